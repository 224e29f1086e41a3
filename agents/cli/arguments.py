"""The argument types the ``cost-envs`` subcommands share.

Each is an argparse ``type``: it turns the text into a value or raises
``argparse.ArgumentTypeError`` naming what it expected, which argparse prints as a usage
error (status 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import cost_envs
from cost_envs.limits import MAX_RESAMPLES


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
#: Bootstrap resamples: at most :data:`cost_envs.limits.MAX_RESAMPLES`, refused before
#: any work (a billion ran for minutes).
resamples_int = int_at_least(1, f"an integer in [1, {MAX_RESAMPLES}]", MAX_RESAMPLES)
#: A seed.
seed_int = int_at_least(0, "an integer >= 0")


def known_env_id(text: str) -> str:
    """A registered id, also accepted without its namespace (``FlightPlanner-v0``)."""
    by_name = {env_id.split("/")[-1]: env_id for env_id in cost_envs.ENV_IDS}
    if text in cost_envs.ENV_IDS:
        return text
    if text in by_name:
        return by_name[text]
    raise argparse.ArgumentTypeError(
        f"unknown environment {text!r}; valid ids: {', '.join(cost_envs.ENV_IDS)}"
    )

