"""Which task set a report scores on: the one home of the name and of its seed (issue #38).

Every env has a validation set, where every choice is made (the rule searches, the stop
marks of the learning curves, the teacher settings, the fitted thresholds), and a test set
that only the reports score (:mod:`agents.seeds`). A headline runner (``lora_ppo``,
``corl``, ``bopo``, ``rules``) takes the set by name, ``tasks=`` (``python -m experiments
... --tasks``), and asks :func:`task_seed` for the first reset seed of its evaluation. The
default is the validation set, on which today's committed tables were scored; a report
scored on the test set says so (:func:`tagged`, :func:`described_set`), one scored on the
validation set says nothing new, so those files are byte for byte what they were.

Not yet moved (the switch, a later step of issue #38): the rule end of a table's gap (the
best fixed row, ``gap_ends`` and ``best_fixed_row``) is still chosen on the tasks the
report scores, whichever set that is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.seeds import EVAL_TASK_SEED, TEST_TASK_SEED

VALIDATION = "validation"
TEST = "test"
#: Set name -> the first reset seed of its evaluation tasks.
TASK_SETS = {VALIDATION: EVAL_TASK_SEED, TEST: TEST_TASK_SEED}
#: The set a report scores on unless told: the one of today's committed tables.
DEFAULT_TASKS = VALIDATION


def check_tasks(tasks: str) -> str:
    """``tasks`` if it names a set of :data:`TASK_SETS`.

    Raises:
        ValueError: One line naming the sets, for any other name.
    """
    if tasks not in TASK_SETS:
        raise ValueError(f"tasks: expected one of {list(TASK_SETS)}, got {tasks!r}")
    return tasks


def task_seed(tasks: str = DEFAULT_TASKS) -> int:
    """The first reset seed of the evaluation tasks of the set ``tasks``.

    Raises:
        ValueError: For an unknown set.
    """
    return TASK_SETS[check_tasks(tasks)]


def set_of(seed: int) -> str | None:
    """The name of the set whose evaluation starts at reset seed ``seed``; ``None``: neither."""
    return next((name for name, first in TASK_SETS.items() if first == seed), None)


def tagged(report: Mapping[str, Any], tasks: str) -> dict[str, Any]:
    """``report`` with ``"tasks": tasks`` when it was scored on the test set, else as it is."""
    check_tasks(tasks)
    return dict(report) if tasks == DEFAULT_TASKS else {**report, "tasks": tasks}


def scored_on(report: Mapping[str, Any]) -> str:
    """The set a report (as :func:`tagged` left it) was scored on."""
    return str(report.get("tasks", DEFAULT_TASKS))


def described_set(report: Mapping[str, Any]) -> str:
    """A sentence for a report's page naming its set; empty for the validation set."""
    if scored_on(report) == DEFAULT_TASKS:
        return ""
    return (f"Scored on the {scored_on(report)} tasks (first reset seed "
            f"{task_seed(scored_on(report))}), which no choice of the experiment has seen: "
            "the rules, stop marks, tuning, teacher settings and thresholds were chosen on "
            "the validation tasks.")


def tasks_option(report: Mapping[str, Any]) -> str:
    """The ``--tasks`` option of the command that reproduces ``report``; empty by default."""
    return "" if scored_on(report) == DEFAULT_TASKS else f" --tasks {scored_on(report)}"


def keeper_settings(settings: str, tasks: str) -> str:
    """The settings a kept unit is filed under: ``settings`` itself for the validation set.

    A test run's units are filed apart, so a resumed run never mixes the two sets.
    """
    check_tasks(tasks)
    return settings if tasks == DEFAULT_TASKS else f"{settings} tasks={tasks}"
