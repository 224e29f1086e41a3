"""Routing over K models: the K-model router, its sweep and AIQ, K-model baselines and the
env's random router (one model per query)."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from agents.evaluation import rollout
from agents.routers import SINGLE_MODELS, MultiRouter, make_router, sweep_metrics
from agents.routers import router_from_state as multi_router_from_state
from agents.routers.evaluation import (
    hull_routing,
    model_baselines,
    random_routing,
    random_shares,
    score_routing,
    single_model,
    single_model_frontier,
)
from agents.routers.random_router import RandomRouter
from agents.rules import hand_written_rules
from cost_envs.envs.trace_routing import TraceTask
from cost_envs.metrics.bootstrap import resample_weights
from cost_envs.metrics.frontier import aiq, bootstrap_aiq, bootstrap_aiqs
from cost_envs.traces import TraceDataset

MODELS = ("small", "mid", "large")
KINDS = ("capital of the country", "sum of the numbers", "integral of the series")
COSTS = (1.0, 3.0, 10.0)


def crafted(n: int = 600, seed: int = 0, n_groups: int = 10) -> tuple[TraceDataset, np.ndarray]:
    """Three models; a query's words say which is the cheapest that gets it right.

    Kind 0 (easy): every model right; kind 1: ``mid`` and ``large``; kind 2: only
    ``large`` (each with 95% luck). Returns the data and each query's kind.
    """
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 3, n)
    noise = ["".join(rng.choice(list("abcdefghij"), 5)) for _ in range(n)]
    prompts = tuple(f"what is the {KINDS[k]} {x}?" for k, x in zip(kind, noise, strict=True))
    correct = np.column_stack([(kind <= j) & (rng.random(n) < 0.95) for j in range(3)])
    return TraceDataset(MODELS, tuple(f"q{i}" for i in range(n)), prompts,
                        correct.astype(float), correct, np.ones((n, 3)), np.ones((n, 3)),
                        cost=np.tile(COSTS, (n, 1)),
                        groups=tuple(f"g{i % n_groups}" for i in range(n))), kind


@pytest.fixture(scope="module")
def fitted() -> tuple[MultiRouter, TraceDataset, np.ndarray]:
    data, kind = crafted()
    train, test = data.split(0, 0.5)
    test_idx = data.split_indices(0, 0.5)[1]
    return MultiRouter(n_features=128, l2=1.0).fit(train), test, kind[test_idx]


# ------------------------------------------------------------------------ the router
def test_the_router_learns_the_right_model_from_the_words(fitted) -> None:
    router, test, kind = fitted
    p = router.correctness(test)
    for k in range(3):  # predicted correctness follows who is right on each kind
        mean = p[kind == k].mean(axis=0)
        if k > 0:
            assert mean[k - 1] < 0.5 < mean[k]
    # a price on cost: the cheapest right model of each kind (switches near lam 0.1 for
    # small vs mid on easy queries, 1.3 for large vs mid on hard ones, if sharp)
    decisions = router.route(test, 0.6)
    assert (decisions == kind).mean() > 0.9
    routed = score_routing(test, decisions, n_resamples=0)
    large = score_routing(test, single_model(test, "large"), n_resamples=0)
    assert routed["accuracy"]["value"] > large["accuracy"]["value"] - 0.05
    assert routed["cost_per_query"]["value"] < 0.7 * large["cost_per_query"]["value"]


def test_the_lam_sweep_lowers_cost_monotonically(fitted) -> None:
    router, test, _ = fitted
    lams = router.lams(test)
    assert lams[0] == 0 and (np.diff(lams) > 0).all()
    sweep = router.sweep(test, lams)
    unit = router.model_costs
    per_query = unit[sweep]  # (n, points): the chosen model's price, never rising
    assert (np.diff(per_query, axis=1) <= 0).all()
    assert (np.diff(per_query.mean(axis=0)) < 0).any()
    p = router.correctness(test)
    np.testing.assert_array_equal(sweep[:, 0], p.argmax(axis=1))  # lam 0: most likely right
    assert (sweep[:, -1] == 0).all()  # the last breakpoint: everything to the cheapest
    np.testing.assert_array_equal(router.route(test, lams[3]), sweep[:, 3])
    with pytest.raises(ValueError, match="lam"):
        router.route(test, -1.0)


def four_priced_models(n: int = 400, seed: int = 3) -> TraceDataset:
    """Four models whose calls cost per token, on prompts of varied length."""
    rng = np.random.default_rng(seed)
    words = rng.integers(5, 300, n)
    prompts = tuple(" ".join(["word"] * w) + f" q{i}?" for i, w in enumerate(words))
    correct = rng.random((n, 4)) < np.array([0.5, 0.6, 0.7, 0.85]) - 0.1 * words[:, None] / 300
    tokens = np.column_stack([words + 3] * 4)
    output = rng.integers(10, 60, (n, 4))
    cost = tokens * np.array([1, 2, 4, 9]) * 1e-7 + output * np.array([2, 5, 9, 20]) * 1e-7
    return TraceDataset(("a", "b", "c", "d"), tuple(f"q{i}" for i in range(n)), prompts,
                        correct.astype(float), correct, tokens, output, cost=cost)


def test_the_lams_are_exactly_the_points_where_some_decision_changes() -> None:
    # four models, each call priced per query: many crossings of two models are of two
    # that neither is chosen there; none of them is a point of the sweep
    data = four_priced_models()
    router = make_router("multi-priced", *data.models, n_features=16, l2=1.0).fit(data)
    inputs = router.inputs(data)
    lams = router.lams_inputs(inputs, max_points=10**6)
    p = router.predict_inputs(inputs)
    unit = router.expected_costs_inputs(inputs) / router.model_costs.max()
    dp, dc = p[:, :, None] - p[:, None, :], unit[:, :, None] - unit[:, None, :]
    mask = (dc > 0) & (dp > 0)
    crossings = np.unique(dp[mask] / dc[mask])
    assert np.isin(lams[1:], crossings).all() and len(lams) - 1 < 0.9 * len(crossings)
    swept = router.sweep_inputs(inputs, lams)
    # every point changes some decision from the point before it ...
    assert (swept[:, 1:] != swept[:, :-1]).any(axis=0).all()
    # ... and between two points none changes: any lam decides as the point below it,
    # the crossings left out too
    probe = np.concatenate([np.setdiff1d(crossings, lams),
                            np.random.default_rng(0).uniform(0, 1.2 * lams[-1], 300)])
    below = np.searchsorted(lams, probe, side="right") - 1
    np.testing.assert_array_equal(router.sweep_inputs(inputs, probe), swept[:, below])


def test_router_aiq_beats_the_single_model_hull_paired(fitted) -> None:
    router, test, _ = fitted
    out = sweep_metrics(test, {"router": router.sweep(test)}, split_by="group",
                        n_resamples=300)
    hull, mine = out[SINGLE_MODELS], out["router"]
    assert mine["cost_range"] == [1.0, 10.0] == hull["cost_range"]
    assert hull["value"] == pytest.approx(aiq(COSTS, test.scores.mean(axis=0), (1.0, 10.0)))
    assert mine["value"] == pytest.approx(aiq(mine["cost"], mine["quality"], (1.0, 10.0)))
    diff = mine[f"minus_{SINGLE_MODELS}"]
    assert diff["value"] == pytest.approx(mine["value"] - hull["value"])
    assert diff["ci"][0] > 0.05  # learnable from the words: clearly above the hull
    # a router that ignores the query cannot beat the hull: its points are mixtures
    blind = np.tile(np.arange(3), (test.n_queries, 1))
    assert sweep_metrics(test, {"blind": blind}, n_resamples=1)["blind"][
        "value"] == pytest.approx(hull["value"])
    with pytest.raises(ValueError, match="model indices"):
        sweep_metrics(test, {"bad": blind + 1}, n_resamples=1)


def test_state_round_trip_routes_exactly_alike(fitted) -> None:
    router, test, _ = fitted
    config, arrays = router.to_state()
    config = json.loads(json.dumps(config))
    assert arrays["coef"].shape == (3, 7 + 128 + 1) and arrays["cost"].tolist() == list(COSTS)
    loaded = multi_router_from_state(config, {k: v.tolist() for k, v in arrays.items()})
    np.testing.assert_array_equal(loaded.correctness(test), router.correctness(test))
    np.testing.assert_array_equal(loaded.sweep(test), router.sweep(test))
    with pytest.raises(ValueError, match="expected keys"):
        multi_router_from_state({**config, "router": "logistic"}, arrays)
    with pytest.raises(ValueError, match="expected router='multi-logistic', format=1"):
        MultiRouter.from_state({**config, "format": 2}, arrays)
    with pytest.raises(ValueError, match="unknown \\['k'\\]"):
        MultiRouter.from_state({**config, "k": 3}, arrays)
    with pytest.raises(ValueError, match="'coef': expected shape"):
        MultiRouter.from_state(config, {**arrays, "coef": arrays["coef"][:2]})
    with pytest.raises(ValueError, match="missing 'cost'"):
        MultiRouter.from_state(config, {k: v for k, v in arrays.items() if k != "cost"})
    with pytest.raises(ValueError, match="call fit first"):
        MultiRouter().to_state()


def test_router_checks_its_models() -> None:
    data, _ = crafted(n=60)
    with pytest.raises(KeyError, match="no model 'huge'"):
        MultiRouter(models=("small", "huge")).fit(data)
    with pytest.raises(ValueError, match="at least two"):
        MultiRouter(models=("small",)).fit(data)
    with pytest.raises(ValueError, match="list of model names"):
        MultiRouter(models="small")
    two = MultiRouter(models=("large", "small"), n_features=16).fit(data)
    assert set(np.unique(two.sweep(data))) <= {0, 2}  # data columns of its two models


# ------------------------------------------------------------------ K-model baselines
def test_random_over_k_models_is_its_exact_expectation() -> None:
    data, _ = crafted(n=90)
    alone = {m: score_routing(data, single_model(data, m), n_resamples=0) for m in MODELS}
    for shares in ({"small": 0.2, "mid": 0.5, "large": 0.3}, None):
        weights = shares or dict.fromkeys(MODELS, 1 / 3)
        out = score_routing(data, random_shares(data, shares), strong="large", n_resamples=0)
        for key in ("accuracy", "cost_per_query"):
            expected = sum(w * alone[m][key]["value"] for m, w in weights.items())
            assert out[key]["value"] == pytest.approx(expected, abs=1e-12)
        assert out["model_share"] == pytest.approx(weights)
    np.testing.assert_array_equal(random_routing(data, "small", "large", 0.3),
                                  random_shares(data, {"small": 0.7, "large": 0.3}))
    with pytest.raises(ValueError, match="summing to 1"):
        random_shares(data, {"small": 0.5})
    with pytest.raises(ValueError, match="no model 'huge'"):
        random_shares(data, {"huge": 1.0})
    assert set(model_baselines(data)) == {"random (uniform)", "only small", "only mid",
                                          "only large", "oracle"}


def test_single_model_hull_drops_dominated_models_and_random_reaches_it() -> None:
    data, _ = crafted(n=90)
    # "mid" made dearer than "large": it is dominated and leaves the hull
    cost = np.tile([1.0, 12.0, 10.0], (data.n_queries, 1))
    hull = single_model_frontier(data, cost)
    assert hull["models"] == ["small", "large"] and hull["cost"] == [1.0, 10.0]
    for budget in (0.5, 4.0, 10.0, 20.0):
        out = score_routing(data, hull_routing(data, budget, cost), cost, n_resamples=0)
        spent = min(max(budget, 1.0), 10.0)
        assert out["cost_per_query"]["value"] == pytest.approx(spent)
        assert out["quality"]["value"] == pytest.approx(
            np.interp(spent, hull["cost"], hull["quality"]))


def test_bootstrap_aiqs_pairs_routers_on_the_same_resamples() -> None:
    data, _ = crafted(n=80, n_groups=8)
    q, c = data.scores, np.asarray(data.cost)
    mixed = np.column_stack([q[:, 0], np.where(np.arange(80) % 2, q[:, 2], q[:, 1])])
    mixed_c = np.column_stack([c[:, 0], np.where(np.arange(80) % 2, c[:, 2], c[:, 1])])
    span = (1.0, 10.0)
    out = bootstrap_aiqs({"a": (q, c), "b": (mixed, mixed_c)}, span, clusters=data.groups,
                         reference="a", n_resamples=120, seed=3)
    single = bootstrap_aiq(q, c, span, clusters=data.groups, n_resamples=120, seed=3)
    assert out["a"]["value"] == single["value"]
    weights = resample_weights(np.random.default_rng(3), 120, 80, data.clusters("group"))
    diffs = []
    for w in weights:
        mean = lambda x, w=w: (w @ x) / w.sum()  # noqa: E731
        diffs.append(aiq(mean(mixed_c), mean(mixed), span) - aiq(mean(c), mean(q), span))
    low, high = np.percentile(diffs, [2.5, 97.5])
    assert out["b"]["minus_a"]["ci"][0] == pytest.approx(min(low, out["b"]["minus_a"]["value"]))
    assert out["b"]["minus_a"]["ci"][1] == pytest.approx(max(high, out["b"]["minus_a"]["value"]))
    with pytest.raises(ValueError, match="same queries"):
        bootstrap_aiqs({"a": (q, c), "b": (q[:5], c[:5])}, span)


# ------------------------------------------------------------ the env's random router
def _calls(policy, env: gym.Env, n: int) -> np.ndarray:
    """Models called in each of the env's first ``n`` queries, replayed in order."""
    base = env.unwrapped
    data = base.dataset
    rows = []
    for q in range(n):
        task = TraceTask(q, data.query_ids[q], base.n_agents, data.fingerprint)
        played = rollout(policy, env, options={"task": task}, record_steps=True)
        rows.append(played.actions.sum(axis=0))
    return np.array(rows)


def test_random_router_calls_exactly_one_model_per_query() -> None:
    env = gym.make("cost_envs/TraceRouting-v0")  # the packaged example: three models
    calls = _calls(RandomRouter(env, seed=1), env, 300)
    assert (calls.sum(axis=1) == 1).all()
    assert np.abs(calls.mean(axis=0) - 1 / 3).max() < 0.1
    cascade = gym.make("cost_envs/TraceRouting-v0", cascade=True)
    assert (_calls(RandomRouter(cascade, seed=2), cascade, 100).sum(axis=1) == 1).all()
    # the generic `random` baseline calls nobody on some queries: that is the difference
    from agents.baselines import RandomAllocator

    assert (_calls(RandomAllocator(env, seed=1), env, 300).sum(axis=1) == 0).any()


def test_random_router_share_and_refusals() -> None:
    data, _ = crafted(n=400)
    two = data.select_models(["small", "large"])
    env = gym.make("cost_envs/TraceRouting-v0", data=two)
    calls = _calls(RandomRouter(env, share=0.25, seed=0), env, 400)
    strongest = env.unwrapped.strongest
    assert two.models[strongest] == "large"
    assert calls[:, strongest].mean() == pytest.approx(0.25, abs=0.07)
    with pytest.raises(ValueError, match="share applies to two models"):
        RandomRouter(gym.make("cost_envs/TraceRouting-v0"), share=0.5)
    with pytest.raises(ValueError, match="expected cost_envs/TraceRouting-v0"):
        RandomRouter(gym.make("cost_envs/AgenticRouting-v0"))
    with pytest.raises(ValueError, match="share"):
        RandomRouter(env, share=1.5)
    # random, so no candidate of the fixed-rule search
    assert "random-router" not in [name for name, _ in hand_written_rules(env)]
