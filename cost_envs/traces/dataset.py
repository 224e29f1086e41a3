"""The logged outcomes of real models as arrays: :class:`TraceDataset`.

A :class:`TraceDataset` holds, for ``n`` queries and ``m`` models, whether each model
answered each query correctly (and a score in ``[0, 1]``), the input and output tokens of
each call, optionally the logged cost of each call and the text of each answer. It is what
``cost_envs/TraceRouting-v0`` replays. Files are read by :mod:`cost_envs.traces.readers`.

**Costs.** :meth:`TraceDataset.call_costs` bills a call's logged input tokens at the
model's input price and its logged output tokens at the output price; output tokens
include reasoning tokens (the schema logs them together), so a price table's separate
``reasoning`` price is not used for logged traces. A logged ``cost`` replaces the tokens
x price estimate of its call.

A logged cost may cover every call (RouterArena logs the dollars of each call): then no
price table is needed at all (``call_costs(None)``).

**Groups.** ``groups`` is optional per-query metadata: the subject, domain or dataset a
query belongs to (``None`` when the data has none). It travels through
:meth:`~TraceDataset.subset`, :meth:`~TraceDataset.select_models` and
:meth:`~TraceDataset.split`, and ``split_by="group"`` splits by it.

**Splits.** :meth:`TraceDataset.split_indices` keeps clusters whole
(:mod:`cost_envs.traces.splits`, the one split mechanism): by default a cluster is a
prompt text, so queries with the same prompt (RouteLLM's MMLU files repeat a few
questions) always land on the same side and a test question is never also a training
question; with ``split_by="group"`` a cluster is a group.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from cost_envs.prices import PriceTable
from cost_envs.traces import splits
from cost_envs.traces.splits import check_split_args


# ----------------------------------------------------------------------------- dataset
def _frozen(array: Any, dtype: Any) -> np.ndarray:
    out = np.array(array, dtype=dtype)  # a copy: callers' arrays stay theirs
    out.flags.writeable = False
    return out


def _responses(responses: Any, n: int, m: int, where: str) -> tuple[tuple[str | None, ...], ...]:
    """``responses`` as ``n`` rows of ``m`` strings or ``None``, or a one-line error."""
    rows = tuple(tuple(r) for r in responses)
    if len(rows) != n or any(len(r) != m for r in rows) or not all(
            t is None or isinstance(t, str) for r in rows for t in r):
        raise ValueError(f"{where}: responses: expected {n} rows of {m} strings or None")
    return rows


@dataclass(frozen=True, eq=False)
class TraceDataset:
    """Logged outcomes of ``m`` models on ``n`` queries (immutable; arrays are read-only).

    Args:
        models: Model names, one per column of the arrays.
        query_ids: One unique id per query.
        prompts: The query texts (``""`` when unknown).
        scores: Score in ``[0, 1]`` of each model's answer, shape ``(n, m)``.
        correct: Whether each answer is correct, shape ``(n, m)``.
        input_tokens: Input tokens of each call, shape ``(n, m)``, integers >= 0.
        output_tokens: Output tokens of each call (reasoning included), shape ``(n, m)``.
        cost: Logged cost of each call, shape ``(n, m)``, NaN where not logged; ``None``
            when no cost is logged at all.
        responses: Answer text of each call (``None`` where absent), ``n`` rows of ``m``;
            ``None`` when no text is logged at all.
        source: Where the data comes from (a path or a description).
        token_counter: How token counts were obtained (``"logged"``, the tiktoken
            encoding, or the approximation :data:`APPROX_COUNTER`).
        groups: The group of each query (subject, domain, dataset): ``n`` non-empty
            strings, or ``None`` when the data has no groups.

    Raises:
        ValueError: On inconsistent shapes, duplicate names or ids, or values out of range.
    """

    models: tuple[str, ...]
    query_ids: tuple[str, ...]
    prompts: tuple[str, ...]
    scores: np.ndarray
    correct: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    cost: np.ndarray | None = None
    responses: tuple[tuple[str | None, ...], ...] | None = None
    source: str = "<memory>"
    token_counter: str = "logged"
    groups: tuple[str, ...] | None = None
    fingerprint: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        where = f"TraceDataset({self.source})"
        models, ids, prompts = tuple(self.models), tuple(self.query_ids), tuple(self.prompts)
        if not models or not all(isinstance(m, str) and m for m in models):
            raise ValueError(f"{where}: models: expected non-empty names, got {models!r}")
        if len(set(models)) != len(models):
            raise ValueError(f"{where}: models: expected unique names, got {list(models)}")
        n, m = len(ids), len(models)
        if n == 0:
            raise ValueError(f"{where}: expected at least one query, got none")
        if len(set(ids)) != n:
            dup = sorted({q for q in ids if ids.count(q) > 1})[:5]
            raise ValueError(f"{where}: query_ids: expected unique ids, duplicates {dup}")
        if len(prompts) != n or not all(isinstance(p, str) for p in prompts):
            raise ValueError(f"{where}: prompts: expected {n} strings")
        set_(self, "models", models)
        set_(self, "query_ids", tuple(str(q) for q in ids))
        set_(self, "prompts", prompts)
        arrays = {
            "scores": _frozen(self.scores, np.float64),
            "correct": _frozen(self.correct, bool),
            "input_tokens": _frozen(self.input_tokens, np.float64),
            "output_tokens": _frozen(self.output_tokens, np.float64),
        }
        if self.cost is not None:
            arrays["cost"] = _frozen(self.cost, np.float64)
        for name, array in arrays.items():
            if array.shape != (n, m):
                raise ValueError(f"{where}: {name}: expected shape ({n}, {m}), "
                                 f"got {array.shape}")
            set_(self, name, array)
        if not (np.isfinite(self.scores).all() and ((self.scores >= 0) & (self.scores <= 1)).all()):
            raise ValueError(f"{where}: scores: expected numbers in [0, 1]")
        for name in ("input_tokens", "output_tokens"):
            tokens = getattr(self, name)
            if not (np.isfinite(tokens).all() and (tokens >= 0).all()
                    and (tokens == np.round(tokens)).all()):
                raise ValueError(f"{where}: {name}: expected integers >= 0")
        if self.cost is not None and not (np.isnan(self.cost)
                                          | (np.isfinite(self.cost) & (self.cost >= 0))).all():
            raise ValueError(f"{where}: cost: expected finite numbers >= 0 or NaN (not logged)")
        if self.responses is not None:
            set_(self, "responses", _responses(self.responses, n, m, where))
        if self.groups is not None:
            groups = tuple(self.groups)
            if len(groups) != n or not all(isinstance(g, str) and g for g in groups):
                raise ValueError(f"{where}: groups: expected {n} non-empty strings or None")
            set_(self, "groups", groups)
        set_(self, "fingerprint", self._digest())

    @classmethod
    def unlogged(cls, models: Sequence[str], prompts: Sequence[str],
                 input_tokens: np.ndarray | None = None,
                 responses: Sequence[Sequence[str | None]] | None = None,
                 token_counter: str = "none", source: str = "<unlogged>") -> TraceDataset:
        """Prompts never logged, as a dataset that a router can read at routing time.

        The outcomes are zeros (nothing is known yet, and no router reads outcomes to
        route). Built without the logged data's checks, which zeros cannot fail: a live
        router builds one per request, where those checks were most of its time.

        Args:
            models: Model names (non-empty, unique).
            prompts: The prompts (strings), ids ``live-0``, ``live-1``, ...
            input_tokens: Each prompt's token count, one per prompt (same for every
                model); zeros by default.
            responses: Rows of ``len(models)`` answers or ``None`` (a cascade's weak
                answers).
            token_counter: How ``input_tokens`` were counted.
            source: Where the prompts come from.
        """
        models, prompts = tuple(models), tuple(prompts)
        n, m = len(prompts), len(models)
        if not models or not all(isinstance(x, str) and x for x in models) \
                or len(set(models)) != m:
            raise ValueError(f"TraceDataset({source}): models: expected unique non-empty "
                             f"names, got {models!r}")
        if n == 0 or not all(isinstance(p, str) for p in prompts):
            raise ValueError(f"TraceDataset({source}): prompts: expected at least one string")
        zeros = np.zeros((n, m))
        zeros.flags.writeable = False
        tokens = zeros
        if input_tokens is not None:
            counts = np.asarray(input_tokens, dtype=np.float64)
            if counts.shape != (n,) or not (np.isfinite(counts) & (counts >= 0)).all():
                raise ValueError(f"TraceDataset({source}): input_tokens: expected {n} "
                                 f"counts >= 0, got {input_tokens!r}")
            tokens = np.repeat(counts[:, None], m, axis=1)
            tokens.flags.writeable = False
        rows = None
        if responses is not None:
            rows = _responses(responses, n, m, f"TraceDataset({source})")
        correct = np.zeros((n, m), dtype=bool)
        correct.flags.writeable = False
        data = object.__new__(cls)
        for name, value in (("models", models), ("prompts", prompts),
                            ("query_ids", tuple(f"live-{i}" for i in range(n))),
                            ("scores", zeros), ("correct", correct), ("input_tokens", tokens),
                            ("output_tokens", zeros), ("cost", None), ("responses", rows),
                            ("source", source), ("token_counter", token_counter),
                            ("groups", None)):
            object.__setattr__(data, name, value)
        object.__setattr__(data, "fingerprint", data._digest())
        return data

    def _digest(self) -> str:
        h = hashlib.blake2b(digest_size=12)
        for text in (*self.models, "\x00", *self.query_ids, "\x00", *self.prompts):
            h.update(text.encode("utf-8") + b"\x1f")
        for array in (self.scores, self.correct, self.input_tokens, self.output_tokens):
            h.update(np.ascontiguousarray(array).tobytes())
        if self.cost is not None:
            h.update(np.ascontiguousarray(self.cost).tobytes())
        if self.responses is not None:
            for row in self.responses:
                for answer in row:
                    h.update(b"\x01" if answer is None else answer.encode("utf-8") + b"\x1f")
        if self.groups is not None:  # absent groups leave older fingerprints as they were
            h.update(b"\x02")
            for text in self.groups:
                h.update(text.encode("utf-8") + b"\x1f")
        return h.hexdigest()

    # ------------------------------------------------------------------ views
    @property
    def n_queries(self) -> int:
        """Number of queries."""
        return len(self.query_ids)

    @property
    def n_models(self) -> int:
        """Number of models."""
        return len(self.models)

    @property
    def accuracy(self) -> np.ndarray:
        """Fraction of queries each model answered correctly, shape ``(m,)``."""
        return self.correct.mean(axis=0)

    def model_index(self, name: str) -> int:
        """Column of model ``name``."""
        try:
            return self.models.index(name)
        except ValueError:
            raise KeyError(f"{self.source}: no model {name!r}; the data has "
                           f"{list(self.models)}") from None

    def response_texts(self) -> list[list[str]]:
        """Answer texts as ``n`` lists of ``m`` strings (``""`` where absent)."""
        if self.responses is None:
            return [[""] * self.n_models for _ in range(self.n_queries)]
        return [[t or "" for t in row] for row in self.responses]

    def subset(self, indices: Sequence[int] | np.ndarray) -> TraceDataset:
        """The queries at ``indices`` (in that order), as a new dataset."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1 or idx.size == 0:
            raise ValueError(f"{self.source}: subset: expected a non-empty 1-d index list")
        if idx.min() < 0 or idx.max() >= self.n_queries:
            raise ValueError(f"{self.source}: subset: indices must lie in [0, {self.n_queries})")
        picked = idx.tolist()
        return replace(
            self,
            query_ids=tuple(self.query_ids[i] for i in picked),
            prompts=tuple(self.prompts[i] for i in picked),
            scores=self.scores[idx],
            correct=self.correct[idx],
            input_tokens=self.input_tokens[idx],
            output_tokens=self.output_tokens[idx],
            cost=None if self.cost is None else self.cost[idx],
            responses=None if self.responses is None else tuple(
                self.responses[i] for i in picked),
            groups=None if self.groups is None else tuple(self.groups[i] for i in picked),
        )

    def select_models(self, names: Sequence[str]) -> TraceDataset:
        """The same queries with only the models ``names`` (in that order)."""
        if isinstance(names, str) or not isinstance(names, Sequence) or not names:
            raise ValueError(f"models: expected a non-empty list of model names, got {names!r}")
        unknown = [n for n in names if n not in self.models]
        if unknown:
            raise ValueError(f"models: {unknown} not in the data; it has {list(self.models)}")
        if len(set(names)) != len(names):
            raise ValueError(f"models: expected unique names, got {list(names)}")
        cols = [self.models.index(n) for n in names]
        return replace(
            self,
            models=tuple(names),
            scores=self.scores[:, cols],
            correct=self.correct[:, cols],
            input_tokens=self.input_tokens[:, cols],
            output_tokens=self.output_tokens[:, cols],
            cost=None if self.cost is None else self.cost[:, cols],
            responses=None if self.responses is None else tuple(
                tuple(row[c] for c in cols) for row in self.responses),
        )

    def split_indices(self, seed: int = 0, test_fraction: float = 0.5,
                      split_by: str = "query") -> tuple[np.ndarray, np.ndarray]:
        """Disjoint (train, test) query indices, each ascending, clusters kept whole.

        ``split_by="query"`` (default): queries are clustered by prompt text
        (:meth:`prompt_groups`): identical prompts are always on the same side, so no
        test question is also a training question. ``split_by="group"``: clustered by
        ``groups``, so no test group is seen in training. The clusters are put in a
        seeded random order (``default_rng(seed).permutation`` of the clusters) and the
        test split takes the leading clusters whose query count comes closest to
        ``round(n * test_fraction)`` (the first such prefix; both splits non-empty;
        :func:`cost_envs.traces.splits.split_clusters`). When every prompt is distinct,
        the split by query is the plain one: the first ``round(n * test_fraction)``
        queries of ``default_rng(seed).permutation(n)``.

        Raises:
            ValueError: On invalid arguments, when a split would be empty, or for
                ``split_by="group"`` without groups.
        """
        check_split_args(seed, test_fraction, split_by)
        what = "one prompt" if split_by == "query" else "one group"
        try:
            return splits.split_clusters(self.clusters(split_by), seed, test_fraction, what)
        except ValueError as err:
            raise ValueError(f"{self.source}: {err}") from None

    def clusters(self, split_by: str = "query") -> np.ndarray:
        """What a split keeps together, one int64 per query (:func:`splits.clusters`).

        ``"query"``: :meth:`prompt_groups`; ``"group"``: the codes of ``groups``.
        """
        return splits.clusters(self, split_by)

    def fold_ids(self, folds: int = 5, seed: int = 0, split_by: str = "query") -> np.ndarray:
        """The cross-validation fold of each query, clusters kept whole.

        See :func:`cost_envs.traces.splits.fold_ids`.
        """
        return splits.fold_ids(self.clusters(split_by), folds, seed)

    def prompt_groups(self) -> np.ndarray:
        """Group index of each query, ``(n,)`` int64: equal prompts share a group.

        Groups are numbered by first appearance; a query without a prompt (``""``) is a
        group of its own. With all prompts distinct, query ``i`` is group ``i``.
        """
        ids: dict[str, int] = {}
        out = np.empty(self.n_queries, dtype=np.int64)
        fresh = 0
        for i, prompt in enumerate(self.prompts):
            if not prompt:
                out[i] = fresh
                fresh += 1
            elif prompt in ids:
                out[i] = ids[prompt]
            else:
                out[i] = ids[prompt] = fresh
                fresh += 1
        return out

    def split(self, seed: int = 0, test_fraction: float = 0.5, split_by: str = "query"
              ) -> tuple[TraceDataset, TraceDataset]:
        """(train, test) datasets (see :meth:`split_indices`)."""
        train, test = self.split_indices(seed, test_fraction, split_by)
        return self.subset(train), self.subset(test)

    # ------------------------------------------------------------------ prices
    def _prices_needed(self) -> list[str]:
        if self.cost is None:
            return list(self.models)
        return [m for j, m in enumerate(self.models) if np.isnan(self.cost[:, j]).any()]

    def call_costs(self, prices: PriceTable | None) -> np.ndarray:
        """Money of each call, shape ``(n, m)``: the logged cost, else tokens x price.

        ``prices`` may be ``None`` when every call's cost is logged (RouterArena).

        Tokens x price is ``(input_tokens * input + output_tokens * output) / 1e6``: the
        logged output tokens include any reasoning tokens and are all billed at the output
        price; a table's ``reasoning`` price is not used for logged traces (they do not
        log reasoning tokens apart).

        Raises:
            ValueError: Naming every model that needs a price the table does not have.
        """
        needed = self._prices_needed()
        if prices is None:
            if needed:
                raise ValueError(f"{self.source}: prices=None, but the calls of model(s) "
                                 f"{needed} are not all logged with a cost; pass a price table")
        else:
            prices.require(needed, source=f"{self.source}: price table")
        out = np.full((self.n_queries, self.n_models), np.nan)
        for j, name in enumerate(self.models):
            if prices is not None and name in prices:
                out[:, j] = prices[name].cost(self.input_tokens[:, j], self.output_tokens[:, j])
        if self.cost is not None:
            out = np.where(np.isnan(self.cost), out, self.cost)
        out.flags.writeable = False
        return out

    def call_flops(self, prices: PriceTable) -> np.ndarray:
        """FLOPs of each call, ``2 x active params x (input + output tokens)``, ``(n, m)``.

        Models the table does not list (possible when their cost is logged) count 0.
        """
        tokens = self.input_tokens + self.output_tokens
        out = np.zeros((self.n_queries, self.n_models))
        for j, name in enumerate(self.models):
            if name in prices:
                out[:, j] = prices[name].flops(tokens[:, j])
        out.flags.writeable = False
        return out

