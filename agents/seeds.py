"""Task seeds in one place: which seed ranges draw which tasks.

No method is scored on a task it trained on.

An env draws every task (and all of its luck) from the seed given to ``reset``, so a
seed range is a task set. Evaluation uses the small seeds; every other use starts at its
own offset, far enough apart that the ranges never meet at the scales the project runs.
"""

import numpy as np

#: Evaluation task sets: ``EVAL_TASK_SEED`` is the first reset seed of every evaluation.
EVAL_TASK_SEED = 0
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
