"""Screening routers against the training-free rule on unseen groups (issue #39 point 3).

The held-out tables (:mod:`experiments.traces.heldout`) show no learned router beating
the best training-free rule (:class:`~agents.routers.rule.RuleRouter`: shortest or
longest prompts to the strong model) at the same cost on unseen groups. This module
screens the directions that might, on the tables' own comparison and with nothing chosen
on held-out queries, and prints each one's figure per split seed:

* **alone**: a router of :data:`agents.routers.ROUTERS` as the tables run it (the
  anchors' routers, ``priced``, ``logistic``; with ``--embeddings`` their MiniLM
  variants: ``text_features="minilm"``, without the n-grams);
* **plus** (directions (a), (b), (c), (e)): the rule's standardised length score plus
  ``w`` times a learned correction, ``w`` of :data:`WEIGHTS` chosen by folds of whole
  training groups (:data:`INNER_FOLDS`, the mean validation AIQ, the criterion of
  :mod:`agents.routers.cv`; ties to the smaller ``w``, so ``w = 0``, the rule itself,
  wins where learning does not transfer). The correction is one learner's, or the mean
  of several (an ensemble), each standardised on its training scores: the predicted gain
  ``p_strong - p_weak`` of a priced router, the cluster router's score, the logit of the
  others' scores;
* **gap**: as **plus**, ``w`` chosen instead by the tables' own comparison on the inner
  folds: validation accuracy at the point calibrated for a 50% share minus the rule's
  validation hull at its cost (the hull of a wigglier curve is higher, so AIQ can
  reward a noisy correction);
* **share** (direction (d)): the rule (or a ``plus`` router) at an operating point chosen
  by the same inner folds: the strong-call share of :data:`SHARES` whose calibrated point
  lies highest above the rule's held-out hull at its cost, on the validation folds;
* **conf** and **crc** (conformal thresholds, :mod:`experiments.traces.conformal`): split
  conformal calibration of the operating point. The training part is split once more
  (:meth:`~cost_envs.traces.TraceDataset.split_indices`, seed 0,
  :data:`CALIBRATION_FRACTION` of it, whole groups, or prompts for a split by query) into
  proper-training and calibration units; the router (``conf:NAME``: ``NAME`` alone,
  ``NAME`` ``rule`` or a learner; ``conf:rule+NAME[+NAME...]``: the ``plus`` router, its
  ``w`` chosen on inner folds of the proper-training part) is fitted on the
  proper-training part only, and its threshold is the one that keeps a new unit's
  strong-call share within :data:`CONFORMAL_TARGET` with probability at least
  ``1 -`` :data:`CONFORMAL_ALPHA` (``conf``: the ``ceil((n + 1)(1 - alpha))``-th smallest
  of the ``n`` calibration units' shares within the target; ``inf``, no strong call, when
  there are too few units) or in expectation (``crc``: conformal risk control). The model
  is not refitted on the calibration units, which would void the guarantee; its
  realised share on each held-out unit is reported beside the figure (``guarantee``).

Each candidate is fitted on the training part of a split, calibrated on its training
scores for its share (50% unless chosen) as the tables calibrate, and scored on the
held-out part by :func:`~agents.routers.evaluation.score_table` with ``rule=``: accuracy
minus the rule's held-out curve (its non-decreasing convex hull) at the candidate's cost,
paired on the same resamples of whole groups. The splits are :data:`SEEDS` seeded splits
(:meth:`~cost_envs.traces.TraceDataset.split_indices`, :data:`TEST_FRACTION` of the
queries held out, whole groups where the data has them: 32 of 53 subjects in the issue's
protocol) and the tables' own protocol (``"tables"``: pooled folds of
:data:`~experiments.traces.heldout.PROTOCOLS`), whose ``alone`` figures are the tables'
figures. Run from the repository's root::

    python -m experiments.traces.rule_screen --out /tmp/rule_screen.json [--embeddings]

``docs/routing.md`` ("Beating the rule on unseen groups") reports its figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.files import check_creatable, write_files_atomic
from agents.routers import calibrate_share, make_router
from agents.routers.base import take
from agents.routers.bootstrap import threshold_aiq
from agents.routers.evaluation import call_costs, score_table
from agents.routers.rule import RuleRouter
from agents.routers.statistics import text_statistics
from cost_envs.metrics.frontier import frontier
from cost_envs.traces import TraceDataset, load_routerarena, load_traces
from experiments.traces.conformal import conformal_threshold, risk_control_threshold, unit_shares
from experiments.traces.heldout import PROTOCOLS, by_cost, splits_of

#: RouteLLM's logs, read in place beside the repository (``../shared/data/routellm``)
DEFAULT_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "routellm"

#: The correction's weights ``plus`` chooses among (the first, the rule, wins ties).
WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
#: The strong-call shares ``share`` chooses among (the tables' 50% first).
SHARES = (0.5, 0.3, 0.4, 0.6, 0.7, 0.2, 0.8)
#: Inner folds of the training part (fewer where it has fewer groups).
INNER_FOLDS = 5
#: The seeded splits, and the share of queries each holds out (the issue's 32 of 53).
SEEDS = (0, 1, 2, 3, 4)
TEST_FRACTION = 0.6
#: ``conf``/``crc``: the share of the training part held out as calibration units, the
#: strong-call share a held-out unit should stay within, and the probability it may not.
CALIBRATION_FRACTION = 0.5
CONFORMAL_TARGET = 0.5
CONFORMAL_ALPHA = 0.1
#: The learners by name: a router kind and its settings (``"-mlm"``: MiniLM features).
LEARNERS: dict[str, tuple[str, dict[str, Any]]] = {
    "logistic": ("logistic", {}), "priced": ("priced", {}), "cluster": ("cluster", {}),
    "mlp": ("mlp", {}), "svm": ("svm", {}), "mf": ("mf", {}), "elo": ("elo", {}),
    "priced-stats": ("priced", {"hashed_weight": 0.0}),
    "logistic-stats": ("logistic", {"hashed_weight": 0.0}),
    "mf-stats": ("mf", {"hashed_weight": 0.0}),
    **{f"{k}-mlm": (k, {"text_features": "minilm", "with_ngrams": False})
       for k in ("logistic", "priced", "cluster", "knn", "elo")},
}
#: The candidates run by default (``mode:learner+learner``).
CANDIDATES = (
    "alone:rule", "alone:priced", "alone:logistic", "alone:cluster", "alone:mlp",
    "alone:svm", "alone:mf", "alone:elo", "plus:logistic", "plus:priced", "plus:cluster",
    "plus:mlp", "plus:svm", "plus:mf", "plus:elo", "plus:priced-stats",
    "plus:logistic-stats", "plus:mf-stats", "plus:logistic+priced+mf+cluster",
    "share:rule", "share:priced", "share:logistic+priced+mf+cluster", "gap:logistic",
    "gap:priced", "gap:mf", "gap:cluster", "gap:logistic+priced+mf+cluster",
)
#: The MiniLM candidates ``--embeddings`` adds (the ``embeddings`` extra).
EMBEDDING_CANDIDATES = (
    "alone:logistic-mlm", "alone:priced-mlm", "alone:cluster-mlm", "plus:logistic-mlm",
    "plus:priced-mlm", "plus:cluster-mlm", "plus:knn-mlm", "plus:elo-mlm",
    "plus:logistic-mlm+priced-mlm+cluster-mlm",
    "plus:logistic+priced+mf+logistic-mlm+priced-mlm", "gap:priced-mlm", "gap:logistic-mlm",
    "gap:logistic+priced+mf+logistic-mlm+priced-mlm",
)
#: The conformal candidates, also run by default (``conf``: within the target with
#: probability ``1 - alpha``; ``crc``: in mean).
CONFORMAL_CANDIDATES = (
    "conf:rule", "conf:priced", "conf:rule+priced", "conf:rule+logistic+priced+mf+cluster",
    "crc:rule", "crc:priced", "crc:rule+priced",
)

Split = tuple[np.ndarray, np.ndarray]
Made = tuple[np.ndarray, np.ndarray, dict[str, Any]]


def logit(p: np.ndarray) -> np.ndarray:
    """``log(p / (1 - p))``, ``p`` clipped to ``[1e-6, 1 - 1e-6]``."""
    q = np.clip(np.asarray(p, dtype=np.float64), 1e-6, 1.0 - 1e-6)
    return np.log(q / (1.0 - q))


def standardised(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """``train`` and ``others`` less ``train``'s mean, over its spread (1 if none)."""
    mean, std = float(train.mean()), float(train.std())
    std = std if std > 0 else 1.0
    return [(x - mean) / std for x in (train, *others)]


def finite_mean(values: Sequence[float]) -> float:
    """The mean of the finite ``values`` (``nan`` where there are none)."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def best_of(values: Sequence[float], table: Mapping[float, float]) -> float:
    """The value of ``values`` with the best finite mean in ``table``; the first on a tie."""
    return max(values, key=lambda v: (np.nan_to_num(table[v], nan=-np.inf),
                                      -list(values).index(v)))


def hull_at(cost: np.ndarray, accuracy: np.ndarray, at: float) -> float:
    """The points' non-decreasing upper convex hull (accuracy over cost), read at ``at``.

    The tables' reading of the rule's curve (``np.interp`` on
    :func:`~cost_envs.metrics.frontier.frontier`, as ``compare_with_rule`` does).
    """
    return float(np.interp(at, *frontier(cost, accuracy)))


def parse_candidate(candidate: str) -> tuple[str, list[str]]:
    """``mode:learner[+learner...]`` as its mode and learners (``rule`` dropped but alone).

    ``conf``/``crc`` keep ``rule``: ``[NAME]`` is a router alone (``rule`` included),
    ``["rule", NAME, ...]`` the ``plus`` router.

    Raises:
        ValueError: One line naming the candidate and what was expected.
    """
    mode, _, rest = candidate.partition(":")
    names = [n for n in rest.split("+") if n and n != "rule"]
    for name in names:
        if name not in LEARNERS:
            raise ValueError(f"candidate {candidate!r}: unknown learner {name!r}; "
                             f"expected names of {sorted(LEARNERS)}")
    if mode == "alone" and len(rest.split("+")) == 1:
        return mode, [rest]
    if mode in ("conf", "crc") and (rest == "rule" or names == [rest]
                                    or (rest.startswith("rule+") and names)):
        return mode, (["rule", *names] if rest.startswith("rule") else names)
    if (mode in ("plus", "gap") and names) or mode == "share":
        return mode, names
    raise ValueError(f"candidate: expected alone:NAME, plus:NAME[+NAME...], "
                     f"gap:NAME[+NAME...], share:rule|NAME[+NAME...] or conf|crc:NAME|"
                     f"rule+NAME[+NAME...], got {candidate!r}")


class Screen:
    """One dataset: its two models, the rule's inputs and the learners' (built lazily)."""

    def __init__(self, data: TraceDataset, split_by: str) -> None:
        self.data, self.split_by = data, split_by
        self.costs = call_costs(data)
        self.weak, self.strong = by_cost(data, self.costs)
        self.iw, self.is_ = data.model_index(self.weak), data.model_index(self.strong)
        self.length = text_statistics(data.prompts)[:, 0]
        self._rule = self._learner("rule", {})
        self._learners: dict[str, tuple[Any, ...]] = {}

    def _learner(self, kind: str, settings: Mapping[str, Any]) -> tuple[Any, ...]:
        probe = make_router(kind, self.weak, self.strong, **settings)
        return (kind, dict(settings), probe.inputs(self.data), probe.targets(self.data),
                probe.training_costs(self.data), getattr(probe, "min_threshold", -np.inf))

    def learner(self, name: str) -> tuple[Any, ...]:
        """A learner of :data:`LEARNERS`: its kind, settings, inputs, targets, costs, floor."""
        if name not in self._learners:
            self._learners[name] = self._learner(*LEARNERS[name])
        return self._learners[name]

    def fitted(self, spec: tuple[Any, ...], train: np.ndarray) -> Any:
        """The learner ``spec`` fitted on the queries ``train``."""
        kind, settings, inputs, targets, costs, _ = spec
        return make_router(kind, self.weak, self.strong, **settings).fit_inputs(
            take(inputs, train), targets[train], take(costs, train))

    def rule_base(self, train: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The rule fitted on ``train``: its standardised length score of ``rows``.

        Monotone in :class:`RuleRouter`'s score (its logistic), so the same curve.
        """
        rule = self.fitted(self._rule, train)
        assert isinstance(rule, RuleRouter)
        _, z = standardised(self.length[train], self.length[rows])
        return -z if rule.member == "shortest-first" else z

    def correction(self, names: Sequence[str], train: np.ndarray, rows: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The mean standardised correction of learners ``names`` on ``train`` and ``rows``."""
        parts_train, parts_rows = [], []
        for name in names:
            spec = self.learner(name)
            router = self.fitted(spec, train)
            own = []
            for idx in (train, rows):
                inputs = take(spec[2], idx)
                if spec[0] == "priced":  # the predicted gain; the rule prices the call
                    win = router.predict_inputs(inputs)
                    own.append(win[:, 1] - win[:, 0])
                elif spec[0] == "cluster":  # already a gain, in [-1, 1]
                    own.append(router.scores_inputs(inputs))
                else:
                    own.append(logit(router.scores_inputs(inputs)))
            a, b = standardised(own[0], own[1])
            parts_train.append(a)
            parts_rows.append(b)
        return np.mean(parts_train, axis=0), np.mean(parts_rows, axis=0)

    def aiq(self, rows: np.ndarray, scores: np.ndarray) -> float:
        """AIQ of a score's threshold curve on ``rows`` (the criterion of the inner folds)."""
        d, c = self.data, self.costs
        ends = sorted((float(c[rows, self.iw].mean()), float(c[rows, self.is_].mean())))
        return threshold_aiq(scores, d.scores[rows, self.iw], d.scores[rows, self.is_],
                             c[rows, self.iw], c[rows, self.is_], ends)

    def inner(self, train: np.ndarray) -> list[Split]:
        """Folds of whole groups (queries for a split by query) of ``train``; [] if < 2."""
        part = self.data.subset(train)
        folds = min(INNER_FOLDS, int(part.clusters(self.split_by).max()) + 1)
        if folds < 2:
            return []
        fold = part.fold_ids(folds, 0, self.split_by)
        return [(train[fold != k], train[fold == k]) for k in range(folds)]

    def plus(self, names: Sequence[str], train: np.ndarray, test: np.ndarray,
             criterion: str = "aiq") -> Made:
        """The rule plus ``w`` x the correction, ``w`` chosen on the inner folds.

        ``criterion``: ``"aiq"`` (the mean validation AIQ, as :mod:`agents.routers.cv`)
        or ``"gap"`` (the mean validation accuracy, at the point calibrated for a 50%
        share on the fold's training part, minus the rule's validation hull at its cost:
        the tables' comparison, on the inner folds).
        """
        table: dict[float, list[float]] = {w: [] for w in WEIGHTS}
        for fit, val in self.inner(train):
            base = self.rule_base(fit, val)
            own, corr = self.correction(names, fit, val)
            curve = self.curve(val, base)
            for w in WEIGHTS:
                table[w].append(
                    self.aiq(val, base + w * corr) if criterion == "aiq" else
                    self.gap(val, self.rule_base(fit, fit) + w * own, base + w * corr, 0.5,
                             curve))
        means = {w: finite_mean(v) for w, v in table.items()}
        w = best_of(WEIGHTS, means)
        on_train, on_test = self.correction(names, train, test)
        return (self.rule_base(train, train) + w * on_train,
                self.rule_base(train, test) + w * on_test, {"w": w})

    def gap(self, rows: np.ndarray, on_fit: np.ndarray, on_rows: np.ndarray, share: float,
            curve: tuple[np.ndarray, np.ndarray]) -> float:
        """Accuracy on ``rows`` minus the rule's hull at the same cost.

        The threshold is set for ``share`` on ``on_fit``; ``curve`` is the rule's curve on
        ``rows`` (:meth:`curve`), its hull read at the cost the threshold reaches.
        """
        d, c = self.data, self.costs
        call = on_rows >= calibrate_share(on_fit, share).threshold
        cost = float(np.where(call, c[rows, self.is_], c[rows, self.iw]).mean())
        acc = float(np.where(call, d.scores[rows, self.is_], d.scores[rows, self.iw]).mean())
        return acc - hull_at(*curve, cost)

    def share(self, names: Sequence[str], train: np.ndarray, test: np.ndarray) -> Made:
        """The rule (``names`` empty) or ``plus`` at a share chosen on the inner folds."""
        table: dict[float, list[float]] = {s: [] for s in SHARES}
        for fit, val in self.inner(train):
            if names:
                a, b, _ = self.plus(names, fit, val)
            else:
                a, b = self.rule_base(fit, fit), self.rule_base(fit, val)
            curve = self.curve(val, self.rule_base(fit, val))
            for s in SHARES:
                table[s].append(self.gap(val, a, b, s, curve))
        means = {s: finite_mean(v) for s, v in table.items()}
        made = (self.plus(names, train, test) if names else
                (self.rule_base(train, train), self.rule_base(train, test), {}))
        return made[0], made[1], {**made[2], "share": best_of(SHARES, means)}

    def alone(self, name: str, train: np.ndarray, test: np.ndarray) -> Made:
        """A router as the tables run it: its own scores and its calibration floor."""
        spec = self._rule if name == "rule" else self.learner(name)
        router = self.fitted(spec, train)
        return (router.scores_inputs(take(spec[2], train)),
                router.scores_inputs(take(spec[2], test)), {"floor": spec[5]})

    def units(self, rows: np.ndarray) -> np.ndarray:
        """The exchangeable unit of each of ``rows``: its group, or its prompt."""
        return self.data.clusters(self.split_by)[rows]

    def calibration(self, train: np.ndarray) -> Split:
        """(proper training, calibration): :data:`CALIBRATION_FRACTION` of ``train``'s units.

        The calibration part is empty where ``train`` has a single unit.
        """
        try:
            fit, cal = self.data.subset(train).split_indices(
                seed=0, test_fraction=CALIBRATION_FRACTION, split_by=self.split_by)
        except ValueError:
            return train, train[:0]
        return train[fit], train[cal]

    def conformal(self, mode: str, names: Sequence[str], train: np.ndarray,
                  test: np.ndarray) -> Made:
        """A router fitted on proper-training units, its threshold conformal on the rest.

        ``mode``: ``"conf"`` (:func:`~experiments.traces.conformal.conformal_threshold`) or
        ``"crc"`` (:func:`~experiments.traces.conformal.risk_control_threshold`); ``names``:
        one name (the router alone, ``rule`` included) or ``["rule", NAME, ...]`` (the
        ``plus`` router). Only ``train`` is read for the threshold: ``test`` is scored.

        Returns:
            The proper-training and ``test`` scores, and facts: the ``threshold`` (never
            below the router's floor), the calibration units' count and the guarantee's
            ``target`` and ``alpha`` (``None`` for ``crc``).
        """
        fit, cal = self.calibration(train)
        rows = np.concatenate([cal, test])
        if len(names) > 1:
            on_fit, on_rows, fact = self.plus(names[1:], fit, rows)
        else:
            on_fit, on_rows, fact = self.alone(names[0], fit, rows)
        on_cal, on_test = on_rows[:len(cal)], on_rows[len(cal):]
        if mode == "conf":
            threshold = conformal_threshold(on_cal, self.units(cal), CONFORMAL_TARGET,
                                            CONFORMAL_ALPHA)
        else:
            threshold = risk_control_threshold(on_cal, self.units(cal), CONFORMAL_TARGET)
        floor = fact.pop("floor", -np.inf)
        return on_fit, on_test, {
            **fact, "threshold": max(threshold, float(floor)),
            "calibration_units": len(np.unique(self.units(cal))),
            "target": CONFORMAL_TARGET, "alpha": CONFORMAL_ALPHA if mode == "conf" else None}

    def curve(self, rows: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(cost, accuracy) per query of a score's threshold curve on ``rows``."""
        order = np.argsort(-scores, kind="stable")
        q = self.data.scores[rows][order][:, [self.iw, self.is_]]
        c = self.costs[rows][order][:, [self.iw, self.is_]]
        cost = c[:, 0].sum() + np.concatenate([[0.0], np.cumsum(c[:, 1] - c[:, 0])])
        acc = q[:, 0].sum() + np.concatenate([[0.0], np.cumsum(q[:, 1] - q[:, 0])])
        return cost / len(rows), acc / len(rows)

    def make(self, candidate: str) -> Callable[[np.ndarray, np.ndarray], Made]:
        """``candidate`` (``mode:learner+learner``) as train, test -> scores and facts."""
        mode, names = parse_candidate(candidate)
        if mode == "alone":
            return lambda train, test: self.alone(names[0], train, test)
        if mode in ("plus", "gap"):
            criterion = "aiq" if mode == "plus" else "gap"
            return lambda train, test: self.plus(names, train, test, criterion)
        if mode in ("conf", "crc"):
            return lambda train, test: self.conformal(mode, names, train, test)
        return lambda train, test: self.share(names, train, test)

    def evaluate(self, splits: Sequence[Split], candidate: str, n_resamples: int
                 ) -> dict[str, Any]:
        """``candidate`` over ``splits`` (held-out parts pooled), minus the rule at its cost.

        A conformal candidate's entry adds ``guarantee``: its ``target`` and ``alpha``, the
        number of held-out units, the share of them whose strong-call share stayed within
        the target (``within``, promised ``>= 1 - alpha`` by ``conf``) and their mean share
        (``mean_share``, promised ``<= target`` by ``crc``).
        """
        make = self.make(candidate)
        shares: list[np.ndarray] = []
        promise: dict[str, Any] = {}
        held = np.sort(np.concatenate([test for _, test in splits]))
        where = np.searchsorted(held, np.arange(self.data.n_queries))
        scores, rule, calls = np.zeros(len(held)), np.zeros(len(held)), np.zeros(len(held),
                                                                                bool)
        facts = []
        for train, test in splits:
            on_train, on_test, fact = make(train, test)
            if "threshold" in fact:  # conformal: set on calibration units, not on_train
                threshold = fact.pop("threshold")
                promise = {"target": fact.pop("target"), "alpha": fact.pop("alpha")}
                share = float((on_train >= threshold).mean())
                shares.append(unit_shares(on_test >= threshold, self.units(test)))
            else:
                point = calibrate_share(on_train, fact.pop("share", 0.5),
                                        floor=fact.pop("floor", -np.inf))
                threshold, share = point.threshold, point.strong_share
            facts.append({**fact, "share": share})
            rows = where[test]
            scores[rows], calls[rows] = on_test, on_test >= threshold
            rule[rows] = self.rule_base(train, test)
        test_data = self.data.subset(held)
        c = call_costs(test_data)
        span = sorted((float(c[:, self.iw].mean()), float(c[:, self.is_].mean())))
        decisions = np.where(calls, self.is_, self.iw).astype(np.int64)
        table = score_table(test_data, {"x": decisions},
                            {"x": scores, "random": None, "rule": rule}, weak=self.weak,
                            strong=self.strong, costs=c, curve_reference=["random", "rule"],
                            cost_range=span, rule="rule", split_by=self.split_by,
                            n_resamples=n_resamples, seed=0)
        diff = table["rule"]["x"]["accuracy"]
        random = table["points"]["x"]["minus_random_at_cost"]["accuracy"]
        out = {"minus_rule_at_cost": [diff["value"], *diff["ci"]],
               "minus_random_at_cost": [random["value"], *random["ci"]],
               "test_share": float(calls.mean()), "folds": facts}
        if shares:
            held_shares = np.concatenate(shares)
            out["guarantee"] = {
                **promise, "units": len(held_shares),
                "within": float(np.mean(held_shares <= promise["target"] * (1 + 1e-12))),
                "mean_share": float(held_shares.mean())}
        return out


def datasets(data_dir: Path, arena_dir: Path) -> dict[str, tuple[TraceDataset, str]]:
    """The shipped logs read in place, as the report reads them: name -> (data, split_by)."""
    out: dict[str, tuple[TraceDataset, str]] = {}
    if (data_dir / "gsm8k_responses.csv").is_file():
        out["gsm8k"] = (load_traces(data_dir / "gsm8k_responses.csv",
                                    token_counter="approx"), "query")
    if (data_dir / "mmlu").is_dir():
        out["mmlu"] = (load_traces(sorted((data_dir / "mmlu").glob("mmlu_*.csv")),
                                   token_counter="approx"), "group")
    if arena_dir.is_dir():
        out["routerarena"] = (load_routerarena(arena_dir), "group")
    return out


def splits_for(data: TraceDataset, name: str, split_by: str) -> dict[str, list[Split]]:
    """The seeded splits (``"seed N"``) and the tables' protocol (``"tables"``)."""
    fraction = 0.5 if split_by == "query" else TEST_FRACTION
    out = {f"seed {s}": [data.split_indices(seed=s, test_fraction=fraction,
                                            split_by=split_by)] for s in SEEDS}
    out["tables"] = splits_of(data, PROTOCOLS[name])
    return out


def screen(data: TraceDataset, name: str, split_by: str, candidates: Sequence[str],
           n_resamples: int = 1000, log: Callable[[str], None] | None = None
           ) -> dict[str, dict[str, Any]]:
    """Every candidate on every split of ``data``: candidate -> split -> figures."""
    box = Screen(data, split_by)
    out: dict[str, dict[str, Any]] = {}
    for candidate in candidates:
        out[candidate] = {}
        for label, splits in splits_for(data, name, split_by).items():
            entry = box.evaluate(splits, candidate, n_resamples)
            out[candidate][label] = entry
            if log is not None:
                v, lo, hi = entry["minus_rule_at_cost"]
                log(f"{name} {candidate} {label}: {v:+.4f} [{lo:+.4f}, {hi:+.4f}]")
    return out


def _cell(entry: Sequence[float]) -> str:
    value, low, high = entry
    return f"{value:+.3f} [{low:+.3f}, {high:+.3f}]"


def markdown(result: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """Per dataset a table: each candidate's accuracy minus the rule at its cost, per split.

    The last columns count the seeds whose interval lies above 0 (beats) and below 0
    (loses). Conformal candidates add a table of their guarantee per split: the share of
    held-out units whose strong-call share stayed within the target, and the units' mean
    share.
    """
    lines: list[str] = []
    for name, rows in result.items():
        labels = list(next(iter(rows.values())))
        seeds = [label for label in labels if label.startswith("seed")]
        lines += ["", f"**{name}**", "", "| candidate | " + " | ".join(labels)
                  + " | seeds > 0 | seeds < 0 |", "|---" * (len(labels) + 3) + "|"]
        for candidate, entries in rows.items():
            diffs = [entries[label]["minus_rule_at_cost"] for label in seeds]
            above = sum(1 for d in diffs if d[1] > 0)
            below = sum(1 for d in diffs if d[2] < 0)
            lines.append(f"| {candidate} | "
                         + " | ".join(_cell(entries[label]["minus_rule_at_cost"])
                                      for label in labels) + f" | {above} | {below} |")
        promised = {c: e for c, e in rows.items() if "guarantee" in e[labels[0]]}
        if promised:
            lines += ["", f"**{name}**, the conformal guarantee (held-out units within the "
                      "target; their mean strong-call share)", "",
                      "| candidate | " + " | ".join(labels) + " |",
                      "|---" * (len(labels) + 1) + "|"]
            for candidate, entries in promised.items():
                lines.append(f"| {candidate} | " + " | ".join(
                    f"{g['within']:.3f} of {g['units']}; {g['mean_share']:.3f}"
                    for g in (entries[label]["guarantee"] for label in labels)) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (``--help``): every bad value refused in one line before any work."""
    parser = argparse.ArgumentParser(prog="python -m experiments.traces.rule_screen",
                                     description=__doc__.splitlines()[0] if __doc__ else "",
                                     allow_abbrev=False)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA,
                        help="RouteLLM's folder: gsm8k_responses.csv and mmlu/ "
                             "(default: %(default)s)")
    parser.add_argument("--arena-dir", type=Path, default=None,
                        help="RouterArena's folder (default: routerarena beside --data-dir)")
    parser.add_argument("--datasets", nargs="*", default=None,
                        help="which of the datasets found to screen (default: all)")
    parser.add_argument("--candidates", nargs="*", default=None,
                        help="mode:learner[+learner...] (default: every candidate)")
    parser.add_argument("--embeddings", action="store_true",
                        help="add the MiniLM candidates (the embeddings extra)")
    parser.add_argument("--resamples", type=int, default=1000,
                        help="bootstrap resamples per interval (default: %(default)s)")
    parser.add_argument("--out", type=Path, required=True,
                        help="the JSON written (the Markdown tables go to stdout)")
    args = parser.parse_args(argv)
    if args.resamples < 1:
        parser.error(f"--resamples: expected a positive integer, got {args.resamples}")
    try:
        check_creatable(args.out)  # a bad path fails now, not after half an hour
    except ValueError as error:
        parser.error(f"--out: {error}")
    candidates = args.candidates or [*CANDIDATES, *CONFORMAL_CANDIDATES,
                                      *(EMBEDDING_CANDIDATES if args.embeddings else ())]
    for candidate in candidates:  # a mistyped candidate is refused before the first fit
        try:
            parse_candidate(candidate)
        except ValueError as error:
            parser.error(f"--candidates: {error}")
    arena = args.arena_dir or args.data_dir.parent / "routerarena"
    found = datasets(args.data_dir, arena)
    names = args.datasets or list(found)
    missing = sorted(set(names) - set(found))
    if missing:
        print(f"datasets: {missing} not found under {args.data_dir} / {arena}", file=sys.stderr)
        return 2
    result = {name: screen(found[name][0], name, found[name][1], candidates,
                           args.resamples, log=print) for name in names}
    write_files_atomic(args.out.parent, {args.out.name: json.dumps(result, indent=1) + "\n"})
    print("\n".join(markdown(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
