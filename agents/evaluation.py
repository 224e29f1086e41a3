"""Evaluate allocators on a fixed task set and compare them in one table.

**Fixed task set.** :func:`evaluate` calls ``env.reset(seed=seed)`` for the first episode
and ``env.reset()`` afterwards. A cost-envs environment draws each task (all of its
randomness, including every agent's luck) from its own ``np_random`` at reset, and
nothing else draws from that generator, so the task stream depends on the seed alone,
never on the actions. Every method evaluated with the same seed therefore meets the same
tasks in the same order, and differences between methods are paired, not luck.
Allocators with randomness of their own (:class:`agents.baselines.RandomAllocator`)
must keep their own generator, as the baselines do.

Any object with Stable-Baselines3's ``predict(obs, state, episode_start, deterministic)``
is an allocator: the baselines, trained SB3 models (recurrent ones included) and user
code alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from cost_envs.config import integer
from cost_envs.limits import check_memory, evaluation_bytes
from cost_envs.metrics import (
    HEADLINE_METRICS,
    EpisodeRecord,
    bootstrap_cis,
    bootstrap_mean_ci,
    interval_around,
    summarize,
)

#: Builds an allocator for the environment it will act in (baselines: ``cls(env)``).
AllocatorFactory = Callable[[gym.Env], Any]

def _significant(value: float, digits: int = 4) -> str:
    """``digits`` significant digits, trailing zeros kept so a column reads evenly."""
    text = f"{value:#.{digits}g}"
    return text[:-1] if text.endswith(".") else text


#: Table columns: (header, summary key, formatter).
_COLUMNS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("Success", "success_rate", lambda x: f"{x:.3f}"),
    ("CPS", "cps", _significant),
    ("FLOPs/Success", "flops_per_success", lambda x: f"{x:.3e}"),
    ("Avg quality", "avg_quality", lambda x: f"{x:.2f}"),
    ("Avg cost", "avg_cost", _significant),
)


@dataclass(frozen=True)
class EvaluationResult:
    """The episodes of one evaluation.

    Attributes:
        records: One :class:`EpisodeRecord` per episode, in task order.
        agent_names: Names of the pool's agents, in action order (keys of ``call_ratio``).
        seed: Seed of the task set.
        returns: Each episode's return (the sum of its rewards: Eq. 1 under the env's
            reward weights, or a wrapper's reward), in task order; empty when built from
            records alone.
    """

    records: tuple[EpisodeRecord, ...]
    agent_names: tuple[str, ...]
    seed: int
    returns: tuple[float, ...] = ()

    def summary(self, n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
        """Point metrics with 95% percentile-bootstrap intervals, as plain JSON values.

        Args:
            n_resamples: Bootstrap resamples for the intervals.
            seed: Seed of the bootstrap generator (not of the tasks).

        Returns:
            ``success_rate``, ``cps``, ``flops_per_success``, ``avg_quality``,
            ``avg_cost``, each with ``<key>_ci`` = ``[low, high]``; ``call_ratio``
            (agent name -> fraction of steps it was called in); ``budget_exceeded``
            and ``episodes``; with :attr:`returns`, also ``episode_return`` (their mean)
            and its ``episode_return_ci``.
        """
        out = summarize(self.records)
        out["call_ratio"] = dict(zip(self.agent_names, out["call_ratio"], strict=True))
        intervals = bootstrap_cis(self.records, HEADLINE_METRICS, n_resamples=n_resamples,
                                  seed=seed)
        for key, interval in zip(HEADLINE_METRICS, intervals, strict=True):
            out[f"{key}_ci"] = interval_around(out[key], interval)
        if self.returns:
            mean, low, high = bootstrap_mean_ci(self.returns, n_resamples=n_resamples,
                                                seed=seed)
            out["episode_return"], out["episode_return_ci"] = mean, [low, high]
        return out


def agent_names(env: gym.Env) -> tuple[str, ...]:
    """The pool's agent names, or ``agent_i`` for an env without a pool."""
    pool = getattr(env.unwrapped, "pool", None)
    if pool is not None:
        return tuple(pool.names)
    shape = env.action_space.shape
    if shape is None:
        raise ValueError(f"agent_names: expected an action space with a shape (one bit per "
                         f"agent), got {env.action_space}")
    return tuple(f"agent_{i}" for i in range(int(np.prod(shape))))


def check_binding(allocator: Any, env: gym.Env) -> None:
    """Refuse a privileged allocator bound to another env: it would read the wrong task."""
    bound = getattr(allocator, "env", None)
    if getattr(allocator, "privileged", False) and bound is not env.unwrapped:
        raise ValueError(
            f"{type(allocator).__name__} is privileged and reads the environment it was "
            "built with, which is not the one being evaluated; build it on this env "
            "(pass a factory such as the class to compare())"
        )


def _action(raw: Any) -> np.ndarray:
    """SB3 returns a batch of one for a batched call: drop that leading dimension."""
    action = np.asarray(raw)
    if action.ndim >= 2 and action.shape[0] == 1:
        action = action[0]
    return action


@dataclass(frozen=True)
class Rollout:
    """One episode played by an allocator: the project's one rollout loop returns this.

    Attributes:
        record: The episode's :class:`EpisodeRecord` (its spend read from the env's ledger).
        info: The last step's ``info``.
        observations: ``(T, obs_dim)`` float32, the observation each action was chosen
            from (``None`` unless ``record_steps``).
        actions: ``(T, m)`` int8, the actions sent to the env (``None`` unless recorded).
        rewards: ``(T,)`` float64 rewards (``None`` unless recorded).
        episode_return: The sum of the episode's rewards (always kept).
    """

    record: EpisodeRecord
    info: dict[str, Any]
    observations: np.ndarray | None = None
    actions: np.ndarray | None = None
    rewards: np.ndarray | None = None
    episode_return: float = 0.0


def _episode_totals(env: gym.Env, info: Mapping[str, Any]) -> tuple[float, float]:
    """The episode's money and FLOPs from the env's ledger, the one place that sums them.

    The final ``info`` carries them (``episode_cost``, ``episode_flops``); a foreign
    wrapper's truncation (Gymnasium's ``TimeLimit``) does not, and then the unwrapped
    env's ledger, not yet reset, is read.
    """
    if "episode_cost" in info and "episode_flops" in info:
        return float(info["episode_cost"]), float(info["episode_flops"])
    base = env.unwrapped
    if hasattr(base, "episode_cost") and hasattr(base, "episode_flops"):
        return float(base.episode_cost), float(base.episode_flops)
    raise ValueError(f"{type(base).__name__}: an episode ended without info['episode_cost'] "
                     "and the env keeps no ledger; cost-envs environments report it at the "
                     "last step")


def rollout(
    allocator: Any,
    env: gym.Env,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    deterministic: bool = True,
    record_steps: bool = False,
    observer: Any = None,
) -> Rollout:
    """Play one episode of ``allocator`` on ``env``: the project's one rollout loop.

    Evaluation, the supervised traces and BoPO's boundary rollouts all play episodes
    through here. The allocator's recurrent state starts as ``None`` with
    ``episode_start=[True]`` and is threaded through the episode, as SB3's
    ``evaluate_policy`` does.

    Args:
        allocator: Anything with SB3's ``predict`` signature.
        env: The environment (possibly wrapped).
        seed: Passed to ``env.reset``; ``None`` continues the env's task stream.
        options: Passed to ``env.reset`` (e.g. ``{"task": task}`` replays a task).
        deterministic: Passed to ``predict``.
        record_steps: Also keep every observation, action and reward.
        observer: Told of ``reset`` and of every step, as they happen:
            ``observer.reset(obs, info)`` and ``observer.step(action, obs, reward,
            terminated, truncated, info)`` (a :class:`cost_envs.minari_io.EpisodeRecorder`
            keeps the episode for a Minari dataset).

    Raises:
        ValueError: If the env ends an episode by termination without the ``success``
            info key of the cost-envs contract.
    """
    obs, reset_info = env.reset(seed=seed, options=options)
    if observer is not None:
        observer.reset(obs, reset_info)
    state: Any = None
    start = np.array([True])
    calls = np.zeros(0, dtype=np.int64)
    length = 0
    exceeded = False
    observations: list[np.ndarray] = []
    actions: list[np.ndarray] = []
    rewards: list[float] = []
    episode_return = 0.0
    while True:
        raw, state = allocator.predict(
            obs, state=state, episode_start=start, deterministic=deterministic
        )
        start = np.array([False])
        action = _action(raw)
        if record_steps:
            observations.append(obs)
            actions.append(action)
        obs, reward, terminated, truncated, info = env.step(action)
        if observer is not None:
            observer.step(action, obs, reward, terminated, truncated, info)
        length += 1
        episode_return += float(reward)
        if record_steps:
            rewards.append(float(reward))
        step_calls = np.asarray(info["calls"], dtype=np.int64)
        calls = step_calls if length == 1 else calls + step_calls
        exceeded = exceeded or bool(info.get("budget_exceeded", False))
        if terminated or truncated:
            break
    if "success" not in info and terminated:
        raise ValueError("the environment terminated an episode without info['success']; "
                         "cost-envs environments report it at the last step")
    cost, flops = _episode_totals(env, info)
    # A plain TimeLimit truncation carries no outcome: the episode did not succeed.
    record = EpisodeRecord(
        success=bool(info.get("success", False)),
        quality=float(info.get("quality", 0.0)),
        cost=cost,
        flops=flops,
        calls=calls,
        length=length,
        budget_exceeded=exceeded,
    )
    if not record_steps:
        return Rollout(record, info, episode_return=episode_return)
    return Rollout(record, info, np.asarray(observations, dtype=np.float32),
                   np.asarray(actions, dtype=np.int8).reshape(length, -1),
                   np.asarray(rewards, dtype=np.float64), episode_return)


def run_episode(
    allocator: Any, env: gym.Env, seed: int | None = None, deterministic: bool = True
) -> EpisodeRecord:
    """Play one episode (:func:`rollout`) and return its :class:`EpisodeRecord`."""
    return rollout(allocator, env, seed=seed, deterministic=deterministic).record


def _check_episodes(episodes: int, runs: int = 1) -> None:
    """``episodes`` a count >= 1 whose ``runs`` methods' episodes fit in memory.

    Every episode is kept until the result is summarised: a billion grew by 4 MB/s until
    the machine ran out, so the estimate is checked before the first one.
    """
    integer(episodes, "episodes", minimum=1)
    check_memory(evaluation_bytes(episodes, runs),
                 f"episodes={episodes}" + (f" for each of {runs} methods" if runs > 1 else ""),
                 "lower episodes")


def evaluate(
    allocator: Any,
    env: gym.Env | str,
    episodes: int = 400,
    seed: int = 0,
    deterministic: bool = True,
    env_kwargs: Mapping[str, Any] | None = None,
    progress: bool = False,
    desc: str = "evaluating",
) -> EvaluationResult:
    """Run ``allocator`` for ``episodes`` episodes on the fixed task set of ``seed``.

    The first episode resets with ``seed`` and the rest continue the env's own task
    stream, so every allocator evaluated with the same seed sees the same tasks (see the
    module docstring).

    Args:
        allocator: Anything with SB3's ``predict(obs, state, episode_start,
            deterministic)``; a privileged one must have been built on ``env``.
        env: An environment instance (possibly wrapped) or a registered id, then made
            with ``gym.make(env, **env_kwargs)`` and closed afterwards.
        episodes: Number of episodes, >= 1.
        seed: Seed of the task set.
        deterministic: Passed to ``predict``.
        env_kwargs: Keyword arguments for ``gym.make``; only with an id.
        progress: Show a bar of the episodes on a terminal (:mod:`agents.progress`).
        desc: The bar's label.

    Returns:
        The :class:`EvaluationResult`.
    """
    _check_episodes(episodes)
    if isinstance(env, str):
        made = gym.make(env, **dict(env_kwargs or {}))
        try:
            return evaluate(allocator, made, episodes, seed, deterministic,
                            progress=progress, desc=desc)
        finally:
            made.close()
    if env_kwargs:
        raise ValueError("env_kwargs: only used when env is an id string")
    check_binding(allocator, env)
    from agents.progress import progress_bar

    played = []
    with progress_bar(episodes, desc, progress, unit="episode") as bar:
        for i in range(episodes):
            played.append(rollout(allocator, env, seed if i == 0 else None,
                                  deterministic=deterministic))
            bar.update(1)
    return EvaluationResult(records=tuple(episode.record for episode in played),
                            agent_names=agent_names(env), seed=seed,
                            returns=tuple(episode.episode_return for episode in played))


def build_allocator(method: Any, env: gym.Env, name: str) -> Any:
    """An allocator from ``method``: classes and plain callables are factories."""
    if isinstance(method, type):
        return method(env)
    if hasattr(method, "predict"):
        return method
    if callable(method):
        return method(env)
    raise ValueError(
        f"method {name!r}: expected an allocator (with predict) or a factory env -> "
        f"allocator, got {method!r}"
    )


def evaluate_each(
    methods: Mapping[str, Any],
    env_id: str,
    episodes: int = 400,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
    progress: bool = False,
) -> dict[str, EvaluationResult]:
    """Evaluate several methods on the same task set, each on a freshly made env.

    :func:`compare` summarises what this returns; use this one when the episodes
    themselves are needed (paired comparisons, the share of a gap closed).

    Args:
        methods: Name -> allocator, or name -> factory taking the env and returning an
            allocator (a baseline class works as its own factory). Privileged allocators
            such as the oracle must be given as factories.
        env_id: Registered environment id.
        episodes: Episodes per method.
        seed: Seed of the task set, shared by all methods.
        env_kwargs: Keyword arguments for ``gym.make``.
        log: Told, before each method's episodes, ``"<name>: evaluating on <n>
            episodes"`` (building a method that fits itself may take long too: its
            factory says so).
        progress: A bar of each method's episodes on a terminal (:mod:`agents.progress`).

    Returns:
        Name -> :class:`EvaluationResult`, in the order of ``methods``.
    """
    if not methods:
        raise ValueError("compare: expected at least one method, got none")
    _check_episodes(episodes, len(methods))
    results = {}
    for name, method in methods.items():
        env = gym.make(env_id, **dict(env_kwargs or {}))
        try:
            allocator = build_allocator(method, env, name)
            if log is not None:
                log(f"{name}: evaluating on {episodes} episodes")
            results[name] = evaluate(allocator, env, episodes, seed, progress=progress,
                                     desc=name)
        finally:
            env.close()
    return results


def compare(
    methods: Mapping[str, Any],
    env_id: str,
    episodes: int = 400,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    n_resamples: int = 1000,
    log: Callable[[str], None] | None = None,
    progress: bool = False,
) -> dict[str, dict[str, Any]]:
    """Evaluate several methods on the same task set and summarise each.

    Args:
        methods: As :func:`evaluate_each`'s.
        env_id: Registered environment id.
        episodes: Episodes per method.
        seed: Seed of the task set, shared by all methods.
        env_kwargs: Keyword arguments for ``gym.make``.
        n_resamples: Bootstrap resamples for the intervals.
        log: As :func:`evaluate_each`'s.
        progress: As :func:`evaluate_each`'s.

    Returns:
        Name -> :meth:`EvaluationResult.summary`, in the order of ``methods``.
    """
    results = evaluate_each(methods, env_id, episodes, seed, env_kwargs, log=log,
                            progress=progress)
    return {name: result.summary(n_resamples=n_resamples, seed=seed)
            for name, result in results.items()}


def value_interval(value: float, low: float, high: float, fmt: str = ".3f") -> str:
    """``value [low, high]`` in one format (``n/a`` for a non-finite value)."""
    if not math.isfinite(value):
        return "n/a"
    return f"{value:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


def _cell(summary: Mapping[str, Any], key: str, fmt: Callable[[float], str]) -> str:
    text = fmt(summary[key])
    interval: Sequence[float] | None = summary.get(f"{key}_ci")
    if interval is not None:
        text += f" [{fmt(interval[0])}, {fmt(interval[1])}]"
    return text


def format_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """A Markdown table of summaries, each value with its 95% interval when present.

    Success has 3 decimals, CPS and average cost 4 significant digits, FLOPs/success
    scientific notation, quality 2 decimals: e.g. ``0.812 [0.774, 0.848]``.

    Args:
        results: Method name -> summary (as returned by :func:`compare`).

    Returns:
        The table, one row per method, without a trailing newline.
    """
    if not results:
        raise ValueError("format_table: expected at least one method's summary, got none")
    header = ["Method", *(title for title, _, _ in _COLUMNS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    for name, summary in results.items():
        cells = [name, *(_cell(summary, key, fmt) for _, key, fmt in _COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
