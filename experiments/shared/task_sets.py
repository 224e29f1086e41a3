"""Which task set a report scores on: the one home of the name and of its seed (issue #38).

Every env has a validation set, where every choice is made (the rule searches, the stop
marks of the learning curves, the teacher settings, the fitted thresholds), and a test set
that only the reports score (:mod:`agents.seeds`). A report's runner (``lora_ppo``,
``corl``, ``bopo`` and its long run, ``rules``, ``converged``) takes the set by name,
``tasks=`` (``python -m experiments ... --tasks``, ``python -m experiments.bopo.long
--tasks``), and asks :func:`task_seed` for the first reset seed of its evaluation. The
default is the validation set, on which today's committed tables were scored; a report
scored on the test set says so (:func:`tagged`, :func:`described_set`), one scored on the
validation set says nothing new, so those files are byte for byte what they were.

Every choice is made on the validation set whichever set a report scores (:func:`choose`,
the one home of that rule): a report of the test set scores its candidates for a choice
on the validation tasks as well, makes the choice there, and scores only the one it chose
(and every method) on the test tasks. The choices made this way are the rule end of a
table's gap (``lora_ppo``'s :func:`~experiments.lora_ppo.runner.gap_ends`, CORL's
:func:`~experiments.corl.runner.best_fixed_row` per profile and tier, BoPO's
:func:`~experiments.bopo.gaps.best_rule` per profile, the converged table's rule end).
The other choices never read a scored set: the stop marks are read on the validation
curves (:mod:`experiments.budgets`, :mod:`experiments.corl.budgets`,
:mod:`experiments.bopo.curve`, which take no ``tasks``), the tuning sweeps score their own
validation stream (``VALIDATION_TASK_SEED``), and the fitted rules and thresholds (the
best fixed rule's search, BoPO's difficulty threshold) are fitted on training tasks.
What only describes the scored tasks is read on them: which single expert CORL's page
shows per profile, the Pareto fronts, and the rival point each BoPO frontier point is
compared with (the rival's best costing no more on those tasks, which favours the rival).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from agents.seeds import EVAL_TASK_SEED, TEST_TASK_SEED

VALIDATION = "validation"
TEST = "test"
#: Set name -> the first reset seed of its evaluation tasks.
TASK_SETS = {VALIDATION: EVAL_TASK_SEED, TEST: TEST_TASK_SEED}
#: The set a report scores on unless told: the one of today's committed tables.
DEFAULT_TASKS = VALIDATION
#: The set every choice is made on, whichever set the report scores (:func:`choose`).
CHOICE_TASKS = VALIDATION

Scores = TypeVar("Scores")
Choice = TypeVar("Choice")


def check_tasks(tasks: str) -> str:
    """``tasks`` if it names a set of :data:`TASK_SETS`.

    Raises:
        ValueError: One line naming the sets, for any other name.
    """
    if tasks not in TASK_SETS:
        raise ValueError(f"tasks: expected one of {list(TASK_SETS)}, got {tasks!r}")
    return tasks


def task_seed(tasks: str | int = DEFAULT_TASKS) -> int:
    """The first reset seed of the evaluation tasks of the set ``tasks``.

    ``tasks``: a set's name, or already a first reset seed (another study's own set, as
    :func:`chooses_apart` takes it), returned as it is.

    Raises:
        ValueError: For an unknown set's name.
    """
    if isinstance(tasks, int):
        return tasks
    return TASK_SETS[check_tasks(tasks)]


def choice_seed() -> int:
    """The first reset seed of the tasks every choice is made on (:data:`CHOICE_TASKS`)."""
    return TASK_SETS[CHOICE_TASKS]


def chooses_apart(tasks: str | int) -> bool:
    """Whether a report scored on ``tasks`` makes its choices on other tasks than it scores.

    ``tasks``: a set's name, or the first reset seed of the scored tasks (any seed but the
    validation set's, a private one too, chooses on the validation set).

    Raises:
        ValueError: For an unknown set's name.
    """
    if isinstance(tasks, str):
        return check_tasks(tasks) != CHOICE_TASKS
    return tasks != choice_seed()


def choose(pick: Callable[[Scores], Choice], scored: Scores, tasks: str | int,
           on_choice_set: Callable[[], Scores]) -> Choice:
    """``pick`` of the candidates' scores on the validation set, for a report scored on ``tasks``.

    A report of the validation set picks on the scores it already has (``scored``); any
    other (``tasks`` as :func:`chooses_apart` reads it) calls ``on_choice_set()`` for the
    same candidates' scores on the validation tasks and picks there, so that what it then
    scores on ``tasks`` was chosen without them (issue #38).

    Raises:
        ValueError: For an unknown set's name.
    """
    return pick(on_choice_set() if chooses_apart(tasks) else scored)


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


def where_chosen(report: Mapping[str, Any], here: str) -> str:
    """Where a report's choices were made, in its page's words: ``here`` for the validation set.

    A report of another set says "on the validation tasks" instead.
    """
    return here if scored_on(report) == CHOICE_TASKS else f"on the {CHOICE_TASKS} tasks"


def tasks_option(report: Mapping[str, Any]) -> str:
    """The ``--tasks`` option of the command that reproduces ``report``; empty by default."""
    return "" if scored_on(report) == DEFAULT_TASKS else f" --tasks {scored_on(report)}"


def keeper_settings(settings: str, tasks: str) -> str:
    """The settings a kept unit is filed under: ``settings`` itself for the validation set.

    A test run's units are filed apart, so a resumed run never mixes the two sets.
    """
    check_tasks(tasks)
    return settings if tasks == DEFAULT_TASKS else f"{settings} tasks={tasks}"
