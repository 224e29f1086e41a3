"""ToolBench-v0's task parameters and luck: the topic field and ``with_fresh_luck``."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

import cost_envs  # noqa: F401  (registers the ids)
from agents.baselines import RandomAllocator
from agents.evaluation import rollout
from cost_envs.envs.toolbench import with_fresh_luck

TOOLBENCH = "cost_envs/ToolBench-v0"
LUCK = ("luck", "recall_luck", "hallucination_rate", "hallucination_tokens")
PARAMETERS = ("stage_skill", "stage_difficulty", "reference", "topic")


def _tasks(n: int, seed: int = 0) -> list:
    env = gym.make(TOOLBENCH)
    env.reset(seed=seed)
    return env.unwrapped.sample_tasks(n)


def test_task_stream_and_dynamics_are_those_of_v0_before_the_topic_field():
    # Figures recorded from the code before ToolTask had a topic (issue #11), then again
    # when the task draw became one call of float32 uniforms per block (issue #37 point 1:
    # another stream, the same law): the draws give the same tasks (across a block
    # boundary) and the same episodes.
    tasks = _tasks(70)
    assert [t.stage_skill.tolist() for t in tasks[60:64]] == [
        [3, 4], [0, 0, 4, 4], [2, 4], [2, 0, 3, 5]]
    assert [t.reference[:2].tolist() for t in tasks[60:64]] == [
        [4604, 3873], [2627, 1306], [1708, 2337], [4157, 825]]
    assert [t.hallucination_tokens[0, :2].tolist() for t in tasks[60:64]] == [
        [4296, 3701], [146, 146], [4415, 998], [4899, 4237]]
    assert sum(int(t.hallucination_tokens.sum()) for t in tasks) == 13776672
    assert sum(int(t.reference.sum()) for t in tasks) == 2435075
    assert sum(float(t.stage_difficulty.sum()) for t in tasks) == pytest.approx(99.724368817,
                                                                                abs=1e-8)
    env = gym.make(TOOLBENCH)
    allocator = RandomAllocator(env, seed=3)
    total = sum(rollout(allocator, env, seed=0 if i == 0 else None).episode_return
                for i in range(150))
    assert total == pytest.approx(8.125887826, abs=1e-8)


def test_topic_is_the_reference_then_distractors_and_holds_every_spurious_token():
    for task in _tasks(100):
        size = len(task.reference)
        assert task.topic.shape == (3 * size,)
        assert task.topic[:size].tolist() == task.reference.tolist()
        assert set(task.hallucination_tokens.ravel().tolist()) <= set(task.topic.tolist())


def test_fresh_luck_keeps_the_parameters_and_redraws_all_the_luck():
    task = _tasks(1)[0]
    fresh = with_fresh_luck(task, np.random.default_rng(1))
    for name in PARAMETERS:
        assert getattr(fresh, name) is getattr(task, name)
    for name in LUCK:
        old, new = getattr(task, name), getattr(fresh, name)
        assert new.shape == old.shape and new.dtype == old.dtype
        assert not np.array_equal(new, old), name
    assert set(fresh.hallucination_tokens.ravel().tolist()) <= set(task.topic.tolist())
    # the env replays it like any of its own tasks
    env = gym.make(TOOLBENCH)
    env.reset(options={"task": fresh})
    assert env.unwrapped.task is fresh


def test_fresh_spurious_tokens_are_uniform_over_the_topic_positions():
    task = _tasks(1)[0]
    rng = np.random.default_rng(2)
    size = len(task.reference)
    reference = set(task.reference.tolist())
    hits = sum(int(np.isin(with_fresh_luck(task, rng).hallucination_tokens, list(reference)).sum())
               for _ in range(300))
    share = hits / (300 * task.hallucination_tokens.size)
    expected = np.isin(task.topic, list(reference)).sum() / (3 * size)
    assert share == pytest.approx(expected, abs=0.01)


def test_fresh_luck_refuses_a_task_without_topic():
    task = replace(_tasks(1)[0], topic=None)
    with pytest.raises(ValueError, match="topic"):
        with_fresh_luck(task, np.random.default_rng(0))


def test_privileged_answer_methods_before_reset_say_so():
    # ResetNeeded naming the call (it was an AttributeError on None).
    from gymnasium.error import ResetNeeded

    env = gym.make("cost_envs/ToolBench-v0").unwrapped
    with pytest.raises(ResetNeeded, match="composer_strength needs an episode"):
        env.composer_strength(0)
    with pytest.raises(ResetNeeded, match="answer_tokens needs an episode"):
        env.answer_tokens(0, 0)
