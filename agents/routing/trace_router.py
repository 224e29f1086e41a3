"""A learned weak/strong router for logged traces (its GSM8K report: experiments.traces).

:class:`TraceRouter` predicts from a query's text whether the weak model will get it
wrong; its probability is the router's score, and sweeping a threshold over it gives the
routing curve of :mod:`cost_envs.metrics.routing` (APGR, CPT(50%), CPT(80%)). It is an
L2-regularised logistic regression fitted by Newton's method in numpy, on

* seven text statistics (log characters, words, numbers and sentences, the longest
  number's digit count, whether the text has a percentage, whether it has a fraction
  word), standardised on the training split, and
* hashed word unigrams and bigrams (:func:`cost_envs.traces.features.hashed_features`), scaled by
  ``hashed_weight``.

:meth:`TraceRouter.cross_validate` picks ``l2`` and ``hashed_weight`` by k-fold
cross-validated APGR on the training split only. :class:`RouterPolicy` acts with a
router trained on TraceRouting-v0's own observations (the SB3 ``predict`` signature).

:class:`CascadeRouter` is the cascade (TraceRouting-v0's ``cascade=True``): the weak model
is always called first and the router reads its *answer* before deciding to escalate to
the strong model. It is the same logistic regression on the prompt's features plus
:func:`answer_statistics` of the weak model's logged response (whether it states a final
answer as ``#### n``, whether that number is an integer, arithmetic slips in its
``<<a*b=c>>`` calculator annotations, hedging and self-correction phrases, ...) and
hashed n-grams of that response. Only the weak model's answer text is read: never the
strong model's answer, never a correctness label. A cascade pays the weak call on every
query, so its cost curve is :func:`cascade_curve`'s.

:func:`cascade_observations` replays the env's cascade step for every query. The GSM8K
routing report (tables, figure, files) is :mod:`experiments.traces`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from agents.allocator import Allocator
from agents.routing.router_features import (
    ANSWER_STATISTICS,
    STATISTICS,
    answer_statistics,
    text_statistics,
    weak_answers,
)
from agents.routing.solvers import fit_logistic, logistic_scores
from cost_envs.config import integer, number, one_of
from cost_envs.envs.trace_routing import TraceTask
from cost_envs.metrics.routing import RoutingCurve, routing_curve
from cost_envs.traces import TraceDataset
from cost_envs.traces.features import MINILM_DIM, hashed_features, minilm_features

#: A router's word features: hashed n-grams (numpy) or MiniLM sentence embeddings.
TEXT_FEATURES = ("hashed", "minilm")
#: Version of :meth:`TraceRouter.to_state`'s layout.
STATE_FORMAT = 1


def _array(arrays: Mapping[str, Any], name: str, ndim: int) -> np.ndarray:
    """``arrays[name]`` as a float64 array of ``ndim`` dimensions (ValueError otherwise)."""
    if name not in arrays:
        raise ValueError(f"arrays: missing {name!r}; got {sorted(arrays)}")
    out = np.asarray(arrays[name], dtype=np.float64)
    if out.ndim != ndim or not np.isfinite(out).all():
        raise ValueError(f"arrays: {name!r}: expected finite numbers in {ndim} dimension(s), "
                         f"got shape {out.shape}")
    return out


class LogisticRegression:
    """L2-regularised logistic regression (intercept not penalised).

    Fitted by :func:`agents.routing.solvers.fit_logistic` (scikit-learn's
    ``LogisticRegression(C=1/l2)``, or the same problem by Newton's method in numpy where
    scikit-learn is not installed); scored by :func:`~agents.routing.solvers.logistic_scores`.

    Args:
        l2: Penalty on the squared weights, > 0.
        max_iter: Solver iterations at most.
        tol: Solver tolerance.
    """

    def __init__(self, l2: float = 10.0, max_iter: int = 1000, tol: float = 1e-8,
                 ) -> None:
        number(l2, "l2", minimum=0, inclusive=False)
        integer(max_iter, "max_iter", minimum=1)
        self.l2, self.max_iter, self.tol = float(l2), max_iter, tol
        #: The weights, then the intercept (``(d + 1,)``), once fitted.
        self.coef_: np.ndarray | None = None

    def fit(self, x: np.ndarray, y: np.ndarray) -> LogisticRegression:
        """Fit to features ``x`` ``(n, d)`` and 0/1 labels ``y`` ``(n,)``."""
        coef, intercept = fit_logistic(x, y, self.l2, self.tol, self.max_iter)
        self.coef_ = np.append(coef, intercept)
        return self

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Probability of label 1 for each row of ``x``."""
        if self.coef_ is None:
            raise ValueError("predict_proba: call fit first")
        return logistic_scores(x, self.coef_[:-1], float(self.coef_[-1]))


#: MiniLM embeddings by text, for the process: cross-validation and held-out folds fit and
#: score routers on the same prompts many times, and embedding is the slow part (hashing
#: is cheap, so hashed features are not cached). Deterministic, so caching changes nothing.
_MINILM_CACHE: dict[str, np.ndarray] = {}


def _embedded(texts: Sequence[str]) -> np.ndarray:
    """:func:`minilm_features` of ``texts``, each text embedded once per process."""
    missing = list(dict.fromkeys(t for t in texts if t not in _MINILM_CACHE))
    if missing:
        _MINILM_CACHE.update(zip(missing, minilm_features(missing).astype(np.float64),
                                 strict=True))
    return np.array([_MINILM_CACHE[t] for t in texts]).reshape(len(texts), MINILM_DIM)


@dataclass
class TraceRouter:
    """Scores queries by the predicted probability that the weak model answers wrongly.

    The ``"logistic"`` router of :data:`agents.routing.routers.ROUTERS` (its state
    contract is documented there).

    Args:
        weak: Name of the weak (cheap) model.
        strong: Name of the strong (expensive) model.
        n_features: Hashed n-gram features.
        l2: Logistic regression penalty.
        hashed_weight: Scale of the text features (hashed n-grams or embeddings)
            relative to the standardised statistics (0 ignores the words).
        text_features: ``"hashed"`` (word n-grams, numpy) or ``"minilm"`` (all-MiniLM-L6-v2
            sentence embeddings from the ``embeddings`` extra, 384 dimensions; then
            ``n_features`` is unused).
    """

    weak: str
    strong: str
    n_features: int = 512
    l2: float = 10.0
    hashed_weight: float = 1.0
    text_features: str = "hashed"

    #: Name in :data:`agents.routing.routers.ROUTERS` and in a saved state.
    kind: ClassVar[str] = "logistic"

    def __post_init__(self) -> None:
        integer(self.n_features, "n_features", minimum=1)
        number(self.l2, "l2", minimum=0, inclusive=False)
        number(self.hashed_weight, "hashed_weight", minimum=0)
        one_of(self.text_features, "text_features", TEXT_FEATURES)
        self._mean: np.ndarray | None = None
        self._std: np.ndarray | None = None
        self._model: LogisticRegression | None = None

    def _text(self, texts: Sequence[str]) -> np.ndarray:
        """The texts' word features: hashed n-grams or sentence embeddings."""
        if self.text_features == "minilm":
            return _embedded(texts)
        return hashed_features(texts, self.n_features)

    def _raw(self, data: TraceDataset) -> tuple[np.ndarray, np.ndarray]:
        return text_statistics(data.prompts), self._text(data.prompts)

    def _design(self, stats: np.ndarray, hashed: np.ndarray) -> np.ndarray:
        assert self._mean is not None and self._std is not None
        return np.hstack([(stats - self._mean) / self._std, self.hashed_weight * hashed])

    def features(self, data: TraceDataset) -> np.ndarray:
        """The router's raw inputs for ``data``'s queries (statistics, then hashed n-grams).

        Before standardisation and weighting: what the router reads, no outcomes.
        """
        return np.hstack(self._raw(data))

    def labels(self, data: TraceDataset) -> np.ndarray:
        """The training target: 1 where the weak model is wrong."""
        return ~data.correct[:, data.model_index(self.weak)]

    def fit(self, data: TraceDataset) -> TraceRouter:
        """Fit on ``data`` (the training split)."""
        data.model_index(self.strong)  # both models must exist
        stats, hashed = self._raw(data)
        return self._fit_raw(stats, hashed, self.labels(data))

    def _standardise_on(self, stats: np.ndarray) -> None:
        """Fix the statistics' standardisation to ``stats``' mean and (nonzero) spread."""
        self._mean = stats.mean(axis=0)
        std = stats.std(axis=0)
        self._std = np.where(std > 0, std, 1.0)

    def _fit_raw(self, stats: np.ndarray, hashed: np.ndarray, y: np.ndarray) -> TraceRouter:
        self._standardise_on(stats)
        self._fit_model(self._design(stats, hashed), np.asarray(y, dtype=np.float64))
        return self

    def _fit_model(self, x: np.ndarray, y: np.ndarray) -> None:
        """Fit the model on the design matrix (the one step a subclass replaces)."""
        self._model = LogisticRegression(self.l2).fit(x, y)

    def _score_model(self, x: np.ndarray) -> np.ndarray:
        """Scores of design-matrix rows."""
        assert self._model is not None
        return self._model.predict_proba(x)

    def scores(self, data: TraceDataset) -> np.ndarray:
        """Router scores of ``data``'s queries (higher: send to the strong model)."""
        if self._mean is None:
            raise ValueError("scores: call fit first")
        return self._scores_raw(*self._raw(data))

    def _scores_raw(self, stats: np.ndarray, hashed: np.ndarray) -> np.ndarray:
        """Scores from raw inputs (:meth:`_raw`'s, rows of any queries)."""
        return self._score_model(self._design(stats, hashed))

    # ------------------------------------------------------------------ state
    def _model_arrays(self) -> dict[str, np.ndarray]:
        assert self._model is not None and self._model.coef_ is not None
        return {"coef": self._model.coef_}

    def _load_model_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        self._model = LogisticRegression(self.l2)
        self._model.coef_ = _array(arrays, "coef", 1)
        width = sum(self._widths()) + 1
        if self._model.coef_.shape != (width,):
            raise ValueError(f"arrays: 'coef': expected {width} weights (statistics, text "
                             f"features, intercept) for this config, got "
                             f"{self._model.coef_.shape[0]}")

    def _widths(self) -> tuple[int, int]:
        """Columns of the design: (statistics, text features), as this config builds it."""
        return len(STATISTICS), self._text_width()

    def _text_width(self) -> int:
        """Columns of one text's features: ``n_features`` hashed, or MiniLM's 384."""
        return MINILM_DIM if self.text_features == "minilm" else self.n_features

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The fitted router as ``(config, arrays)``: JSON values and float64 arrays.

        See :mod:`agents.routing.routers` for the contract.
        """
        if self._mean is None or self._std is None:
            raise ValueError("to_state: call fit first")
        config = {"router": self.kind, "format": STATE_FORMAT, **dataclasses.asdict(self)}
        arrays = {"mean": self._mean, "std": self._std, **self._model_arrays()}
        return config, {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in arrays.items()}

    @classmethod
    def from_state(cls, config: Mapping[str, Any], arrays: Mapping[str, Any]) -> TraceRouter:
        """The router :meth:`to_state` saved (it scores exactly as the saved one did).

        Raises:
            ValueError: When ``config`` is another router's or format, has unknown or
                missing keys, or an array is missing or of the wrong shape.
        """
        if config.get("router") != cls.kind or config.get("format") != STATE_FORMAT:
            raise ValueError(f"config: expected router={cls.kind!r}, format={STATE_FORMAT}, "
                             f"got router={config.get('router')!r}, "
                             f"format={config.get('format')!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        given = set(config) - {"router", "format"}
        if given != names:
            raise ValueError(f"config: expected keys {sorted(names)}, got unknown "
                             f"{sorted(given - names)} and missing {sorted(names - given)}")
        router = cls(**{k: config[k] for k in names})
        router._mean, router._std = _array(arrays, "mean", 1), _array(arrays, "std", 1)
        statistics = router._widths()[0]
        if router._mean.shape != (statistics,) or router._std.shape != (statistics,):
            raise ValueError(f"arrays: 'mean' and 'std': expected {statistics} statistics "
                             f"each, got {router._mean.shape} and {router._std.shape}")
        router._load_model_arrays(arrays)
        return router

    def cross_validate(
        self, data: TraceDataset, l2_grid: Sequence[float] = (1.0, 10.0, 100.0),
        weight_grid: Sequence[float] = (0.0, 1.0, 4.0), folds: int = 5, seed: int = 0,
        split_by: str = "query",
    ) -> dict[str, Any]:
        """Choose ``l2`` and ``hashed_weight`` by k-fold APGR on ``data``, then fit on all.

        Folds keep clusters whole (:meth:`~cost_envs.traces.TraceDataset.fold_ids`): by
        prompt (``split_by="query"``: identical prompts share a fold; with all prompts
        distinct, by query) or by group (``split_by="group"``: each fold holds out whole
        groups, as a test split by group does).

        Returns:
            ``{"l2", "hashed_weight", "cv_apgr": {"l2=...,w=...": mean APGR}}``.
        """
        stats, hashed = self._raw(data)
        y = self.labels(data)
        weak = data.correct[:, data.model_index(self.weak)]
        strong = data.correct[:, data.model_index(self.strong)]
        # folds as the train/test split: a repeated question (or a group) stays in one fold
        fold = data.fold_ids(folds, seed, split_by)
        table: dict[str, float] = {}
        best = (-math.inf, self.l2, self.hashed_weight)
        for l2 in l2_grid:
            for weight in weight_grid:
                probe = dataclasses.replace(self, l2=l2, hashed_weight=weight)
                values = []
                for k in range(folds):
                    tr, va = fold != k, fold == k
                    s = probe._fit_raw(stats[tr], hashed[tr], y[tr])._scores_raw(
                        stats[va], hashed[va])
                    curve = routing_curve(s, weak[va], strong[va])
                    if curve.strong_accuracy > curve.weak_accuracy:
                        values.append(curve.apgr)
                score = float(np.mean(values)) if values else -math.inf
                table[f"l2={l2:g},w={weight:g}"] = score
                if score > best[0]:
                    best = (score, l2, weight)
        self.l2, self.hashed_weight = best[1], best[2]
        self._fit_raw(stats, hashed, y)
        return {"l2": self.l2, "hashed_weight": self.hashed_weight, "cv_apgr": table}


@dataclass
class CascadeRouter(TraceRouter):
    """The cascade's escalation score: the weak model has answered; will it be wrong?

    The weak model is called on every query; the router then reads its answer and the
    prompt and scores the probability that the answer is wrong, and the queries scored
    highest are escalated to the strong model (whose answer then counts). Inputs: the
    prompt's :func:`text_statistics` and the answer's :func:`answer_statistics`
    (standardised), and hashed n-grams of the answer and of the prompt
    (``n_features`` each, scaled by ``hashed_weight``). The answer is the weak model's
    logged response (:func:`weak_answers`): the strong model's answer and the
    correctness labels are never inputs. Fitting and cross-validation are
    :class:`TraceRouter`'s.

    Args:
        weak: Name of the weak model, called first.
        strong: Name of the strong model, called on escalation.
        n_features: Hashed n-gram features of the answer, and as many of the prompt.
        l2: Logistic regression penalty.
        hashed_weight: Scale of the hashed features (0: the statistics alone).
    """

    n_features: int = 256
    kind: ClassVar[str] = "cascade"

    def _widths(self) -> tuple[int, int]:
        return len(STATISTICS) + len(ANSWER_STATISTICS), 2 * self._text_width()

    def _raw(self, data: TraceDataset) -> tuple[np.ndarray, np.ndarray]:
        answers = weak_answers(data, self.weak)
        stats = np.hstack([text_statistics(data.prompts),
                           answer_statistics(answers, data.prompts)])
        hashed = np.hstack([self._text(answers), self._text(data.prompts)])
        return stats, hashed


def cascade_curve(scores: Any, weak_correct: Any, strong_correct: Any, weak_cost: Any,
                  strong_cost: Any) -> RoutingCurve:
    """The routing curve of a cascade: the weak call is paid on every query.

    Strong-call share and accuracy are :func:`routing_curve`'s (an escalated query is
    answered by the strong model); the cost of an escalated query is the weak call plus
    the strong one, so the curve's cost runs from the weak model's mean cost (share 0)
    to the sum of both models' (share 1).
    """
    weak_cost = np.asarray(weak_cost, dtype=np.float64)
    return routing_curve(scores, weak_correct, strong_correct, weak_cost,
                         weak_cost + np.asarray(strong_cost, dtype=np.float64))


class RouterPolicy(Allocator):
    """A router acting in TraceRouting-v0: the strong model when its score >= threshold.

    Trained by :meth:`fit` on the env's own first-step observations
    (``query_features`` and ``prompt_length``) to predict that the weak model fails; in
    the cascade's second step it accepts the answer it has. SB3 ``predict`` signature.

    Args:
        env: A TraceRouting-v0 env (possibly wrapped).
        weak: Name of the weak model (default: the cheapest).
        strong: Name of the strong model (default: the most accurate on training).
        threshold: Score at or above which the strong model is called.
        l2: Logistic regression penalty.
    """

    name = "learned"

    def __init__(self, env: gym.Env, weak: str | None = None, strong: str | None = None,
                 threshold: float = 0.5, l2: float = 1.0) -> None:
        base = env.unwrapped
        if not hasattr(base, "initial_observations"):
            raise ValueError(f"RouterPolicy: expected a TraceRouting env, got "
                             f"{type(base).__name__}")
        self.env = base
        names = base.pool.names
        self.weak = names.index(weak) if weak is not None else base.cheapest
        self.strong = names.index(strong) if strong is not None else base.strongest
        self.threshold = float(threshold)
        layout = base.observation_layout
        self._columns = np.r_[layout["query_features"], layout["prompt_length"]]
        self._task = layout["task_embedding"].start
        self._turn = layout["turn"].start if "turn" in layout else None
        self.model = LogisticRegression(l2)

    def fit(self, env: gym.Env | None = None) -> RouterPolicy:
        """Fit on the first-step observations of ``env``'s queries (default: its own env).

        Pass the training-split env and act on the test-split one.
        """
        base = self.env if env is None else env.unwrapped
        x = base.initial_observations()[:, self._columns]
        y = ~base.dataset.correct[:, self.weak]
        self.model.fit(x, y)
        return self

    def scores(self, observations: np.ndarray) -> np.ndarray:
        """Scores of first-step observations ``(n, d)``."""
        return self.model.predict_proba(np.asarray(observations)[:, self._columns])

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The action for one observation."""
        action = np.zeros(self.env.n_agents, dtype=np.int8)
        if observation[self._task] <= 0 or (
                self._turn is not None and observation[self._turn] >= 0.5):
            return action  # answered, or the cascade's second step: accept
        score = self.scores(observation[None, :])[0]
        action[self.strong if score >= self.threshold else self.weak] = 1
        return action


def cascade_observations(env: gym.Env) -> np.ndarray:
    """The cascade's second-step observation of every query of a cascade env, ``(n, d)``.

    Each query is replayed (``reset(options={"task": ...})``) with only the cheapest
    model called first: exactly what a policy sees when it decides to escalate.
    """
    base = env.unwrapped
    if not getattr(base, "cascade", False):
        raise ValueError("cascade_observations: expected TraceRouting-v0 with cascade=True")
    data = base.dataset
    action = np.zeros(base.n_agents, dtype=np.int8)
    action[base.cheapest] = 1
    rows = []
    for q in range(data.n_queries):
        env.reset(options={"task": TraceTask(q, data.query_ids[q], base.n_agents,
                                             data.fingerprint)})
        obs, *_ = env.step(action)
        rows.append(obs)
    return np.array(rows)
