"""The router family reproduces the committed routing figures, decision for decision.

``benchmarks/results/trace_routing.json`` (and the hashed rows of
``routing_embeddings.md``, the same evaluations) were written before the routers became
one family (:mod:`agents.routers`). These tests refit every router through the
family's public interface (``inputs``, ``fit_inputs``, ``scores_inputs``, ``predict``,
``cross_validate``, the calibrations) on the RouteLLM and RouterArena logs, exactly as
the report's protocols split them, and compare the point figures the decisions determine
(strong-call shares, accuracies, APGR and CPTs, the cross-validation tables and choices)
with the committed ones. Intervals are bootstrap draws of those decisions and are not
recomputed here. Skipped where the logs (outside the repository) are absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.routers import (
    CascadeRouter,
    LogisticRouter,
    calibrate_lam,
    calibrate_share,
    cross_validate,
    make_router,
)
from agents.routers.base import take
from cost_envs.metrics.routing import routing_curve
from cost_envs.prices import default_price_table
from cost_envs.traces import TraceDataset, load_routerarena, load_traces

REPO = Path(__file__).resolve().parents[1]
COMMITTED = json.loads((REPO / "benchmarks" / "results" / "trace_routing.json"
                        ).read_text(encoding="utf-8"))
DATA = REPO.parents[0] / "shared" / "data"
ROUTELLM, ARENA = DATA / "routellm", DATA / "routerarena"
#: How the report splits each dataset: (split_by, folds; None: one half split, seed 0).
PROTOCOLS = {"gsm8k": ("query", None), "mmlu": ("group", 4), "routerarena": ("group", 5)}
_CACHE: dict[str, TraceDataset] = {}


def logs(name: str) -> TraceDataset:
    """The report's dataset ``name`` (skips when the logs are absent)."""
    if name not in _CACHE:
        if not (ROUTELLM / "gsm8k_responses.csv").is_file() or not ARENA.is_dir():
            pytest.skip(f"{DATA} not found: the logs live outside the repository")
        if name == "gsm8k":
            _CACHE[name] = load_traces(ROUTELLM / "gsm8k_responses.csv", token_counter="approx")
        elif name == "mmlu":
            _CACHE[name] = load_traces(sorted((ROUTELLM / "mmlu").glob("mmlu_*.csv")),
                                       token_counter="approx")
        else:
            _CACHE[name] = load_routerarena(ARENA)
    return _CACHE[name]


def weak_strong(data: TraceDataset) -> tuple[str, str]:
    """The cheaper and the dearer model, as the report orders them."""
    order = np.argsort(data.call_costs(default_price_table()).mean(axis=0))
    return data.models[order[0]], data.models[order[1]]


def splits(data: TraceDataset, name: str) -> list[tuple[np.ndarray, np.ndarray]]:
    split_by, folds = PROTOCOLS[name]
    if folds is None:
        return [data.split_indices(seed=0, test_fraction=0.5, split_by=split_by)]
    fold = data.fold_ids(folds, seed=0, split_by=split_by)
    return [(np.flatnonzero(fold != k), np.flatnonzero(fold == k)) for k in range(folds)]


def close(ours: Any, committed: Any) -> bool:
    """Equal up to float rounding, through nested dicts and lists."""
    if isinstance(committed, dict):
        return set(ours) == set(committed) and all(close(ours[k], committed[k])
                                                   for k in committed)
    if isinstance(committed, list):
        return len(ours) == len(committed) and all(map(close, ours, committed))
    if isinstance(committed, float):
        return ours == pytest.approx(committed, rel=1e-9, abs=1e-12)
    return ours == committed


ROWS = [(name, row) for name in PROTOCOLS for row in COMMITTED["heldout"][name]["routers"]]


@pytest.mark.parametrize(("name", "row"), ROWS, ids=[f"{n}-{r}" for n, r in ROWS])
def test_held_out_rows_are_reproduced(name: str, row: str) -> None:
    committed = COMMITTED["heldout"][name]["routers"][row]
    data = logs(name)
    weak, strong = weak_strong(data)
    kind, split_by = committed["kind"], PROTOCOLS[name][0]
    probe = make_router(kind, weak, strong)
    inputs = probe.inputs(data)  # per query: computed once, indexed per fold
    labels, fit_costs = probe.targets(data), probe.training_costs(data)
    calls = np.zeros(data.n_queries, dtype=bool)
    train_shares, chosen = [], []
    for train, test in splits(data, name):
        settings: dict[str, Any] = {}
        if "cv" in committed["settings"]:  # nested: the training fold's own folds
            choice = cross_validate(kind, data.subset(train), weak=weak, strong=strong,
                                    folds=committed["settings"]["cv"], split_by=split_by,
                                    raw=take(inputs, train))
            settings = choice.settings()
            chosen.append(choice.as_json())
        router = make_router(kind, weak, strong, **settings).fit_inputs(
            take(inputs, train), labels[train], take(fit_costs, train))
        cal = calibrate_share(router.scores_inputs(take(inputs, train)), 0.5,
                              floor=router.min_threshold)
        train_shares.append(cal.strong_share)
        calls[test] = router.scores_inputs(take(inputs, test)) >= cal.threshold
    held = np.sort(np.concatenate([test for _, test in splits(data, name)]))
    w, s = (data.correct[held, data.model_index(m)] for m in (weak, strong))
    share = float(calls[held].mean())
    accuracy = float(np.where(calls[held], s, w).mean())
    random = (1 - share) * w.mean() + share * s.mean()
    assert close(train_shares, committed["train_share"])
    assert share == pytest.approx(committed["test_share"], abs=1e-12)
    assert accuracy == pytest.approx(committed["point"]["accuracy"]["value"], abs=1e-12)
    assert accuracy - random == pytest.approx(
        committed["point"]["minus_random"]["accuracy"]["value"], abs=1e-12)
    if chosen:
        assert close(chosen, committed["cv"])


KMODEL = [(name, row) for name in PROTOCOLS
          for row in COMMITTED["heldout"][name]["k_model"]["rows"]]


@pytest.mark.parametrize(("name", "row"), KMODEL, ids=[f"{n}-{r}" for n, r in KMODEL])
def test_k_model_halfway_points_are_reproduced(name: str, row: str) -> None:
    committed = COMMITTED["heldout"][name]["k_model"]["rows"][row]
    data = logs(name)
    costs = data.call_costs(default_price_table())
    kind = row.removesuffix(" (cv)")  # the row's router: multi-logistic, -priced, -cluster
    probe = make_router(kind, *data.models)
    inputs, fit_costs = probe.inputs(data), probe.training_costs(data, costs)
    decisions = np.zeros(data.n_queries, dtype=np.int64)
    lams = []
    for train, test in splits(data, name):
        settings: dict[str, Any] = {}
        if "cv" in committed:
            settings = cross_validate(kind, data.subset(train), costs=costs[train],
                                      folds=5, split_by=PROTOCOLS[name][0],
                                      raw=take(inputs, train)).settings()
        router = make_router(kind, *data.models, **settings).fit_inputs(
            take(inputs, train), data.correct[train], take(fit_costs, train))
        grid = router.lams_inputs(take(inputs, train))
        mean = costs[train].mean(axis=0)
        lam = calibrate_lam(grid, router.sweep_inputs(take(inputs, train), grid),
                            costs[train], float(mean.min() + 0.5 * (mean.max() - mean.min()))
                            ).lam
        lams.append(lam)
        decisions[test] = router.sweep_inputs(take(inputs, test), [lam])[:, 0]
    held = np.sort(np.concatenate([test for _, test in splits(data, name)]))
    d = decisions[held]
    assert close(lams, committed["halfway_lam"])
    assert float(data.correct[held, d].mean()) == pytest.approx(
        committed["halfway"]["accuracy"]["value"], abs=1e-12)
    assert float(costs[held, d].mean()) == pytest.approx(
        committed["halfway"]["cost_per_query"]["value"], rel=1e-9)


@pytest.mark.parametrize("cls", [LogisticRouter, CascadeRouter], ids=["learned", "cascade"])
def test_gsm8k_cross_validated_routers_are_reproduced(cls: type) -> None:
    """The report's GSM8K block: l2 and hashed_weight by AIQ folds, then the test curve."""
    data = logs("gsm8k")
    gsm = COMMITTED["gsm8k"]
    weak, strong = weak_strong(data)
    train, test = data.split(seed=0, test_fraction=0.5)
    router = cls(weak, strong)
    chosen = router.cross_validate(train)
    committed = gsm["router"] if cls is LogisticRouter else gsm["cascade"]["router"]
    assert close(chosen, committed)
    w, s = (test.correct[:, test.model_index(m)] for m in (weak, strong))
    curve = routing_curve(router.scores(test), w, s)
    metrics = gsm["metrics"]["learned" if cls is LogisticRouter else "cascade"]
    assert curve.apgr == pytest.approx(metrics["apgr"]["value"], abs=1e-12)
    assert curve.cpt(0.5) == pytest.approx(metrics["cpt_50"]["value"], abs=1e-12)
    assert curve.cpt(0.8) == pytest.approx(metrics["cpt_80"]["value"], abs=1e-12)


def test_gsm8k_other_splits_are_reproduced() -> None:
    data = logs("gsm8k")
    weak, strong = weak_strong(data)
    w, s = (data.correct[:, data.model_index(m)] for m in (weak, strong))
    routers = {"": LogisticRouter(weak, strong), "cascade_": CascadeRouter(weak, strong)}
    inputs = {prefix: router.inputs(data) for prefix, router in routers.items()}
    for committed in COMMITTED["gsm8k_other_splits"]:
        train, test = data.split_indices(seed=committed["split_seed"], test_fraction=0.5)
        for prefix, router in routers.items():
            stats, text = inputs[prefix]
            router.fit_inputs((stats[train], text[train]), ~w[train])
            curve = routing_curve(router.scores_inputs((stats[test], text[test])), w[test],
                                  s[test])
            assert curve.apgr == pytest.approx(committed[f"{prefix}apgr"], abs=1e-12)
            assert curve.cpt(0.5) == pytest.approx(committed[f"{prefix}cpt_50"], abs=1e-12)
            assert curve.cpt(0.8) == pytest.approx(committed[f"{prefix}cpt_80"], abs=1e-12)
