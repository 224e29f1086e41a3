"""The cost-aware router: it prices each call and buys accuracy where a dollar buys most."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.routers import PricedMultiRouter, PricedRouter, calibrate, load_router, make_router
from agents.routers.calibration import calibrate_cost, calibrate_share
from agents.routers.priced import fit_prices
from cost_envs.traces import TraceDataset

WEAK, STRONG = "weak", "strong"
#: Dollars per token of the weak and the strong model: (input, output).
PRICES = np.array([[1e-7, 4e-7], [2e-6, 6e-6]])


def long_prompts_cost_more(n: int = 4000, seed: int = 0, strong_accuracy: float = 0.95,
                           tokens_per_word: int = 8) -> TraceDataset:
    """Longer prompts need the strong model more often, and every call costs per token.

    The weak model fails with a probability rising with the prompt's length (0.30 to
    0.45), so a router of P(weak wrong) sends its strong calls to the longest, dearest
    prompts; the gain per dollar of a strong call falls with length.

    A prompt of ``w`` words (5 to 399: its tokens are ``w + 3``) is written as
    ``ceil(w / tokens_per_word)`` words: its length, all a router reads of it here, still
    grows with ``w``, and the routers' text features cost a share of the time (the
    priced routers beat the unpriced ones by as much at 8 as at 1, and the tests fail
    alike when the pricer ignores the query; 1 writes every word, as the files in
    ``tests/data`` were fitted).
    """
    rng = np.random.default_rng(seed)
    words = rng.integers(5, 400, n)
    prompts = tuple(" ".join(["word"] * -(-w // tokens_per_word)) + f" q{i}?"
                    for i, w in enumerate(words))
    share = (words - 5) / 395
    weak = rng.random(n) >= 0.3 + 0.15 * share
    strong = rng.random(n) < strong_accuracy
    correct = np.column_stack([weak, strong])
    input_tokens = np.column_stack([words + 3, words + 3])
    output_tokens = np.column_stack([rng.integers(20, 40, n), 30 + words // 4])
    cost = input_tokens * PRICES[:, 0] + output_tokens * PRICES[:, 1]
    return TraceDataset((WEAK, STRONG), tuple(f"q{i}" for i in range(n)), prompts,
                        correct.astype(float), correct, input_tokens, output_tokens,
                        cost=cost)


@dataclass(frozen=True)
class Fitted:
    """Routers fitted once on the training half of ``long_prompts_cost_more()`` (seed 0).

    The tests that compare routers at a budget need these 4000 queries (their margins are
    statistical); they only read the routers, so one fit of each serves them all.
    """

    train: TraceDataset
    test: TraceDataset
    budget: float
    routers: dict[str, Any]


@pytest.fixture(scope="module")
def fitted() -> Fitted:
    train, test = long_prompts_cost_more().split(seed=0)
    budget = float(train.cost[:, 0].mean() + 0.3 * (train.cost[:, 1] - train.cost[:, 0]).mean())
    routers = {"priced": PricedRouter(WEAK, STRONG, n_features=16).fit(train)}
    for name in ("logistic", "multi-priced", "multi-logistic"):
        routers[name] = make_router(name, WEAK, STRONG, n_features=16).fit(train)
    return Fitted(train, test, budget, routers)


def accuracy_and_cost(test: TraceDataset, strong_calls: np.ndarray) -> tuple[float, float]:
    rows = np.arange(test.n_queries)
    pick = strong_calls.astype(np.int64)
    return (float(test.correct[rows, pick].mean()), float(test.cost[rows, pick].mean()))


def test_prices_are_recovered_from_priced_calls() -> None:
    data = long_prompts_cost_more(500)
    for j in range(2):
        np.testing.assert_allclose(fit_prices(data.cost[:, j], data.input_tokens[:, j],
                                              data.output_tokens[:, j]), PRICES[j],
                                   rtol=1e-9)
    # a negative unconstrained price falls back to the better one-price fit
    tokens = np.array([1.0, 2.0, 3.0, 4.0])
    assert (fit_prices(tokens * 2.0, tokens, 2 * tokens + np.array([0, 1, 0, 1]))
            >= 0).all()


def test_expected_costs_price_the_prompt_and_predict_the_output(fitted: Fitted) -> None:
    test, router = fitted.test, fitted.routers["priced"]
    expected = router.expected_costs(test)
    actual = test.cost
    # the mean is right (Duan's smearing), and the strong call's per-query price follows
    # its length-driven output tokens
    np.testing.assert_allclose(expected.mean(axis=0), actual.mean(axis=0), rtol=0.05)
    assert np.corrcoef(expected[:, 1], actual[:, 1])[0, 1] > 0.95


def test_at_the_same_cost_it_beats_the_probability_router_and_random(fitted: Fitted) -> None:
    train, test, budget = fitted.train, fitted.test, fitted.budget
    results = {}
    for name in ("priced", "logistic"):
        router = fitted.routers[name]
        threshold, _ = calibrate(router, train, train.cost, cost=budget)
        results[name] = accuracy_and_cost(test, router.scores(test) >= threshold)
    (acc_p, cost_p), (acc_l, cost_l) = results["priced"], results["logistic"]
    # both spend about the budget on the test queries ...
    assert cost_p == pytest.approx(budget, rel=0.1) and cost_l == pytest.approx(budget, rel=0.1)
    # ... and the priced router buys more strong calls with it, so more accuracy
    assert acc_p > acc_l + 0.02
    # random routing at the priced router's cost: the share that spends it
    w, s = test.cost[:, 0].mean(), test.cost[:, 1].mean()
    share = (cost_p - w) / (s - w)
    random_acc = (1 - share) * test.correct[:, 0].mean() + share * test.correct[:, 1].mean()
    assert acc_p > random_acc + 0.02


def test_it_never_pays_for_a_call_predicted_to_lose_accuracy() -> None:
    # the dearer model is worse (the predicted loss shows at any size: no score >= 0 at 800
    # queries, as at 4000)
    data = long_prompts_cost_more(800, strong_accuracy=0.3)
    train, _ = data.split(seed=0)
    router = PricedRouter(WEAK, STRONG, n_features=16).fit(train)
    scores = router.scores(train)
    threshold, facts = calibrate(router, train, share=0.5)
    assert threshold == 0.0 and facts["train_strong_share"] == (scores >= 0).mean() < 0.5
    assert calibrate_share(scores, 0.5).threshold < 0  # without the floor it would pay
    big = float(train.cost[:, 1].mean())
    capped = calibrate_cost(scores, train.cost[:, 0], train.cost[:, 1], big, floor=0.0)
    assert capped.threshold >= 0 and capped.strong_share == (scores >= 0).mean()
    with pytest.raises(ValueError, match="floor: expected a number < inf"):
        calibrate_share(scores, 0.5, floor=float("inf"))


def test_decisions_read_the_prices() -> None:
    data = long_prompts_cost_more(800)
    train, test = data.split(seed=0)
    router = PricedRouter(WEAK, STRONG, n_features=16).fit(train)
    win, costs = router.predict(test), router.expected_costs(test)
    point = float(np.median(router.scores(test)))
    chosen = router.decide(win, point, costs)
    np.testing.assert_array_equal(chosen, (router.scores(test) >= point).astype(int))
    np.testing.assert_array_equal(router.route(test, point),
                                  np.array([0, 1])[chosen])
    # the same predictions with the strong call priced 100x dearer: fewer strong calls
    dearer = costs * np.array([1.0, 100.0])
    assert router.decide(win, point, dearer).sum() < chosen.sum()
    with pytest.raises(ValueError, match="expected costs=expected_costs"):
        router.decide(win, point)


def test_the_k_model_router_priced_per_query_is_the_two_model_rule_at_k_2() -> None:
    data = long_prompts_cost_more(400)  # an identity: holds at any size
    train, test = data.split(seed=0)
    two = PricedRouter(WEAK, STRONG, n_features=16).fit(train)
    many = PricedMultiRouter((WEAK, STRONG), n_features=16).fit(train)
    np.testing.assert_allclose(many.predict(test), two.predict(test))
    np.testing.assert_allclose(many.expected_costs(test), two.expected_costs(test))
    scale = many.model_costs.max()
    scores = two.scores(test)
    for lam in (0.0, 0.05, 0.2, 1.0):
        np.testing.assert_array_equal(many.route(test, lam) == 1,
                                      scores >= lam / scale - 1e-12 / scale)


def test_priced_per_query_the_k_model_router_buys_more_accuracy_per_dollar(
        fitted: Fitted) -> None:
    train, test, budget = fitted.train, fitted.test, fitted.budget
    accuracy = {}
    for name in ("multi-priced", "multi-logistic"):
        router = fitted.routers[name]
        lam, _ = calibrate(router, train, cost=budget)
        acc, cost = accuracy_and_cost(test, router.route(test, lam) == 1)
        assert cost == pytest.approx(budget, rel=0.15)
        accuracy[name] = acc
    # priced at its mean cost, a call on a long prompt looks as cheap as one on a short
    assert accuracy["multi-priced"] > accuracy["multi-logistic"] + 0.02


def test_the_cost_floor_restricts_the_candidates_and_never_passes_the_target() -> None:
    # the second query's strong call is cheaper than its weak one: fewer strong calls
    # are dearer there, so moving the chosen point up to the floor could pass the target
    scores, weak, strong = [1.0, -1.0], [1.0, 1.0], [1.5, 0.1]
    assert calibrate_cost(scores, weak, strong, 0.9).cost_per_query == pytest.approx(0.8)
    with pytest.raises(ValueError, match="no threshold keeps"):
        calibrate_cost(scores, weak, strong, 0.9, floor=0.0)
    chosen = calibrate_cost(scores, weak, strong, 1.0, floor=0.0)
    assert chosen.threshold == np.inf and chosen.cost_per_query == pytest.approx(1.0)


def test_an_unfitted_priced_router_says_fit_first() -> None:
    data = long_prompts_cost_more(50)
    with pytest.raises(ValueError, match="call fit first"):
        PricedRouter(WEAK, STRONG, n_features=16).scores(data)


@pytest.mark.parametrize("kind", ["priced", "multi-priced"])
def test_routers_saved_before_the_pricer_had_one_home_decide_as_they_did(kind: str) -> None:
    """Files saved by the tree before ``PricedLogistic`` (commit f8bcfc2) load and decide.

    Each fixture was fitted there with ``n_features=32`` on
    ``long_prompts_cost_more(600, seed=3, tokens_per_word=1)``'s first 400 queries,
    calibrated (default target) and saved with what it decided on the other 200 (its
    meta's ``"fixture"``).
    """
    path = Path(__file__).parent / "data" / f"{kind}_router_before_issue24_refactor"
    saved = load_router(path)
    recorded = saved.meta["fixture"]
    data = long_prompts_cost_more(600, seed=3, tokens_per_word=1)
    test = data.subset(np.arange(400, 600))
    assert saved.router.route(test, saved.point).tolist() == recorded["route"]
    # the recorded predictions and prices are those of the first 40 test queries (each
    # query's own: its features are its text's and tokens')
    first = data.subset(np.arange(400, 440))
    np.testing.assert_array_equal(saved.router.predict(first), recorded["predict"])
    np.testing.assert_array_equal(saved.router.expected_costs(first),
                                  recorded["expected_costs"])
    # and a router refitted now is the saved one, array for array: to the last bits on the
    # machine that saved it; another CPU's BLAS kernels round the solver's sums in another
    # order (an AMD EPYC refit differs by <= 4.4e-16 absolute), so the refit is held to
    # 1e-9 relative, far tighter than any change to what the fit solves would allow
    train = data.subset(np.arange(400))
    _, arrays = make_router(kind, WEAK, STRONG, n_features=32).fit(train).to_state()
    _, before = saved.router.to_state()
    assert arrays.keys() == before.keys()
    for name, values in before.items():
        np.testing.assert_allclose(arrays[name], values, rtol=1e-9, atol=1e-12, err_msg=name)
