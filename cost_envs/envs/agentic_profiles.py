"""The task profiles of AgenticRouting-v0: the shape of one benchmark's tasks.

A :class:`RoutingProfile` says how long a task's horizon is, how many subgoals it has and
how hard they are, what a harmful failure costs and how many tokens a step reads and
writes. :data:`PROFILES` holds the three presets shaped like ALFWorld, SciWorld and
AppWorld; users pass a profile of their own (or its dict form) to the env. How a profile
turns into tasks is documented on :class:`cost_envs.envs.agentic_routing.AgenticRoutingEnv`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cost_envs.config import coerce_config, integer, number, probability, text

#: Subgoal difficulty classes, in the order of a profile's ``mix``.
CLASSES = ("routine", "hard", "very_hard")
#: Bounds of a profile (and normalisers of the observation): largest horizon, most
#: subgoals, most recovery steps pending.
MAX_HORIZON = 50
MAX_SUBGOALS = 10
MAX_RECOVERY = 9


@dataclass(frozen=True)
class RoutingProfile:
    """The shape of one benchmark's tasks.

    Args:
        name: Profile name.
        horizon: Steps before the episode ends in failure.
        min_subgoals: Fewest subgoals of a task.
        max_subgoals: Most subgoals of a task.
        mix: Mean shares of the classes ``routine``, ``hard``, ``very_hard`` of a subgoal.
        concentration: ``kappa`` of the task's routine share ``r ~ Beta(kappa mix_0,
            kappa (1 - mix_0))``; the rest is split between ``hard`` and ``very_hard`` in
            the ratio ``mix_1 : mix_2``. Small values cluster hard subgoals in hard tasks.
        recovery_steps: Extra steps a harmful failure costs (undoing a wrong action).
        harm_small: Probability that a failed small-model step is harmful.
        harm_large: Probability that a failed large-model step is harmful.
        input_tokens: Mean tokens the model reads per step (prompt, observation, history
            window).
        output_tokens: Mean tokens the model writes per step (thought and action).
        demo_tokens: Tokens of in-context demonstrations the small model reads on top of
            ``input_tokens`` at every step (7B models need them to keep the action
            format; the large model is prompted zero-shot).
    """

    name: str
    horizon: int
    min_subgoals: int
    max_subgoals: int
    mix: tuple[float, float, float]
    concentration: float
    recovery_steps: int
    harm_small: float
    harm_large: float
    input_tokens: float
    output_tokens: float
    demo_tokens: float = 0.0

    def __post_init__(self) -> None:
        text(self.name, "profile name")
        where = f"profile {self.name!r}"
        set_ = object.__setattr__  # frozen: normalise the fields in place once
        for key in ("horizon", "min_subgoals", "max_subgoals", "recovery_steps"):
            set_(self, key, integer(getattr(self, key), key, minimum=0, where=where))
        if not 1 <= self.min_subgoals <= self.max_subgoals <= MAX_SUBGOALS:
            raise ValueError(f"{where}: expected 1 <= min_subgoals <= max_subgoals <= "
                             f"{MAX_SUBGOALS}, got {self.min_subgoals}, {self.max_subgoals}")
        if not self.max_subgoals < self.horizon <= MAX_HORIZON:
            raise ValueError(f"{where}: horizon: expected max_subgoals < horizon <= "
                             f"{MAX_HORIZON}, got {self.horizon}")
        if self.recovery_steps > MAX_RECOVERY:
            raise ValueError(f"{where}: recovery_steps: expected at most {MAX_RECOVERY}, "
                             f"got {self.recovery_steps}")
        shape = (f"{where}: mix: expected {len(CLASSES)} probabilities (routine, hard, "
                 f"very_hard) summing to 1, got {self.mix!r}")
        if isinstance(self.mix, (str, bytes)) or not isinstance(self.mix, (Sequence, np.ndarray)):
            raise ValueError(shape)
        mix = tuple(number(p, f"mix[{i}]", minimum=0, where=where)
                    for i, p in enumerate(self.mix))
        if len(mix) != len(CLASSES) or not math.isclose(sum(mix), 1.0, abs_tol=1e-9):
            raise ValueError(shape)
        set_(self, "mix", mix)
        if not 0.0 < mix[0] < 1.0:
            raise ValueError(f"{where}: mix: the routine share must be in (0, 1), "
                             f"got {mix[0]!r}")
        set_(self, "concentration", number(self.concentration, "concentration", minimum=0,
                                           inclusive=False, where=where))
        for key in ("harm_small", "harm_large"):
            set_(self, key, probability(getattr(self, key), key, where=where))
        if self.harm_large > self.harm_small:
            raise ValueError(f"{where}: harm_large must not exceed harm_small (the large "
                             "model is the stronger one)")
        for key in ("input_tokens", "output_tokens"):
            set_(self, key, number(getattr(self, key), key, minimum=0, inclusive=False,
                                   where=where))
        set_(self, "demo_tokens", number(self.demo_tokens, "demo_tokens", minimum=0,
                                         where=where))

    @classmethod
    def coerce(cls, value: RoutingProfile | Mapping[str, Any] | str) -> RoutingProfile:
        """A profile, its dict form, or the name of a preset (:data:`PROFILES`)."""
        return coerce_config(cls, value, PROFILES, "profile")


#: The three benchmark profiles (see the class docstring for what each one models).
PROFILES: dict[str, RoutingProfile] = {
    "alfworld": RoutingProfile("alfworld", horizon=50, min_subgoals=3, max_subgoals=6,
                               mix=(0.84, 0.11, 0.05), concentration=1.5,
                               recovery_steps=3, harm_small=0.6, harm_large=0.15,
                               input_tokens=1800.0, output_tokens=80.0, demo_tokens=1200.0),
    "sciworld": RoutingProfile("sciworld", horizon=50, min_subgoals=5, max_subgoals=10,
                               mix=(0.68, 0.22, 0.10), concentration=2.0,
                               recovery_steps=3, harm_small=0.6, harm_large=0.15,
                               input_tokens=3000.0, output_tokens=110.0, demo_tokens=2000.0),
    "appworld": RoutingProfile("appworld", horizon=40, min_subgoals=4, max_subgoals=8,
                               mix=(0.5, 0.28, 0.22), concentration=2.0,
                               recovery_steps=3, harm_small=0.6, harm_large=0.15,
                               input_tokens=5500.0, output_tokens=200.0, demo_tokens=3500.0),
}
PROFILE_NAMES = tuple(PROFILES)
