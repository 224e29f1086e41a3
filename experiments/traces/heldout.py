"""Calibrated routers on queries and groups they never saw: the routing report's held-out part.

For each dataset (:data:`PROTOCOLS`): GSM8K split by query (one seeded half split), the
shipped MMLU subjects held out one at a time (leave-one-subject-out: 4 folds by group),
RouterArena's domains held out in 5 folds by group. In every fold each router of
:data:`agents.routers.ROUTERS` (logistic, kNN, the cost-aware priced router,
the cascade where the weak model's answers are logged, the anchors' routers of
:data:`ANCHOR_ROUTERS` (cluster routing, MLP, SVM, matrix factorisation, similarity-weighted
Elo: :mod:`agents.routers.cluster`, :mod:`~agents.routers.classifiers`,
:mod:`~agents.routers.mf`, :mod:`~agents.routers.elo`), and with ``embeddings=True``
their MiniLM variants: the ``embeddings`` extra, compared by
``benchmarks/routing_embeddings.py``, not by the report, whose numbers must not depend
on an optional package) is fitted on the training queries, its threshold calibrated on
the *training* scores for a strong-call share of :data:`TARGET_SHARE`
(:func:`agents.routers.calibrate_share`; never below the priced router's 0: it
does not pay for a call it predicts to lose), and the held-out queries routed. Beside
them the best training-free rule (``"rule"``, :mod:`agents.routers.rule`: shortest or
longest prompts first, whichever has the better AIQ on the training fold; the JSON
records each fold's ``"rule_members"``) shows what routing without learned weights does,
and every other router's ``"minus_rule_at_cost"`` is its accuracy minus the rule's at the
same cost, paired (:func:`~agents.routers.evaluation.compare_with_rule`'s comparison, which
``score_table(rule=)`` runs on the router's draw: the rule's pooled held-out curve, its
points those of the rule's curve metrics, read at the router's cost per query on each
resample), with a ``"verdict_vs_rule"``: beats, loses or not resolved.
The out-of-fold decisions and scores are pooled (every query held out exactly once) and
scored exactly, on one draw of resamples per router
(:func:`agents.routers.evaluation.score_table`):
accuracy, cost and the test share reached, against random routing at the same share and
at the same cost, both matched to the router within each resample
(:func:`~agents.routers.evaluation.compare_with_random`: exact, paired differences),
each single model and the per-query oracle; the score curve gives APGR, CPT(50%),
CPT(80%) and AIQ (:func:`~agents.routers.evaluation.curve_metrics`), each against
random routing's and, for every learned router, against the rule's pooled held-out curve
(``"curve"``'s ``"minus_rule"``: AIQ - best rule, paired on the same resamples as AIQ -
random, by the same curve references). The tables lead with accuracy minus random at
the same cost, then minus the rule at the same cost: AIQ - random cannot fall below 0
for a threshold router (its hull never falls below the straight line between the two
models), those can.
Intervals resample whole groups when the split is by group (the JSON says
``"resampled": "clusters"`` and how many). Weak and strong are the cheaper and the dearer
model; where the dearer is not the more accurate, PGR (so APGR and CPT) is undefined and
the report says so. Nothing is tuned on the shipped subjects or domains: the plain rows
run with each router's defaults, and the ``(cv)`` rows choose their setting (``l2``;
kNN's ``k``; the cluster router's number of clusters ``k``) by :data:`CV_FOLDS` folds of
each *training* fold (:func:`agents.routers.cross_validate`: nested, folds of whole
groups when the protocol holds out groups), so the held-out queries never inform a choice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from agents.routers import TwoModelRouter, calibrate_share, cross_validate, make_router
from agents.routers.base import take
from agents.routers.evaluation import (
    call_costs,
    oracle_routing,
    rule_verdict,
    score_routings,
    score_table,
    single_model,
)
from agents.routers.rule import RuleRouter
from agents.routers.solvers import solver_name
from cost_envs.extras import EXTRA_MODULES, install_hint, missing_modules
from cost_envs.traces import TraceDataset

#: Strong-call share the thresholds are calibrated for, on training scores.
TARGET_SHARE = 0.5
#: Inner folds of the ``(cv)`` rows' choice, in each training fold (fewer when the
#: training fold has fewer groups: MMLU's leave-one-subject-out leaves three).
CV_FOLDS = 5
#: The routers that also get a ``(cv)`` row.
CV_ROUTERS = ("logistic", "knn", "priced", "cluster")
#: The anchors' routers (issue #39: LLMRouter's and LLMRouterBench's baselines), each a
#: row with its documented default settings: Avengers-Pro's cluster routing, the MLP and
#: SVM classifiers, RouteLLM's matrix factorisation and its similarity-weighted Elo.
ANCHOR_ROUTERS = ("cluster", "mlp", "svm", "mf", "elo")
#: Name of the rule's curve among each learned router's curve references (``"curve"``
#: then holds ``"minus_rule"``: the router minus the rule, every curve metric, paired).
RULE_CURVE = "rule"


@dataclass(frozen=True)
class Protocol:
    """How a dataset is split: by query or group, one half split or k folds (pooled)."""

    split_by: str
    folds: int | None  # None: one train/test half split (seed 0)
    label: str


PROTOCOLS = {
    "gsm8k": Protocol("query", None, "split by query (seed 0): half train, half test"),
    "mmlu": Protocol("group", 4, "leave-one-subject-out: 4 folds, each holding out one "
                     "whole subject"),
    "routerarena": Protocol("group", 5, "5 folds by domain (seed 0): each domain held out "
                            "once, never seen in training"),
}


def by_cost(data: TraceDataset, costs: np.ndarray) -> tuple[str, str]:
    """(weak, strong): the cheaper and the dearer of a two-model dataset."""
    if data.n_models != 2:
        raise ValueError(f"{data.source}: expected two models, got {list(data.models)}")
    order = np.argsort(costs.mean(axis=0))
    return data.models[order[0]], data.models[order[1]]


def has_answers(data: TraceDataset, model: str) -> bool:
    """Whether the data logs answer texts of ``model`` (what a cascade reads)."""
    j = data.model_index(model)
    return data.responses is not None and any(row[j] for row in data.responses)


def embeddings_skip_reason() -> str | None:
    """Why the MiniLM routers are not run (``None`` when the extra is installed)."""
    missing = missing_modules(EXTRA_MODULES["embeddings"])
    if missing:
        return (f"{', '.join(m.replace('_', '-') for m in missing)} is not installed "
                f"({install_hint('embeddings')}); nothing is downloaded at run time")
    return None


def router_specs(data: TraceDataset, weak: str, embeddings: bool
                 ) -> dict[str, tuple[str, dict[str, Any]]]:
    """Report name -> (registry name, settings) of the routers run on ``data``."""
    specs: dict[str, tuple[str, dict[str, Any]]] = {"logistic": ("logistic", {}),
                                                    "knn": ("knn", {}),
                                                    "priced": ("priced", {}),
                                                    "rule": ("rule", {})}
    if has_answers(data, weak):
        specs["cascade"] = ("cascade", {})
    for kind in ANCHOR_ROUTERS:  # the field's baselines, with their documented defaults
        specs[kind] = (kind, {})
    for kind in CV_ROUTERS:  # the setting chosen inside each training fold
        specs[f"{kind} (cv)"] = (kind, {"cv": CV_FOLDS})
    if embeddings:
        specs["logistic (minilm)"] = ("logistic", {"text_features": "minilm"})
        specs["knn (minilm)"] = ("knn", {"text_features": "minilm"})
    return specs


def splits_of(data: TraceDataset, protocol: Protocol) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) index pairs: one half split, or one pair per fold."""
    if protocol.folds is None:
        return [data.split_indices(seed=0, test_fraction=0.5, split_by=protocol.split_by)]
    fold = data.fold_ids(protocol.folds, seed=0, split_by=protocol.split_by)
    return [(np.flatnonzero(fold != k), np.flatnonzero(fold == k))
            for k in range(protocol.folds)]


def _out_of_fold(data: TraceDataset, splits: list[tuple[np.ndarray, np.ndarray]],
                 kind: str, settings: Mapping[str, Any], weak: str, strong: str,
                 split_by: str = "query", chosen: list[dict[str, Any]] | None = None,
                 members: list[str] | None = None,
                 ) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Held-out scores and calibrated strong calls of every query, in index order.

    ``settings["cv"]`` (folds) chooses the router's setting on each training fold only
    (folds kept whole by ``split_by``); each choice is appended to ``chosen``, and a
    training-free rule's member chosen on each training fold to ``members``.

    Returns:
        (scores, strong calls) over the held-out queries (ascending indices) and the
        training share each fold's threshold reached.
    """
    scores = np.full(data.n_queries, np.nan)
    calls = np.zeros(data.n_queries, dtype=bool)
    train_shares = []
    fixed = {k: v for k, v in settings.items() if k != "cv"}
    # a router's inputs are per query (deterministic): computed once, indexed per fold
    probe = make_router(kind, weak, strong, **fixed)
    inputs = probe.inputs(data)
    labels = probe.targets(data)
    fit_costs = probe.training_costs(data)
    for train, test in splits:
        tuned = dict(fixed)
        if "cv" in settings:  # nested: only this training fold is read
            choice = cross_validate(kind, data.subset(train), weak=weak, strong=strong,
                                    settings=fixed, folds=settings["cv"], split_by=split_by,
                                    raw=take(inputs, train))
            tuned.update(choice.settings())
            if chosen is not None:
                chosen.append(choice.as_json())
        # a router over the two models (weak, strong) is a TwoModelRouter
        router = cast(TwoModelRouter, make_router(kind, weak, strong, **tuned).fit_inputs(
            take(inputs, train), labels[train], take(fit_costs, train)))
        if members is not None and isinstance(router, RuleRouter):
            members.append(router.member)
        calibration = calibrate_share(router.scores_inputs(take(inputs, train)),
                                      TARGET_SHARE, floor=router.min_threshold)
        train_shares.append(calibration.strong_share)
        scores[test] = router.scores_inputs(take(inputs, test))
        calls[test] = scores[test] >= calibration.threshold
    held = np.sort(np.concatenate([test for _, test in splits]))
    return scores[held], calls[held], train_shares


def rule_label(members: list[str]) -> str:
    """How the tables name the rule row: the member each training fold chose."""
    counts = {m: members.count(m) for m in dict.fromkeys(members)}
    if len(counts) == 1:
        return f"best training-free rule (chosen on training data: {members[0]})"
    return ("best training-free rule (chosen on each training fold: "
            + ", ".join(f"{m} in {n} fold{'s' * (n > 1)}" for m, n in counts.items()) + ")")


def verdict(diff: Mapping[str, Any]) -> str:
    """How a paired router-minus-random interval reads."""
    low, high = diff["ci"]
    if low > 0:
        return "beats random"
    if high < 0:
        return "worse than random"
    return "cannot be told apart from random"


def _minus_rule_cell(entry: Mapping[str, Any]) -> str:
    """The table's router-minus-rule cell: the verdict and the paired difference."""
    diff = entry.get("minus_rule_at_cost")
    if diff is None:
        return ""
    return f"{entry['verdict_vs_rule']}: {_fmt(diff['accuracy'])}"


def _fold_table(data: TraceDataset, splits: list[tuple[np.ndarray, np.ndarray]], weak: str,
                strong: str) -> list[dict[str, Any]]:
    """Each fold's held-out groups, size and the two models' accuracy there."""
    rows = []
    for _, test in splits:
        part = data.subset(test)
        acc = dict(zip(data.models, part.accuracy.tolist(), strict=True))
        rows.append({"groups": sorted(set(part.groups)) if part.groups else None,
                     "queries": part.n_queries, "accuracy": acc,
                     "pgr_defined": bool(acc[strong] > acc[weak])})
    return rows


def evaluate(data: TraceDataset, protocol: Protocol, n_resamples: int, seed: int = 0,
             embeddings: bool = False, routers: Sequence[str] | None = None) -> dict[str, Any]:
    """Every router of :func:`router_specs` held out and scored as the module doc says.

    Args:
        data: A two-model dataset (with groups when ``protocol`` splits by group).
        protocol: The split.
        n_resamples: Bootstrap resamples of every interval.
        seed: Seed of the resampling.
        embeddings: Also run the MiniLM routers (needs the ``embeddings`` extra).
        routers: The report names of :func:`router_specs` to run (default: all of them).

    Raises:
        ValueError: With ``embeddings`` but without the extra (the reason in one line), or
            a name in ``routers`` that :func:`router_specs` does not have.

    Returns:
        A JSON-able dict: the split, the models, ``"resampled"`` and ``"units"`` (what
        the intervals resample), ``"baselines"`` (each model, the oracle), ``"routers"``
        (per router: test share, exact point metrics with ``minus_random``, curve
        metrics with ``minus_random``, the verdict), ``"folds"``.
    """
    skip = embeddings_skip_reason()
    if embeddings and skip is not None:
        raise ValueError(f"embeddings: {skip}")
    weak, strong = by_cost(data, call_costs(data))
    specs = router_specs(data, weak, embeddings)
    if routers is not None:
        unknown = sorted(set(routers) - set(specs))
        if unknown:
            raise ValueError(f"routers: unknown {unknown}; expected names of {sorted(specs)}")
        specs = {name: spec for name, spec in specs.items() if name in routers}
    splits = splits_of(data, protocol)
    held = np.sort(np.concatenate([test for _, test in splits]))
    test = data.subset(held)
    c = call_costs(test)
    iw, is_ = test.model_index(weak), test.model_index(strong)
    plain_range = sorted((float(c[:, iw].mean()), float(c[:, is_].mean())))
    kw: dict[str, Any] = {"split_by": protocol.split_by, "n_resamples": n_resamples,
                          "seed": seed}
    base = {f"only {m}": single_model(test, m) for m in test.models}
    base["oracle"] = oracle_routing(test, c)
    out: dict[str, Any] = {
        "source": data.source, "protocol": protocol.label, "split_by": protocol.split_by,
        "folds": protocol.folds, "weak": weak, "strong": strong, "queries": data.n_queries,
        "held_out": test.n_queries, "target_share": TARGET_SHARE, "solver": solver_name(),
        "cost_range": plain_range,
        "groups": None if test.groups is None else len(set(test.groups)),
        "pgr_defined": bool(test.accuracy[is_] > test.accuracy[iw]),
        "embeddings": "run" if embeddings else ("not run here (benchmarks/"
                                                "routing_embeddings.py compares them)"),
        "baselines": score_routings(test, base, c, strong=strong, **kw),
        "fold_table": _fold_table(data, splits, weak, strong), "routers": {},
    }
    first = out["baselines"]["oracle"]
    out["resampled"], out["units"] = first["resampled"], first["units"]
    fitted: dict[str, tuple[str, dict[str, Any], Any, Any, Any, list[Any], list[str]]] = {}
    for name, (kind, settings) in specs.items():
        chosen: list[dict[str, Any]] = []
        members: list[str] = []
        scores, calls, train_shares = _out_of_fold(data, splits, kind, settings, weak, strong,
                                                   protocol.split_by, chosen, members)
        fitted[name] = (kind, settings, scores, calls, train_shares, chosen, members)
    # the rule's curve is every learned router's second curve reference (AIQ - rule,
    # paired on the same resamples as AIQ - random)
    rule = next((n for n, f in fitted.items() if f[6]), None)
    for name, (kind, settings, scores, calls, train_shares, chosen, members) in fitted.items():
        # a cascade pays the weak call on every query: an escalation costs both calls;
        # its random references pay the plain calls (what random routing would spend)
        costs = c.copy()
        if kind == "cascade":
            costs[:, is_] += c[:, iw]
        share = float(calls.mean())
        decisions = np.where(calls, is_, iw).astype(np.int64)
        curves: dict[str, Any] = {name: scores, "random": None}
        refs = ["random"]
        versus = rule is not None and not members  # a learned router beside the rule
        if versus and rule is not None:  # versus implies a rule (`is not None` for mypy)
            curves[RULE_CURVE] = fitted[rule][2]
            refs.append(RULE_CURVE)
        # one draw: the points, the curves and the router minus the rule at its cost
        # (on the rule's curve points the curve metrics computed)
        table = score_table(test, {name: decisions}, curves,
                            weak=weak, strong=strong, costs=c, router_costs={name: costs},
                            curve_reference=refs, cost_range=plain_range,
                            rule=RULE_CURVE if versus else None, **kw)
        point = dict(table["points"][name])
        references = {key: point.pop(key) for key in
                      ("random_at_share", "random_at_cost", "minus_random_at_share",
                       "minus_random_at_cost")}
        out["routers"][name] = {
            "kind": kind, "settings": dict(settings), "train_share": train_shares,
            "test_share": share,
            # minus_random: random at the same share, matched within each resample
            "point": {**point, "minus_random": references["minus_random_at_share"],
                      "minus_random_at_cost": references["minus_random_at_cost"]},
            "random_point": references["random_at_share"],
            "random_at_cost": references["random_at_cost"],
            "curve": table["curves"][name], "random_curve": table["curves"]["random"],
            "verdict": verdict(references["minus_random_at_share"]["accuracy"]),
            "verdict_at_cost": verdict(references["minus_random_at_cost"]["accuracy"]),
        }
        if chosen:
            out["routers"][name]["cv"] = chosen
        if members:
            out["routers"][name].update(rule_members=members, label=rule_label(members))
        if versus:  # a rule alone has no router to set beside it
            diff = table["rule"][name]
            out["routers"][name].update(minus_rule_at_cost=diff,
                                        verdict_vs_rule=rule_verdict(diff["accuracy"]))
    return out


def _fmt(entry: Mapping[str, Any] | None, scale: float = 1.0, digits: int = 3) -> str:
    """``value [low, high]`` (n/a where undefined)."""
    if entry is None or entry.get("value") is None or not math.isfinite(entry["value"]):
        return "n/a"
    text = f"{scale * entry['value']:.{digits}f}"
    ci = entry.get("ci")
    if ci and all(v is not None and math.isfinite(v) for v in ci):
        text += f" [{scale * ci[0]:.{digits}f}, {scale * ci[1]:.{digits}f}]"
    return text


def markdown(title: str, result: Mapping[str, Any]) -> list[str]:
    """The Markdown lines of one dataset's held-out evaluation."""
    r = result
    unit = "groups" if r["resampled"] == "clusters" else "queries"
    lines = [
        "", f"### {title}", "",
        f"{r['held_out']} held-out queries of {r['queries']}"
        + (f" in {r['groups']} groups" if r["split_by"] == "group" else "")
        + f"; {r['protocol']}. "
        f"Weak `{r['weak']}`, strong `{r['strong']}` (the cheaper and the dearer). "
        f"Thresholds calibrated on each fold's training scores for {r['target_share']:.0%} "
        f"strong calls. 95% intervals resample {r['units']} {unit}"
        + (" (whole groups: the cluster bootstrap)" if unit == "groups" else "")
        + f". Solver: {r['solver']}. Embeddings: {r['embeddings']}.",
        "",
        "| Router | accuracy - random at the same cost (paired) | accuracy - best rule at the "
        "same cost (paired) | strong share (test) | accuracy | cost / 1k queries | "
        "accuracy - random at the same share (paired) | APGR | APGR - random | CPT(50%) | "
        "CPT(80%) | AIQ | AIQ - random (paired) | AIQ - best rule (paired) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in r["routers"].items():
        p, cv = e["point"], e["curve"]
        minus_rule = cv.get(f"minus_{RULE_CURVE}")  # the rule row has none: empty
        lines.append(
            f"| {e.get('label', name)} | {_fmt(p['minus_random_at_cost']['accuracy'])} | "
            f"{_minus_rule_cell(e)} | {e['test_share']:.1%} | {_fmt(p['accuracy'])} | "
            f"{_fmt(p['cost_per_query'], 1000, 4)} | {_fmt(p['minus_random']['accuracy'])} | "
            f"{_fmt(cv['apgr'])} | {_fmt(cv['minus_random']['apgr'])} | "
            f"{_fmt(cv['cpt_50'])} | {_fmt(cv['cpt_80'])} | {_fmt(cv['aiq'])} | "
            f"{_fmt(cv['minus_random']['aiq'])} | "
            f"{'' if minus_rule is None else _fmt(minus_rule['aiq'])} |")
    for name, e in r["baselines"].items():
        lines.append(f"| {name} | | | {e['strong_share']['value']:.1%} | "
                     f"{_fmt(e['accuracy'])} | {_fmt(e['cost_per_query'], 1000, 4)} | "
                     "| | | | | | | |")
    unit = "groups" if r["split_by"] == "group" else "queries"
    lines += ["", "Accuracy minus random routing, paired, matched within each resample "
              "(the section's opening says how): "
              + " ".join(f"**{name}**: at the same cost, {e['verdict_at_cost']} "
                         f"({_fmt(e['point']['minus_random_at_cost']['accuracy'])}); at the "
                         f"same share, {e['verdict']} on held-out {unit} "
                         f"({_fmt(e['point']['minus_random']['accuracy'])})."
                         for name, e in r["routers"].items())]
    if any("minus_rule_at_cost" in e for e in r["routers"].values()):
        lines += ["", "The best-rule column: each learned router's accuracy minus the "
                  "training-free rule's at the same cost, paired: the rule's pooled held-out "
                  "threshold curve, on the same resamples, reduced to its non-decreasing "
                  "convex hull and read at the router's cost per query on each resample. "
                  "beats / loses: the interval is above / below 0; not resolved: it "
                  "holds 0. AIQ - best rule: the router's AIQ minus the rule's, on the same "
                  "resamples and cost range as AIQ - random; the rule's own row leaves both "
                  "empty."]
    tuned = [(name, e["cv"]) for name, e in r["routers"].items() if e.get("cv")]
    if tuned:
        first = tuned[0][1]  # the first (cv) row's folds describe them (as they did)
        lines += ["", "The `(cv)` rows chose their setting in each training fold, by "
                  "mean validation AIQ over inner folds of that training fold only ("
                  + f"{len(first)} training fold{'s' * (len(first) > 1)}, "
                  f"{'/'.join(str(x['folds']) for x in first)} inner folds by "
                  f"{first[0]['split_by']}"
                  + "): " + "; ".join(
                      f"**{name}** {c[0]['setting']} = "
                      + ", ".join(f"{x['value']:g}" for x in c) for name, c in tuned)
                  + "."]
    if not r["pgr_defined"]:
        lines += ["", f"APGR and CPT are undefined here: on the held-out queries "
                  f"`{r['strong']}` is not more accurate than `{r['weak']}`, so there is no "
                  "gap to recover; accuracy against random at the same share and AIQ "
                  "still compare the routers."]
    if r["split_by"] == "group" and r["folds"]:
        lines += ["", "| Fold: held-out groups | queries | acc weak / strong |",
                  "|---|---|---|"]
        for f in r["fold_table"]:
            names = f["groups"] or []
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more"
                                            if len(names) > 4 else "")
            lines.append(f"| {shown} | {f['queries']} | {f['accuracy'][r['weak']]:.3f} / "
                         f"{f['accuracy'][r['strong']]:.3f} |")
    return lines
