"""Cross-validation of the routers' settings on training data only (routers/cv.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from agents.routers import CV_GRIDS, KNNRouter, MultiRouter, cross_validate, make_router
from agents.routers import LogisticRouter as TraceRouter
from cost_envs.metrics.frontier import aiq
from cost_envs.metrics.routing import routing_curve
from cost_envs.traces import TraceDataset
from experiments.traces.heldout import Protocol, evaluate, splits_of

WEAK, STRONG = "weak", "strong"


def dataset(n: int = 240, n_groups: int = 8, seed: int = 0) -> TraceDataset:
    """The weak model fails on prompts with some words; grouped; costs 1 and 10."""
    rng = np.random.default_rng(seed)
    hard = rng.random(n) < 0.5
    words = np.where(hard, "integral of the series", "capital of the country")
    noise = ["".join(rng.choice(list("abcdefghij"), 5)) for _ in range(n)]
    prompts = tuple(f"what is the {w} {x}?" for w, x in zip(words, noise, strict=True))
    correct = np.column_stack([np.where(hard, rng.random(n) < 0.2, rng.random(n) < 0.9),
                               rng.random(n) < 0.9])
    cost = np.column_stack([np.full(n, 1.0), np.full(n, 10.0)])
    return TraceDataset((WEAK, STRONG), tuple(f"q{i}" for i in range(n)), prompts,
                        correct.astype(float), correct, np.ones((n, 2)), np.ones((n, 2)),
                        cost=cost, groups=tuple(f"g{i % n_groups}" for i in range(n)))


def poisoned(data: TraceDataset, rows: np.ndarray) -> TraceDataset:
    """``data`` with the outcomes of ``rows`` flipped (prompts and groups unchanged)."""
    correct = data.correct.copy()
    correct[rows] = ~correct[rows]
    return dataclasses.replace(data, correct=correct, scores=correct.astype(float))


def _by_hand(router: TraceRouter, data: TraceDataset, fold: np.ndarray) -> float:
    """Mean validation AIQ through the public API (fit, scores, routing_curve, aiq)."""
    values = []
    for k in range(fold.max() + 1):
        tr, va = data.subset(np.flatnonzero(fold != k)), data.subset(np.flatnonzero(fold == k))
        s = dataclasses.replace(router).fit(tr).scores(va)
        c = va.cost
        curve = routing_curve(s, va.correct[:, 0], va.correct[:, 1], c[:, 0], c[:, 1])
        values.append(aiq(curve.cost, curve.accuracy, [c[:, 0].mean(), c[:, 1].mean()]))
    return float(np.mean(values))


@pytest.mark.parametrize("kind,cls,setting", [("logistic", TraceRouter, "l2"),
                                              ("knn", KNNRouter, "k")])
def test_the_table_is_each_candidates_mean_validation_aiq(kind, cls, setting) -> None:
    data = dataset(120)  # 8 groups of 15: the table is the by-hand one at any size
    choice = cross_validate(kind, data, weak=WEAK, strong=STRONG, folds=4, split_by="group")
    fold = data.fold_ids(4, 0, "group")
    assert choice.setting == setting and choice.folds == 4 and choice.split_by == "group"
    values = CV_GRIDS[kind][1]
    assert list(choice.table) == [f"{setting}={v:g}" for v in values]
    for v in values:
        expected = _by_hand(cls(WEAK, STRONG, **{setting: v}), data, fold)
        assert choice.table[f"{setting}={v:g}"] == pytest.approx(expected, abs=1e-12)
    # the choice is the best mean, ties to the earlier value
    best = max(choice.table.values())
    first = next(k for k, v in choice.table.items() if v == best)
    assert f"{setting}={choice.value:g}" == first
    assert choice.settings() == {setting: int(choice.value) if setting == "k"
                                 else choice.value}


def test_the_k_model_table_is_the_sweeps_validation_aiq() -> None:
    data = dataset(120)
    choice = cross_validate("multi-logistic", data, folds=3, split_by="group", seed=2)
    fold = data.fold_ids(3, 2, "group")
    for l2 in CV_GRIDS["multi-logistic"][1]:
        values = []
        for k in range(3):
            tr = data.subset(np.flatnonzero(fold != k))
            va = data.subset(np.flatnonzero(fold == k))
            d = MultiRouter(l2=l2).fit(tr).sweep(va)
            rows = np.arange(va.n_queries)[:, None]
            mean = va.cost.mean(axis=0)
            values.append(aiq(va.cost[rows, d].mean(axis=0), va.scores[rows, d].mean(axis=0),
                              [mean.min(), mean.max()]))
        assert choice.table[f"l2={l2:g}"] == pytest.approx(np.mean(values), abs=1e-12)


def test_only_the_data_given_is_read() -> None:
    """Flipping the outcomes of queries not passed in changes nothing; of those passed, it does."""
    data = dataset(150)
    train_idx = data.split_indices(0, 0.5, "group")[0]
    test_idx = np.setdiff1d(np.arange(data.n_queries), train_idx)
    kw = {"weak": WEAK, "strong": STRONG, "folds": 3}
    base = cross_validate("logistic", data.subset(train_idx), **kw)
    other = cross_validate("logistic", poisoned(data, test_idx).subset(train_idx), **kw)
    assert other == base
    flipped = cross_validate("logistic", poisoned(data, train_idx).subset(train_idx), **kw)
    assert flipped.table != base.table


def test_folds_are_capped_at_the_groups_and_bad_input_is_named() -> None:
    data = dataset(120, n_groups=3)
    assert cross_validate("knn", data, weak=WEAK, strong=STRONG, folds=5,
                          split_by="group").folds == 3
    one = data.subset(np.flatnonzero(np.array(data.groups) == "g0"))
    with pytest.raises(ValueError, match="only one group"):
        cross_validate("logistic", one, weak=WEAK, strong=STRONG, split_by="group")
    with pytest.raises(ValueError, match="router: expected one of"):
        cross_validate("nearest", data, weak=WEAK, strong=STRONG)
    with pytest.raises(ValueError, match="folds"):
        cross_validate("logistic", data, weak=WEAK, strong=STRONG, folds=1)
    with pytest.raises(KeyError):
        cross_validate("logistic", data, weak="tiny", strong=STRONG)
    with pytest.raises(ValueError, match="raw: expected the inputs of 120 queries"):
        cross_validate("logistic", data, weak=WEAK, strong=STRONG,
                       raw=(np.zeros((3, 7)), np.zeros((3, 512))))
    # every part of the inputs: a priced router's third, the prompt's tokens, too
    raw = make_router("priced", WEAK, STRONG).inputs(data)
    with pytest.raises(ValueError, match="got 120 and 120 and 3 rows"):
        cross_validate("priced", data, weak=WEAK, strong=STRONG, raw=(*raw[:2], raw[2][:3]))


def test_equal_costs_leave_the_default() -> None:
    data = dataset()
    flat = dataclasses.replace(data, cost=np.ones_like(data.cost))
    choice = cross_validate("knn", flat, weak=WEAK, strong=STRONG, folds=3)
    assert choice.value == KNNRouter.k and all(np.isnan(v) for v in choice.table.values())
    assert all(v is None for v in choice.as_json()["table"].values())


def test_the_report_chooses_inside_each_training_fold() -> None:
    """Nested: each fold's choice is cross_validate's on that training fold alone, and the
    held-out fold's outcomes do not move it."""
    data = dataset(240, n_groups=8)
    protocol = Protocol("group", 4, "4 folds by group")
    result = evaluate(data, protocol, n_resamples=20)
    splits = splits_of(data, protocol)
    for name, kind in (("logistic (cv)", "logistic"), ("knn (cv)", "knn")):
        chosen = result["routers"][name]["cv"]
        for (train, test), entry in zip(splits, chosen, strict=True):
            alone = cross_validate(kind, data.subset(train), weak=WEAK, strong=STRONG,
                                   folds=5, split_by="group")
            assert entry == alone.as_json()
            blind = cross_validate(kind, poisoned(data, test).subset(train), weak=WEAK,
                                   strong=STRONG, folds=5, split_by="group")
            assert blind.as_json() == entry
