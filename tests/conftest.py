"""Shared fixtures: every test that takes ``env_id`` runs once per registered environment.

Tests are generated from ``cost_envs.ENV_IDS`` (as Minigrid generates its tests from its
registry), so an environment is covered the moment it is registered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

import cost_envs

ENV_IDS = sorted(cost_envs.ENV_IDS)


@pytest.fixture(params=ENV_IDS)
def env_id(request: pytest.FixtureRequest) -> str:
    return request.param


@dataclass
class SmokeAll:
    """What ``python -m experiments all --scale smoke`` did: its files, progress and reports.

    ``reports`` maps an experiment (``corl``, ``bopo``, ``traces``, ``rules``) to how its
    ``report`` was called (``args``, ``kwargs``) and what it ``returned``; ``lora_ppo`` to
    the same of ``experiments.lora_ppo.reproduce`` (the computed reports, before writing).
    """

    status: int
    out: Path
    progress: str
    reports: dict[str, dict[str, Any]]


@pytest.fixture(scope="session")
def smoke_all(tmp_path_factory: pytest.TempPathFactory) -> SmokeAll:
    """One ``python -m experiments all --scale smoke`` (its ``main``, in this process).

    Shared by the session: tests/test_experiments.py checks the command, and the lora_ppo,
    corl, bopo, traces and rules tests check the reports it wrote rather than computing the
    same smoke reports again. A spy on each experiment's ``report`` (lora_ppo's
    ``reproduce``) keeps its arguments and return.
    """
    import contextlib
    import io

    from experiments import bopo, corl, lora_ppo, rules, traces
    from experiments.__main__ import main

    out = tmp_path_factory.mktemp("experiments") / "results"
    reports: dict[str, dict[str, Any]] = {}

    def spy(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def report(*args: Any, **kwargs: Any) -> Any:
            returned = real(*args, **kwargs)
            reports[name] = {"args": args, "kwargs": kwargs, "returned": returned}
            return returned
        return report

    progress = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(progress):
        for name, module in (("corl", corl), ("bopo", bopo), ("traces", traces),
                             ("rules", rules)):
            patch.setattr(module, "report", spy(name, module.report))
        patch.setattr(lora_ppo, "reproduce", spy("lora_ppo", lora_ppo.reproduce))
        status = main(["all", "--scale", "smoke", "--out", str(out)])
    assert status == 0, progress.getvalue()
    return SmokeAll(status, out, progress.getvalue(), reports)


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` as users call it (wrappers included)."""
    return gym.make(env_id, **kwargs)


def random_actions(m: int, seed: int, dtype: type = np.int8) -> Iterator[np.ndarray]:
    """An endless stream of random MultiBinary(m) actions, reproducible from ``seed``.

    Drawn from our own generator rather than ``action_space.sample()`` so that two envs
    compared step by step get the same actions without sharing a space's RNG.
    """
    rng = np.random.default_rng(seed)
    while True:
        yield rng.integers(0, 2, m).astype(dtype)


@dataclass
class Trajectory:
    """What an env returned over some episodes, copied so later mutation cannot alter it."""

    resets: list[tuple[np.ndarray, dict[str, Any]]] = field(default_factory=list)
    steps: list[tuple[np.ndarray, float, bool, bool, dict[str, Any]]] = field(
        default_factory=list
    )

    def record_reset(self, obs: np.ndarray, info: dict[str, Any]) -> None:
        self.resets.append(_snapshot((obs, info)))

    def record_step(self, result: tuple) -> None:
        self.steps.append(_snapshot(result))


def _snapshot(data: Any) -> Any:
    if isinstance(data, np.ndarray):
        return data.copy()
    if isinstance(data, dict):
        return {k: _snapshot(v) for k, v in data.items()}
    if isinstance(data, tuple):
        return tuple(_snapshot(v) for v in data)
    return data


def play_episode(
    env: gym.Env,
    actions: Iterator[Any],
    traj: Trajectory | None = None,
    before_step: Callable[[gym.Env, np.ndarray], None] | None = None,
    **reset_kwargs: Any,
) -> tuple[Trajectory, list[Any]]:
    """Reset with ``reset_kwargs`` and step until the episode ends, recording everything.

    ``before_step(env, obs)`` runs before every step (e.g. to call privileged hooks).
    Returns the trajectory and the actions taken, so an episode can be replayed.
    """
    traj = Trajectory() if traj is None else traj
    obs, info = env.reset(**reset_kwargs)
    traj.record_reset(obs, info)
    return traj, finish_episode(env, actions, traj, obs, before_step)


def finish_episode(
    env: gym.Env,
    actions: Iterator[Any],
    traj: Trajectory,
    obs: np.ndarray,
    before_step: Callable[[gym.Env, np.ndarray], None] | None = None,
) -> list[Any]:
    """Step the current episode to its end, recording every step; returns the actions."""
    taken = []
    done = False
    while not done:
        if before_step is not None:
            before_step(env, obs)
        action = next(actions)
        taken.append(action)
        result = env.step(action)
        traj.record_step(result)
        obs, done = result[0], result[2] or result[3]
    return taken


def run_episodes(
    env: gym.Env,
    actions: Iterator[Any],
    episodes: int,
    seed: int | None = None,
    before_step: Callable[[gym.Env, np.ndarray], None] | None = None,
    traj: Trajectory | None = None,
) -> Trajectory:
    """Play ``episodes`` episodes; ``seed`` goes to the first reset only.

    Later resets take no seed, so the env's own task stream is exercised too.
    """
    traj = Trajectory() if traj is None else traj
    for episode in range(episodes):
        play_episode(env, actions, traj, before_step, seed=seed if episode == 0 else None)
    return traj


def assert_same_trajectory(a: Trajectory, b: Trajectory) -> None:
    """Exact equality of everything returned, types included (1.0 is not np.float64(1.0))."""
    assert len(a.resets) == len(b.resets)
    assert len(a.steps) == len(b.steps), "episodes of different lengths"
    for i, (x, y) in enumerate(zip(a.resets, b.resets, strict=True)):
        assert data_equivalence(x, y, exact=True), f"reset {i} differs: {x} != {y}"
    for i, (x, y) in enumerate(zip(a.steps, b.steps, strict=True)):
        assert data_equivalence(x, y, exact=True), f"step {i} differs:\n{x}\n!=\n{y}"


def diverges_only_on_what_it_sees(agent: Any, env: gym.Env, task: Any, fresh: Any) -> bool:
    """Play ``task`` and ``fresh`` (the same task, its luck redrawn) with a planner.

    Asserts that the planner acts alike while the two episodes look alike (it cannot read
    the luck) and returns whether the episodes came apart at all (the luck mattered).
    """
    from agents.evaluation import rollout

    runs = [rollout(agent, env, options={"task": t}, record_steps=True) for t in (task, fresh)]
    same = 0
    while (same < min(len(r.actions) for r in runs)
           and np.array_equal(runs[0].observations[same], runs[1].observations[same])):
        np.testing.assert_array_equal(runs[0].actions[same], runs[1].actions[same])
        same += 1
    return same < max(len(r.actions) for r in runs)


def code_lines(source: str) -> int:
    """Lines of a module that are code: not blank, not comments, not docstrings.

    The size guideline (issue #25) is about cohesion, so documentation never counts
    against it: a module is not made to fit by trimming what explains it.
    """
    import ast
    import io
    import tokenize

    documentation: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                documentation.update(range(body[0].lineno, body[0].end_lineno + 1))
    code = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                              tokenize.DEDENT, tokenize.ENDMARKER):
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - documentation)
