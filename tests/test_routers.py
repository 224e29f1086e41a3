"""The learned routers: solvers (scikit-learn), kNN, saved state, held-out report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.routers import ROUTERS, KNNRouter, make_router, router_from_state
from agents.routers import LogisticRouter as TraceRouter
from agents.routers.solvers import (
    fit_logistic,
    logistic_scores,
    neighbour_share,
)
from cost_envs.traces import TraceDataset
from cost_envs.traces.features import hashed_features
from experiments.traces.heldout import Protocol, evaluate, markdown, router_specs, verdict

WEAK, STRONG = "weak", "strong"


def dataset(n: int = 240, n_groups: int = 8, seed: int = 0) -> TraceDataset:
    """Prompts whose words say whether the weak model fails ("hard"), grouped, with answers."""
    rng = np.random.default_rng(seed)
    hard = rng.random(n) < 0.5
    words = np.where(hard, "integral of the series", "capital of the country")
    noise = ["".join(rng.choice(list("abcdefghij"), 5)) for _ in range(n)]  # distinct words
    prompts = tuple(f"what is the {w} {x}?" for w, x in zip(words, noise, strict=True))
    weak = np.where(hard, rng.random(n) < 0.2, rng.random(n) < 0.9)
    strong = rng.random(n) < 0.9
    correct = np.column_stack([weak, strong])
    answers = tuple((f"#### {i}" if w else "maybe", "#### 1") for i, w in enumerate(weak))
    cost = np.column_stack([np.full(n, 1.0), np.full(n, 10.0)])
    return TraceDataset((WEAK, STRONG), tuple(f"q{i}" for i in range(n)), prompts,
                        correct.astype(float), correct, np.ones((n, 2)), np.ones((n, 2)),
                        cost=cost, responses=answers,
                        groups=tuple(f"g{i % n_groups}" for i in range(n)))


# ------------------------------------------------------------------------- solvers
def _problem(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(300, 6))
    y = (x @ np.array([1.5, -1.0, 0.5, 0.0, 0.0, 2.0]) + rng.logistic(size=300) > 0.3)
    return x, y.astype(float)


def test_logistic_solves_the_penalised_problem() -> None:
    x, y = _problem()
    for l2 in (0.1, 2.0, 10.0):
        coef, intercept = fit_logistic(x, y, l2=l2)
        p = logistic_scores(x, coef, intercept)
        # optimality: the gradient of sum logloss + l2/2 |w|^2 vanishes (intercept
        # unpenalised), so C = 1 / l2 is the right translation of the penalty
        assert np.abs(x.T @ (p - y) + l2 * coef).max() < 1e-3 * len(x)
        assert abs((p - y).sum()) < 1e-3 * len(x)
    strong, weak = fit_logistic(x, y, l2=0.1)[0], fit_logistic(x, y, l2=100.0)[0]
    assert np.abs(strong).sum() > 2 * np.abs(weak).sum()  # the penalty shrinks
    coef0, b0 = fit_logistic(x, np.ones(300), l2=1.0)
    assert not coef0.any() and b0 > 0
    with pytest.raises(ValueError, match="0/1 labels"):
        fit_logistic(x, y * 2, l2=1.0)


def test_neighbour_share_counts_the_nearest_labels() -> None:
    train_x = np.array([[0.0], [1.0], [2.0], [10.0], [11.0], [12.0]])
    train_y = np.array([1, 1, 0, 0, 0, 1], dtype=float)
    x = np.array([[0.9], [11.2], [100.0]])
    share = neighbour_share(train_x, train_y, x, k=3)
    np.testing.assert_allclose(share, [2 / 3, 1 / 3, 1 / 3])
    assert neighbour_share(train_x, train_y, x, k=50) == pytest.approx([0.5] * 3)


def test_knn_router_finds_the_hard_queries() -> None:
    data = dataset(300)
    train, test = data.split(seed=0)
    scores = KNNRouter(WEAK, STRONG, n_features=64, k=15).fit(train).scores(test)
    hard = np.array(["integral" in p for p in test.prompts])
    # hard prompts' neighbours are hard prompts, where the weak model fails 80% of the time
    assert scores[hard].mean() > 0.6 > 0.25 > scores[~hard].mean()
    assert np.isin(np.round(scores * 15, 9), np.arange(16)).all()  # multiples of 1/k


@pytest.fixture(scope="module")
def family() -> tuple[dict, TraceDataset]:
    """Every router of the registry fitted once on ``dataset()``'s training half (seed 0),
    and the other half: the tests that take it save, load and score them, never refit."""
    train, test = dataset().split(seed=0)
    fitted = {name: make_router(name, WEAK, STRONG, n_features=32).fit(train)
              for name in ROUTERS}
    return fitted, test


# --------------------------------------------------------------------------- state
@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_state_round_trip_scores_identically(name: str, family, tmp_path) -> None:
    from safetensors.numpy import load_file, save_file

    fitted, test = family
    router = fitted[name]
    config, arrays = router.to_state()
    path = tmp_path / "router.safetensors"
    save_file(arrays, str(path), metadata={"config": json.dumps(config)})
    loaded = router_from_state(json.loads(json.dumps(config)), load_file(str(path)))
    assert type(loaded) is type(router) and loaded == router
    np.testing.assert_array_equal(loaded.predict(test), router.predict(test))
    # JSON all the way (arrays as lists)
    again = router_from_state(config, {k: v.tolist() for k, v in arrays.items()})
    np.testing.assert_array_equal(again.predict(test), router.predict(test))
    np.testing.assert_array_equal(again.route(test, 0.5), router.route(test, 0.5))


def test_bad_states_are_rejected() -> None:
    config, arrays = TraceRouter(WEAK, STRONG, n_features=16).fit(dataset()).to_state()
    with pytest.raises(ValueError, match="'router' must be one of"):
        router_from_state({**config, "router": "forest"}, arrays)
    with pytest.raises(ValueError, match="format=1"):
        router_from_state({**config, "format": 2}, arrays)
    with pytest.raises(ValueError, match="unknown \\['depth'\\]"):
        router_from_state({**config, "depth": 3}, arrays)
    with pytest.raises(ValueError, match="missing 'coef'"):
        router_from_state(config, {k: v for k, v in arrays.items() if k != "coef"})
    with pytest.raises(ValueError, match="expected router='knn'"):
        KNNRouter.from_state(config, arrays)
    with pytest.raises(ValueError, match="call fit first"):
        KNNRouter(WEAK, STRONG).to_state()
    with pytest.raises(ValueError, match="router: expected one of"):
        make_router("forest", WEAK, STRONG)


# ------------------------------------------------------------------ held-out report
#: The routers the group split runs: two (cv) rows of different settings (the inner folds
#: are cross_validate's, whatever the router), the rule and one plain router; the default
#: report runs every router (default_report below).
GROUP_ROUTERS = ("knn (cv)", "logistic", "logistic (cv)", "rule")


def test_heldout_evaluation_runs_every_router_of_the_family_by_default() -> None:
    data = dataset(240, n_groups=8)
    assert sorted(router_specs(data, WEAK, False)) == [
        "cascade", "cluster", "cluster (cv)", "elo", "knn", "knn (cv)", "logistic",
        "logistic (cv)", "mf", "mlp", "priced", "priced (cv)", "rule", "svm"]
    with pytest.raises(ValueError, match=r"routers: unknown \['forest'\]"):
        evaluate(data, Protocol("group", 4, "4 folds by group"), n_resamples=20,
                 routers=["logistic", "forest"])


def test_heldout_evaluation_by_group_resamples_groups() -> None:
    data = dataset(240, n_groups=8)
    result = evaluate(data, Protocol("group", 4, "4 folds by group"), n_resamples=200,
                      embeddings=False, routers=GROUP_ROUTERS)
    assert result["resampled"] == "clusters" and result["units"] == 8
    assert result["held_out"] == data.n_queries and result["groups"] == 8
    assert sorted(result["routers"]) == sorted(GROUP_ROUTERS)
    # a (cv) row chose its setting once per training fold, on inner folds of whole groups
    for name, setting in (("logistic (cv)", "l2"), ("knn (cv)", "k")):
        chosen = result["routers"][name]["cv"]
        assert len(chosen) == 4 and {c["setting"] for c in chosen} == {setting}
        assert {c["split_by"] for c in chosen} == {"group"} and {c["folds"] for c in chosen} == {5}
    groups = [g for fold in result["fold_table"] for g in fold["groups"]]
    assert sorted(groups) == sorted({f"g{i}" for i in range(8)})  # each held out once
    for entry in result["routers"].values():
        assert entry["point"]["resampled"] == entry["curve"]["resampled"] == "clusters"
        assert 0 <= entry["test_share"] <= 1
        assert len(entry["train_share"]) == 4
        # random at the router's own share: exact, so its share is that share
        assert entry["random_point"]["strong_share"]["value"] == pytest.approx(
            entry["test_share"])
        assert entry["verdict"] == verdict(entry["point"]["minus_random"]["accuracy"])
    # continuous scores: each fold's threshold sends about half its training queries strong
    assert all(abs(s - 0.5) < 0.02 for s in result["routers"]["logistic"]["train_share"])
    # the words carry the signal across groups: the logistic router beats random
    assert result["routers"]["logistic"]["verdict"] == "beats random"
    text = "\n".join(markdown("synthetic", result))
    assert "95% intervals resample 8 groups (whole groups" in text
    assert text.count("| logistic |") == 1 and "| oracle |" in text


@pytest.fixture(scope="module")
def default_report() -> tuple[dict, list[str]]:
    """One held-out ``evaluate`` with its defaults (no ``embeddings``), split by query.

    Shared by the tests that read it: 60 queries and 20 resamples, as what they check (the
    unit resampled, the routers run) does not depend on either. The MiniLM encoder is
    replaced by one that records what it was asked to embed, so a default run that embeds
    with MiniLM (under any report name) shows in the second element, the texts embedded.
    """
    from agents.routers import features

    embedded: list[str] = []

    def spy(texts):
        embedded.extend(texts)
        return np.zeros((len(texts), features.MINILM_DIM), dtype=np.float32)

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(features.TEXT_ENCODERS, "minilm",
                      features.TextEncoder(spy, features.MINILM_DIM, cached=True))
        patch.setattr(features, "_CACHE", {})
        result = evaluate(dataset(60), Protocol("query", None, "half split"), n_resamples=20)
    return result, embedded


def test_heldout_evaluation_by_query_resamples_queries(default_report) -> None:
    result, _ = default_report
    assert result["resampled"] == "queries" and result["units"] == result["held_out"] == 30
    assert result["routers"]["knn"]["curve"]["resampled"] == "queries"


def test_verdict_reads_the_interval() -> None:
    assert verdict({"value": 0.1, "ci": [0.01, 0.2]}) == "beats random"
    assert verdict({"value": -0.1, "ci": [-0.2, -0.01]}) == "worse than random"
    assert verdict({"value": 0.1, "ci": [-0.01, 0.2]}) == "cannot be told apart from random"


def test_the_report_runs_minilm_only_when_asked_and_says_why_it_cannot(
        default_report, monkeypatch) -> None:
    from experiments.traces import heldout as traces_heldout

    data = dataset(120, n_groups=6)
    protocol = Protocol("group", 3, "3 folds by group")
    # asked, the report's routers include the MiniLM ones (the names looked for below)
    asked = traces_heldout.router_specs(data, WEAK, embeddings=True)
    assert {"logistic (minilm)", "knn (minilm)"} <= set(asked)
    assert {asked[name][1]["text_features"] for name in asked if "minilm" in name} == {
        "minilm"}
    plain, embedded = default_report  # the default: never the optional extra
    assert sorted(plain["routers"]) == sorted(traces_heldout.router_specs(data, WEAK, False))
    assert not any("minilm" in name for name in plain["routers"])
    assert embedded == []  # no router of the default run embedded a text with MiniLM
    assert plain["embeddings"].startswith("not run here")
    monkeypatch.setattr(traces_heldout, "embeddings_skip_reason", lambda: "not installed")
    with pytest.raises(ValueError, match="embeddings: not installed"):
        evaluate(data, protocol, n_resamples=20, embeddings=True)


def test_minilm_features_are_embedded_once_per_text(monkeypatch) -> None:
    from agents.routers import features

    embedded: list[str] = []

    def fake(texts):
        embedded.extend(texts)
        return np.array([[len(t) % 7, t.count(" ")] + [0.0] * 382 for t in texts],
                        dtype=np.float32)

    monkeypatch.setitem(features.TEXT_ENCODERS, "minilm",
                        features.TextEncoder(fake, 384, cached=True))
    monkeypatch.setattr(features, "_CACHE", {})
    data = dataset(60)
    train, test = data.split(seed=0)
    first = TraceRouter(WEAK, STRONG, text_features="minilm").fit(train).scores(test)
    calls = len(embedded)
    assert calls == len(set(data.prompts))  # every distinct prompt once
    again = TraceRouter(WEAK, STRONG, text_features="minilm").fit(train).scores(test)
    assert len(embedded) == calls  # a second router on the same prompts embeds nothing
    np.testing.assert_array_equal(first, again)


# ------------------------------------------------------------------ the family
def test_one_registry_over_k_models(family) -> None:
    from agents.routers import Router, TwoModelRouter

    assert sorted(ROUTERS) == ["cascade", "cluster", "elo", "knn", "logistic", "mf", "mlp",
                               "multi-cluster", "multi-logistic", "multi-priced",
                               "multi-rule", "priced", "rule", "svm"]
    assert all(issubclass(cls, Router) for cls in ROUTERS.values())
    assert {k for k, cls in ROUTERS.items() if issubclass(cls, TwoModelRouter)} == {
        "cascade", "cluster", "elo", "knn", "logistic", "mf", "mlp", "priced", "rule", "svm"}
    fitted, test = family
    assert sorted(fitted) == sorted(ROUTERS)
    for name, router in fitted.items():
        assert type(router) is ROUTERS[name]
        win = router.predict(test)
        assert win.shape == (test.n_queries, 2) and router.models == (WEAK, STRONG)
        assert ((win >= 0) & (win <= 1)).all()
        routed = router.route(test, 0.5)  # the decision is its own step
        np.testing.assert_array_equal(routed, router.decide(win, 0.5,
                                                            router.expected_costs(test)))
    logistic = fitted["logistic"]
    np.testing.assert_array_equal(logistic.predict(test)[:, 1], logistic.scores(test))
    with pytest.raises(ValueError, match="expected two models"):
        make_router("knn", WEAK)


def test_knn_has_no_logistic_settings_and_reads_old_states() -> None:
    assert not hasattr(KNNRouter, "cross_validate")
    with pytest.raises(TypeError, match="l2"):
        KNNRouter(WEAK, STRONG, l2=1.0)  # type: ignore[call-arg]  # refused on purpose
    train, test = dataset().split(seed=0)
    router = KNNRouter(WEAK, STRONG, n_features=32).fit(train)
    config, arrays = router.to_state()
    assert "l2" not in config
    old = router_from_state({**config, "l2": 10.0}, arrays)  # saved before the family
    np.testing.assert_array_equal(old.scores(test), router.scores(test))


def test_your_own_text_features(tmp_path) -> None:
    from agents.routers import (
        TEXT_ENCODERS,
        embedding_lookup,
        load_router,
        register_text_features,
        save_router,
    )

    data = dataset()
    train, test = data.split(seed=0)
    # a column of precomputed embeddings: one vector per prompt, here "hard" in 2 numbers
    vectors = {p: [float("integral" in p), float(len(p))] for p in data.prompts}
    register_text_features("mine", embedding_lookup(vectors), dim=2)
    try:
        router = make_router("logistic", WEAK, STRONG, text_features="mine",
                             with_ngrams=False).fit(train)
        assert router.features.widths == (7, 2)  # your vectors instead of the n-grams
        both = make_router("logistic", WEAK, STRONG, text_features="mine").fit(train)
        assert both.features.widths == (7, 512 + 2)  # by default beside them
        text = both.inputs(test)[1]
        np.testing.assert_array_equal(text[:, :512], hashed_features(test.prompts, 512))
        np.testing.assert_array_equal(text[:, 512:], [vectors[p] for p in test.prompts])
        # a state saved before the setting existed meant "instead of": it loads as such
        config, arrays = router.to_state()
        del config["with_ngrams"]
        old = router_from_state(config, arrays)
        assert old.with_ngrams is False
        np.testing.assert_array_equal(old.scores(test), router.scores(test))
        words = make_router("logistic", WEAK, STRONG, hashed_weight=0.0).fit(train)
        w, s = (test.correct[:, j] for j in (0, 1))
        from cost_envs.metrics.routing import routing_curve

        assert routing_curve(router.scores(test), w, s).apgr > routing_curve(
            words.scores(test), w, s).apgr  # the vector says what the statistics do not
        save_router(tmp_path / "r", router, 0.5)
        np.testing.assert_array_equal(load_router(tmp_path / "r").router.scores(test),
                                      router.scores(test))
        with pytest.raises(ValueError, match="no vector for text 'unseen'"):
            router.scores(dataset_of(["unseen"]))
        register_text_features("mine", lambda texts: np.zeros((len(texts), 3)), dim=2)
        with pytest.raises(ValueError, match=r"text_features='mine': expected finite "
                                             r"numbers of shape \(\d+, 2\), got shape \(\d+, 3\)"):
            router.scores(test)
    finally:
        TEXT_ENCODERS.pop("mine", None)
    with pytest.raises(ValueError, match=r"register_text_features\('mine', \.\.\.\) first"):
        load_router(tmp_path / "r")
    with pytest.raises(ValueError, match="name: expected a new non-empty name"):
        register_text_features("hashed", lambda texts: texts, dim=1)
    with pytest.raises(ValueError, match="dim"):
        register_text_features("other", lambda texts: texts, dim=0)


def dataset_of(prompts: list[str]) -> TraceDataset:
    n = len(prompts)
    return TraceDataset((WEAK, STRONG), tuple(f"x{i}" for i in range(n)), tuple(prompts),
                        np.ones((n, 2)), np.ones((n, 2), bool), np.ones((n, 2)),
                        np.ones((n, 2)))


def test_a_router_kind_cannot_be_taken_twice():
    from agents.routers import ROUTERS, LogisticRouter, register

    class Impostor(LogisticRouter):
        kind = "logistic"

    with pytest.raises(ValueError, match=r"router kind 'logistic' is taken by .*LogisticRouter; "
                                         r"give .*Impostor another kind"):
        register(Impostor)
    assert ROUTERS["logistic"] is LogisticRouter


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_predictions_read_in_chunks_are_those_read_at_once(name: str, family,
                                                           monkeypatch) -> None:
    """Scoring builds a chunk of queries' features at a time (bounded memory), same result."""
    from agents.routers import base

    fitted, test = family
    router = fitted[name]
    inputs = router.inputs(test)  # every query's features at once
    win, costs = router.predict_inputs(inputs), router.expected_costs_inputs(inputs)
    cols = np.array([test.model_index(m) for m in router.models])
    monkeypatch.setattr(base, "PREDICT_CHUNK", 7)  # 120 queries: 18 chunks, the last of 1
    np.testing.assert_allclose(router.predict(test), win, rtol=0, atol=1e-12)
    if costs is None:
        assert router.expected_costs(test) is None
    else:
        np.testing.assert_allclose(router.expected_costs(test), costs, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(router.route(test, 0.5),
                                  cols[router.decide_inputs(inputs, 0.5)])
