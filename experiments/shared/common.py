"""Plumbing shared by the experiments: the machine, output files, what a rule says it is.

(The experiments' units run through :mod:`experiments.shared.scheduler`.)

* :func:`machine`: a one-line description of the machine, for wall-time records;
* :func:`check_writable`: an output directory checked before any work starts;
* :func:`quiet`: the progress printer that says nothing;
* :func:`recording` and :func:`described`: keep the allocators a factory builds, and what
  a searched or fitted rule says it is (its ``description``), for the reports;
* :func:`refitting_none`: factories that hand back the rules already fitted instead of
  fitting them again.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Hashable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from agents.files import check_creatable


def recording(factory: Callable[[Any], Any], built: MutableMapping[Any, Any],
              key: Hashable | Callable[[Any], Hashable]) -> Callable[[Any], Any]:
    """``factory`` (a baseline class or env -> allocator), keeping what it builds in ``built``.

    The tables score methods through factories (:func:`agents.evaluation.compare`,
    :func:`agents.learners.corl.tier_table`); a rule searched or fitted when it is built
    says which rule it froze only on the built object. ``key`` is the key in ``built``,
    or a function of the env that gives it (e.g. the env's tier).
    """
    def build(env: Any) -> Any:
        allocator = factory(env)
        built[key(env) if callable(key) else key] = allocator
        return allocator

    return build


def refitting_none(factories: Mapping[str, Callable[[Any], Any]], built: Mapping[str, Any]
                   ) -> dict[str, Callable[[Any], Any]]:
    """``factories``, each rule ``built`` holds fitted on training tasks returned as it is.

    A report of the test set scores its rule candidates again on the validation tasks to
    choose its gap's rule end there (:func:`experiments.shared.task_sets.choose`). A rule
    fitted on training tasks (its class has ``fit``: the best fixed rule's search, BoPO's
    difficulty threshold) freezes the same rule whichever env of the id it is built on,
    and then acts on the observation alone, so fitting it again would only repeat the
    search: the larger part of what scoring the candidates again costs (the search is
    most of CORL's fixed rows). Every other row (e.g. a random one, whose generator has
    moved) is built afresh, as it would be without this.
    """
    return {key: _returning(built[key])
            if key in built and hasattr(type(built[key]), "fit") else factory
            for key, factory in factories.items()}


def _returning(rule: Any) -> Callable[[Any], Any]:
    """A factory that ignores its env and returns ``rule`` itself."""
    return lambda env: rule


def described(allocator: Any) -> dict[str, str]:
    """``{"rule": allocator.description}`` for a searched or fitted rule, else ``{}``."""
    description = getattr(allocator, "description", None)
    return {} if description is None else {"rule": str(description)}


def machine() -> str:
    """The machine in one line: system, CPU model and vector extensions, CPUs, Python.

    Training's floats can differ between CPUs (numpy's and torch's vector kernels), so a
    results file names the CPU it was made on.
    """
    return (f"{platform.system()} {platform.machine()}, {cpu_model()}, {os.cpu_count()} "
            f"logical CPUs, Python {platform.python_version()}, {torch_kernels()}")


def torch_kernels() -> str:
    """Which paths torch's CPU backends take: ``"torch kernels DEFAULT, MKL_CBWR COMPATIBLE"``.

    Torch's scalar kernels and MKL's one SSE2 path make training's floats the same on x86
    CPUs (:mod:`experiments` asks for both); the vectorised paths differ between CPUs.
    """
    import torch  # the capability is only known once torch has read its setting

    return (f"torch kernels {torch.backends.cpu.get_cpu_capability()}, "
            f"MKL_CBWR {os.environ.get('MKL_CBWR', 'unset')}")


def cpu_model() -> str:
    """The CPU's model name and widest x86 vector extension, from ``/proc/cpuinfo`` if any."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "CPU model unknown"
    fields = {key.strip(): value.strip() for key, value in
              (line.split(":", 1) for line in text.splitlines()[:40] if ":" in line)}
    name = " ".join(fields.get("model name", "").split())
    flags = set(fields.get("flags", "").split())
    widest = next((label for flag, label in (("avx512f", "AVX-512"), ("avx2", "AVX2"))
                   if flag in flags), None)
    return ", ".join(part for part in (name or "CPU model unknown", widest) if part)


def quiet(_message: str) -> None:
    """The default progress printer of the experiments: says nothing."""


def check_writable(directory: str | Path) -> Path:
    """Create ``directory`` if needed and prove it writable by writing a probe file.

    Called before any work starts, so a run of minutes never ends on an unwritable
    output directory.

    Returns:
        The directory as a ``Path``.

    Raises:
        ValueError: One line naming the directory and why it cannot be written.
    """
    directory = Path(directory)
    try:
        check_creatable(directory / ".write-probe")  # the one writability probe
        directory.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ValueError(f"output directory {directory} is not writable: {reason}") from None
    return directory
