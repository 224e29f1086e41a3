"""How much CORL's experiment trains and evaluates, and on which task seed it scores.

The scales and the evaluation seed are read by the experiment (:mod:`experiments.corl.runner`)
and by its equal-budget sweeps (:mod:`experiments.tune.corl`), whose fits the experiment
calls for its tuned rows: they live here, below both, so neither imports the other back.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.seeds import EVAL_TASK_SEED


@dataclass(frozen=True)
class CorlScale:
    """How much to train and evaluate.

    ``seeds``: training seeds of the learned controllers (each trains both on its own);
    ``rule_tasks``: training tasks on which the best fixed rule is searched, per profile and
    tier; ``jobs``: worker processes (one training seed, or one env's fixed rows, each).
    """

    ppo_timesteps: int
    adapter_timesteps: int
    episodes: int
    n_resamples: int
    seeds: int = 5
    rule_tasks: int = 200
    jobs: int = 1


CORL_SCALES = {
    "smoke": CorlScale(ppo_timesteps=1024, adapter_timesteps=512, episodes=30, n_resamples=50,
                       seeds=2, rule_tasks=5),
    # The shared PPO's training success is flat from about 15k steps on (the committed
    # curves at 60k showed it), so 40k + 3 x 10k leaves room for the tuned rows in
    # ``make reproduce``'s 15 minutes. Multiples of the 512-step rollout.
    "default": CorlScale(ppo_timesteps=40_960, adapter_timesteps=10_240, episodes=400,
                         n_resamples=1000, jobs=2),
    # The longer budget (issue #23): five times every stage's steps, to see whether the
    # controllers move past the rules when they are given them.
    "full": CorlScale(ppo_timesteps=204_800, adapter_timesteps=51_200, episodes=400,
                      n_resamples=1000, jobs=2),
}
#: The evaluation queries: task seed 0 of each profile and tier, for every method. They are
#: the validation set (:data:`agents.seeds.EVAL_TASK_SEED`): the budget curves' stop marks
#: (:mod:`experiments.corl.budgets`) are read on them; a report scores on the test set with
#: ``tasks="test"`` (:mod:`experiments.shared.task_sets`).
EVAL_SEED = EVAL_TASK_SEED
