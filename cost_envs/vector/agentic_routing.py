"""AgenticRouting-v0 batched: every sub-env's step (small or large model) as array operations.

The single env's dynamics (:class:`~cost_envs.envs.agentic_routing.AgenticRoutingEnv`) over
the rows of the sub-envs that step: the turn's luck against the chosen model's chance on
the current subgoal (or on a recovery step), harmful failures adding recovery steps, the
observation from the single env's own ``observation_rows``. Prices depend on each task's
token counts, priced by the single env's ``_step_prices`` on whole columns.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from cost_envs.envs.agentic_profiles import MAX_HORIZON, MAX_RECOVERY
from cost_envs.envs.agentic_routing import (
    _DIFF,
    _FAILED,
    _FAILS,
    _REC,
    _SLACK,
    _TAG,
    _TURNS,
    FAILURE_CAP,
    LARGE_CURVE,
    RECOVERY_DIFFICULTY,
    SMALL_CURVE,
    AgenticRoutingEnv,
    success_probability,
)
from cost_envs.vector.array_ops import pick
from cost_envs.vector.base import BatchedOrchestrationEnv


class AgenticBlock(NamedTuple):
    """``AgenticRoutingEnv.draw_block``'s arrays, named (subgoal columns padded)."""

    n_subgoals: np.ndarray
    difficulty: np.ndarray
    signal: np.ndarray
    reasoning: np.ndarray
    luck: np.ndarray
    harm_luck: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray


class AgenticRoutingVectorEnv(BatchedOrchestrationEnv):
    """``num_envs`` AgenticRouting-v0 envs stepped together with numpy.

    A :class:`~cost_envs.vector.base.BatchedOrchestrationEnv` of ``AgenticRoutingEnv``: its
    keywords are that env's arguments (``profile``, ``prices``, ``small``, ``large``,
    ``reward_weights``).
    """

    env_class = AgenticRoutingEnv
    single_env: AgenticRoutingEnv
    fixed_prices = False  # each task's token counts set its prices
    observe_all = True

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        n = self.num_envs
        profile = self.single_env.profile
        self._horizon = profile.horizon
        self._width = profile.max_subgoals
        self._recovery_steps = profile.recovery_steps
        self._harm = (profile.harm_small, profile.harm_large)
        self._recovery_chance = (self.single_env._rec_small, self.single_env._rec_large)
        self._done = np.zeros(n, dtype=np.int64)
        self._recovering = np.zeros(n, dtype=np.int64)
        self._fails = np.zeros(n, dtype=np.int64)
        self._k = np.ones(n, dtype=np.int64)
        # each subgoal's success chance with the small model, then with the large: one
        # row per sub-env, read by one flat gather a step (pick)
        self._chance = np.zeros((n, 2 * self._width))
        self._rows = np.zeros((n, self._width + 1, self.single_observation_space.shape[0]),
                              dtype=np.float32)
        self._all = np.arange(n)

    def _draw(self, rng: np.random.Generator, n: int) -> AgenticBlock:
        return AgenticBlock(*self.single_env.draw_block(rng, n))

    def _derive(self, draws: AgenticBlock) -> AgenticBlock:
        return draws._replace(n_subgoals=draws.n_subgoals.astype(np.int8))  # 1 to 6

    def _start(self, idx: np.ndarray, rows: np.ndarray) -> None:
        blocks = self.blocks
        k = blocks.n_subgoals[rows].astype(np.int64)  # as the single env's
        difficulty = blocks.difficulty.take(rows, axis=0)
        (small_cost, small_flops), (large_cost, large_flops) = self.single_env._step_prices(
            blocks.input_tokens[rows], blocks.output_tokens[rows])
        self._call_costs[idx, 0] = large_cost - small_cost
        self._call_flops[idx, 0] = large_flops - small_flops
        self._step_cost[idx], self._step_flops[idx] = small_cost, small_flops
        self._rows[idx] = self.single_env.observation_rows(
            k, blocks.signal.take(rows, axis=0), blocks.reasoning.take(rows, axis=0),
            small_cost, large_cost)
        self._chance[idx, :self._width] = success_probability(difficulty, SMALL_CURVE)
        self._chance[idx, self._width:] = success_probability(difficulty, LARGE_CURVE)
        self._k[idx] = k
        self._done[idx] = 0
        self._recovering[idx] = 0
        self._fails[idx] = 0

    def _transition(self, idx: np.ndarray,
                    calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # read from the queue: copying a task's luck (up to 50 turns) at start costs more
        turn, task = self._turn[idx], self._task[idx]
        done, recovering, fails, k = (self._done[idx], self._recovering[idx], self._fails[idx],
                                      self._k[idx])
        large = calls[:, 0] != 0
        u = pick(self.blocks.luck, task, turn)
        at = np.minimum(done, self._width - 1)
        chance = pick(self._chance, idx, np.where(large, self._width, 0) + at)
        small_rec, large_rec = self._recovery_chance
        in_recovery = recovering > 0
        cleared = np.where(in_recovery, u < np.where(large, large_rec, small_rec), u < chance)
        recovering = recovering - (cleared & in_recovery)
        done = done + (cleared & ~in_recovery)
        fails = np.where(cleared, 0, np.minimum(fails + 1, FAILURE_CAP))
        harm = np.where(large, self._harm[1], self._harm[0])
        harmful = ~cleared & ~in_recovery & (pick(self.blocks.harm_luck, task, turn) < harm)
        recovering = np.where(harmful, np.minimum(recovering + self._recovery_steps,
                                                  MAX_RECOVERY), recovering)
        complete = cleared & ~in_recovery & (done == k)
        out_of_turns = ~complete & (turn + 1 >= self._horizon)
        self._done[idx] = done
        self._recovering[idx] = np.where(complete, 0, recovering)
        self._fails[idx] = fails
        quality = np.where(complete, 10.0, 10.0 * done / k)
        return complete | out_of_turns, complete, np.where(complete | out_of_turns, quality, 0.0)

    def _observe(self, idx: np.ndarray | slice) -> np.ndarray:
        done, recovering, fails = self._done[idx], self._recovering[idx], self._fails[idx]
        obs = pick(self._rows, self._all if isinstance(idx, slice) else idx, done)
        turns_left = self._horizon - self._turn[idx]
        obs[:, _TURNS] = turns_left / MAX_HORIZON
        slack = turns_left - (self._k[idx] - done) - recovering
        obs[:, _SLACK] = np.where(slack > 0, slack / MAX_HORIZON, 0.0)
        # masked column writes (copyto's where: no boolean gathers and scatters)
        rec = recovering > 0
        np.copyto(obs[:, _DIFF], RECOVERY_DIFFICULTY, where=rec)
        np.copyto(obs[:, _TAG], 0.0, where=rec)
        np.copyto(obs[:, _REC], recovering / MAX_RECOVERY, where=rec)
        failing = fails > 0
        np.copyto(obs[:, _FAILED], 1.0, where=failing)
        np.copyto(obs[:, _FAILS], fails / FAILURE_CAP, where=failing)
        return obs
