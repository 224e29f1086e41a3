"""The routing report's K-model block: :class:`~agents.routers.MultiRouter` held out.

On each real dataset, split as :mod:`experiments.traces.heldout` splits it (GSM8K by
query, MMLU leave-one-subject-out, RouterArena 5 folds by domain), a
:class:`~agents.routers.MultiRouter` over all the logged models is fitted on
each training fold, with its ``l2`` at the default (``multi-logistic``) or chosen on inner
folds of that training fold only (``multi-logistic (cv)``,
:func:`agents.routers.cross_validate`); beside it the same with each call priced per
query (``multi-priced``) and Avengers-Pro's cluster routing over K models
(``multi-cluster``, :class:`~agents.routers.cluster.ClusterMultiRouter`), and the best
training-free rule over K models (``multi-rule``,
:class:`~agents.routers.rule.RuleMultiRouter`: prompt-length bands up the training
frontier of the models, its direction chosen on each training fold). Its operating
points are fixed on the training fold too: for each target cost per query of
:data:`TARGETS` (fractions of the way from the cheapest to the dearest model's mean
training cost) ``lam`` is calibrated on the training queries
(:func:`agents.routers.calibrate_lam`) and the held-out queries are routed at it. The
pooled out-of-fold decisions (every query held out once) give:

* the AIQ of those operating points against the single models' frontier (what random
  routing between the models reaches), paired
  (:func:`agents.routers.sweep_metrics`);
* at the halfway target (``route train``'s default), accuracy and cost beside the
  reference points of the two-model table
  (:func:`agents.routers.evaluation.compare_with_random`, exact, paired): random
  routing at the router's own share of calls to each model, and random routing on the
  single models' frontier at the router's own cost per query, both matched to the router
  within each resample;
* each learned row's accuracy at the halfway target minus the rule's at the same cost,
  paired (:func:`agents.routers.evaluation.compare_with_rule`: the rule's pooled held-out
  operating points, one per target, reduced to their non-decreasing convex hull and read
  at the row's cost per query on each resample), with a verdict: beats, loses or not
  resolved.

Intervals resample whole groups when the split is by group. **No shipped log has more
than two models**, so here a K-model router chooses between two: its AIQ is compared
with the straight line between them. A three-model set built by joining logs of different
queries would pair outcomes no model produced on one query, so none is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from agents.routers import (
    SINGLE_MODELS,
    MultiRouter,
    calibrate_lam,
    cross_validate,
    make_router,
    sweep_metrics,
)
from agents.routers.base import take
from agents.routers.evaluation import (
    call_costs,
    compare_with_random,
    compare_with_rule,
    rule_verdict,
)
from agents.routers.rule import RuleMultiRouter
from cost_envs.traces import TraceDataset
from experiments.traces.heldout import (
    CV_FOLDS,
    Protocol,
    _fmt,
    _minus_rule_cell,
    rule_label,
    splits_of,
    verdict,
)

#: Target costs per query, as fractions from the cheapest to the dearest model's mean
#: training cost; each is calibrated to a ``lam`` on the training fold.
TARGETS = tuple(np.round(np.linspace(0.0, 1.0, 21), 2).tolist())
#: The target of the single operating point reported (``route train``'s default).
HALFWAY = 0.5
#: The row of the best training-free rule over K models (:mod:`agents.routers.rule`).
RULE_ROW = "multi-rule"
#: The K-model rows: name -> (router kind, inner CV folds; ``None``: the default ``l2``).
MULTI_ROWS: dict[str, tuple[str, int | None]] = {
    "multi-logistic": ("multi-logistic", None),
    "multi-logistic (cv)": ("multi-logistic", CV_FOLDS),
    "multi-priced": ("multi-priced", None),
    # Avengers-Pro's cluster routing over K models (issue #39), its default k = 8
    "multi-cluster": ("multi-cluster", None),
    # the best training-free rule over K models (issue #39), every learned row's bar
    RULE_ROW: ("multi-rule", None)}


def _out_of_fold(data: TraceDataset, splits: list[tuple[np.ndarray, np.ndarray]],
                 costs: np.ndarray, kind: str, cv: int | None, split_by: str,
                 members: list[str] | None = None,
                 ) -> tuple[np.ndarray, list[dict[str, Any]], list[float]]:
    """``(n, len(TARGETS))`` held-out decisions, each fold's CV choice and halfway lam.

    A training-free rule's member chosen on each training fold is appended to ``members``.
    """
    decisions = np.zeros((data.n_queries, len(TARGETS)), dtype=np.int64)
    probe = make_router(kind, *data.models)
    inputs = probe.inputs(data)  # per query: computed once
    fit_costs = probe.training_costs(data, costs)
    chosen: list[dict[str, Any]] = []
    lams: list[float] = []
    cols = np.arange(data.n_models)
    for train, test in splits:
        settings: dict[str, Any] = {}
        if cv is not None:  # nested: only this training fold is read
            choice = cross_validate(kind, data.subset(train), costs=costs[train],
                                    folds=cv, split_by=split_by,
                                    raw=take(inputs, train))
            settings = choice.settings()
            chosen.append(choice.as_json())
        # a router over all the data's models is a MultiRouter
        router = cast(MultiRouter, make_router(kind, *data.models, **settings).fit_inputs(
            take(inputs, train), data.correct[train], take(fit_costs, train)))
        if members is not None and isinstance(router, RuleMultiRouter):
            members.append(router.chosen)  # "the cheapest model alone" says more there
        grid = router.lams_inputs(take(inputs, train))
        swept = cols[router.sweep_inputs(take(inputs, train), grid)]
        mean = costs[train].mean(axis=0)
        fold_lams = [calibrate_lam(grid, swept, costs[train],
                                   float(mean.min() + f * (mean.max() - mean.min()))).lam
                     for f in TARGETS]
        lams.append(fold_lams[TARGETS.index(HALFWAY)])
        decisions[test] = cols[router.sweep_inputs(take(inputs, test), fold_lams)]
    return decisions, chosen, lams


def evaluate_multi(data: TraceDataset, protocol: Protocol, n_resamples: int, seed: int = 0
                   ) -> dict[str, Any]:
    """The K-model rows on ``data``, held out as ``protocol`` says (see the module doc).

    Returns:
        A JSON-able dict: the models, the split, ``"resampled"``/``"units"``, and per row
        ``"aiq"`` (with ``minus_single models``), ``"halfway"`` (accuracy, cost, model
        shares, ``minus_frontier``), the verdict, each fold's halfway ``lam`` and CV choice.
    """
    splits = splits_of(data, protocol)
    c = call_costs(data)
    held = np.sort(np.concatenate([test for _, test in splits]))
    test = data.subset(held)
    kw: dict[str, Any] = {"split_by": protocol.split_by, "n_resamples": n_resamples,
                          "seed": seed}
    out: dict[str, Any] = {
        "source": data.source, "models": list(data.models), "protocol": protocol.label,
        "split_by": protocol.split_by, "held_out": test.n_queries,
        "targets": list(TARGETS), "halfway": HALFWAY, "rows": {},
    }
    halfway: dict[str, np.ndarray] = {}  # each learned row's halfway decisions
    rule: np.ndarray | None = None  # the rule's held-out decisions at every target
    for name, (kind, cv) in MULTI_ROWS.items():
        members: list[str] = []
        decisions, chosen, lams = _out_of_fold(data, splits, c, kind, cv, protocol.split_by,
                                               members)
        d = decisions[held]
        curves = sweep_metrics(test, {name: d}, c[held], **kw)
        at = d[:, TARGETS.index(HALFWAY)]
        point = dict(compare_with_random(test, {name: at}, c[held], **kw)[name])
        references = {key: point.pop(key) for key in
                      ("random_at_share", "random_at_cost", "minus_random_at_share",
                       "minus_random_at_cost")}
        out["rows"][name] = {
            "aiq": curves[name], "single_models_aiq": curves[SINGLE_MODELS],
            # the two-model table's reference points: random routing at the router's own
            # model shares and on the single models' frontier at its own cost, matched
            # within each resample
            "halfway": {**point, "minus_random": references["minus_random_at_share"],
                        "minus_frontier": references["minus_random_at_cost"]},
            "random_point": references["random_at_share"],
            "frontier": references["random_at_cost"],
            "verdict": verdict(curves[name][f"minus_{SINGLE_MODELS}"]),
            "verdict_at_share": verdict(references["minus_random_at_share"]["accuracy"]),
            "verdict_at_cost": verdict(references["minus_random_at_cost"]["accuracy"]),
            "halfway_lam": lams, **({"cv": chosen} if chosen else {}),
        }
        if members:
            out["rows"][name].update(rule_members=members, label=rule_label(members))
            rule = d
        else:
            halfway[name] = at
        out["resampled"], out["units"] = point["resampled"], point["units"]
    if rule is not None and halfway:  # every learned row beside the rule, on one draw
        versus = compare_with_rule(test, halfway, rule, costs=c[held], **kw)
        for name, diff in versus.items():
            out["rows"][name].update(minus_rule_at_cost=diff,
                                     verdict_vs_rule=rule_verdict(diff["accuracy"]))
    return out


def markdown(results: Mapping[str, Any]) -> list[str]:
    """The K-model block's Markdown lines (one table over the datasets run)."""
    lines = ["", "## Routing over K models: MultiRouter on held-out queries and groups", "",
             "One correctness model per logged model, routed by `argmax p_j - lam * cost_j / "
             "cost_max` (`agents/routers/multi.py`). **No shipped log has more than "
             "two models**, so the K-model router chooses between two here, and its AIQ is "
             "compared with the straight line between them (the single models' frontier, "
             "which random routing reaches). Joining logs of different queries into a "
             "three-model set would invent outcomes, so none is made. Splits as above; each "
             f"`lam` calibrated on the training fold for {len(TARGETS)} target costs per "
             "query (0% to 100% of the way from the cheapest to the dearest model's mean "
             "training cost); the halfway point is `cost-envs route train`'s default. The "
             "(cv) row chooses `l2` on inner folds of each training fold. The multi-priced "
             "row prices each call per query (`agents/routers/priced.py`: the "
             "prompt's tokens known, the output's predicted) instead of at the model's mean "
             "cost. The multi-cluster row reads each model's correctness from the query's "
             "nearest k-means cluster (Avengers-Pro's cluster routing, "
             "`agents/routers/cluster.py`: smoothed per-cluster accuracy, k = 8) instead of "
             "a regression. The halfway point "
             "is compared with the two-model table's references: random routing at its own "
             "share of calls to each model and on the single models' frontier at its own "
             "cost per query, both matched within each resample; the accuracy columns are "
             "the halfway point's, the same-cost one first. The best training-free rule's "
             "row (`multi-rule`, `agents/routers/rule.py`: each prompt routed up the "
             "training frontier of the models by its length, shortest or longest first as "
             "each training fold's lam sweep scores better; with two models, the two-model "
             "rule's threshold curve) is calibrated as the others; the best-rule column is "
             "each learned row's accuracy minus the rule's at the same cost, paired: the "
             "rule's pooled held-out operating points (its "
             f"{len(TARGETS)} calibrated targets), on the same resamples, reduced to their "
             "non-decreasing convex hull and read at the router's cost per query on each "
             "resample (beats / loses: the interval is above / below 0; not resolved: it "
             "holds 0).", "",
             "| Data (held out) | Router | accuracy - random at the same cost (paired) | "
             "accuracy - best rule at the same cost (paired) | "
             "accuracy - random at the same shares (paired) | halfway: accuracy | "
             "cost / 1k queries | AIQ | AIQ - single models (paired) |",
             "|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for title, r in results.items():
        if "skipped" in r:
            lines.append(f"| {title} | skipped: {r['skipped']} | | | | | | | |")
            continue
        for name, e in r["rows"].items():
            h = e["halfway"]
            lines.append(
                f"| {title} ({r['held_out']} queries, {r['units']} "
                f"{'groups' if r['resampled'] == 'clusters' else 'queries'} resampled) | "
                f"{e.get('label', name)} | {_fmt(h['minus_frontier']['accuracy'])} | "
                f"{_minus_rule_cell(e)} | "
                f"{_fmt(h['minus_random']['accuracy'])} | {_fmt(h['accuracy'])} | "
                f"{_fmt(h['cost_per_query'], 1000, 4)} | {_fmt(e['aiq'])} | "
                f"{_fmt(e['aiq'][f'minus_{SINGLE_MODELS}'])} |")
            reads = e["verdict"].replace("random", "the single models")
            versus = ("" if "verdict_vs_rule" not in e else
                      f"; against the best rule at the same cost, {e['verdict_vs_rule']}")
            verdicts.append(f"{title}, {name}: at the same cost (halfway), "
                            f"{e['verdict_at_cost']}{versus}; AIQ {reads}")
            if e.get("cv"):
                values = ", ".join(f"{x['value']:g}" for x in e["cv"])
                verdicts[-1] += f" (l2 chosen per training fold: {values})"
    lines += ["", "; ".join(verdicts) + "."]
    return lines
