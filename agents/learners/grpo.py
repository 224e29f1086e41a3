"""PPO on group-relative advantages: several plays of the same task, each against the group.

GRPO (Shao et al., 2024), as ToolOrchestra trains its orchestrator with cost-aware
rewards: the policy plays each task ``group_size`` times and every step of a play gets the
play's whole return minus the mean return of the group's plays of that task, so the
baseline is what the policy itself scores on that very task, not a learned value of the
observation. A call that decides a task's success or cost is then credited by comparing
plays of the same task, with no critic to be wrong about it.

How a task is replayed from interaction alone: every random draw of a cost-envs task,
the luck of each call included, is made at reset from the sub-env's own generator, so
sub-envs seeded alike play the same sequence of tasks whatever their actions (the k-th
episode of each is the same task; :func:`group_task_seeds`). :class:`GroupRelativePPO`
seeds the batched env's sub-envs in groups of ``group_size`` and, after each rollout,
replaces GAE's advantages: for the k-th episode of a group, each member's steps get
``R - mean(R of the group's k-th episodes)``, scaled by the rollout's standard deviation
of those advantages. An episode gets one only when it lies wholly in the rollout and every
member of its group has played its k-th episode by the rollout's end (a member that lags
has its group's returns kept from the rollout before); the others' steps get 0 (about one
episode per sub-env and rollout). The clipped PPO update is :class:`FastPPO`'s, with no
value loss by default (``vf_coef=0``: GRPO has no critic) and no per-minibatch
normalisation (the rollout's scale above): ``agents.learners.METHOD_SETTINGS``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv

from agents.learners.common.episodes import EpisodeTracker
from agents.learners.ppo import FastPPO
from agents.seeds import train_task_seeds
from cost_envs.config import integer

#: Plays of each task (GRPO's group size).
GROUP_SIZE = 8


def group_task_seeds(seed: int, n_envs: int, group_size: int = GROUP_SIZE) -> list[int]:
    """Reset seeds of ``n_envs`` sub-envs: each group of ``group_size`` shares one stream.

    The groups' streams are :func:`agents.seeds.train_task_seeds`' first ``n_envs //
    group_size`` ones, so groups of different runs share none.

    Raises:
        ValueError: If ``n_envs`` is not a multiple of ``group_size``.
    """
    integer(group_size, "group_size", minimum=2)
    if n_envs % group_size:
        raise ValueError(f"n_envs: expected a multiple of the group size {group_size} (GRPO "
                         f"replays each task on a group of sub-envs), got {n_envs}")
    return [s for s in train_task_seeds(seed, n_envs // group_size) for _ in range(group_size)]


class GroupRelativePPO(FastPPO):
    """:class:`FastPPO` on group-relative advantages (module docstring).

    Takes FastPPO's arguments and ``group_size``; the env's sub-envs must be seeded with
    :func:`group_task_seeds` (``agents.learners.training.train`` does).
    """

    def __init__(self, *args: Any, group_size: int = GROUP_SIZE, **kwargs: Any) -> None:
        self.group_size = integer(group_size, "group_size", minimum=2)
        super().__init__(*args, **kwargs)
        if self.n_envs % self.group_size:
            raise ValueError(f"n_envs: expected a multiple of group_size {self.group_size}, "
                             f"got {self.n_envs}")
        self._tracker = EpisodeTracker(self.n_envs)
        # (group, episode number) -> {member: return}; dropped once the group is complete
        self._returns: dict[tuple[int, int], dict[int, float]] = {}
        #: Share of the last rollout's steps with a nonzero advantage.
        self.scored_share = 0.0

    def task_seeds(self, seed: int) -> list[int]:
        """The sub-envs' reset seeds for training seed ``seed`` (:func:`group_task_seeds`)."""
        return group_task_seeds(seed, self.n_envs, self.group_size)

    def collect_rollouts(self, env: VecEnv, callback: BaseCallback,
                         rollout_buffer: RolloutBuffer, n_rollout_steps: int) -> bool:
        """FastPPO's rollout, its advantages then replaced by group-relative ones."""
        if not super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps):
            return False
        assert self._last_episode_starts is not None  # set by the rollout just run
        segments = self._tracker.segments(rollout_buffer.rewards,
                                          rollout_buffer.episode_starts,
                                          self._last_episode_starts)
        rollout_buffer.advantages[:] = group_advantages(segments, self._returns,
                                                        rollout_buffer.rewards.shape,
                                                        self.group_size)
        self.scored_share = float(np.mean(rollout_buffer.advantages != 0))
        self.logger.record("rollout/grpo_scored_share", self.scored_share)
        return True


def group_advantages(segments: list[Any], kept: dict[tuple[int, int], dict[int, float]],
                     shape: tuple[int, ...], group_size: int) -> np.ndarray:
    """``(n_steps, n_envs)`` advantages of one rollout's segments (module docstring).

    ``kept`` carries the returns of groups not yet complete from one rollout to the next
    (it is updated in place, complete groups removed).
    """
    for segment in segments:
        if segment.done:
            kept.setdefault((segment.env // group_size, segment.index), {})[
                segment.env % group_size] = segment.episode_return
    advantages = np.zeros(shape, dtype=np.float32)
    for segment in segments:
        group = kept.get((segment.env // group_size, segment.index))
        if segment.whole and segment.done and group is not None and len(group) == group_size:
            advantages[segment.start:segment.stop, segment.env] = (
                segment.episode_return - np.mean(list(group.values())))
    for key in [k for k, group in kept.items() if len(group) == group_size]:
        del kept[key]
    scored = advantages[advantages != 0]
    scale = float(np.std(scored)) if scored.size > 1 else 0.0
    return advantages / scale if scale > 0 else advantages
