"""The anchors' routers (issue #39): cluster, MLP, SVM, matrix factorisation, Elo."""

from __future__ import annotations

import contextlib
import io
import json
import warnings

import numpy as np
import pytest

from agents import cli
from agents.routers import (
    ROUTERS,
    ClusterMultiRouter,
    ClusterRouter,
    EloRouter,
    MFRouter,
    TwoModelRouter,
    calibrate_share,
    cross_validate,
    load_router,
    make_router,
    save_router,
)
from agents.routers.cluster import smoothed_accuracy
from agents.routers.mf import fit_mf, mf_direction
from cost_envs.traces import TraceDataset

WEAK, STRONG = "weak", "strong"
ANCHORS = ("cluster", "mlp", "svm", "mf", "elo")
#: Small and quick settings for the tests (the text features narrow).
FAST = {"n_features": 32}


def two_topics(n: int = 300, seed: int = 0) -> TraceDataset:
    """Two clusters of prompts of one length: the strong model is needed on one only.

    Algebra prompts: the weak model is wrong 95% of the time, the strong one right 95%.
    Geography prompts: both right 95% of the time. Prompt lengths are alike, so only the
    words tell the clusters apart.
    """
    rng = np.random.default_rng(seed)
    hard = rng.random(n) < 0.4
    noise = ["".join(rng.choice(list("abcdefghij"), 5)) for _ in range(n)]
    prompts = tuple(
        (f"solve the integral equation {x}?" if h else f"name the capital country {x}?")
        for h, x in zip(hard, noise, strict=True))
    weak = np.where(hard, rng.random(n) < 0.05, rng.random(n) < 0.95)
    strong = rng.random(n) < 0.95
    correct = np.column_stack([weak, strong])
    cost = np.column_stack([np.full(n, 1.0), np.full(n, 10.0)])
    return TraceDataset((WEAK, STRONG), tuple(f"q{i}" for i in range(n)), prompts,
                        correct.astype(float), correct, np.ones((n, 2)), np.ones((n, 2)),
                        cost=cost, groups=tuple(f"g{i % 6}" for i in range(n)))


@pytest.fixture(scope="module")
def halves() -> tuple[TraceDataset, TraceDataset]:
    return two_topics().split(seed=0)


@pytest.fixture(scope="module")
def fitted(halves) -> dict[str, TwoModelRouter]:
    """Each anchor router fitted once on the training half (the tests only read them)."""
    train, _ = halves
    out = {}
    for name in ANCHORS:
        router = make_router(name, WEAK, STRONG, **FAST).fit(train)
        assert isinstance(router, TwoModelRouter)
        out[name] = router
    return out


def test_the_anchors_are_two_model_routers_of_the_registry() -> None:
    for name in ANCHORS:
        assert issubclass(ROUTERS[name], TwoModelRouter) and ROUTERS[name].kind == name


@pytest.mark.parametrize("name", ANCHORS)
def test_the_cluster_that_needs_the_strong_model_gets_it(name: str, fitted, halves) -> None:
    """Calibrated on training for the hard share, the router sends the algebra prompts to
    the strong model and the geography prompts to the weak one (on unseen queries)."""
    train, test = halves
    router = fitted[name]
    hard_train = np.array(["integral" in p for p in train.prompts])
    calibration = calibrate_share(router.scores(train), float(hard_train.mean()),
                                  floor=router.min_threshold)
    strong = router.route(test, calibration.threshold) == test.model_index(STRONG)
    hard = np.array(["integral" in p for p in test.prompts])
    assert strong[hard].mean() >= 0.9, (name, strong[hard].mean())
    assert strong[~hard].mean() <= 0.1, (name, strong[~hard].mean())
    scores = router.scores(test)  # the ranking itself, not only the cut: AUC >= 0.99
    assert (scores[hard][:, None] > scores[~hard][None, :]).mean() >= 0.99


@pytest.mark.parametrize("name", ANCHORS)
def test_saved_and_loaded_the_scores_are_the_same(name: str, fitted, halves, tmp_path) -> None:
    _, test = halves
    router = fitted[name]
    save_router(tmp_path / name, router, 0.5)
    saved = load_router(tmp_path / name)
    assert saved.name == name and saved.router == router
    np.testing.assert_array_equal(saved.router.scores(test), router.scores(test))
    np.testing.assert_array_equal(saved.router.route(test, 0.5), router.route(test, 0.5))
    config, arrays = router.to_state()
    assert all(a.dtype == np.float64 for a in arrays.values())  # arrays, no pickle
    json.dumps(config)


@pytest.mark.parametrize("name", ANCHORS)
def test_the_same_seed_fits_the_same_router(name: str, fitted, halves) -> None:
    train, test = halves
    again = make_router(name, WEAK, STRONG, **FAST).fit(train)
    np.testing.assert_array_equal(again.scores(test), fitted[name].scores(test))


@pytest.mark.parametrize(("name", "bad", "message"), [
    ("cluster", {"k": 0}, "k"), ("cluster", {"prior": -1.0}, "prior"),
    ("cluster", {"nearest": 0}, "nearest"), ("mlp", {"hidden": 0}, "hidden"),
    ("mlp", {"alpha": -0.1}, "alpha"), ("svm", {"C": 0.0}, "C"), ("svm", {"folds": 1}, "folds"),
    ("mf", {"dim": 0}, "dim"), ("mf", {"lr": 0.0}, "lr"), ("elo", {"gamma": -1.0}, "gamma"),
])
def test_bad_settings_are_refused(name: str, bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_router(name, WEAK, STRONG, **bad)


# ------------------------------------------------------------------ each mechanism
def test_cluster_accuracy_is_pulled_toward_the_global_accuracy_by_the_prior() -> None:
    labels = np.array([0, 0, 0, 0, 1])  # cluster 1: one query, the weak model wrong
    correct = np.array([[1, 1], [1, 1], [1, 1], [1, 1], [0, 1]], dtype=float)
    accuracy, size = smoothed_accuracy(labels, correct, 2, prior=4.0)
    np.testing.assert_array_equal(size, [4, 1])
    # global weak accuracy 0.8: (0 + 4 * 0.8) / (1 + 4) for the one-query cluster
    np.testing.assert_allclose(accuracy[:, 0], [(4 + 3.2) / 8, 3.2 / 5])
    np.testing.assert_allclose(accuracy[:, 1], [1.0, 1.0])
    raw, _ = smoothed_accuracy(labels, correct, 2, prior=0.0)
    np.testing.assert_allclose(raw[:, 0], [1.0, 0.0])


def test_cluster_score_is_the_accuracy_the_strong_call_adds(fitted, halves) -> None:
    _, test = halves
    router = fitted["cluster"]
    win = router.predict(test)
    np.testing.assert_array_equal(router.scores(test), win[:, 1] - win[:, 0])
    assert isinstance(router, ClusterRouter)
    clusters = router.cluster_of(test)
    hard = np.array(["integral" in p for p in test.prompts])
    # the two topics never share a cluster
    assert not set(clusters[hard]) & set(clusters[~hard])


def test_cluster_k_is_chosen_by_cross_validation(halves) -> None:
    train, _ = halves
    choice = cross_validate("cluster", train, weak=WEAK, strong=STRONG, settings=FAST,
                            folds=3)
    assert choice.setting == "k" and set(choice.table) == {"k=4", "k=8", "k=16", "k=32"}
    assert isinstance(choice.settings()["k"], int)


def test_mlp_and_svm_probabilities_are_scikit_learns(fitted, halves) -> None:
    """The numpy scoring of a saved classifier is scikit-learn's predict_proba."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.neural_network import MLPClassifier
    from sklearn.svm import LinearSVC

    train, test = halves
    mlp, svm = fitted["mlp"], fitted["svm"]
    x_train = mlp._design(*mlp.inputs(train))
    x_test = mlp._design(*mlp.inputs(test))
    y = mlp.targets(train).astype(float)
    net = MLPClassifier(hidden_layer_sizes=(64,), alpha=0.01, max_iter=200,
                        random_state=0)
    with warnings.catch_warnings():  # stopping at max_iter, as the router does
        warnings.simplefilter("ignore")
        net.fit(x_train, y)
    np.testing.assert_allclose(mlp.scores(test), net.predict_proba(x_test)[:, 1],
                               rtol=0, atol=1e-10)
    calibrated = CalibratedClassifierCV(LinearSVC(C=0.1, max_iter=10_000, random_state=0),
                                        method="sigmoid", cv=3).fit(x_train, y)
    np.testing.assert_allclose(svm.scores(test), calibrated.predict_proba(x_test)[:, 1],
                               rtol=0, atol=1e-10)


def test_mf_learns_from_disagreements_only(halves) -> None:
    """Ties carry no comparison: queries both models answered alike change nothing."""
    train, test = halves
    router = MFRouter(WEAK, STRONG, **FAST).fit(train)
    right = train.correct
    ties = right[:, 0] == right[:, 1]
    swapped = np.where(ties[:, None], ~right, right)  # both right <-> both wrong
    flipped = TraceDataset(train.models, train.query_ids, train.prompts,
                           swapped.astype(float), swapped, train.input_tokens,
                           train.output_tokens, cost=train.cost)
    # the standardiser reads the same prompts; only the labels of the ties differ
    again = MFRouter(WEAK, STRONG, **FAST).fit(flipped)
    np.testing.assert_array_equal(again.scores(test), router.scores(test))


def test_mf_gradient_matches_finite_differences() -> None:
    """One Adam step from the start moves each weight by -lr * sign(gradient): compare
    those signs with the numerical gradient of the loss."""
    rng = np.random.default_rng(3)
    x, won = rng.normal(size=(40, 5)), (rng.random(40) < 0.5).astype(float)
    start = fit_mf(x, won, 3, 0.1, 1, 1e-9, seed=1)  # a step of 1e-9: the start

    def loss(p: dict) -> float:
        z = x @ mf_direction(p["w1"], p["w2"], p["v"])
        q = 1.0 / (1.0 + np.exp(-z))
        return float(-np.mean(won * np.log(q) + (1 - won) * np.log(1 - q))
                     + 0.05 * sum(float((v ** 2).sum()) for v in p.values()))

    stepped = fit_mf(x, won, 3, 0.1, 1, 1e-3, seed=1)
    for name, value in start.items():
        numeric = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            up = {k: v.copy() for k, v in start.items()}
            down = {k: v.copy() for k, v in start.items()}
            up[name][i] += 1e-6
            down[name][i] -= 1e-6
            numeric[i] = (loss(up) - loss(down)) / 2e-6
        moved = stepped[name] - value
        big = np.abs(numeric) > 1e-4
        np.testing.assert_array_equal(np.sign(moved[big]), -np.sign(numeric[big]))


def test_elo_without_similarity_is_one_rating_for_every_query(halves) -> None:
    """gamma = 0: plain Elo, the strong model's share of the points on every query."""
    train, test = halves
    plain = EloRouter(WEAK, STRONG, gamma=0.0, **FAST).fit(train)
    right = train.correct.astype(float)
    share = float(np.mean(0.5 + 0.5 * (right[:, 1] - right[:, 0])))
    np.testing.assert_allclose(plain.scores(test), share, rtol=0, atol=1e-12)


def test_route_train_takes_the_anchor_routers(tmp_path) -> None:
    data = two_topics(160)
    path = tmp_path / "logs.jsonl"
    rows = [{"query_id": q, "model": m, "correct": bool(data.correct[i, j]),
             "input_tokens": 10, "output_tokens": 10, "cost": float(data.cost[i, j]),
             "prompt": data.prompts[i], "group": data.groups[i]}
            for i, q in enumerate(data.query_ids) for j, m in enumerate(data.models)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["route", "train", "--data", str(path), "--weak", WEAK, "--strong",
                         STRONG, "--router", "cluster", "--cv", "3", "--save",
                         str(tmp_path / "r"), "--json", "--resamples", "200"]) == 0
    assert load_router(tmp_path / "r").name == "cluster"
    report = json.loads(out.getvalue())
    assert report["router"] == "cluster" and report["cv"]["setting"] == "k"


@pytest.mark.parametrize("name", ANCHORS)
def test_served_decisions_are_the_offline_decisions(name: str, fitted, halves,
                                                    tmp_path) -> None:
    """A saved anchor router routes fresh prompts in the server as it routes the logs."""
    from agents.serve import LiveRouter
    from agents.serve.routes import threshold_range

    train, test = halves
    router = fitted[name]
    point = calibrate_share(router.scores(train), 0.4, floor=router.min_threshold).threshold
    save_router(tmp_path / name, router, point, {"training": {"token_counter": "approx"}})
    live = LiveRouter.load(tmp_path / name)
    decisions = live.route_many(list(test.prompts))
    assert [d.model for d in decisions] == np.array(test.models)[
        router.route(test, point)].tolist()
    np.testing.assert_allclose([d.score for d in decisions], router.scores(test),
                               rtol=1e-12, atol=1e-12)
    # a probability score takes thresholds in [0, 1]; the cluster's accuracy difference any
    assert threshold_range(live) == ((-np.inf, np.inf) if name == "cluster" else (0.0, 1.0))


# ------------------------------------------------------------------ K models
def three_models(n: int = 300, seed: int = 0) -> TraceDataset:
    """Three models (costs 1, 3, 10): algebra needs `mid` or `strong`, geography none."""
    rng = np.random.default_rng(seed)
    hard = rng.random(n) < 0.4
    noise = ["".join(rng.choice(list("abcdefghij"), 5)) for _ in range(n)]
    prompts = tuple(
        (f"solve the integral equation {x}?" if h else f"name the capital country {x}?")
        for h, x in zip(hard, noise, strict=True))
    luck = rng.random((n, 3)) < 0.95
    correct = np.column_stack([~hard & luck[:, 0], luck[:, 1], luck[:, 2]])
    return TraceDataset((WEAK, "mid", STRONG), tuple(f"q{i}" for i in range(n)), prompts,
                        correct.astype(float), correct, np.ones((n, 3)), np.ones((n, 3)),
                        cost=np.tile((1.0, 3.0, 10.0), (n, 1)))


def test_multi_cluster_sends_each_cluster_to_its_cheapest_good_model(tmp_path) -> None:
    train, test = three_models().split(seed=0)
    router = make_router("multi-cluster", **FAST).fit(train)
    assert isinstance(router, ClusterMultiRouter) and router.models == (WEAK, "mid", STRONG)
    hard = np.array(["integral" in p for p in test.prompts])
    # lam = 2: cost / 5 of accuracy per call; `mid` is worth its price on algebra only
    # (the prior pulls a small geography cluster's weak accuracy of 0.95 toward 0.57)
    routed = np.array(test.models)[router.route(test, 2.0)]
    assert (routed[hard] == "mid").mean() >= 0.9 and (routed[~hard] == WEAK).mean() >= 0.9
    assert (np.array(test.models)[router.route(test, 0.0)] != WEAK)[hard].all()
    save_router(tmp_path / "m", router, 0.5)
    saved = load_router(tmp_path / "m")
    np.testing.assert_array_equal(saved.router.predict(test), router.predict(test))
    np.testing.assert_array_equal(saved.router.route(test, 0.5), router.route(test, 0.5))
    np.testing.assert_array_equal(make_router("multi-cluster", **FAST).fit(train).predict(test),
                                  router.predict(test))
    with pytest.raises(ValueError, match="k"):
        make_router("multi-cluster", k=0)
