"""TraceRouting-v0 batched: every sub-env's routing step (and the cascade's) as array operations.

The single env's dynamics (:class:`~cost_envs.envs.trace_routing.TraceRoutingEnv`) over
the rows of the sub-envs that step: a query's logged outcomes are replayed, the answer
being the strongest called model's (training-split accuracy, ties to the higher index,
the single env's ``_rank``); calling nobody fails at no cost. With ``cascade=True`` the
first step's calls reveal the cheapest called model's answer features (cheapest at this
query's prices, ties to the lower index) and the second step escalates or accepts (the
all-zero action). Each sub-env draws its queries with the single env's ``draw_block``;
prices, observation rows and answer features are the single env's own tables.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from cost_envs.envs.trace_routing import TraceRoutingEnv
from cost_envs.vector.array_ops import any_per_row
from cost_envs.vector.base import BatchedOrchestrationEnv


class TraceBlock(NamedTuple):
    """``TraceRoutingEnv.draw_block``'s queries, in the smallest dtype holding the dataset's."""

    query: np.ndarray


class TraceRoutingVectorEnv(BatchedOrchestrationEnv):
    """``num_envs`` TraceRouting-v0 envs stepped together with numpy.

    A :class:`~cost_envs.vector.base.BatchedOrchestrationEnv` of ``TraceRoutingEnv``: its
    keywords are that env's arguments (``data``, ``split``, ``models``, ``prices``,
    ``features``, ``cascade`` ...).
    """

    env_class = TraceRoutingEnv
    single_env: TraceRoutingEnv
    fixed_prices = False  # each query's logged tokens set its prices

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        n, m = self.num_envs, self.n_agents
        single = self.single_env
        self.cascade = single.cascade
        self._costs = single._query_costs
        self._flops = single._query_flops
        self._correct = single.dataset.correct.astype(np.bool_)
        self._quality = 10.0 * single.dataset.scores  # the single env's quality, elementwise
        self._rows = single._rows
        # models by strength: the single env's max over called of (train accuracy, index)
        order = sorted(range(m), key=single._rank.__getitem__)
        self._strength = np.empty(m, dtype=np.int64)
        self._strength[order] = np.arange(m)
        self._query = np.zeros(n, dtype=np.int64)
        self._first = np.zeros((n, m), dtype=np.bool_)  # the cascade's first calls
        layout = single.observation_layout
        self._open = layout["task_embedding"].start
        if self.cascade:
            self._answers = single._answer_rows
            self._turn_at = layout["turn"].start
            self._called = layout["called"]
            self._answer_at = slice(layout["answer_features"].start,
                                    layout["answer_has_text"].stop)

    def _draw(self, rng: np.random.Generator, n: int) -> TraceBlock:
        size = np.min_scalar_type(self.single_env.dataset.n_queries - 1)
        return TraceBlock(self.single_env.draw_block(rng, n).astype(size))

    def _start(self, idx: np.ndarray, rows: np.ndarray) -> None:
        q = self.blocks.query[rows].astype(np.int64)
        self._query[idx] = q
        self._call_costs[idx] = self._costs[q]
        self._call_flops[idx] = self._flops[q]
        self._step_cost[idx] = 0.0
        self._step_flops[idx] = 0.0
        self._first[idx] = False

    def _transition(self, idx: np.ndarray,
                    calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = len(idx)
        called = calls != 0
        anyone = any_per_row(called)
        if self.cascade:
            first_step = self._turn[idx] == 0
            opening = first_step & anyone  # the query stays open for a second step
            self._first[idx[opening]] = called[opening]
            called = called | (self._first[idx] & ~first_step[:, None])
            answered = ~first_step | anyone
            ended = ~opening
        else:
            answered = anyone
            ended = np.ones(k, dtype=np.bool_)
        ended_answer = ended & answered  # some model answered: the strongest one's
        success = np.zeros(k, dtype=np.bool_)
        quality = np.zeros(k)
        if ended_answer.any():
            at = ended_answer.nonzero()[0]
            best = np.argmax(np.where(called[at], self._strength, -1), axis=1)
            q = self._query[idx[at]]
            success[at] = self._correct[q, best]
            quality[at] = self._quality[q, best]
        return ended, success, quality

    def _observe(self, idx: np.ndarray | slice) -> np.ndarray:
        if isinstance(idx, slice):  # not observe_all, so never given one by step()
            idx = np.arange(self.num_envs)[idx]
        obs = self._rows[self._query[idx]]
        stepped = self._turn[idx] > 0
        if not stepped.any():
            return obs
        if self.cascade:
            obs[stepped, self._turn_at] = 1.0
            open_ = (self._turn[idx] == 1) & any_per_row(self._first[idx])
            if open_.any():
                at = open_.nonzero()[0]
                first = self._first[idx[at]]
                obs[at, self._called] = first
                # the cheapest first call at this query's prices (ties: the lower index)
                cheapest = np.argmin(np.where(first, self._call_costs[idx[at]], np.inf),
                                     axis=1)
                obs[at, self._answer_at] = self._answers[self._query[idx[at]], cheapest]
            stepped &= ~open_
        obs[stepped, self._open] = 0.0
        return obs
