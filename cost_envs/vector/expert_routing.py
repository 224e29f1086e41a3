"""ExpertRouting-v0 and -v1 batched: every sub-env's round and weighted vote as array operations.

The single envs' dynamics (:class:`~cost_envs.envs.expert_routing.ExpertRoutingEnv`,
:class:`~cost_envs.envs.expert_routing_v1.ExpertRoutingV1Env`) over the rows of the
sub-envs that step. Each sub-env's queue holds its questions' tables as the single env
computes them, with its own ``draw_block`` and ``block_arrays`` (and v1's
``answer_codes``): who is right in which round, every call's and round's price, the fixed
observation slots. ``block_arrays`` runs once per step over the blocks of every sub-env
that draws in it (elementwise, so each question gets the bits it gets alone); it is also
the single env's, so the exponentials are the same calls in both (numpy's ``exp`` for the
accuracy curves, ``math.exp`` per question for o3's reasoning tokens), on any machine.

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
    DISTRACTOR_SHARES,
    NOT_CONSULTED,
    OTHER_WRONG,
    OWN_WRONG,
    RIGHT,
    ExpertRoutingV1Env,
)
from cost_envs.vector.array_ops import any_per_row, pick
from cost_envs.vector.base import BatchedOrchestrationEnv

#: The vote and observation slots are tabulated over every state (the controller's answer
#: times each expert's latest) up to this many states: 1,080 for v1's three default
#: experts; larger pools vote row by row at each step (:meth:`ExpertRoutingVectorEnv._vote`).
MAX_VOTE_STATES = 2**15


class ExpertRows(NamedTuple):
    """A block of questions' tables as the batched env queues them."""

    answers: np.ndarray  # (n, max_rounds, m) float32 symbol of expert i in round t
    controller_state: np.ndarray  # (n,) float32: the controller's symbol times A ** m (or 0)
    controller_answer: np.ndarray  # (n,) its answer code
    prices: np.ndarray  # (n, 2 m + 2) a row of the base's ``_prices``
    static_obs: np.ndarray  # (n, d) float32


class ExpertRoutingVectorEnv(BatchedOrchestrationEnv):
    """``num_envs`` ExpertRouting-v0 envs stepped together with numpy.

    A :class:`~cost_envs.vector.base.BatchedOrchestrationEnv` of ``ExpertRoutingEnv``: its
    keywords are that env's arguments (``profile``, ``experts``, ``prices``, ``max_rounds``,
    ``reward_weights``).

    **States as numbers.** An expert's latest answer is one of ``A = D + 3`` symbols (0 not
    consulted, 1 right, ``2 .. D + 1`` a distractor, ``D + 2`` a wrong answer of its own;
    v0 has no distractor, ``D = 0``), the controller's one of ``D + 2`` (right, a
    distractor, its own wrong answer). A sub-env's state is the number
    ``controller * A**m + sum_i symbol_i * A**i``; for pools of up to ``MAX_VOTE_STATES``
    states the vote's outcome and the observation slots it sets are tables over these
    numbers, computed once by :meth:`_vote`, so a step reads them instead of voting.
    """

    env_class: type[ExpertRoutingEnv] = ExpertRoutingEnv
    single_env: ExpertRoutingEnv
    fixed_prices = False  # each question's difficulty and tokens set its prices
    observe_all = True
    #: Distractor answer codes ``1 .. n_distractors`` (v0: none).
    n_distractors = 0

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        n, m = self.num_envs, self.n_agents
        single = self.single_env
        self.max_rounds = single.max_rounds
        self._own_trust = float(single.controller.trust)
        self._trust = [float(t) for t in single._trust]
        self._slots_at = single._slots_at.start  # rounds_left, then consulted ... support
        d = self.n_distractors
        size = self._alphabet = d + 3
        # symbol -> answer code: of expert i (row i), of the controller
        self._code_of = np.array([[NOT_CONSULTED, RIGHT, *range(1, d + 1), OTHER_WRONG + i]
                                  for i in range(m)])
        self._own_code_of = np.array([RIGHT, *range(1, d + 1), OWN_WRONG])
        self._sym = np.zeros((n, m), dtype=np.float32)
        self._own = np.zeros(n, dtype=np.int64)
        self._base = np.zeros(n, dtype=np.float32)
        self._state = np.zeros(n, dtype=np.int64)
        self._right_table: np.ndarray | None = None
        self._slot_table: np.ndarray | None = None
        n_states = (d + 2) * size**m
        # state numbers only where tabulated: float32 holds them exactly below 2**24, and
        # A**m of a large pool would overflow any integer type
        self._state_unit = size**m if n_states <= MAX_VOTE_STATES else 0
        self._powers = (size ** np.arange(m) if self._state_unit else np.zeros(m)
                        ).astype(np.float32)
        if self._state_unit:
            states = np.arange(n_states)
            symbols = states[:, None] // size ** np.arange(m) % size
            self._right_table, self._slot_table = self._vote_slots(
                self._codes(symbols), self._own_code_of[states // size**m])

    def _answer_codes(self, block: ExpertBlock, arrays: BlockArrays
                      ) -> tuple[np.ndarray, np.ndarray]:
        """v0's right/wrong as answer codes: right is 0, a wrong answer its source's own."""
        wrong = OTHER_WRONG + np.arange(self.n_agents)
        return (np.where(arrays.hits, RIGHT, wrong),
                np.where(arrays.controller_right, RIGHT, OWN_WRONG))

    def _codes(self, symbols: np.ndarray) -> np.ndarray:
        """The experts' answer codes of ``(k, m)`` symbols."""
        return self._code_of[np.arange(self.n_agents), symbols.astype(np.int64)]

    def _draw(self, rng: np.random.Generator, n: int) -> ExpertBlock:
        return self.single_env.draw_block(rng, n)

    def _derive(self, block: ExpertBlock) -> ExpertRows:
        arrays = self.single_env.block_arrays(block)
        answers, own = self._answer_codes(block, arrays)
        # code -> symbol: right 0 -> 1, distractor c -> c + 1, an expert's own wrong -> A - 1
        symbols = np.where(answers >= OTHER_WRONG, self._alphabet - 1, answers + 1)
        own_symbol = np.where(own == OWN_WRONG, self.n_distractors + 1, own)
        return ExpertRows(symbols.astype(np.float32),
                          (own_symbol * self._state_unit).astype(np.float32),
                          own.astype(np.int8),  # a code: 0 to 3 or OWN_WRONG (99)
                          np.column_stack((arrays.call_costs, arrays.call_flops,
                                                arrays.step_cost, arrays.step_flops)),
                          arrays.static_obs)

    def _start(self, idx: np.ndarray, rows: np.ndarray) -> None:
        blocks = self.blocks
        self._prices[idx] = blocks.prices.take(rows, axis=0)
        self._sym[idx] = 0.0  # no expert consulted
        self._base[idx] = base = blocks.controller_state.take(rows)
        self._state[idx] = base.astype(np.int64)
        self._own[idx] = blocks.controller_answer.take(rows)

    def _transition(self, idx: np.ndarray,
                    calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        turn = self._turn[idx]
        called = calls != 0
        # turn < max_rounds while an episode runs: the last round ends it
        answers = pick(self.blocks.answers, self._task[idx],
                       np.minimum(turn, self.max_rounds - 1))
        symbols = np.where(called, answers, self._sym.take(idx, axis=0))
        self._sym[idx] = symbols
        answered = ~any_per_row(called) if self._step_codes is None else self._step_codes == 0
        ended = answered | (turn + 1 >= self.max_rounds)
        if self._right_table is not None:
            state = (self._base.take(idx) + symbols @ self._powers).astype(np.int64)
            self._state[idx] = state
            success = ended & self._right_table.take(state)
        else:
            success = np.zeros(len(idx), dtype=np.bool_)
            if ended.any():
                at = ended.nonzero()[0]
                success[at], _ = self._vote_slots(self._codes(symbols[at]),
                                                  self._own[idx[at]])
        return ended, success, np.where(success, 10.0, 0.0)

    def _vote_slots(self, codes: np.ndarray, own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whether each row's vote is right, and its slots from ``consulted`` to ``support``.

        ``codes`` ``(k, m)`` the experts' latest answers, ``own`` the controller's; slots
        ``(k, 2 m + 2)`` float32 as the single env's ``_dynamic_slots`` sets them.
        """
        m = self.n_agents
        lead, weight, total = self._vote(codes, own)
        consulted = codes >= 0
        slots = np.empty((len(codes), 2 * m + 2), dtype=np.float32)
        slots[:, :m] = consulted
        slots[:, m:2 * m] = consulted & (codes == lead[:, None])
        slots[:, 2 * m] = own == lead
        slots[:, 2 * m + 1] = weight / total
        return lead == RIGHT, slots

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

    def _observe(self, idx: np.ndarray | slice) -> np.ndarray:
        m, rounds, at = self.n_agents, self.max_rounds, self._slots_at
        obs = self.blocks.static_obs.take(self._task[idx], axis=0)
        obs[:, at] = (rounds - self._turn[idx]) / rounds
        if self._slot_table is not None:
            obs[:, at + 1:at + 3 + 2 * m] = self._slot_table.take(self._state[idx], axis=0)
        else:
            _, obs[:, at + 1:at + 3 + 2 * m] = self._vote_slots(self._codes(self._sym[idx]),
                                                                self._own[idx])
        return obs


class ExpertRoutingV1VectorEnv(ExpertRoutingVectorEnv):
    """``num_envs`` ExpertRouting-v1 envs stepped together with numpy.

    As :class:`ExpertRoutingVectorEnv`, with v1's answer codes (``answer_codes`` of
    :class:`ExpertRoutingV1Env`): same trajectories as
    ``gym.make("cost_envs/ExpertRouting-v1", **kwargs)`` seeded alike.
    """

    env_class = ExpertRoutingV1Env
    single_env: ExpertRoutingV1Env
    n_distractors = max(DISTRACTOR_SHARES)

    def _answer_codes(self, block: ExpertBlock, arrays: BlockArrays
                      ) -> tuple[np.ndarray, np.ndarray]:
        # a v1 env's blocks are ExpertBlockV1 (its single env draws them)
        return self.single_env.answer_codes(block, arrays)  # type: ignore[arg-type]  # see above
