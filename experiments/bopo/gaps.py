"""BoPO's ``gap_closed`` block: how much of the rule-to-planner gap each router closes.

One task per profile. The score is each episode's return under the env's own reward
(Eq. 1 with the env's weights, budget cuts included), the same for every row; the rule is
the best fixed rule of the profile's table, the fitted difficulty threshold or the rule
searched on training tasks, whichever has the higher mean return on the validation tasks
(the evaluation tasks themselves for a table of the validation set; for one of the test
set, :func:`experiments.bopo.runner.prepare_profile` chose it there; the choice is
recorded as ``rule_method``); the reference is the planner that knows the
task but not its luck (:class:`agents.planning.AgenticPlanner`). The learned methods are
the SFT warm start and every BoPO and PPO cost weight of the table, each with every
training seed's per-episode returns; their shares are :func:`experiments.shared.gaps.task_entry`'s
(paired over the episodes, resampling seeds; ``per_seed`` holds each seed's share).

BoPO and PPO do not train on this score: they maximise their own cost-weighted rewards
(``BoPOReward``, ``CostPenaltyReward``), so a share below 1 also measures how far their
objectives are from Eq. 1's trade between success and money.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from experiments.bopo.report import label
from experiments.shared import gaps
from experiments.shared.task_sets import CHOICE_TASKS, DEFAULT_TASKS, chooses_apart

EXPERIMENT = "BoPO on AgenticRouting-v0"
#: The fixed rules the gap starts from (the better of the two on each profile).
RULES = ("difficulty-threshold", "best-rule")
REFERENCE = "planner"
#: Learned methods: the SFT warm start and the RL routers (``bopo/<lam>``, ``ppo/<lam>``).
LEARNED_FAMILIES = ("sft", "bopo", "ppo")


def is_learned(key: str) -> bool:
    """Whether the method ``key`` (``sft``, ``bopo/0.4``, ...) was trained."""
    return key.split("/")[0] in LEARNED_FAMILIES


def best_rule(returns: Mapping[str, Sequence[Sequence[float]]]) -> str:
    """The key of the rule of :data:`RULES` with the higher mean return (the first on ties).

    ``returns[key]`` are the runs of ``key`` (one for a fixed rule), each a list of
    per-episode returns.

    Raises:
        ValueError: If ``returns`` holds none of the rules.
    """
    present = [key for key in RULES if key in returns]
    if not present:
        raise ValueError(f"bopo gap_closed: expected returns of one of {list(RULES)}, got "
                         f"{sorted(returns)}")
    return max(present, key=lambda key: (float(np.mean(returns[key])), -present.index(key)))


def profile_entry(returns: Mapping[str, Sequence[Sequence[float]]],
                  rule: str | None = None) -> dict[str, Any]:
    """One profile's task entry: ``returns[key][s][j]``, run ``s`` of ``key`` on episode ``j``.

    A fixed row has one run; a learned row one per training seed; every run is on the
    same tasks in the same order. ``rule``: the rule end, chosen on the validation tasks
    (:attr:`experiments.bopo.runner.Prepared.rule`); ``None``: the better rule of
    ``returns``, which are then the validation set's.
    """
    if REFERENCE not in returns:
        raise ValueError(f"bopo gap_closed: expected the planner's returns ({REFERENCE!r}), "
                         f"got {sorted(returns)}")
    if rule is not None and rule not in RULES:
        raise ValueError(f"bopo gap_closed: rule: expected one of {list(RULES)}, got {rule!r}")
    rule = rule or best_rule(returns)
    learned = {key: (label(key), returns[key]) for key in returns if is_learned(key)}
    entry = gaps.task_entry(_single(returns, rule), _single(returns, REFERENCE), learned)
    return {"rule_method": rule, "rule_label": label(rule), **entry}


def _single(returns: Mapping[str, Sequence[Sequence[float]]], key: str) -> Sequence[float]:
    """The one run of a fixed row."""
    if len(returns[key]) != 1:
        raise ValueError(f"bopo gap_closed: expected one run of the fixed row {key!r}, got "
                         f"{len(returns[key])}")
    return returns[key][0]


def gap_block(returns: Mapping[str, Mapping[str, Sequence[Sequence[float]]]],
              rules: Mapping[str, str | None] | None = None,
              tasks: str = DEFAULT_TASKS) -> dict[str, Any]:
    """The block of ``bopo.json``: ``returns[profile][method]`` are its runs' returns.

    ``rules``: each profile's rule end as chosen on the validation tasks (missing or
    ``None``: the better rule of ``returns``); ``tasks``: the set ``returns`` were scored on.
    """
    rules = rules or {}
    where = f" on the {CHOICE_TASKS} tasks" if chooses_apart(tasks) else ""
    return gaps.block(
        EXPERIMENT,
        score="episode return (Eq. 1, the env's reward weights, under the per-task budget)",
        rule="the best fixed rule of the profile (fitted difficulty threshold or searched "
             f"rule, the higher mean return{where}; see rule_method)",
        reference="Planner (knows the task, not the luck)",
        tasks={profile: profile_entry(by_method, rules.get(profile))
               for profile, by_method in returns.items()})

