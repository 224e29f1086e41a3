"""BoPO's experiment, the training side: the scales, one seed's warm start, one RL run.

The units of work :func:`experiments.bopo.runner.run_all` spreads over worker processes, each
seeded on its own so that the results do not depend on the number of workers:

* :func:`warm_start` (one profile, one training seed): the seed's own training-task draw
  (task seed ``BOPO_TRAIN_TASK_SEED + seed``), its boundaries, the SFT data and the SFT
  warm start, and the SFT policy's evaluation (the ``sft`` row is a learned row too).
* :func:`run_learning_job` (one profile, seed, method and cost weight): the RL run from
  that seed's warm start (BoPO) or from scratch (vanilla PPO), scored at the scale's
  checkpoints.

Every unit is scored on the profile's evaluation tasks under the profile's one budget
(:func:`budget_of` the base seed's training draw), the same for every row: those of the
validation set by default, of the test set with ``tasks="test"``
(:mod:`experiments.shared.task_sets`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from agents.evaluation import EvaluationResult, evaluate
from agents.learners.bopo import (
    BUDGET_QUANTILE,
    LEARNING_RATE,
    BoPOReward,
    Boundary,
    CostPenaltyReward,
    Trajectory,
    boundary_trajectories,
    draw_tasks,
    make_env,
)
from agents.learners.bopo_sft import (
    MaskedRouter,
    build_model,
    demonstration_log_likelihood,
    policy_weights,
    sft_warm_start,
    synthesize_sft_data,
)
from agents.seeds import BOPO_TRAIN_TASK_SEED, EVAL_TASK_SEED
from cost_envs.metrics import EpisodeRecord, summarize
from cost_envs.wrappers import TaskReplay
from experiments.shared.task_sets import DEFAULT_TASKS, task_seed

#: The RL methods: BoPO with the paper's clipped cost term, BoPO with the linear variant
#: (:data:`agents.learners.bopo.COST_TERMS`), vanilla PPO on ``S - lam * cost / scale``.
METHODS = {"bopo": "clipped", "bopo-linear": "linear", "ppo": None}


# ------------------------------------------------------------------- the scale
@dataclass(frozen=True)
class BopoScale:
    """How much work :func:`experiments.bopo.runner.report` does.

    The table's learned rows (all profiles, every seed) are BoPO at ``bopo_lams`` (the
    paper's reward) and PPO at ``ppo_lams``. The λ scan (``scan_profile`` only, the first
    ``scan_seeds`` seeds) adds BoPO at ``scan_lams`` (the paper's reward) and at
    ``linear_lams`` (the linear variant); a scan point that is also a table row is
    trained once.

    Args:
        name: ``smoke``, ``default`` or ``full``.
        n_train: Training tasks per profile and seed.
        n_eval: Evaluation tasks per profile.
        timesteps: RL environment steps per learned router.
        bopo_lams: BoPO's cost weights in the table (the paper's reward).
        ppo_lams: Vanilla PPO's cost weights in the table.
        seeds: Training seeds of every learned row (``seed``, ``seed + 1``, ...).
        scan_profile: The profile of the λ scan.
        scan_lams: BoPO's cost weights in the scan (the paper's reward, in [0, 1)).
        linear_lams: BoPO's cost weights in the scan with the linear cost term.
        scan_seeds: Training seeds of the scan (the first of ``seeds``).
        mix_probs: Large-model probabilities of the SFT samples.
        samples: SFT samples per probability and task.
        sft_epochs: Behaviour-cloning epochs.
        n_envs: Parallel envs per RL run (one batched policy call per step).
        resamples: Bootstrap resamples.
        jobs: Worker processes.
        random_ps: RandomMix's probabilities of the large model.
        patiences: Cascade's patiences.
        checkpoints: RL steps at which the table's runs score the policy (their learning
            curves; the final evaluation at ``timesteps`` is always one). Scan runs are
            scored at the end only.
    """

    name: str
    n_train: int
    n_eval: int
    timesteps: int
    bopo_lams: tuple[float, ...]
    ppo_lams: tuple[float, ...]
    seeds: int = 5
    scan_profile: str = "appworld"
    scan_lams: tuple[float, ...] = ()
    linear_lams: tuple[float, ...] = ()
    scan_seeds: int = 3
    mix_probs: tuple[float, ...] = (0.1, 0.25, 0.5)
    samples: int = 4
    sft_epochs: int = 10
    n_envs: int = 8
    resamples: int = 1000
    jobs: int = 2
    random_ps: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75)
    patiences: tuple[int, ...] = (1, 2, 3)
    checkpoints: tuple[int, ...] = (0, 2048, 8192)

    def __post_init__(self) -> None:
        if self.seeds < 1 or not 1 <= self.scan_seeds <= self.seeds:
            raise ValueError(f"BopoScale: expected 1 <= scan_seeds <= seeds, got seeds="
                             f"{self.seeds}, scan_seeds={self.scan_seeds}")


SCALES = {
    # Plumbing for the tests: every row, every file, in seconds. Not a result.
    "smoke": BopoScale("smoke", n_train=24, n_eval=16, timesteps=256, bopo_lams=(0.5,),
                       ppo_lams=(0.5,), seeds=2, scan_lams=(0.9,), linear_lams=(2.0, 8.0),
                       scan_seeds=2, samples=1, sft_epochs=2, n_envs=2, resamples=50,
                       jobs=1, random_ps=(0.5,), patiences=(1,), checkpoints=(0,)),
    # What the benchmark runs: all three profiles, 5 seeds, in about 4 minutes on 2 cores.
    "default": BopoScale("default", n_train=400, n_eval=400, timesteps=32_768,
                         bopo_lams=(0.5,), ppo_lams=(0.25, 1.0), seeds=5,
                         scan_lams=(0.1, 0.95), linear_lams=(1.0, 8.0, 64.0), scan_seeds=3),
    # The longer budget (issue #23): the table's rows at five times the steps, scored
    # along the way so the curves show where each stops; the λ scan stays at default.
    "full": BopoScale("full", n_train=400, n_eval=400, timesteps=163_840,
                      bopo_lams=(0.5,), ppo_lams=(0.25, 1.0), seeds=5, scan_seeds=1,
                      checkpoints=(0, 32_768, 98_304)),
    # Issue #23: where `full` left PPO (λ=1) on AppWorld (0.17 [-0.03, 0.36] of the gap when
    # this scale was made; 0.23 [0.02, 0.43] on its 400 tasks since 2026-12-07), twice its
    # steps and 1000 evaluation tasks (experiments/bopo/long.py; AppWorld only).
    "long": BopoScale("long", n_train=400, n_eval=1000, timesteps=327_680,
                      bopo_lams=(0.5,), ppo_lams=(1.0,), seeds=5, scan_seeds=1, jobs=1,
                      checkpoints=(0, 163_840)),
}


def scale_of(scale: str | BopoScale, scales: Mapping[str, BopoScale] | None = None
             ) -> BopoScale:
    """``scale`` itself, or the :class:`BopoScale` it names in ``scales`` (or :data:`SCALES`)."""
    scales = SCALES if scales is None else scales
    if isinstance(scale, BopoScale):
        return scale
    if scale not in scales:
        raise ValueError(f"scale: expected one of {list(scales)}, got {scale!r}")
    return scales[scale]


# ------------------------------------------------------------------ shared pieces
def budget_of(boundaries: Sequence[Boundary]) -> float:
    """The per-task budget: the ``BUDGET_QUANTILE`` quantile of always-large's cost."""
    return float(np.quantile([b.large_cost for b in boundaries], BUDGET_QUANTILE))


def cost_scale(boundaries: Sequence[Boundary]) -> float:
    """Vanilla PPO's cost scale: always-large's mean cost on the training tasks."""
    return float(np.mean([b.large_cost for b in boundaries]))


def training_draw(profile: str, sc: BopoScale, seed: int
                  ) -> tuple[list[Any], list[tuple[Trajectory, Trajectory]]]:
    """Seed ``seed``'s training tasks and their boundary trajectories (no budget)."""
    tasks = draw_tasks(profile, sc.n_train, BOPO_TRAIN_TASK_SEED + seed)
    return tasks, boundary_trajectories(make_env(profile), tasks)


def profile_budget(profile: str, scale: str | BopoScale = "default", seed: int = 0) -> float:
    """The profile's per-task budget, from the base training draw (seed ``seed``)."""
    _, paths = training_draw(profile, scale_of(scale), seed)
    return budget_of([Boundary.from_trajectories(lo, hi) for lo, hi in paths])


def evaluate_on(allocator_for: Callable[[gym.Env], Any], profile: str, tasks: Sequence[Any],
                budget: float, seed: int = EVAL_TASK_SEED) -> EvaluationResult:
    """Every evaluation task once, in order, under the budget.

    ``seed``: the first reset seed of the task set ``tasks`` were drawn with (the replay
    plays ``tasks`` whatever it is; the result records it).

    The allocator is built on the env as scored, under the budget but beneath the replay
    of the evaluation tasks: a rule fitted when it is built replays its own training tasks
    on that env (TaskReplay refuses to sit on another replay) and never meets an
    evaluation task.
    """
    env = make_env(profile, budget)
    allocator = allocator_for(env)
    replay = TaskReplay(env, tasks)
    result = evaluate(allocator, replay, episodes=len(tasks), seed=seed)
    replay.close()
    return result


def vec_env(profile: str, tasks: Sequence[Any], budget: float, n_envs: int, seed: int,
            reward: Callable[[gym.Env], gym.Env]) -> Any:
    """``n_envs`` training envs, each replaying ``tasks`` in its own shuffled order."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    def factory(i: int) -> Callable[[], gym.Env]:
        return lambda: reward(TaskReplay(make_env(profile, budget), tasks, shuffle=True,
                                         seed=seed * 1000 + i))

    return DummyVecEnv([factory(i) for i in range(n_envs)])


# ------------------------------------------------------------------- warm start
@dataclass
class WarmStart:
    """One training seed's draw and SFT warm start on one profile, and the SFT row."""

    profile: str
    seed: int
    cost_scale: float
    train_boundaries: list[Boundary]
    sft_counts: dict[str, int]
    sft_steps: int
    sft_losses: list[float]
    sft_log_likelihood: tuple[float, float]
    sft_state: dict[str, Any]
    records: tuple[EpisodeRecord, ...]
    returns: tuple[float, ...]
    seconds: float = 0.0


def warm_start(profile: str, sc: BopoScale, seed: int, budget: float,
               scored: bool = True, tasks: str = DEFAULT_TASKS) -> WarmStart:
    """Seed ``seed``'s training draw, boundaries, SFT data and warm start; the SFT row.

    ``scored=False`` skips the SFT row's evaluation (``records`` and ``returns`` stay
    empty): a tuning trial (:mod:`experiments.tune.bopo`) never meets an evaluation task.
    ``tasks``: the task set the SFT row is scored on (:mod:`experiments.shared.task_sets`).
    """
    from stable_baselines3.common.utils import set_random_seed

    from agents.learners.training import configure_torch_threads

    configure_torch_threads()
    start = time.perf_counter()
    train_tasks, train_paths = training_draw(profile, sc, seed)
    train_b = [Boundary.from_trajectories(lo, hi) for lo, hi in train_paths]
    data = synthesize_sft_data(make_env(profile), train_tasks, train_b, sc.mix_probs,
                               sc.samples, seed=seed, boundary_paths=train_paths)
    set_random_seed(seed)
    vec = vec_env(profile, train_tasks, budget, 1, seed, lambda e: e)
    model = build_model(vec, seed=seed)
    before = demonstration_log_likelihood(model.policy, data)
    losses = sft_warm_start(model.policy, data, epochs=sc.sft_epochs, seed=seed)
    after = demonstration_log_likelihood(model.policy, data)
    weights = policy_weights(model.policy)
    vec.close()
    first = task_seed(tasks)
    result = (evaluate_on(lambda e: MaskedRouter(weights, e), profile,
                          draw_tasks(profile, sc.n_eval, first), budget, first)
              if scored else EvaluationResult((), ("large",), first))
    return WarmStart(profile, seed, cost_scale(train_b), train_b,
                     data.counts(), len(data.actions), losses, (before, after),
                     {k: v.clone() for k, v in model.policy.state_dict().items()},
                     result.records, result.returns, time.perf_counter() - start)


# ------------------------------------------------------------------- RL runs
@dataclass(frozen=True)
class LearnJob:
    """One RL run: ``method`` (a key of :data:`METHODS`) with cost weight ``lam``."""

    profile: str
    method: str
    lam: float
    scale: BopoScale
    budget: float
    cost_scale: float
    train_boundaries: tuple[Boundary, ...]
    sft_state: dict[str, Any] | None
    seed: int = 0
    curve: bool = True
    #: Overrides of :func:`~agents.learners.bopo_sft.build_model`'s settings (the learning
    #: rate, ``ent_coef``, ...): a tuning trial's configuration; empty keeps the experiment's.
    ppo: Mapping[str, Any] = field(default_factory=dict)
    #: A row trained in the configuration its equal-budget sweep chose (``ppo`` above).
    tuned: bool = False
    #: The task set the run is scored on (:mod:`experiments.shared.task_sets`).
    tasks: str = DEFAULT_TASKS

    @property
    def key(self) -> str:
        """``<method>/<lam>``, the run's key in reports (``<family>/tuned`` when tuned)."""
        if self.tuned:
            return f"{self.method.split('-')[0]}/tuned"
        return f"{self.method}/{self.lam:g}"


@dataclass(frozen=True)
class LearnResult:
    """A trained router's evaluation episodes and its learning curve.

    Attributes:
        job: What was trained.
        records: Evaluation episodes of the final policy.
        returns: Their returns (Eq. 1), in task order.
        curve: ``timesteps``, ``success_rate``, ``avg_cost`` and ``cps`` of the policy on
            the evaluation tasks at each checkpoint (0 = before RL); the final one only
            for a scan run.
        seconds: Wall time of the job.
        scored: At the same checkpoints, ``timesteps``, ``gradient_steps``
            (:func:`agents.callbacks.gradient_steps`) and the per-task ``returns``: the
            entries :func:`experiments.budgets.report.curve_table` reads.
    """

    job: LearnJob
    records: tuple[EpisodeRecord, ...]
    returns: tuple[float, ...]
    curve: tuple[dict[str, float], ...]
    seconds: float
    scored: tuple[dict[str, Any], ...] = ()

    @property
    def key(self) -> str:
        """``<method>/<lam>``, the method's key in reports."""
        return self.job.key


def _reward(job: LearnJob) -> Callable[[gym.Env], gym.Env]:
    if job.method not in METHODS:
        raise ValueError(f"method: expected one of {list(METHODS)}, got {job.method!r}")
    term = METHODS[job.method]
    if term is None:
        return lambda e: CostPenaltyReward(e, job.lam, job.cost_scale)
    boundaries = list(job.train_boundaries)
    return lambda e: BoPOReward(e, boundaries, job.lam, term)


def learner(job: LearnJob) -> Any:
    """The job's MaskablePPO on its training envs, before any RL step.

    From the SFT weights for BoPO (``job.sft_state``), from scratch for vanilla PPO; the
    rollout is ``n_envs`` x ``min(256, timesteps // n_envs)`` steps (at least 16 per env).
    """
    from stable_baselines3.common.utils import set_random_seed

    sc = job.scale
    reward = _reward(job)
    train_tasks = draw_tasks(job.profile, sc.n_train, BOPO_TRAIN_TASK_SEED + job.seed)
    set_random_seed(job.seed)
    n_steps = max(16, min(256, sc.timesteps // sc.n_envs))
    vec = vec_env(job.profile, train_tasks, job.budget, sc.n_envs, job.seed, reward)
    settings = {"learning_rate": LEARNING_RATE,
                "batch_size": min(256, n_steps * sc.n_envs), **job.ppo}
    model = build_model(vec, seed=job.seed, n_steps=n_steps, **settings)
    if job.sft_state is not None:
        model.policy.load_state_dict(job.sft_state)
    return model


def _streams() -> tuple[Any, ...]:
    """The process-wide random streams a run draws from (Python, NumPy, torch)."""
    import random

    import torch

    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _restore(streams: tuple[Any, ...]) -> None:
    import random

    import torch

    random.setstate(streams[0])
    np.random.set_state(streams[1])
    torch.set_rng_state(streams[2])


class LearningRun:
    """One RL run, advanced checkpoint by checkpoint: trained, then scored, at each.

    The run keeps its own copy of the process-wide random streams (SB3 samples actions
    from torch's), swapped in while it works and out when it stops, so several runs
    advanced in turn in one process train exactly what each would train alone
    (:func:`run_learning_job`): a long curve can bring all its runs to a checkpoint
    before any goes further.
    """

    def __init__(self, job: LearnJob) -> None:
        from agents.learners.training import configure_torch_threads

        configure_torch_threads()
        start = time.perf_counter()
        outside = _streams()
        self.job = job
        self.eval_seed = task_seed(job.tasks)
        self.eval_tasks = draw_tasks(job.profile, job.scale.n_eval, self.eval_seed)
        self.model = learner(job)
        self._streams = _streams()
        _restore(outside)
        self.curve: list[dict[str, float]] = []
        self.scored: list[dict[str, Any]] = []
        self.result = EvaluationResult((), ("large",), self.eval_seed)
        self.seconds = time.perf_counter() - start

    def advance(self, checkpoint: int) -> dict[str, Any]:
        """Train to ``checkpoint`` env steps (no step back) and score; its ``scored`` entry."""
        from agents.callbacks import gradient_steps

        start = time.perf_counter()
        outside = _streams()
        _restore(self._streams)
        model = self.model
        if checkpoint > model.num_timesteps:
            model.learn(checkpoint - model.num_timesteps, reset_num_timesteps=False)
        weights = policy_weights(model.policy)
        self.result = evaluate_on(lambda e: MaskedRouter(weights, e), self.job.profile,
                                  self.eval_tasks, self.job.budget, self.eval_seed)
        self._streams = _streams()
        _restore(outside)
        point = summarize(self.result.records)
        self.curve.append({"timesteps": model.num_timesteps,
                           **{k: point[k] for k in ("success_rate", "avg_cost", "cps")}})
        self.scored.append({"timesteps": int(model.num_timesteps),
                            "gradient_steps": gradient_steps(model),
                            "returns": [float(value) for value in self.result.returns]})
        self.seconds += time.perf_counter() - start
        return self.scored[-1]

    def finish(self) -> LearnResult:
        """Close the training envs; the run's result (its last checkpoint's evaluation)."""
        self.model.get_env().close()
        return LearnResult(self.job, self.result.records, self.result.returns,
                           tuple(self.curve), self.seconds, tuple(self.scored))


def checkpoints_of(job: LearnJob) -> list[int]:
    """The env-step counts a job is scored at: its steps, and below them its checkpoints."""
    sc = job.scale
    points = sc.checkpoints if job.curve else ()
    return sorted({*(c for c in points if c < sc.timesteps), sc.timesteps})


def run_learning_job(job: LearnJob) -> LearnResult:
    """Train one router (BoPO from the SFT weights, or vanilla PPO) and evaluate it.

    With ``job.curve`` the policy is also scored at each of ``scale.checkpoints`` (its
    learning curve); the final evaluation is the one at ``scale.timesteps``.
    """
    run = LearningRun(job)
    for checkpoint in checkpoints_of(job):
        run.advance(checkpoint)
    return run.finish()
