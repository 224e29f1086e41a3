"""The cost-aware two-model router: expected accuracy gained per expected extra dollar.

A router that thresholds P(the strong model is needed) ignores what the call costs. On
logged outcomes the strongest feature of that probability is the prompt's length, and a
call's cost grows with it, so such a router sends its strong calls to the dearest
prompts: at equal dollar cost it answers fewer queries with the strong model than random
routing does, and on unseen subjects it lands below random (issue #24).
:class:`PricedRouter` (``"priced"`` in :data:`~agents.routers.ROUTERS`) prices
each call before it is made and routes on

    ``score(q) = (p_strong(q) - p_weak(q)) / (c_strong(q) - c_weak(q))``

the predicted accuracy gained per dollar spent on top of the weak call:

* ``p_j(q)``: the probability that model ``j`` answers ``q`` right, one L2 logistic
  regression per model on the family's :class:`~agents.routers.features.TextFeatures`
  (as :class:`~agents.routers.multi.MultiRouter` predicts it);
* ``c_j(q) = in_j * input_tokens_j(q) + out_j * E[output_tokens_j | q]``: the prompt's
  tokens are known before the call (they are an input of the router, per model, as each
  model's tokenizer counts them); the output tokens are predicted by a ridge regression
  of ``log(1 + tokens)`` on the same features, turned into an expectation with Duan's
  smearing factor (the mean of the exponentiated training residuals); the per-token
  prices ``in_j`` and ``out_j`` are fitted on the training calls' costs (non-negative
  least squares of cost on input and output tokens: exact when the costs are tokens x a
  price table, as the packaged one prices them, and a fit of logged costs otherwise).

Routing the queries in order of this score is the greedy solution of "the most expected
accuracy for a mean cost": a threshold on it is the operating point, calibrated on the
training queries for a target share or cost as every two-model router's is
(:mod:`~agents.routers.calibration`), never below 0: a strong call predicted to
lose accuracy is not worth any price, whatever share or cost was asked (on RouterArena
the cheaper model is the more accurate one, and a 50% share would otherwise be filled
with such calls). Where the strong call is predicted no
dearer than the weak one (``c_strong <= c_weak``), the denominator is floored at
:data:`MIN_EXTRA_COST` of the mean training call cost, so the score is a large number
of the gain's sign. ``predict`` gives ``(p_weak, p_strong)``, ``scores`` the score above,
:meth:`PricedRouter.expected_costs` the priced calls.

Its inputs are ``(statistics, text features, input tokens)``: the third, ``(n, 2)``, is
the prompt's tokens for the weak and the strong model, read from the logs
(``data.input_tokens``); a live caller counts them with each model's tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agents.routers.base import Router, arrays_of_shapes, register
from agents.routers.inputs import call_costs
from agents.routers.multi import MultiRouter, PerModelLogistic
from agents.routers.two_model import TwoModelLogistic
from cost_envs.traces import TraceDataset

#: The smallest extra cost a strong call is priced at, as a share of the mean training
#: call cost (a strong call predicted no dearer than the weak one gets a large score).
MIN_EXTRA_COST = 1e-6


def fit_prices(cost: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray
               ) -> np.ndarray:
    """Per-token ``(input, output)`` prices of one model: least squares, both >= 0.

    The cost of a call is modelled as ``input * input_tokens + output * output_tokens``
    (no intercept: a call of no tokens is free). The unconstrained fit is kept when both
    prices are >= 0; otherwise the better of the two one-price fits (the other at 0).
    """
    a = np.column_stack([input_tokens, output_tokens]).astype(np.float64)
    y = np.asarray(cost, dtype=np.float64)
    if not a.any():
        return np.zeros(2)
    both, *_ = np.linalg.lstsq(a, y, rcond=None)
    if (both >= 0).all():
        return both
    best, best_sse = np.zeros(2), float(y @ y)
    for j in range(2):
        norm = float(a[:, j] @ a[:, j])
        if norm > 0:
            price = np.zeros(2)
            price[j] = max(0.0, float(a[:, j] @ y) / norm)
            sse = float(np.sum((y - a @ price) ** 2))
            if sse < best_sse:
                best, best_sse = price, sse
    return best


def fit_ridge(x: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    """Ridge regression weights, intercept last and not penalised: ``(d + 1,)``."""
    xm, ym = x.mean(axis=0), float(y.mean())
    xc = x - xm
    w = np.linalg.solve(xc.T @ xc + l2 * np.eye(x.shape[1]), xc.T @ (y - ym))
    return np.append(w, ym - float(xm @ w))


class CallPricer:
    """Each model's call priced before it is made: known input tokens, predicted output.

    ``expected(x, input_tokens)`` is ``in_j * input_tokens_j + out_j * E[output_j | x]``
    per model ``j`` (the module doc says how each part is fitted).
    """

    def __init__(self) -> None:
        self.tokens: np.ndarray | None = None  # (K, d + 1) log(1 + output tokens) models
        self.smear: np.ndarray | None = None  # (K,) Duan's smearing factors
        self.prices: np.ndarray | None = None  # (K, 2) per-token (input, output) prices
        self.floor: float | None = None  # MIN_EXTRA_COST x mean training call cost

    def fit(self, x: np.ndarray, calls: Mapping[str, np.ndarray], l2: float) -> CallPricer:
        """Fit on design rows ``x`` and :meth:`~PricedRouter.training_costs`' ``calls``."""
        tokens, smear = [], []
        for j in range(calls["cost"].shape[1]):
            log_out = np.log1p(calls["output_tokens"][:, j])
            w = fit_ridge(x, log_out, l2)
            tokens.append(w)
            smear.append(float(np.mean(np.exp(log_out - (x @ w[:-1] + w[-1])))))
        self.tokens, self.smear = np.array(tokens), np.array(smear)
        self.prices = np.array([fit_prices(calls["cost"][:, j], calls["input_tokens"][:, j],
                                           calls["output_tokens"][:, j])
                                for j in range(calls["cost"].shape[1])])
        self.floor = MIN_EXTRA_COST * max(float(np.mean(calls["cost"])), 1e-300)
        return self

    def _fitted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        if self.tokens is None or self.smear is None or self.prices is None \
                or self.floor is None:
            raise ValueError("CallPricer: call fit first")
        return self.tokens, self.smear, self.prices, self.floor

    def expected(self, x: np.ndarray, input_tokens: np.ndarray) -> np.ndarray:
        """``(n, K)`` expected price of each model's call on design rows ``x``."""
        tokens, smear, prices, _ = self._fitted()
        out = np.column_stack([smear[j] * np.exp(x @ tokens[j, :-1] + tokens[j, -1]) - 1.0
                               for j in range(len(smear))])
        return (prices[:, 0] * np.asarray(input_tokens, dtype=np.float64)
                + prices[:, 1] * np.maximum(out, 0.0))

    def arrays(self) -> dict[str, np.ndarray]:
        """The state's arrays: ``tokens``, ``smear``, ``prices``, ``floor``."""
        tokens, smear, prices, floor = self._fitted()
        return {"tokens": tokens, "smear": smear, "prices": prices, "floor": np.array([floor])}

    def load(self, arrays: Mapping[str, Any], models: int, width: int) -> None:
        """Set from a state's arrays, checking their shapes (``width``: ``d + 1``)."""
        shapes = {"tokens": (models, width), "smear": (models,), "prices": (models, 2),
                  "floor": (1,)}
        loaded = arrays_of_shapes(arrays, shapes)
        if (loaded["prices"] < 0).any() or (loaded["smear"] <= 0).any() \
                or loaded["floor"][0] <= 0:
            raise ValueError("arrays: expected 'prices' >= 0, 'smear' > 0 and 'floor' > 0")
        self.tokens, self.smear, self.prices = loaded["tokens"], loaded["smear"], loaded["prices"]
        self.floor = float(loaded["floor"][0])


def call_inputs(router: Router, data: TraceDataset) -> Any:
    """A priced router's inputs: its text inputs, then the prompt's tokens per model."""
    cols = np.array([data.model_index(m) for m in router.models], dtype=np.int64)
    stats, text = router.features.raw(data, router.models[0] if router.reads_answers else None)
    return stats, text, data.input_tokens[:, cols].astype(np.float64)


def call_records(router: Router, data: TraceDataset, costs: Any) -> dict[str, np.ndarray]:
    """What a priced router fits its pricer on: cost and tokens of each call, ``(n, K)``."""
    cols = np.array([data.model_index(m) for m in router.models], dtype=np.int64)
    return {"cost": call_costs(data, costs)[:, cols],
            "input_tokens": data.input_tokens[:, cols].astype(np.float64),
            "output_tokens": data.output_tokens[:, cols].astype(np.float64)}


class PricedLogistic(PerModelLogistic):
    """Per-model correctness with each call priced before it is made.

    The one home of the pricer's plumbing, shared by :class:`PricedRouter` (before
    :class:`~agents.routers.two_model.TwoModelLogistic`, the logistic router's settings
    on :class:`~agents.routers.base.TwoModelRouter`) and :class:`PricedMultiRouter` (before
    :class:`~agents.routers.multi.MultiRouter`); the output-token models share the
    correctness models' ``l2``. Its :meth:`inputs` gain the prompt's tokens per model,
    its training costs are each call's cost and tokens (:func:`call_records`), fitting
    fits a :class:`CallPricer` on the correctness models' own design rows,
    :meth:`expected_costs_inputs` prices the calls, and the state carries the pricer's
    arrays beside the model's.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        self._pricer = CallPricer()

    def inputs(self, data: TraceDataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(statistics, text features, input tokens (n, K))`` of ``data``'s queries."""
        if not self.models:
            raise ValueError(f"{type(self).__name__}: its models are set at fit")
        return call_inputs(self, data)

    def _model_costs(self, data: TraceDataset, costs: Any) -> dict[str, np.ndarray]:
        return call_records(self, data, costs)

    def fit_inputs(self, inputs: Any, targets: np.ndarray, costs: Any = None) -> Any:
        """Fit on precomputed :meth:`inputs`, :meth:`targets` and :meth:`training_costs`."""
        stats, text, _ = inputs
        if not isinstance(costs, Mapping):
            raise ValueError(f"{type(self).__name__}.fit_inputs: expected "
                             "costs=training_costs(data)")
        return super().fit_inputs((stats, text), targets, costs)

    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Mapping[str, np.ndarray]
                   ) -> None:
        # the correctness model reads the calls' costs only; the pricer its tokens too
        super()._fit_model(x, y, costs["cost"])
        self._pricer.fit(x, costs, self.l2)

    def predict_inputs(self, inputs: Any) -> np.ndarray:
        """``(n, K)``: each model's predicted correctness."""
        stats, text, _ = inputs
        return super().predict_inputs((stats, text))

    def expected_costs_inputs(self, inputs: Any) -> np.ndarray:
        """``(n, K)``: each call priced before it is made, from precomputed :meth:`inputs`."""
        stats, text, input_tokens = inputs
        self._coefficients()  # "call fit first", before the design needs the standardiser
        return self._pricer.expected(self._design(stats, text), input_tokens)

    def _model_arrays(self) -> dict[str, np.ndarray]:
        return {**super()._model_arrays(), **self._pricer.arrays()}

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        super()._load_model_arrays(arrays)
        self._pricer.load(arrays, len(self.models), sum(self.features.widths) + 1)


@register
@dataclass
class PricedRouter(PricedLogistic, TwoModelLogistic):
    """Routes a query to the strong model by predicted accuracy gained per extra dollar.

    Args:
        weak: Name of the weak (cheap) model.
        strong: Name of the strong (expensive) model.
        n_features: Width of the hashed n-gram features.
        l2: Penalty of the correctness models (logistic) and of the output-token
            models (ridge), > 0.
        hashed_weight: Scale of the text features relative to the standardised
            statistics (0 ignores the words).
        text_features: The text encoder: ``"hashed"``, ``"minilm"`` or your own.
    """

    kind: ClassVar[str] = "priced"
    #: Never pay for a strong call predicted to lose accuracy: calibration stops at 0.
    min_threshold: ClassVar[float] = 0.0

    def targets(self, data: TraceDataset) -> np.ndarray:
        """``(n, 2)``: whether the weak and the strong model answered each query right."""
        return data.correct[:, [data.model_index(m) for m in self.models]]

    def scores_of(self, win: np.ndarray, costs: np.ndarray | None = None) -> np.ndarray:
        """Accuracy gained per extra dollar, from a prediction and its prices."""
        if costs is None:
            raise ValueError("scores_of: a priced router's scores need the calls' prices")
        return self._per_dollar(np.asarray(win), np.asarray(costs))

    def scores(self, data: TraceDataset) -> np.ndarray:
        """Predicted accuracy gained per extra dollar of the strong call; higher: strong."""
        return self.scores_of(*self.predicted(data))

    def _per_dollar(self, p: np.ndarray, c: np.ndarray) -> np.ndarray:
        floor = self._pricer._fitted()[3]
        return (p[:, 1] - p[:, 0]) / np.maximum(c[:, 1] - c[:, 0], floor)

    def decide(self, win: np.ndarray, point: float, costs: Any = None) -> np.ndarray:
        """1 (strong) where the gain per dollar is at or above ``point``, else 0.

        Args:
            win: :meth:`predict`'s ``(n, 2)`` correctness.
            point: The threshold, in accuracy per dollar.
            costs: :meth:`expected_costs`'s ``(n, 2)``; required.
        """
        if costs is None:
            raise ValueError("PricedRouter.decide: expected costs=expected_costs(data)")
        return (self._per_dollar(np.asarray(win), np.asarray(costs)) >= point
                ).astype(np.int64)


@register
@dataclass
class PricedMultiRouter(PricedLogistic, MultiRouter):
    """The K-model router with each call priced per query: ``argmax p_j - lam c_j(q) / s``.

    As :class:`~agents.routers.multi.MultiRouter` (one correctness model per
    model, ``lam`` the accuracy given up per unit of the dearest model's mean training
    cost ``s``), but ``c_j(q)`` is model ``j``'s call on this query priced before it is
    made (:class:`CallPricer`: the prompt's tokens known, the output's predicted), not
    the model's mean: a long prompt makes every call dearer, the dear models' most.
    With two models, a query goes to the dearer one exactly where its predicted gain per
    extra dollar is at least ``lam / s``: :class:`PricedRouter`'s rule.

    Args:
        models: The models to route between (default: all of the training data's).
        n_features: Hashed n-gram features.
        l2: Penalty of the correctness (logistic) and output-token (ridge) models.
        hashed_weight: Scale of the text features relative to the statistics.
        text_features: The text encoder.
    """

    kind: ClassVar[str] = "multi-priced"
