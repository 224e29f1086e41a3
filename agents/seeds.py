"""Task seeds in one place: which seed ranges draw which tasks.

No method is scored on a task it trained on, and no choice is made on a task a report
scores (issue #38).

An env draws every task (and all of its luck) from the seed given to ``reset``, so a
seed range is a task set. Each env has three: training (``TRAIN_TASK_SEED`` and the other
training ranges below), validation (``EVAL_TASK_SEED``: every choice is made there, the
rule searched, the stop marks of the learning curves, the teacher settings, the fitted
thresholds, the rule end of each table's gap; the tuning sweeps have their own
``VALIDATION_TASK_SEED``) and test (``TEST_TASK_SEED``: scored only by the reports; a
report of the test set picks its gap's rule end on the validation tasks,
:func:`experiments.shared.task_sets.choose`).
Evaluation uses the small seeds; every other use starts at its own offset, far enough
apart that the ranges never meet at the scales the project runs.
:mod:`experiments.shared.task_sets` names the two sets a report can score on.
"""

import numpy as np

#: The validation task sets: ``EVAL_TASK_SEED`` is the first reset seed of every evaluation
#: that informs a choice (the rule searches' scores, the learning curves whose stop marks
#: set the full-scale budgets, the teacher settings, the fitted rules and thresholds), and of
#: the committed tables until they are regenerated on ``TEST_TASK_SEED`` (issue #38). The
#: name stays from when it was the only evaluation set (20-odd modules and tests read it);
#: ``VALIDATION_SET_SEED`` says the same under the name of what it is.
EVAL_TASK_SEED = 0
VALIDATION_SET_SEED = EVAL_TASK_SEED
#: RL training tasks of the LoRA paper's methods and CORL: ``TRAIN_TASK_SEED + seed``
#: (CORL's per-tier adapters add ``100 * (tier + 1)``).
TRAIN_TASK_SEED = 10_000
#: Tasks of the supervised (greedy-label) traces: ``TRACE_TASK_SEED + seed``.
TRACE_TASK_SEED = 20_000
#: Tasks of base pretraining: ``PRETRAIN_TASK_SEED + 1000 * seed + pool``.
PRETRAIN_TASK_SEED = 30_000
#: BoPO's training tasks on AgenticRouting-v0: ``BOPO_TRAIN_TASK_SEED + seed``. It shares
#: its value with ``PRETRAIN_TASK_SEED`` but never its tasks: pretraining runs only on the
#: FlightPlanner and ToolBench families.
BOPO_TRAIN_TASK_SEED = 30_000
#: Training tasks of fitted rules (the best fixed rule, the difficulty threshold) when
#: no task list is given: ``RULE_TASK_SEED`` is their first reset seed.
RULE_TASK_SEED = 40_000
#: Validation tasks of the tuning sweeps (``experiments/tune/runner.py``): every trial of every
#: method is scored on the task stream of this one reset seed, never on an evaluation,
#: training, trace, pretraining or rule task. 10_000 past the last range above, so no
#: range meets it at any scale the project runs (seeds < 1000, tiers add at most 300).
#: On ToolBench it is the first reset seed of the validation episodes; CORL's sweeps play
#: each tier's validation queries from it; BoPO's draw their validation tasks with it
#: (``draw_tasks(profile, n, VALIDATION_TASK_SEED)``), apart from BoPO's training draws
#: (``BOPO_TRAIN_TASK_SEED + seed``) and evaluation draw (``EVAL_TASK_SEED``).
VALIDATION_TASK_SEED = 50_000
#: Tasks of the Bayes reference's prior (``agents.planning.toolbench_bayes``): its particles
#: are drawn from the reset seed ``PRIOR_TASK_SEED + seed``, apart from every range above,
#: so the prior never holds an evaluation task.
PRIOR_TASK_SEED = 60_000
#: Logged episodes a learned prior is fitted from (:mod:`experiments.learned_prior`): training
#: seed ``s`` logs from ``LOG_TASK_SEED + 1000 * s`` (sub-env ``i`` of its batched env
#: ``+ i``), below ``TEST_TASK_SEED`` at every seed under 20.
LOG_TASK_SEED = 70_000
#: The test task sets: the first reset seed of a report's evaluation with ``--tasks test``
#: (:mod:`experiments.shared.task_sets`). Scored only by the reports; no choice reads them
#: (``tests/test_test_tasks.py`` runs the selection code and checks that no reset seed
#: falls in ``[TEST_TASK_SEED, TEST_TASK_SEED + TEST_TASK_SPAN)``). Past the logs' range
#: above and below ``SUB_ENV_TASK_SEED``; a batched env reset with it gives its sub-envs
#: ``TEST_TASK_SEED + i``, inside the span.
TEST_TASK_SEED = 90_000
#: How far the test range reaches: every reset seed in ``[TEST_TASK_SEED, TEST_TASK_SEED +
#: TEST_TASK_SPAN)`` is a test task's, and no other use of this module comes near it.
TEST_TASK_SPAN = 10_000
#: Training tasks of the RL stage's sub-envs after the first when it steps several at once
#: (:func:`train_task_seeds`): past every range above.
SUB_ENV_TASK_SEED = 100_000


def train_task_seeds(seed: int, n_envs: int) -> list[int]:
    """Reset seeds of ``n_envs`` training sub-envs for training seed ``seed``.

    Sub-env 0 plays ``TRAIN_TASK_SEED + seed``, the stream of a run with one env. Sub-envs
    1, 2, ... play ``SUB_ENV_TASK_SEED`` plus 32-bit words of ``SeedSequence(TRAIN_TASK_SEED
    + seed)``: unlike SB3's ``seed + i``, under which seed ``s``'s sub-env 1 replays seed
    ``s + 1``'s sub-env 0, runs with different seeds share no stream (a collision of two
    random words has chance about ``n_envs**2 / 2**32`` per pair of runs).
    """
    first = TRAIN_TASK_SEED + seed
    more = np.random.SeedSequence(first).generate_state(n_envs - 1, np.uint32)
    return [first, *(SUB_ENV_TASK_SEED + int(word) for word in more)]
