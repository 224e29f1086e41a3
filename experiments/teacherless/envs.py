"""What each ``--env`` of the screen is: how it is built, scored, and where its gap ends come from.

A registered id (ToolBench-v0, FlightPlanner-v1) is the env as ``gym.make`` builds it,
scored by :func:`agents.evaluation.evaluate` on the task set of a reset seed, its gap ends
those of :func:`experiments.budgets.runner.reference_returns`. A setting
``<id>:<name>`` (:data:`~experiments.teacherless.settings.APPWORLD`) is the env as the
experiment that owns its gap trains its PPO rows: that experiment builds it (its
``gym.make`` arguments), scores a policy on its own tasks of a reset seed and gives the
gap's ends on the same tasks, the rule end chosen on its validation tasks. One home per
mechanism: this module only says which.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from experiments.teacherless.settings import APPWORLD, MIXED_LOW, ROWS

#: Train methods that act bit by bit on a ``MultiBinary`` action.
BITWISE_METHODS = ("bdq", "dyna", "sac-bits")


@dataclass(frozen=True)
class Owned:
    """An env set up by the experiment that owns its gap (module docstring).

    Attributes:
        env_id: The registered id.
        owner: That experiment's module, named in the report.
        env_kwargs: Its ``gym.make`` arguments (the profile, the budget ...).
        score: ``(allocator, episodes, seed)`` -> the per-task scores on its tasks.
        gap_ends: ``(episodes, seed)`` -> the rule's and the planner's scores there.
        score_name: What a score is, for the report.
    """

    env_id: str
    owner: str
    env_kwargs: Callable[[], dict[str, Any]]
    score: Callable[[Any, int, int], list[float]]
    gap_ends: Callable[[int, int], tuple[list[float], list[float]]]
    score_name: str = "Eq. 1 return"


def _appworld() -> Owned:
    from experiments.bopo import curve

    return Owned("cost_envs/AgenticRouting-v0", "experiments.bopo.curve", curve.env_kwargs,
                 curve.score, curve.gap_ends, "Eq. 1 return under the per-task budget")


def _mixed_low() -> Owned:
    from functools import partial

    from experiments.corl import budgets

    return Owned("cost_envs/ExpertRouting-v1", "experiments.corl.budgets",
                 partial(budgets.env_kwargs, "low"), partial(budgets.score, tier="low"),
                 partial(budgets.gap_ends, tier="low"),
                 "accuracy within the low tier's budget (CORL's gated score)")


#: ``--env`` setting -> its :class:`Owned` (built when asked: the owners import torch).
OWNED: dict[str, Callable[[], Owned]] = {APPWORLD: _appworld, MIXED_LOW: _mixed_low}


def owned(env: str) -> Owned | None:
    """The setting ``env`` names, or ``None`` for a plain registered id."""
    return OWNED[env]() if env in OWNED else None


def env_id_of(env: str) -> str:
    """The registered id of ``env`` (a setting's, or ``env`` itself)."""
    return env.split(":", 1)[0]


def check_rows(keys: Iterable[str], env: str) -> None:
    """Refuse rows whose learner cannot act on ``env``'s action space.

    BDQ, Dyna-BDQ and SAC per bit learn a value per bit of a ``MultiBinary`` action.

    Raises:
        ValueError: One line naming the row, the env and its action space.
    """
    bitwise = [key for key in keys if key in ROWS and ROWS[key].method in BITWISE_METHODS]
    if not bitwise:
        return
    import gymnasium as gym
    from gymnasium import spaces

    import cost_envs  # noqa: F401  # registers the ids

    probe = gym.make(env_id_of(env))
    space = probe.action_space
    probe.close()
    if not isinstance(space, spaces.MultiBinary):
        raise ValueError(f"rows: {bitwise[0]} needs a MultiBinary action, {env} has {space}")
