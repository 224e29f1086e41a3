"""A learned weak/strong router for logged traces, and the GSM8K routing report.

:class:`TraceRouter` predicts from a query's text whether the weak model will get it
wrong; its probability is the router's score, and sweeping a threshold over it gives the
routing curve of :mod:`cost_envs.routing_metrics` (APGR, CPT(50%), CPT(80%)). It is an
L2-regularised logistic regression fitted by Newton's method in numpy, on

* seven text statistics (log characters, words, numbers and sentences, the longest
  number's digit count, whether the text has a percentage, whether it has a fraction
  word), standardised on the training split, and
* hashed word unigrams and bigrams (:func:`cost_envs.traces.hashed_features`), scaled by
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

:func:`report` runs the RouteLLM experiment: GSM8K (Mixtral-8x7B vs GPT-4) split by query
into train and test halves, the routers fitted on train, and the learned, cascade, random
and per-query-oracle routers scored on test with 95% bootstrap intervals over test
queries; also the four MMLU subjects, and the baselines on the TraceRouting-v0 test split.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import operator
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agents.files import write_file_atomic, write_text_atomic
from cost_envs.envs.trace_routing import TraceTask
from cost_envs.prices import default_price_table
from cost_envs.routing_metrics import (
    RoutingCurve,
    bootstrap_routing,
    oracle_point,
    oracle_scores,
    random_routing_curve,
    routing_curve,
)
from cost_envs.traces import TraceDataset, hashed_features, load_traces

#: Names of :func:`text_statistics`' columns.
STATISTICS = ("log_chars", "log_words", "log_numbers", "log_sentences", "max_digits",
              "has_percent", "has_fraction")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SENTENCE = re.compile(r"[.?!](?:\s|$)")
_FRACTION = re.compile(r"\d/\d|\bhalf\b|\bthird|\bquarter|\bfifth", re.IGNORECASE)
SCALES = ("smoke", "default")
GSM8K = "gsm8k_responses.csv"
MMLU_DIR = "mmlu"


def text_statistics(texts: Sequence[str]) -> np.ndarray:
    """Seven statistics per text (see :data:`STATISTICS`), float64 ``(n, 7)``."""
    rows = []
    for t in texts:
        numbers = _NUMBER.findall(t)
        rows.append((
            math.log1p(len(t)), math.log1p(len(t.split())), math.log1p(len(numbers)),
            math.log1p(len(_SENTENCE.findall(t))),
            max((sum(c.isdigit() for c in x) for x in numbers), default=0),
            float("%" in t or "percent" in t.lower()), float(bool(_FRACTION.search(t))),
        ))
    return np.array(rows, dtype=np.float64).reshape(len(texts), len(STATISTICS))


#: Names of :func:`answer_statistics`' columns.
ANSWER_STATISTICS = (
    "has_final", "final_not_integer", "final_in_prompt", "final_is_last_result",
    "final_has_words", "log_final", "log_chars", "log_lines", "log_annotations",
    "annotation_error", "log_hedges", "log_decimals", "prompt_numbers_used",
)
#: A final answer in GSM8K's form: ``#### 18`` (an optional ``$``, commas, a sign).
_FINAL = re.compile(r"####[ \t]*\$?[ \t]*(-?\d[\d,]*(?:\.\d+)?|-?\.\d+)")
#: A calculator annotation of GSM8K's reference style: ``<<9*2=18>>``.
_ANNOTATION = re.compile(r"<<([^<>=]*)=([^<>]*)>>")
_SIGNED_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_RESULT = re.compile(r"=\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?)")
#: Hedging, approximation and self-correction phrases.
_HEDGE = re.compile(
    r"\b(?:however|but|wait|actually|mistake|instead|assum\w*|approximately|about|around|"
    r"roughly|estimate\w*|round\w*|nearest|whole number|cannot|can't|not possible|"
    r"impossible|note)\b|\u2248|\?", re.IGNORECASE)
_ARITHMETIC = re.compile(r"[\d.+\-*/() ]+")
_OPERATORS: dict[type, Any] = {ast.Add: operator.add, ast.Sub: operator.sub,
                               ast.Mult: operator.mul, ast.Div: operator.truediv}


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _evaluate(node: ast.AST) -> float:
    """Value of a parsed expression of numbers, ``+ - * /``, unary minus and brackets."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError("not plain arithmetic")


def arithmetic_value(expression: str) -> float | None:
    """The value of a plain arithmetic expression (``"12+5*3"``), or ``None``.

    Numbers (commas as thousands separators), ``+ - * /`` (also ``x``, a multiplication
    sign and a Markdown-escaped star) and brackets; anything else, a division by zero or an
    expression over 200 characters gives ``None``. Nothing is executed: the expression
    is parsed with :mod:`ast` and only those nodes are evaluated.
    """
    text = expression.replace(",", "").replace("\\", "").replace("\u00d7", "*")
    text = text.replace("x", "*").strip()
    if not text or len(text) > 200 or not _ARITHMETIC.fullmatch(text):
        return None
    try:
        return _evaluate(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def answer_statistics(answers: Sequence[str], prompts: Sequence[str]) -> np.ndarray:
    """What an answer text shows of its own reliability, float64 ``(n, 13)``.

    Read from the answer (and, for two columns, its prompt) only, in the order of
    :data:`ANSWER_STATISTICS`:

    * ``has_final``: it states a final answer as ``#### n`` (GSM8K's format);
    * ``final_not_integer``: that number has a fractional part (GSM8K's answers are
      whole numbers, so this is a prior about the benchmark, not about the text);
    * ``final_in_prompt``: that number is one of the prompt's numbers (copied, not
      computed);
    * ``final_is_last_result``: it equals the last ``= x`` result of the working (or
      its last number when there is no ``=``);
    * ``final_has_words``: words follow the number on the ``####`` line (units, prose);
    * ``log_final``: ``log10(1 + |final number|)`` (0 without one);
    * ``log_chars``, ``log_lines``: ``log1p`` of the answer's characters and line breaks;
    * ``log_annotations``: ``log1p`` of its ``<<a*b=c>>`` calculator annotations;
    * ``annotation_error``: some annotation's expression does not evaluate to its stated
      result (beyond 1% rounding; see :func:`arithmetic_value`);
    * ``log_hedges``: ``log1p`` of hedging and self-correction phrases ("however",
      "wait", "assume", "approximately", "round", "cannot", "?", ...);
    * ``log_decimals``: ``log1p`` of non-integer numbers in the working;
    * ``prompt_numbers_used``: share of the prompt's distinct numbers that the working
      mentions (1 for a prompt without numbers).

    An empty answer gives zeros except ``prompt_numbers_used`` (0 when the prompt has
    numbers).
    """
    if len(answers) != len(prompts):
        raise ValueError(f"answer_statistics: expected as many prompts as answers, got "
                         f"{len(prompts)} and {len(answers)}")
    rows = []
    for answer, prompt in zip(answers, prompts, strict=True):
        match = _FINAL.search(answer)
        final = _number(match.group(1)) if match else None
        working = answer[: match.start()] if match else answer
        errors = 0
        annotations = _ANNOTATION.findall(answer)
        for left, right in annotations:
            value, stated = arithmetic_value(left), arithmetic_value(right)
            if value is not None and stated is not None and (
                    abs(value - stated) > 0.01 * max(1.0, abs(value))):
                errors += 1
        numbers = [x for x in map(_number, _SIGNED_NUMBER.findall(working)) if x is not None]
        given = {x for x in map(_number, _SIGNED_NUMBER.findall(prompt)) if x is not None}
        results = [x for x in map(_number, _RESULT.findall(working)) if x is not None]
        last = results[-1] if results else (numbers[-1] if numbers else None)
        after = answer[match.end():].split("\n", 1)[0].strip() if match else ""
        rows.append((
            float(final is not None),
            float(final is not None and final != round(final)),
            float(final is not None and final in given),
            float(final is not None and last is not None and math.isclose(final, last)),
            float(bool(re.search(r"[A-Za-z]", after))),
            math.log10(1.0 + abs(final)) if final is not None else 0.0,
            math.log1p(len(answer)),
            math.log1p(answer.count("\n")),
            math.log1p(len(annotations)),
            float(errors > 0),
            math.log1p(len(_HEDGE.findall(answer))),
            math.log1p(sum(1 for x in numbers if x != round(x))),
            len(given & set(numbers)) / len(given) if given else 1.0,
        ))
    return np.array(rows, dtype=np.float64).reshape(len(answers), len(ANSWER_STATISTICS))


def weak_answers(data: TraceDataset, weak: str) -> list[str]:
    """The weak model's logged answer texts (``""`` where absent): all a cascade reads.

    Raises:
        ValueError: When the data has no answer texts for ``weak`` at all.
    """
    j = data.model_index(weak)
    answers = [] if data.responses is None else [row[j] or "" for row in data.responses]
    if not any(answers):
        raise ValueError(f"{data.source}: the cascade reads the weak model's answers, but the "
                         f"data has no answer texts for {weak!r} (a '{weak}_response' column "
                         "or 'response' field)")
    return answers


def _check_positive(name: str, value: Any, integer: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
        raise ValueError(f"{name}: expected a positive {'int' if integer else 'number'}, "
                         f"got {value!r}")


class LogisticRegression:
    """L2-regularised logistic regression (intercept not penalised), Newton's method.

    Args:
        l2: Penalty on the squared weights, > 0.
        max_iter: Newton steps at most.
        tol: Stop when the largest step is below this.
    """

    def __init__(self, l2: float = 10.0, max_iter: int = 50, tol: float = 1e-8) -> None:
        _check_positive("l2", l2)
        _check_positive("max_iter", max_iter, integer=True)
        self.l2, self.max_iter, self.tol = float(l2), max_iter, tol
        self.coef_: np.ndarray | None = None

    def fit(self, x: np.ndarray, y: np.ndarray) -> LogisticRegression:
        """Fit to features ``x`` ``(n, d)`` and 0/1 labels ``y`` ``(n,)``."""
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if x.ndim != 2 or y.shape != (len(x),) or len(x) == 0:
            raise ValueError(f"fit: expected x (n, d) and y (n,), got {x.shape} and {y.shape}")
        xb = np.hstack([x, np.ones((len(x), 1))])
        d = xb.shape[1]
        penalty = np.full(d, self.l2)
        penalty[-1] = 0.0
        w = np.zeros(d)
        for _ in range(self.max_iter):
            p = 1.0 / (1.0 + np.exp(-np.clip(xb @ w, -30, 30)))
            grad = xb.T @ (p - y) + penalty * w
            hess = (xb.T * (p * (1 - p))) @ xb + np.diag(penalty + 1e-9)
            step = np.linalg.solve(hess, grad)
            w -= step
            if np.abs(step).max() < self.tol:
                break
        self.coef_ = w
        return self

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Probability of label 1 for each row of ``x``."""
        if self.coef_ is None:
            raise ValueError("predict_proba: call fit first")
        z = np.asarray(x, dtype=np.float64) @ self.coef_[:-1] + self.coef_[-1]
        return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


@dataclass
class TraceRouter:
    """Scores queries by the predicted probability that the weak model answers wrongly.

    Args:
        weak: Name of the weak (cheap) model.
        strong: Name of the strong (expensive) model.
        n_features: Hashed n-gram features.
        l2: Logistic regression penalty.
        hashed_weight: Scale of the hashed features relative to the standardised
            statistics (0 ignores the words).
    """

    weak: str
    strong: str
    n_features: int = 512
    l2: float = 10.0
    hashed_weight: float = 1.0

    def __post_init__(self) -> None:
        _check_positive("n_features", self.n_features, integer=True)
        _check_positive("l2", self.l2)
        if isinstance(self.hashed_weight, bool) or not self.hashed_weight >= 0:
            raise ValueError(f"hashed_weight: expected a number >= 0, got {self.hashed_weight!r}")
        self._mean: np.ndarray | None = None
        self._std: np.ndarray | None = None
        self._model: LogisticRegression | None = None

    def _raw(self, data: TraceDataset) -> tuple[np.ndarray, np.ndarray]:
        return text_statistics(data.prompts), hashed_features(data.prompts, self.n_features)

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

    def _fit_raw(self, stats: np.ndarray, hashed: np.ndarray, y: np.ndarray) -> TraceRouter:
        self._mean = stats.mean(axis=0)
        std = stats.std(axis=0)
        self._std = np.where(std > 0, std, 1.0)
        self._model = LogisticRegression(self.l2).fit(self._design(stats, hashed), y)
        return self

    def scores(self, data: TraceDataset) -> np.ndarray:
        """Router scores of ``data``'s queries (higher: send to the strong model)."""
        if self._model is None:
            raise ValueError("scores: call fit first")
        return self._model.predict_proba(self._design(*self._raw(data)))

    def cross_validate(
        self, data: TraceDataset, l2_grid: Sequence[float] = (1.0, 10.0, 100.0),
        weight_grid: Sequence[float] = (0.0, 1.0, 4.0), folds: int = 5, seed: int = 0,
    ) -> dict[str, Any]:
        """Choose ``l2`` and ``hashed_weight`` by k-fold APGR on ``data``, then fit on all.

        Returns:
            ``{"l2", "hashed_weight", "cv_apgr": {"l2=...,w=...": mean APGR}}``.
        """
        stats, hashed = self._raw(data)
        y = self.labels(data)
        weak = data.correct[:, data.model_index(self.weak)]
        strong = data.correct[:, data.model_index(self.strong)]
        fold = np.random.default_rng(seed).permutation(data.n_queries) % folds
        table: dict[str, float] = {}
        best = (-math.inf, self.l2, self.hashed_weight)
        for l2 in l2_grid:
            for weight in weight_grid:
                probe = dataclasses.replace(self, l2=l2, hashed_weight=weight)
                values = []
                for k in range(folds):
                    tr, va = fold != k, fold == k
                    probe._fit_raw(stats[tr], hashed[tr], y[tr])
                    assert probe._model is not None
                    s = probe._model.predict_proba(probe._design(stats[va], hashed[va]))
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

    def _raw(self, data: TraceDataset) -> tuple[np.ndarray, np.ndarray]:
        answers = weak_answers(data, self.weak)
        stats = np.hstack([text_statistics(data.prompts),
                           answer_statistics(answers, data.prompts)])
        hashed = np.hstack([hashed_features(answers, self.n_features),
                            hashed_features(data.prompts, self.n_features)])
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


class RouterPolicy:
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
    privileged = False

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

    def predict(self, observation: np.ndarray, state: Any = None,
                episode_start: np.ndarray | None = None, deterministic: bool = True
                ) -> tuple[np.ndarray, Any]:
        """SB3-compatible ``predict`` for one observation or a batch."""
        obs = np.asarray(observation, dtype=np.float32)
        if obs.ndim == 1:
            return self.act(obs), state
        return np.stack([self.act(row) for row in obs]), state


# --------------------------------------------------------------------------- the report
def _by_cost(data: TraceDataset, costs: np.ndarray) -> tuple[str, str]:
    """(weak, strong): the cheaper and the dearer of a two-model dataset."""
    if data.n_models != 2:
        raise ValueError(f"{data.source}: expected two models, got {list(data.models)}")
    order = np.argsort(costs.mean(axis=0))
    return data.models[order[0]], data.models[order[1]]


def _fmt(entry: Mapping[str, Any], digits: int = 3) -> str:
    value, (low, high) = entry["value"], entry["ci"]
    if not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _curve_json(curve: Any) -> dict[str, list[float]]:
    return {"strong_share": curve.strong_share.tolist(), "accuracy": curve.accuracy.tolist(),
            "cost_per_query": curve.cost.tolist()}


def _cost_at(curve: Any, share: float) -> float:
    """Mean cost per query where the curve reaches ``share`` (linear between points)."""
    return float(np.interp(share, curve.strong_share, curve.cost))


def _has_answers(data: TraceDataset, model: str) -> bool:
    """Whether the data logs answer texts of ``model`` (what a cascade reads)."""
    j = data.model_index(model)
    return data.responses is not None and any(row[j] for row in data.responses)


def _experiment(data: TraceDataset, n_resamples: int, seed: int, cv: bool,
                keep_curves: bool) -> dict[str, Any]:
    """Split, fit on train, score on test: the numbers of one dataset.

    The cascade routers are added when the data has the weak model's answer texts.
    """
    table = default_price_table()
    costs = data.call_costs(table)
    weak, strong = _by_cost(data, costs)
    train, test = data.split(seed=0, test_fraction=0.5)
    iw, is_ = data.model_index(weak), data.model_index(strong)
    w, s = test.correct[:, iw], test.correct[:, is_]
    test_costs = test.call_costs(table)
    wc, sc = test_costs[:, iw], test_costs[:, is_]
    router = TraceRouter(weak, strong)
    if cv:
        chosen = router.cross_validate(train)
    else:
        router.fit(train)
        chosen = {"l2": router.l2, "hashed_weight": router.hashed_weight}
    learned = router.scores(test)
    out: dict[str, Any] = {
        "source": data.source, "n_resamples": n_resamples, "queries": data.n_queries,
        "train": train.n_queries, "test": test.n_queries, "weak": weak, "strong": strong,
        "token_counter": data.token_counter,
        "accuracy_all": dict(zip(data.models, data.accuracy.tolist(), strict=True)),
        "accuracy_test": dict(zip(data.models, test.accuracy.tolist(), strict=True)),
        "cost_per_query_test": dict(zip(data.models, test_costs.mean(axis=0).tolist(),
                                        strict=True)),
        "router": chosen,
        "pgr_defined": bool(s.mean() > w.mean()),
    }
    share, acc = oracle_point(w, s)
    out["oracle_point"] = {"strong_share": share, "accuracy": acc}
    if not out["pgr_defined"]:
        return out
    length = np.array([len(p) for p in test.prompts], dtype=np.float64)
    routers: dict[str, np.ndarray | None] = {
        "learned": learned, "length": length, "random": None, "oracle": oracle_scores(w, s)}
    curves = {
        "learned": routing_curve(learned, w, s, wc, sc),
        "length": routing_curve(length, w, s, wc, sc),
        "random": random_routing_curve(w, s, wc, sc),
        "oracle": routing_curve(routers["oracle"], w, s, wc, sc),
    }
    if _has_answers(data, weak):
        cascade = CascadeRouter(weak, strong)
        if cv:
            cascade_chosen = cascade.cross_validate(train)
        else:
            cascade.fit(train)
            cascade_chosen = {"l2": cascade.l2, "hashed_weight": cascade.hashed_weight}
        routers["cascade"] = cascade.scores(test)
        # the no-training cascade: escalate exactly the answers without a "#### n"
        routers["no_final"] = 1.0 - answer_statistics(
            weak_answers(test, weak), test.prompts)[:, ANSWER_STATISTICS.index("has_final")]
        for name in ("cascade", "no_final"):
            curves[name] = cascade_curve(routers[name], w, s, wc, sc)
        out["cascade"] = {
            "router": cascade_chosen, "n_features": cascade.n_features,
            "statistics": [*STATISTICS, *ANSWER_STATISTICS],
            "weak_cost_per_query": float(wc.mean()),
        }
    out["metrics"] = bootstrap_routing(routers, w, s, n_resamples=n_resamples, seed=seed,
                                       reference="random")
    if "cascade" in routers:
        # the same seed draws the same resamples: cascade minus learned, paired
        paired = bootstrap_routing({"learned": learned, "cascade": routers["cascade"]}, w, s,
                                   n_resamples=n_resamples, seed=seed, reference="learned")
        out["cascade"]["minus_learned"] = paired["cascade"]["minus_learned"]
    out["cost_at_cpt_80"] = {
        name: _cost_at(curve, out["metrics"][name]["cpt_80"]["value"])
        for name, curve in curves.items()}
    out["_scores"] = {k: v for k, v in routers.items() if v is not None}
    if keep_curves:
        out["curves"] = {name: _curve_json(c) for name, c in curves.items()}
        out["_curves"] = curves
    return out


def _split_robustness(data: TraceDataset, seeds: Sequence[int]) -> list[dict[str, float]]:
    """APGR and CPTs of the learned and cascade routers on the test halves of other splits.

    Fixed hyperparameters (each router's defaults), fitted on each split's train half.
    """
    costs = data.call_costs(default_price_table())
    weak, strong = _by_cost(data, costs)
    cascade = _has_answers(data, weak)
    rows = []
    for seed in seeds:
        train, test = data.split(seed=seed, test_fraction=0.5)
        w = test.correct[:, test.model_index(weak)]
        s = test.correct[:, test.model_index(strong)]
        curve = routing_curve(TraceRouter(weak, strong).fit(train).scores(test), w, s)
        row = {"split_seed": seed, "apgr": curve.apgr, "cpt_50": curve.cpt(0.5),
               "cpt_80": curve.cpt(0.8)}
        if cascade:
            curve = routing_curve(CascadeRouter(weak, strong).fit(train).scores(test), w, s)
            row.update(cascade_apgr=curve.apgr, cascade_cpt_50=curve.cpt(0.5),
                       cascade_cpt_80=curve.cpt(0.8))
        rows.append(row)
    return rows


def _env_table(data: TraceDataset) -> dict[str, dict[str, Any]]:
    """Baselines and the learned policy on the TraceRouting-v0 test split, one epoch."""
    from agents.baselines import BASELINES
    from agents.evaluation import compare

    train_env = gym.make("cost_envs/TraceRouting-v0", data=data, split="train")
    test_env = gym.make("cost_envs/TraceRouting-v0", data=data, split="test")
    policy = RouterPolicy(test_env).fit(train_env)
    # threshold: the training split's median score, so about half the queries go strong
    policy.threshold = float(np.median(policy.scores(train_env.unwrapped.initial_observations())))
    episodes = test_env.unwrapped.dataset.n_queries  # one block: every test query once
    methods: dict[str, Any] = {name: BASELINES[name] for name in
                               ("oracle", "capability", "rule", "random", "all")}

    def learned(env: gym.Env) -> RouterPolicy:
        clone = RouterPolicy(env, threshold=policy.threshold)
        clone.model = policy.model
        return clone

    methods["learned (median threshold)"] = learned
    return compare(methods, "cost_envs/TraceRouting-v0", episodes=episodes, seed=0,
                   env_kwargs={"data": data, "split": "test"}, n_resamples=500)


#: What TraceRouting-v0(cascade=True) shows of the first answer, besides the prompt.
ENV_CASCADE_COLUMNS = ("query_features", "prompt_length", "answer_features", "answer_length",
                       "answer_marker")


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


def _env_cascade_check(data: TraceDataset) -> dict[str, Any]:
    """A logistic regression on the env's cascade observation, fitted on train, on test.

    Tells whether TraceRouting-v0(cascade=True) reveals enough of the first answer for
    the cascade router to act in it (point values on the test split).
    """
    envs = {split: gym.make("cost_envs/TraceRouting-v0", data=data, split=split, cascade=True)
            for split in ("train", "test")}
    try:
        layout = envs["train"].unwrapped.observation_layout
        columns = np.r_[tuple(layout[k] for k in ENV_CASCADE_COLUMNS)]
        x = {k: cascade_observations(env)[:, columns] for k, env in envs.items()}
        weak = envs["train"].unwrapped.cheapest
        strong = envs["train"].unwrapped.strongest
        model = LogisticRegression(10.0).fit(
            x["train"], ~envs["train"].unwrapped.dataset.correct[:, weak])
        correct = envs["test"].unwrapped.dataset.correct
        curve = routing_curve(model.predict_proba(x["test"]), correct[:, weak],
                              correct[:, strong])
    finally:
        for env in envs.values():
            env.close()
    return {"columns": list(ENV_CASCADE_COLUMNS), "inputs": len(columns),
            "apgr": curve.apgr, "cpt_50": curve.cpt(0.5), "cpt_80": curve.cpt(0.8)}


def _figure(path: Path, result: Mapping[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = result["_curves"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"learned": ("C0", "-", "learned router"),
              "length": ("C1", "-.", "longest prompts first"),
              "cascade": ("C4", "-", "cascade router (weak answer read first)"),
              "no_final": ("C5", "-.", "cascade: escalate answers without '#### n'"),
              "random": ("C7", "--", "random routing"),
              "oracle": ("C2", ":", "oracle scores, threshold sweep")}
    for name, curve in curves.items():
        color, line, label = styles[name]
        axes[0].plot(curve.strong_share, curve.accuracy, line, color=color, label=label)
        axes[1].plot(curve.cost * 1000, curve.accuracy, line, color=color, label=label)
    share, acc = result["oracle_point"]["strong_share"], result["oracle_point"]["accuracy"]
    axes[0].plot([share], [acc], "o", color="C2", label="per-query oracle")
    target = curves["learned"].weak_accuracy + 0.8 * (
        curves["learned"].strong_accuracy - curves["learned"].weak_accuracy)
    axes[0].axhline(target, color="C3", lw=0.8, alpha=0.6, label="PGR 80%")
    cpt = result["metrics"]["learned"]["cpt_80"]
    axes[0].axvspan(cpt["ci"][0], cpt["ci"][1], color="C0", alpha=0.12,
                    label="learned CPT(80%) 95% CI")
    if "cascade" in result["metrics"]:
        cpt = result["metrics"]["cascade"]["cpt_80"]
        axes[0].axvspan(cpt["ci"][0], cpt["ci"][1], color="C4", alpha=0.12,
                        label="cascade CPT(80%) 95% CI")
    axes[0].set_xlabel(f"share of queries sent to {result['strong']}")
    axes[1].set_xlabel("mean cost per 1,000 queries (USD; cascades include the weak call)")
    for ax in axes:
        ax.set_ylabel("accuracy (GSM8K test split)")
        ax.grid(alpha=0.3)
    # the cost panel's lower right is empty: the legend goes there
    axes[1].legend(*axes[0].get_legend_handles_labels(), fontsize=7, loc="lower right")
    fig.suptitle(f"Routing {result['weak']} vs {result['strong']} on GSM8K "
                 f"({result['test']} test queries)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _verdict(diff: Mapping[str, Any], other: str) -> str:
    """How a CPT difference (router minus ``other``, paired) reads, with its interval."""
    low, high = diff["ci"]
    if high < 0:
        word = f"beats {other}"
    elif low > 0:
        word = f"needs more strong calls than {other}"
    else:
        word = f"does not clearly beat {other}"
    return f"{word} (paired difference {_fmt(diff)})"


def _cascade_lines(gsm: Mapping[str, Any]) -> list[str]:
    """The Markdown paragraphs on the cascade router."""
    m, c, cost = gsm["metrics"], gsm["cascade"], gsm["cost_at_cpt_80"]
    cpt = m["cascade"]["cpt_80"]
    learned = m["learned"]["cpt_80"]
    router = c["router"]
    diff_r, diff_l = m["cascade"]["minus_random"], c["minus_learned"]
    return [
        "",
        f"Cascade (TraceRouting-v0's `cascade=True`): `{gsm['weak']}` answers every query "
        "first, and the router reads that answer before escalating to "
        f"`{gsm['strong']}`. Its logistic regression (l2={router['l2']:g}, hashed weight="
        f"{router['hashed_weight']:g}"
        f"{', chosen by 5-fold CV APGR on train' if 'cv_apgr' in router else ''}) reads "
        f"the prompt's {len(STATISTICS)} statistics, {len(ANSWER_STATISTICS)} statistics of "
        f"the weak answer ({', '.join(f'`{n}`' for n in ANSWER_STATISTICS)}) and "
        f"{c['n_features']} + {c['n_features']} hashed n-grams of the answer and of the "
        "prompt; never the strong model's answer or a correctness label. The no-training "
        "cascade escalates exactly the answers without a `#### n` final answer (ties "
        "between the rest are split at random). Both cascade rows' costs include the weak "
        f"call paid on every query (${1000 * c['weak_cost_per_query']:.4f} per 1k queries "
        "on the test split). Cascade minus random, paired: APGR "
        f"{_fmt(diff_r['apgr'])}, CPT(50%) {_fmt(diff_r['cpt_50'])}, CPT(80%) "
        f"{_fmt(diff_r['cpt_80'])}; cascade minus learned, paired: APGR "
        f"{_fmt(diff_l['apgr'])}, CPT(50%) {_fmt(diff_l['cpt_50'])}, CPT(80%) "
        f"{_fmt(diff_l['cpt_80'])}.",
        "",
        f"**Cascade CPT(80%)**: the cascade router escalates {cpt['value']:.1%} of queries "
        f"(95% CI {cpt['ci'][0]:.1%}-{cpt['ci'][1]:.1%}) to reach 80% of the gap, where the "
        f"non-cascade learned router needs {learned['value']:.1%} "
        f"({learned['ci'][0]:.1%}-{learned['ci'][1]:.1%}) and random routing 80.0%: it "
        f"{_verdict(diff_l['cpt_80'], 'the learned router')} and "
        f"{_verdict(diff_r['cpt_80'], 'random routing')}. At that point it costs "
        f"${1000 * cost['cascade']:.2f} per 1k queries, the always-paid weak calls "
        f"included, against ${1000 * cost['learned']:.2f} for the learned router, "
        f"${1000 * cost['random']:.2f} for random routing and "
        f"${1000 * cost['oracle']:.2f} for the per-query oracle at theirs.",
    ]


def _markdown(gsm: Mapping[str, Any], mmlu: Sequence[Mapping[str, Any]],
              robustness: Sequence[Mapping[str, float]], env_rows: Mapping[str, Any] | None,
              scale: str, n_resamples: int, seconds: float,
              env_cascade: Mapping[str, Any] | None = None) -> str:
    table = default_price_table()
    m = gsm["metrics"]
    lines = [
        "# TraceRouting: learned routing on real RouteLLM outcomes",
        "",
        f"Generated by `agents.trace_router.report(scale={scale!r})` in {seconds:.1f} s. Data: "
        "RouteLLM's evaluation CSVs (lm-sys/RouteLLM, Apache-2.0), read from outside the "
        "repository. Weak model "
        f"`{gsm['weak']}`, strong model `{gsm['strong']}`.",
        "",
        f"GSM8K: {gsm['queries']} questions split by query (seed 0) into {gsm['train']} "
        f"train and {gsm['test']} test. The router (logistic regression on text statistics "
        "and hashed n-grams, "
        f"l2={gsm['router']['l2']:g}, hashed weight={gsm['router']['hashed_weight']:g}"
        f"{', chosen by 5-fold CV APGR on train' if 'cv_apgr' in gsm['router'] else ''}) "
        "predicts that the weak model fails; it never sees test outcomes. Intervals are 95% "
        f"percentile bootstraps over the test queries ({n_resamples} resamples), all "
        "routers on the same resamples.",
        "",
        "| Router | APGR | CPT(50%) | CPT(80%) | cost / 1k queries at CPT(80%) |",
        "|---|---|---|---|---|",
    ]
    labels = (("learned", "learned"), ("length", "longest prompts first (no training)"),
              ("cascade", "cascade: weak model first, learned on its answer"),
              ("no_final", "cascade: escalate answers without `#### n` (no training)"),
              ("random", "random (expected)"), ("oracle", "per-query oracle"))
    for name, label in labels:
        if name not in m:
            continue
        lines.append(f"| {label} | {_fmt(m[name]['apgr'])} | {_fmt(m[name]['cpt_50'])} | "
                     f"{_fmt(m[name]['cpt_80'])} | "
                     f"${1000 * gsm['cost_at_cpt_80'][name]:.4f} |")
    diff = m["learned"]["minus_random"]
    lines += [
        "",
        "Random routing's values are exact (its PGR is its strong-call share); its "
        "intervals are those of one random router redrawn on every resample. Learned minus "
        f"random, paired: APGR {_fmt(diff['apgr'])}, CPT(50%) {_fmt(diff['cpt_50'])}, "
        f"CPT(80%) {_fmt(diff['cpt_80'])}.",
        "",
        f"**CPT(80%)**: the learned router needs {m['learned']['cpt_80']['value']:.1%} strong "
        f"calls (95% CI {m['learned']['cpt_80']['ci'][0]:.1%}-"
        f"{m['learned']['cpt_80']['ci'][1]:.1%}) where random routing needs 80.0%; the "
        f"oracle needs {m['oracle']['cpt_80']['value']:.1%}.",
        *(_cascade_lines(gsm) if "cascade" in gsm else []),
        "",
        "| Model | accuracy (all) | accuracy (test) | mean cost per query (test) |",
        "|---|---|---|---|",
    ]
    for model in (gsm["weak"], gsm["strong"]):
        lines.append(f"| `{model}` | {gsm['accuracy_all'][model]:.3f} | "
                     f"{gsm['accuracy_test'][model]:.3f} | "
                     f"${gsm['cost_per_query_test'][model]:.6f} |")
    op = gsm["oracle_point"]
    lines += [
        "",
        f"Per-query oracle: {op['strong_share']:.1%} strong calls, accuracy "
        f"{op['accuracy']:.3f}.",
        "",
        f"Tokens: {gsm['token_counter']} (input = the prompt, output = the logged "
        "response; both models counted with the same counter). Prices: " + "; ".join(
            f"`{name}` ${table[name].input:g}/${table[name].output:g} per M tokens "
            f"({table[name].source}, {table[name].date})" for name in (gsm["weak"],
                                                                       gsm["strong"])) + ".",
    ]
    if robustness:
        cascade = "cascade_cpt_80" in robustness[0]
        lines += ["", "Other splits (test halves of split seeds), point values of the "
                  "learned" + (" and cascade routers" if cascade else " router") + " (each "
                  "with its default hyperparameters, fitted on that split's train half):", "",
                  "| split seed | learned APGR | learned CPT(50%) | learned CPT(80%) |"
                  + (" cascade APGR | cascade CPT(50%) | cascade CPT(80%) |" if cascade else ""),
                  "|---|---|---|---|" + ("---|---|---|" if cascade else "")]
        for row in robustness:
            line = (f"| {row['split_seed']} | {row['apgr']:.3f} | {row['cpt_50']:.3f} | "
                    f"{row['cpt_80']:.3f} |")
            if cascade:
                line += (f" {row['cascade_apgr']:.3f} | {row['cascade_cpt_50']:.3f} | "
                         f"{row['cascade_cpt_80']:.3f} |")
            lines.append(line)
    if mmlu:
        lines += ["", "## MMLU subjects (no responses: 1 output token per answer)", "",
                  "| Subject | test queries | acc weak / strong (test) | learned APGR | "
                  "learned CPT(80%) | oracle CPT(80%) | resamples without a gap |",
                  "|---|---|---|---|---|---|---|"]
        for r in mmlu:
            acc = f"{r['accuracy_test'][r['weak']]:.3f} / {r['accuracy_test'][r['strong']]:.3f}"
            name = Path(r["source"]).stem.removeprefix("mmlu_")
            if not r["pgr_defined"]:
                lines.append(f"| {name} | {r['test']} | {acc} | n/a | n/a | n/a | - |")
                continue
            mm = r["metrics"]
            lines.append(f"| {name} | {r['test']} | {acc} | {_fmt(mm['learned']['apgr'])} | "
                         f"{_fmt(mm['learned']['cpt_80'])} | {_fmt(mm['oracle']['cpt_80'])} | "
                         f"{mm['learned']['undefined_resamples']} / {r['n_resamples']} |")
        lines += ["", "n/a: on that subject's test split the strong model is not more "
                  "accurate than the weak one (in RouteLLM's data GPT-4 scores 3% on high "
                  "school mathematics), so PGR is undefined. The subjects have 51-135 test "
                  "queries: their intervals are wide, and PGR explodes on resamples where "
                  "the gap between the models is small (resamples with no gap are left "
                  "out of the intervals)."]
    if env_rows:
        lines += ["", "## TraceRouting-v0 on the GSM8K test split", "",
                  "Every test query once (seed 0), baselines of `agents.baselines` and the "
                  "learned router acting on the env's own observations (64 hashed features "
                  "and the prompt length; threshold: the training split's median score).", "",
                  "| Method | success | mean cost per query | CPS |", "|---|---|---|---|"]
        for name, row in env_rows.items():
            lines.append(f"| {name} | {row['success_rate']:.3f} [{row['success_rate_ci'][0]:.3f}, "
                         f"{row['success_rate_ci'][1]:.3f}] | ${row['avg_cost']:.6f} | "
                         f"${row['cps']:.6f} |")
    if env_cascade and "cascade" in m:
        env_cpt = env_cascade["cpt_80"]
        gap = (env_cpt - m["cascade"]["cpt_80"]["value"]) / max(
            m["learned"]["cpt_80"]["value"] - m["cascade"]["cpt_80"]["value"], 1e-9)
        closer = ("closer to the prompt-only router than to the cascade router, so acting "
                  "in the env would need it to expose richer answer features" if gap > 0.5
                  else "close to the cascade router's")
        lines += [
            "",
            "The cascade router is not run as a policy in `TraceRouting-v0(cascade=True)`: "
            "the env's second-step observation reveals only 16 hashed n-grams of the first "
            "answer, its length and whether it has a final-answer marker, not the answer "
            "statistics the router reads (a non-integer final number, arithmetic slips in "
            "its annotations, hedges, ...). A logistic regression on what the env does "
            f"reveal ({', '.join(f'`{k}`' for k in env_cascade['columns'])}; "
            f"{env_cascade['inputs']} inputs), fitted on the train split's second-step "
            f"observations, reaches APGR {env_cascade['apgr']:.3f} and CPT(80%) "
            f"{env_cpt:.3f} on the test split (point values; the cascade router: "
            f"{m['cascade']['apgr']['value']:.3f} and {m['cascade']['cpt_80']['value']:.3f}, "
            f"the prompt-only learned router: {m['learned']['apgr']['value']:.3f} and "
            f"{m['learned']['cpt_80']['value']:.3f}): {closer}.",
        ]
    lines += [
        "",
        "## Caveats",
        "",
        "- One dataset, one pair of models, ~660 test queries: the intervals, not the points, "
        "are the result.",
        "- Token counts are approximate when tiktoken is unavailable, and both models are "
        "counted with one tokenizer; costs scale with them, strong-call shares do not.",
        "- GSM8K difficulty is only weakly visible in the question text: sending the "
        "longest prompts to the strong model, with no training at all, does about as well "
        "as the learned router, whose words add little to its length statistics.",
        "- The cascade's answer statistics are partly GSM8K-specific (the `#### n` format, "
        "whole-number answers, `<<a*b=c>>` annotations) and would need redesigning for "
        "another task. An answer's correctness is a property of its text, so the weak "
        "answer is bound to say more about it than the prompt does: that is what a "
        "cascade buys with its always-paid weak call.",
        "- The cascade's cost counts tokens only: an escalated query also waits for two "
        "calls (latency is not modelled), and the strong model is billed for the prompt "
        "alone, as in the non-cascade routers.",
        "",
        "![frontier](trace_routing.png)",
        "",
    ]
    return "\n".join(lines)


def _json_ready(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _json_ready(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.generic):
        return _json_ready(value.item())
    return value


def report(out_dir: Path, scale: str, data_dir: Path) -> str:
    """Run the GSM8K routing experiment and write ``trace_routing.{md,json,png}``.

    Args:
        out_dir: Where to write the three files (created if needed).
        scale: ``"smoke"`` (GSM8K only, 200 resamples, fixed hyperparameters: a few
            seconds) or ``"default"`` (2,000 resamples, hyperparameters by CV on train,
            five other splits, the MMLU subjects, the env baselines and the check of the
            env's cascade observation: well under a minute). Both include the cascade
            routers when the data logs the weak model's answers (GSM8K does).
        data_dir: The RouteLLM folder (``gsm8k_responses.csv`` and ``mmlu/``).

    Returns:
        The Markdown text.

    Raises:
        ValueError: For an unknown scale.
        FileNotFoundError: When the data is missing.
    """
    if scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    out_dir, data_dir = Path(out_dir), Path(data_dir)
    gsm_path = data_dir / GSM8K
    if not gsm_path.is_file():
        raise FileNotFoundError(f"{gsm_path} not found: the RouteLLM data lives outside the "
                                "repository (../shared/data/routellm)")
    start = time.perf_counter()
    smoke = scale == "smoke"
    n_resamples = 200 if smoke else 2000
    data = load_traces(gsm_path)
    gsm = _experiment(data, n_resamples, seed=0, cv=not smoke, keep_curves=True)
    robustness = [] if smoke else _split_robustness(data, seeds=range(1, 6))
    mmlu = [] if smoke else [
        _experiment(load_traces(path), 1000, seed=0, cv=False, keep_curves=False)
        for path in sorted((data_dir / MMLU_DIR).glob("mmlu_*.csv"))]
    env_rows = None if smoke else _env_table(data)
    env_cascade = None if smoke else _env_cascade_check(data)
    seconds = time.perf_counter() - start
    text = _markdown(gsm, mmlu, robustness, env_rows, scale, n_resamples, seconds, env_cascade)
    payload = _json_ready({"scale": scale, "n_resamples": n_resamples, "seconds": seconds,
                           "gsm8k": gsm, "gsm8k_other_splits": robustness, "mmlu": mmlu,
                           "trace_routing_env": env_rows,
                           "trace_routing_env_cascade_check": env_cascade})
    # render the figure first, so a plotting error leaves the old files untouched
    write_file_atomic(out_dir / "trace_routing.png", lambda tmp: _figure(tmp, gsm))
    write_text_atomic(out_dir / "trace_routing.json", json.dumps(payload, indent=1) + "\n")
    write_text_atomic(out_dir / "trace_routing.md", text)
    return text
