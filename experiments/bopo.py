"""BoPO's experiment: the three AgenticRouting-v0 profiles, every router, one report.

For each profile, :func:`prepare_profile` draws the training and evaluation tasks, rolls
out the boundaries, sets the per-task budget, builds the SFT data and the warm start
(:mod:`agents.routing.bopo_sft`) and scores the fixed baselines, among them the rules of
:data:`TRAINED_RULES` (the difficulty threshold, the best fixed rule), each fitted on the
profile's training tasks under the same budget, then frozen; :func:`run_learning_job`
trains one router (BoPO from the SFT weights, or vanilla PPO) per cost weight and scores
it at the scale's checkpoints. :func:`run_all` runs all of it, in worker processes when
the scale says so, and :func:`report` writes ``bopo.md``, ``bopo.json`` and
``pareto_bopo_<profile>.png`` (rendered by :mod:`experiments.bopo_report`), all rendered
before any is written and written all together.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agents.baselines import (
    AlwaysLarge,
    AlwaysSmall,
    Cascade,
    CostOptOracle,
    DifficultyThreshold,
    RandomMix,
)
from agents.evaluation import EvaluationResult, evaluate
from agents.files import write_files_atomic
from agents.planning import AgenticPlanner
from agents.routing.bopo import (
    BUDGET_QUANTILE,
    LEARNING_RATE,
    BoPOReward,
    Boundary,
    CostPenaltyReward,
    boundary_rollouts,
    boundary_trajectories,
    draw_tasks,
    inversion_share,
    make_env,
    strata_distribution,
)
from agents.routing.bopo_sft import (
    MaskedRouter,
    build_model,
    demonstration_log_likelihood,
    policy_weights,
    sft_warm_start,
    synthesize_sft_data,
)
from agents.rules import BestFixedRule
from agents.seeds import BOPO_TRAIN_TASK_SEED, EVAL_TASK_SEED
from cost_envs.envs.agentic_routing import PROFILE_NAMES
from cost_envs.metrics import EpisodeRecord, summarize
from cost_envs.wrappers import TaskReplay
from experiments.bopo_gaps import gap_block
from experiments.bopo_report import (
    RIVALS,
    compare_frontiers,
    label,
    markdown,
    method_summary,
    pareto_figure,
)
from experiments.common import described, quiet, recording, spawn_pool


# ------------------------------------------------------------------- the scale
@dataclass(frozen=True)
class BopoScale:
    """How much work :func:`report` does (there is no ``full`` scale).

    Args:
        name: ``smoke`` or ``default``.
        n_train: Training tasks per profile.
        n_eval: Evaluation tasks per profile.
        timesteps: RL environment steps per learned router.
        bopo_lams: BoPO's cost weights (one frontier point each).
        ppo_lams: Vanilla PPO's cost weights.
        mix_probs: Large-model probabilities of the SFT samples.
        samples: SFT samples per probability and task.
        sft_epochs: Behaviour-cloning epochs.
        n_envs: Parallel envs per RL run (one batched policy call per step).
        resamples: Bootstrap resamples.
        jobs: Worker processes.
        random_ps: RandomMix's probabilities of the large model.
        patiences: Cascade's patiences.
        checkpoints: RL steps at which the learning curves score the policy (the final
            evaluation at ``timesteps`` is always one).
    """

    name: str
    n_train: int
    n_eval: int
    timesteps: int
    bopo_lams: tuple[float, ...]
    ppo_lams: tuple[float, ...]
    mix_probs: tuple[float, ...] = (0.1, 0.25, 0.5)
    samples: int = 4
    sft_epochs: int = 10
    n_envs: int = 8
    resamples: int = 1000
    jobs: int = 2
    random_ps: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75)
    patiences: tuple[int, ...] = (1, 2, 3)
    checkpoints: tuple[int, ...] = (0, 2048, 8192)


SCALES = {
    # Plumbing for the tests: every row, every file, in seconds. Not a result.
    "smoke": BopoScale("smoke", n_train=24, n_eval=16, timesteps=256, bopo_lams=(0.5,),
                       ppo_lams=(0.5,), samples=1, sft_epochs=2, n_envs=2, resamples=50,
                       jobs=1, random_ps=(0.5,), patiences=(1,), checkpoints=(0,)),
    # What the benchmark runs: all three profiles in under 4 minutes on 2 cores.
    "default": BopoScale("default", n_train=400, n_eval=400, timesteps=32_768,
                         bopo_lams=(0.1, 0.4, 0.7, 0.95), ppo_lams=(0.25, 0.5, 1.0, 2.0)),
}


def _scale(scale: str | BopoScale) -> BopoScale:
    if isinstance(scale, BopoScale):
        return scale
    if scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    return SCALES[scale]


# ------------------------------------------------------------------- profile work
@dataclass
class Prepared:
    """What one profile's preparation leaves for the learning jobs and the report."""

    profile: str
    budget: float
    cost_scale: float
    train_boundaries: list[Boundary]
    eval_boundaries: list[Boundary]
    sft_counts: dict[str, int]
    sft_steps: int
    sft_losses: list[float]
    sft_log_likelihood: tuple[float, float]
    sft_state: dict[str, Any]
    records: dict[str, tuple[EpisodeRecord, ...]] = field(default_factory=dict)
    #: Method key -> each evaluation episode's return (Eq. 1), in task order.
    returns: dict[str, tuple[float, ...]] = field(default_factory=dict)
    #: Method key -> what its fitting found, for its report entry (label, threshold, rule).
    fitted: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class LearnJob:
    """One RL run: ``method`` (``bopo`` or ``ppo``) with cost weight ``lam``."""

    profile: str
    method: str
    lam: float
    scale: BopoScale
    budget: float
    cost_scale: float
    train_boundaries: tuple[Boundary, ...]
    sft_state: dict[str, Any] | None
    seed: int = 0

    @property
    def key(self) -> str:
        """``<method>/<lam>``, the run's key in reports."""
        return f"{self.method}/{self.lam:g}"


#: Rules fitted on a profile's training tasks, then frozen: key -> ``fit(env, train_tasks)``,
#: called with the env as it is scored (``make_env(profile, budget)``, see :func:`_evaluate`).
TRAINED_RULES: dict[str, Callable[[gym.Env, Sequence[Any]], Any]] = {
    "difficulty-threshold": DifficultyThreshold.fit,
    "best-rule": BestFixedRule.fit,
}


def _evaluate(allocator_for: Callable[[gym.Env], Any], profile: str, tasks: Sequence[Any],
              budget: float) -> EvaluationResult:
    """Every evaluation task once, in order, under the budget.

    The allocator is built on the env as scored, under the budget but beneath the replay
    of the evaluation tasks: a rule fitted when it is built replays its own training tasks
    on that env (TaskReplay refuses to sit on another replay) and never meets an
    evaluation task.
    """
    env = make_env(profile, budget)
    allocator = allocator_for(env)
    replay = TaskReplay(env, tasks)
    result = evaluate(allocator, replay, episodes=len(tasks), seed=EVAL_TASK_SEED)
    replay.close()
    return result


def _vec_env(profile: str, tasks: Sequence[Any], budget: float, n_envs: int, seed: int,
             reward: Callable[[gym.Env], gym.Env]) -> Any:
    from stable_baselines3.common.vec_env import DummyVecEnv

    def factory(i: int) -> Callable[[], gym.Env]:
        return lambda: reward(TaskReplay(make_env(profile, budget), tasks, shuffle=True,
                                         seed=seed * 1000 + i))

    return DummyVecEnv([factory(i) for i in range(n_envs)])


def prepare_profile(profile: str, scale: str | BopoScale = "default", seed: int = 0
                    ) -> Prepared:
    """Boundaries, taxonomy, budget, SFT warm start and the fixed baselines of one profile."""
    from stable_baselines3.common.utils import set_random_seed

    from agents.lora.training import configure_torch_threads

    configure_torch_threads()

    start = time.perf_counter()
    sc = _scale(scale)
    train_tasks = draw_tasks(profile, sc.n_train, BOPO_TRAIN_TASK_SEED + seed)
    eval_tasks = draw_tasks(profile, sc.n_eval, EVAL_TASK_SEED)
    env = make_env(profile)
    train_paths = boundary_trajectories(env, train_tasks)
    train_b = [Boundary.from_trajectories(lo, hi) for lo, hi in train_paths]
    eval_b = boundary_rollouts(env, eval_tasks)
    large_costs = np.array([b.large_cost for b in train_b])
    budget = float(np.quantile(large_costs, BUDGET_QUANTILE))
    cost_scale = float(large_costs.mean())
    data = synthesize_sft_data(env, train_tasks, train_b, sc.mix_probs, sc.samples, seed=seed,
                               boundary_paths=train_paths)
    set_random_seed(seed)
    vec = _vec_env(profile, train_tasks, budget, 1, seed, lambda e: e)
    model = build_model(vec, seed=seed)
    before = demonstration_log_likelihood(model.policy, data)
    losses = sft_warm_start(model.policy, data, epochs=sc.sft_epochs, seed=seed)
    after = demonstration_log_likelihood(model.policy, data)
    weights = policy_weights(model.policy)
    prepared = Prepared(profile, budget, cost_scale, train_b, eval_b, data.counts(),
                        len(data.actions), losses, (before, after),
                        {k: v.clone() for k, v in model.policy.state_dict().items()})
    methods: dict[str, Callable[[gym.Env], Any]] = {
        "always-small": AlwaysSmall, "always-large": AlwaysLarge, "oracle": CostOptOracle,
        "planner": AgenticPlanner,
        "sft": lambda e: MaskedRouter(weights, e),
    }
    for p in sc.random_ps:
        methods[f"random-mix/{p:g}"] = lambda e, p=p: RandomMix(e, p=p, seed=seed)
    for k in sc.patiences:
        methods[f"cascade/{k}"] = lambda e, k=k: Cascade(e, patience=k)
    built: dict[str, Any] = {}
    for key, fit in TRAINED_RULES.items():
        methods[key] = recording(lambda e, fit=fit: fit(e, train_tasks), built, key)
    for name, factory in methods.items():
        result = _evaluate(factory, profile, eval_tasks, budget)
        prepared.records[name], prepared.returns[name] = result.records, result.returns
    for key, rule in built.items():  # what each fit found, in its label and its entry
        found = prepared.fitted[key] = described(rule)
        if isinstance(rule, DifficultyThreshold):
            found.update(label=f"{label(key)} (fitted, t={rule.threshold:g})",
                         fitted_threshold=rule.threshold)
        elif "rule" in found:
            found["label"] = f"{label(key)}: {found['rule']}"
    env.close()
    vec.close()
    prepared.seconds = time.perf_counter() - start
    return prepared


@dataclass(frozen=True)
class LearnResult:
    """A trained router's evaluation episodes and its learning curve.

    Attributes:
        job: What was trained.
        records: Evaluation episodes of the final policy.
        returns: Their returns (Eq. 1), in task order.
        curve: ``timesteps``, ``success_rate``, ``avg_cost`` and ``cps`` of the policy on
            the evaluation tasks at each of the scale's checkpoints (0 = before RL).
        seconds: Wall time of the job.
    """

    job: LearnJob
    records: tuple[EpisodeRecord, ...]
    returns: tuple[float, ...]
    curve: tuple[dict[str, float], ...]
    seconds: float

    @property
    def key(self) -> str:
        """``<method>/<lam>``, the method's key in reports."""
        return self.job.key


def run_learning_job(job: LearnJob) -> LearnResult:
    """Train one router (BoPO from the SFT weights, or vanilla PPO) and evaluate it.

    The policy is also scored at each checkpoint of ``scale.checkpoints`` (its learning
    curve); the final evaluation is the one at ``scale.timesteps``.
    """
    from stable_baselines3.common.utils import set_random_seed

    from agents.lora.training import configure_torch_threads

    configure_torch_threads()

    start = time.perf_counter()
    sc = job.scale
    train_tasks = draw_tasks(job.profile, sc.n_train, BOPO_TRAIN_TASK_SEED + job.seed)
    eval_tasks = draw_tasks(job.profile, sc.n_eval, EVAL_TASK_SEED)
    set_random_seed(job.seed)
    if job.method == "bopo":
        boundaries = list(job.train_boundaries)
        reward: Callable[[gym.Env], gym.Env] = lambda e: BoPOReward(e, boundaries, job.lam)  # noqa: E731
    elif job.method == "ppo":
        reward = lambda e: CostPenaltyReward(e, job.lam, job.cost_scale)  # noqa: E731
    else:
        raise ValueError(f"method: expected 'bopo' or 'ppo', got {job.method!r}")
    n_steps = max(16, min(256, sc.timesteps // sc.n_envs))
    vec = _vec_env(job.profile, train_tasks, job.budget, sc.n_envs, job.seed, reward)
    model = build_model(vec, seed=job.seed, learning_rate=LEARNING_RATE, n_steps=n_steps,
                        batch_size=min(256, n_steps * sc.n_envs))
    if job.sft_state is not None:
        model.policy.load_state_dict(job.sft_state)
    curve = []
    result = EvaluationResult((), ("large",), EVAL_TASK_SEED)
    for checkpoint in sorted({*(c for c in sc.checkpoints if c < sc.timesteps), sc.timesteps}):
        if checkpoint > model.num_timesteps:
            model.learn(checkpoint - model.num_timesteps, reset_num_timesteps=False)
        weights = policy_weights(model.policy)
        result = _evaluate(lambda e, w=weights: MaskedRouter(w, e), job.profile, eval_tasks,
                           job.budget)
        point = summarize(result.records)
        curve.append({"timesteps": model.num_timesteps,
                      **{k: point[k] for k in ("success_rate", "avg_cost", "cps")}})
    vec.close()
    return LearnResult(job, result.records, result.returns, tuple(curve),
                       time.perf_counter() - start)


# ----------------------------------------------------------------------- the runs
def _learn_jobs(prepared: Prepared, sc: BopoScale, seed: int) -> list[LearnJob]:
    common = {"profile": prepared.profile, "scale": sc, "budget": prepared.budget,
              "cost_scale": prepared.cost_scale,
              "train_boundaries": tuple(prepared.train_boundaries), "seed": seed}
    return ([LearnJob(method="bopo", lam=lam, sft_state=prepared.sft_state, **common)
             for lam in sc.bopo_lams]
            + [LearnJob(method="ppo", lam=lam, sft_state=None, **common)
               for lam in sc.ppo_lams])


def run_all(scale: str | BopoScale = "default", profiles: Sequence[str] = PROFILE_NAMES,
            seed: int = 0, log: Callable[[str], None] = quiet
            ) -> tuple[dict[str, Prepared], dict[str, dict[str, LearnResult]]]:
    """Prepare every profile and train every router; returns what each produced."""
    sc = _scale(scale)
    prepared: dict[str, Prepared] = {}
    learned: dict[str, dict[str, LearnResult]] = {p: {} for p in profiles}

    def take(result: LearnResult) -> None:
        learned[result.job.profile][result.key] = result
        log(f"{result.job.profile}: {result.job.method} lam={result.job.lam:g} trained and "
            f"scored in {result.seconds:.0f}s")

    if sc.jobs <= 1:
        for profile in profiles:
            prepared[profile] = prepare_profile(profile, sc, seed)
            for job in _learn_jobs(prepared[profile], sc, seed):
                take(run_learning_job(job))
        return in_job_order(prepared, learned, profiles, sc, seed)
    with spawn_pool(sc.jobs) as pool:
        pending: dict[Future[Any], str] = {
            pool.submit(prepare_profile, p, sc, seed): "prep" for p in profiles}
        while pending:
            done = next(as_completed(pending))
            kind = pending.pop(done)
            if kind == "prep":
                prep = done.result()
                prepared[prep.profile] = prep
                log(f"{prep.profile}: boundaries, SFT and baselines in {prep.seconds:.0f}s")
                for job in _learn_jobs(prep, sc, seed):
                    pending[pool.submit(run_learning_job, job)] = "learn"
            else:
                take(done.result())
    return in_job_order(prepared, learned, profiles, sc, seed)


def in_job_order(prepared: Mapping[str, Prepared],
                 learned: Mapping[str, Mapping[str, LearnResult]], profiles: Sequence[str],
                 sc: BopoScale, seed: int
                 ) -> tuple[dict[str, Prepared], dict[str, dict[str, LearnResult]]]:
    """The results in the order of the profiles and of their jobs, whatever order they came in.

    Workers finish in whatever order the machine's load gives; reports follow this order
    (rows, JSON keys, figure colours), as a one-process run does, so a rerun writes the
    same files.
    """
    ordered = {profile: prepared[profile] for profile in profiles}
    return ordered, {profile: {job.key: learned[profile][job.key]
                               for job in _learn_jobs(ordered[profile], sc, seed)}
                     for profile in profiles}


# ----------------------------------------------------------------------- the summary
def summarise(prepared: Mapping[str, Prepared],
              learned: Mapping[str, Mapping[str, LearnResult]],
              sc: BopoScale, seed: int = 0) -> dict[str, Any]:
    """The report's data, as JSON values.

    Per profile: the taxonomy, the budget, every method's metrics, the learning curves and
    the frontier outcomes; and the ``gap_closed`` block (:mod:`experiments.bopo_gaps`).
    """
    out: dict[str, Any] = {"scale": asdict(sc), "eval_task_seed": EVAL_TASK_SEED,
                           "train_task_seed": BOPO_TRAIN_TASK_SEED + seed, "profiles": {}}
    returns: dict[str, dict[str, tuple[float, ...]]] = {}
    for profile, prep in prepared.items():
        records = {**prep.records, **{k: r.records for k, r in learned[profile].items()}}
        returns[profile] = {**prep.returns, **{k: r.returns for k, r in learned[profile].items()}}
        order = (["always-small", "always-large"]
                 + [k for k in records if k.startswith("random-mix/")]
                 + [k for k in records if k.startswith("cascade/")]
                 + [k for k in TRAINED_RULES if k in records]
                 + ["sft"] + [k for k in records if k.startswith("ppo/")]
                 + [k for k in records if k.startswith("bopo/")] + ["planner", "oracle"])
        methods = {k: {"label": label(k),
                       **method_summary(records[k], prep.eval_boundaries, sc.resamples, seed,
                                        returns[profile][k]),
                       **prep.fitted.get(k, {})}
                   for k in order}
        points = {k: (m["success_rate"], m["avg_cost"]) for k, m in methods.items()}
        out["profiles"][profile] = {
            "budget": prep.budget,
            "cost_scale": prep.cost_scale,
            "strata_train": strata_distribution(prep.train_boundaries),
            "strata_eval": strata_distribution(prep.eval_boundaries),
            "inversion_share_train": inversion_share(prep.train_boundaries),
            "inversion_share_eval": inversion_share(prep.eval_boundaries),
            "sft": {"trajectories": prep.sft_counts, "steps": prep.sft_steps,
                    "epoch_losses": prep.sft_losses,
                    "demo_log_likelihood_before_after": list(prep.sft_log_likelihood)},
            "methods": methods,
            "learning_curves": {k: list(r.curve) for k, r in learned[profile].items()},
            "frontiers": {rival: compare_frontiers(points, rival, records, sc.resamples, seed)
                          for rival in RIVALS},
        }
    out["gap_closed"] = gap_block(returns, sc.resamples, seed)
    return out


def report(out_dir: Path, scale: str | BopoScale = "default", seed: int = 0,
           log: Callable[[str], None] = quiet, jobs: int | None = None) -> str:
    """Run BoPO against its baselines on the three profiles and write the results.

    Writes ``bopo.md``, ``bopo.json`` and ``pareto_bopo_<profile>.png`` into ``out_dir``,
    all or nothing, after everything is computed and rendered
    (:func:`agents.files.write_files_atomic`).

    Args:
        out_dir: Output directory (created if needed).
        scale: ``"smoke"`` (seconds, for tests), ``"default"`` (under 4 minutes on 2
            cores) or a :class:`BopoScale`.
        seed: Training seed (network initialisation, training tasks, SFT sampling).
        log: Progress printer.
        jobs: Worker processes, instead of the scale's own ``jobs``.

    Returns:
        The Markdown report.
    """
    sc = _scale(scale)
    if jobs is not None:
        sc = dataclasses.replace(sc, jobs=jobs)
    start = time.perf_counter()
    prepared, learned = run_all(sc, seed=seed, log=log)
    summary = summarise(prepared, learned, sc, seed)
    seconds = time.perf_counter() - start
    summary["wall_seconds"] = seconds
    text = markdown(summary, seconds)
    files: dict[str, str | bytes] = {"bopo.md": text,
                                     "bopo.json": json.dumps(summary, indent=2) + "\n"}
    for profile, rep in summary["profiles"].items():
        files[f"pareto_bopo_{profile}.png"] = pareto_figure(profile, rep)
    write_files_atomic(out_dir, files)
    return text
