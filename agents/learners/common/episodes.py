"""Whole episodes out of an on-policy rollout buffer, across rollout boundaries.

SB3's ``RolloutBuffer`` holds ``n_steps`` rows per sub-env and marks with
``episode_starts[t, e]`` the rows whose observation starts an episode; an episode can
begin in one rollout and end in the next. The learners that score an episode as a whole
(self-imitation, group-relative advantages) need, for every episode, its rows in this
rollout, its return (the part in earlier rollouts included) and its number in its
sub-env's stream of episodes. :class:`EpisodeTracker` carries the open episodes from one
rollout to the next and cuts each rollout into :class:`Segment`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np


@dataclass(frozen=True)
class Segment:
    """The rows ``[start, stop)`` of sub-env ``env`` that belong to one episode.

    Attributes:
        env: The sub-env.
        start: First row in this rollout.
        stop: One past the last row in this rollout.
        index: The episode's number in its sub-env's stream (0 for its first episode).
        whole: Whether the episode began in this rollout (its first row is ``start``).
        done: Whether it ended in this rollout (its last row is ``stop - 1``).
        episode_return: Its undiscounted return so far, earlier rollouts included (the
            whole return when ``done``).
    """

    env: int
    start: int
    stop: int
    index: int
    whole: bool
    done: bool
    episode_return: float


class EpisodeTracker:
    """Episodes of ``n_envs`` sub-envs, rollout after rollout (module docstring)."""

    def __init__(self, n_envs: int) -> None:
        self.n_envs = n_envs
        self._index = np.zeros(n_envs, dtype=np.int64)  # the open episode's number
        self._carried = np.zeros(n_envs, dtype=np.float64)  # its return before this rollout

    def segments(self, rewards: np.ndarray, episode_starts: np.ndarray,
                 next_starts: np.ndarray) -> list[Segment]:
        """Cut one rollout into segments, sub-env by sub-env, and carry what stays open.

        Args:
            rewards: ``(n_steps, n_envs)``, the buffer's rewards.
            episode_starts: ``(n_steps, n_envs)``, the buffer's episode starts.
            next_starts: ``(n_envs,)``, whether the observation after the last row starts
                an episode (the model's ``_last_episode_starts``).

        Raises:
            ValueError: If the arrays' shapes do not match ``n_envs``.
        """
        rewards = np.asarray(rewards, dtype=np.float64)
        starts = np.asarray(episode_starts).astype(bool)
        ends_after = np.asarray(next_starts).astype(bool).reshape(-1)
        if (rewards.ndim != 2 or rewards.shape != starts.shape
                or rewards.shape[1] != self.n_envs or ends_after.shape != (self.n_envs,)):
            raise ValueError(f"EpisodeTracker.segments: expected rewards and episode_starts of "
                             f"shape (n_steps, {self.n_envs}) and next_starts of ({self.n_envs},)"
                             f", got {rewards.shape}, {starts.shape}, {ends_after.shape}")
        n_steps = rewards.shape[0]
        out = []
        for env in range(self.n_envs):
            cuts = [int(t) for t in np.flatnonzero(starts[:, env])]
            bounds = ([0] if not cuts or cuts[0] != 0 else []) + cuts + [n_steps]
            for start, stop in pairwise(bounds):
                # a segment after a cut starts an episode; the first continues the open one
                # unless its row starts one (the first rollout, or one ended at the boundary)
                new = bool(starts[start, env])
                total = self._carried[env] + float(rewards[start:stop, env].sum())
                done = stop < n_steps or bool(ends_after[env])
                out.append(Segment(env, start, stop, int(self._index[env]), new, done, total))
                if done:
                    self._index[env] += 1
                    self._carried[env] = 0.0
                else:
                    self._carried[env] = total
        return out
