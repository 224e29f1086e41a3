"""ExpertRouting-v0 and -v1 batched: every sub-env's round and weighted vote as array operations.

The single envs' dynamics (:class:`~cost_envs.envs.expert_routing.ExpertRoutingEnv`,
:class:`~cost_envs.envs.expert_routing_v1.ExpertRoutingV1Env`) over the rows of the
sub-envs that step. Each sub-env's queue holds its questions' tables as the single env
computes them, with its own ``draw_block`` and ``block_arrays`` (and v1's
``answer_codes``): who is right in which round, every call's and round's price, the fixed
observation slots. The exponentials of the accuracy curves and of o3's reasoning tokens
are evaluated there per question on Python floats, as for one env, never as numpy's
vectorised ``exp`` (which may round differently on some CPUs), so the batched env holds
the same bits on any machine.

**One vote for both versions.** Every answer is a code (v1's: 0 right, 1..3 a
distractor, ``OWN_WRONG`` / ``OTHER_WRONG + i`` a wrong answer of its own); v0's answers
are the same codes with no distractor (right is 0, a wrong one its source's own code).
The vote is v1's rule, which is v0's on such codes: each answer pools the trust of its
sources, added in index order from the controller's as the single env adds them; the
largest pool leads, ties going to the controller's answer, then to a wrong answer over
the right one, then to the lower expert index.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from cost_envs.envs.expert_routing import ExpertBlock, ExpertRoutingEnv
from cost_envs.envs.expert_routing_tables import BlockArrays
from cost_envs.envs.expert_routing_v1 import (
    NOT_CONSULTED,
    OTHER_WRONG,
    OWN_WRONG,
    RIGHT,
    ExpertRoutingV1Env,
)
from cost_envs.vector.base import BatchedOrchestrationEnv, any_per_row


class ExpertRows(NamedTuple):
    """A block of questions' tables as the batched env queues them."""

    answers: np.ndarray  # (n, max_rounds, m) answer code of expert i consulted in round t
    controller_answer: np.ndarray  # (n,)
    call_costs: np.ndarray
    call_flops: np.ndarray
    step_cost: np.ndarray
    step_flops: np.ndarray
    static_obs: np.ndarray  # (n, d) float32


class ExpertRoutingVectorEnv(BatchedOrchestrationEnv):
    """``num_envs`` ExpertRouting-v0 envs stepped together with numpy.

    Same spaces per sub-env, same arguments, same trajectories as
    ``gym.make("cost_envs/ExpertRouting-v0", **kwargs)`` seeded alike (see
    :mod:`cost_envs.vector.base` for seeding, autoreset and ``info``).

    Args:
        num_envs: Number of sub-envs.
        autoreset_mode: ``gymnasium.vector.AutoresetMode`` (default ``NEXT_STEP``).
        **env_kwargs: ``ExpertRoutingEnv``'s arguments (``profile``, ``experts``,
            ``prices``, ``max_rounds``, ``reward_weights``).
    """

    env_class: type[ExpertRoutingEnv] = ExpertRoutingEnv
    single_env: ExpertRoutingEnv
    fixed_prices = False  # each question's difficulty and tokens set its prices

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        n, m = self.num_envs, self.n_agents
        single = self.single_env
        self.max_rounds = single.max_rounds
        self._own_trust = float(single.controller.trust)
        self._trust = [float(t) for t in single._trust]
        self._slots_at = single._slots_at.start  # rounds_left, then consulted ... support
        self._codes = np.full((n, m), NOT_CONSULTED, dtype=np.int64)
        self._own = np.zeros(n, dtype=np.int64)

    def _answer_codes(self, block: ExpertBlock, arrays: BlockArrays
                      ) -> tuple[np.ndarray, np.ndarray]:
        """v0's right/wrong as answer codes: right is 0, a wrong answer its source's own."""
        wrong = OTHER_WRONG + np.arange(self.n_agents)
        return (np.where(arrays.hits, RIGHT, wrong),
                np.where(arrays.controller_right, RIGHT, OWN_WRONG))

    def _draw(self, rng: np.random.Generator, n: int) -> ExpertRows:
        block = self.single_env.draw_block(rng, n)
        arrays = self.single_env.block_arrays(block)
        answers, own = self._answer_codes(block, arrays)
        return ExpertRows(answers.astype(np.int16), own, arrays.call_costs, arrays.call_flops,
                          arrays.step_cost, arrays.step_flops, arrays.static_obs)

    def _start(self, idx: np.ndarray, rows: np.ndarray) -> None:
        blocks = self.blocks
        self._call_costs[idx] = blocks.call_costs[rows]
        self._call_flops[idx] = blocks.call_flops[rows]
        self._step_cost[idx] = blocks.step_cost[rows]
        self._step_flops[idx] = blocks.step_flops[rows]
        self._codes[idx] = NOT_CONSULTED
        self._own[idx] = blocks.controller_answer[rows]

    def _transition(self, idx: np.ndarray,
                    calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        turn = self._turn[idx]
        called = calls != 0
        # turn < max_rounds while an episode runs: the last round ends it
        answers = self.blocks.answers[self._task[idx], np.minimum(turn, self.max_rounds - 1)]
        codes = np.where(called, answers, self._codes[idx])
        self._codes[idx] = codes
        ended = ~any_per_row(called) | (turn + 1 >= self.max_rounds)
        success = np.zeros(len(idx), dtype=np.bool_)
        if ended.any():
            at = ended.nonzero()[0]
            lead, _, _ = self._vote(codes[at], self._own[idx[at]])
            success[at] = lead == RIGHT
        return ended, success, np.where(success, 10.0, 0.0)

    def _vote(self, codes: np.ndarray, own: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The weighted vote of each row: (leading code, its weight, the total weight).

        ``codes`` ``(k, m)`` the experts' latest answers (``NOT_CONSULTED`` if none),
        ``own`` the controller's. Sums run in the single env's order (the controller's
        trust, then each expert's in index order; adding 0.0 for the others is exact).
        """
        k, m = codes.shape
        consulted = codes >= 0
        total = np.full(k, self._own_trust)
        own_pool = total.copy()
        for i in range(m):
            total = total + np.where(consulted[:, i], self._trust[i], 0.0)
            own_pool = own_pool + np.where(codes[:, i] == own, self._trust[i], 0.0)
        lead, weight = own.copy(), own_pool
        lead_wrong = own != RIGHT
        lead_own = np.ones(k, dtype=np.bool_)
        for j in range(m):
            code = codes[:, j]
            is_own = code == own
            pool = np.where(is_own, self._own_trust, 0.0)
            for i in range(m):
                pool = pool + np.where(codes[:, i] == code, self._trust[i], 0.0)
            wrong = code != RIGHT
            # max over answers of (weight, is the controller's, is wrong, earliest source)
            better = consulted[:, j] & ((pool > weight) | ((pool == weight) & (
                (is_own & ~lead_own) | ((is_own == lead_own) & wrong & ~lead_wrong))))
            lead = np.where(better, code, lead)
            weight = np.where(better, pool, weight)
            lead_own = np.where(better, is_own, lead_own)
            lead_wrong = np.where(better, wrong, lead_wrong)
        return lead, weight, total

    def _observe(self, idx: np.ndarray) -> np.ndarray:
        m, rounds = self.n_agents, self.max_rounds
        codes, own = self._codes[idx], self._own[idx]
        lead, weight, total = self._vote(codes, own)
        obs = self.blocks.static_obs[self._task[idx]]
        at = self._slots_at
        consulted = codes >= 0
        obs[:, at] = (rounds - self._turn[idx]) / rounds
        obs[:, at + 1:at + 1 + m] = consulted
        obs[:, at + 1 + m:at + 1 + 2 * m] = consulted & (codes == lead[:, None])
        obs[:, at + 1 + 2 * m] = own == lead
        obs[:, at + 2 + 2 * m] = weight / total
        return obs


class ExpertRoutingV1VectorEnv(ExpertRoutingVectorEnv):
    """``num_envs`` ExpertRouting-v1 envs stepped together with numpy.

    As :class:`ExpertRoutingVectorEnv`, with v1's answer codes (``answer_codes`` of
    :class:`ExpertRoutingV1Env`): same trajectories as
    ``gym.make("cost_envs/ExpertRouting-v1", **kwargs)`` seeded alike.
    """

    env_class = ExpertRoutingV1Env
    single_env: ExpertRoutingV1Env

    def _answer_codes(self, block: ExpertBlock, arrays: BlockArrays
                      ) -> tuple[np.ndarray, np.ndarray]:
        return self.single_env.answer_codes(block, arrays)  # type: ignore[arg-type]
