"""The argument types the ``cost-envs`` subcommands share.

Each is an argparse ``type``: it turns the text into a value or raises
``argparse.ArgumentTypeError`` naming what it expected, which argparse prints as a usage
error (status 2).

Importing this module imports no ``cost_envs`` (and so no NumPy or Gymnasium): the
top-level parser (:mod:`agents.cli.main`) uses it, and ``cost-envs --help`` must answer at
once; what needs ``cost_envs`` imports it when called.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

#: Exit status of a usage error (argparse's): a bad flag, an unknown env id or method.
EXIT_USAGE = 2
#: Exit status of a bad input file or output path, or of a missing extra.
EXIT_INPUT = 1


def close_to(word: str, options: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the option closest to a mistyped ``word``, or ``""``."""
    from cost_envs.config import suggestion

    return suggestion(word, options)


def missing_extra(extra: str, missing: Sequence[str]) -> str:
    """The one-line message for a missing ``extra``: what is missing, the install line."""
    from cost_envs.extras import install_hint

    return (f"needs the {extra!r} extra, which is not installed (missing: "
            f"{', '.join(missing)}): {install_hint(extra)}")


def require_extra(extra: str, where: str) -> None:
    """Exit with status :data:`EXIT_INPUT` and one line if ``extra`` is not installed.

    Looks the modules up without importing them, so it costs nothing when they are there.
    """
    from cost_envs.extras import EXTRA_MODULES, missing_modules

    missing = missing_modules(EXTRA_MODULES[extra])
    if missing:
        raise SystemExit(f"{where}: {missing_extra(extra, missing)}")


def int_at_least(minimum: int, what: str, maximum: int | None = None
                 ) -> Callable[[str], int]:
    """An argparse type for integers in ``[minimum, maximum]``; ``what`` names them in errors."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


#: A count: episodes, timesteps, sub-envs, resamples.
positive_int = int_at_least(1, "a positive integer")


def resamples_int(text: str) -> int:
    """An argparse type for bootstrap resamples, refused above the cap before any work.

    The cap is :data:`cost_envs.limits.MAX_RESAMPLES` (a billion ran for minutes).
    """
    from cost_envs.limits import MAX_RESAMPLES

    return int_at_least(1, f"an integer in [1, {MAX_RESAMPLES}]", MAX_RESAMPLES)(text)


#: A seed.
seed_int = int_at_least(0, "an integer >= 0")


def known_env_id(text: str) -> str:
    """A registered id, also accepted without its namespace (``FlightPlanner-v0``)."""
    import cost_envs

    by_name = {env_id.split("/")[-1]: env_id for env_id in cost_envs.ENV_IDS}
    if text in cost_envs.ENV_IDS:
        return text
    if text in by_name:
        return by_name[text]
    # the closest id in the form it was typed in: with its namespace or without
    close = close_to(text, list(cost_envs.ENV_IDS) if "/" in text else list(by_name))
    raise argparse.ArgumentTypeError(
        f"unknown environment {text!r}; valid ids: {', '.join(cost_envs.ENV_IDS)}{close}"
    )

