"""A saved router routing fresh prompts: the offline scorer's decisions, one prompt at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents.routers import ROUTERS, calibrate, make_router, save_router
from agents.serve import LiveRouter
from cost_envs.traces import load_traces

GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "routellm" / "gsm8k_responses.csv"
WEAK, STRONG = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"


@pytest.fixture(scope="module")
def logs():
    """The first 400 of the 1,319 queries, split in two: live and offline decisions are
    compared one for one, so a live input that differs (the prompt, the weak answer, the
    token count) shows on 200 as on 660 (the text features were most of the test's time)."""
    if not GSM8K.is_file():
        pytest.skip(f"{GSM8K} not found (RouteLLM's GSM8K logs, read in place)")
    data = load_traces(GSM8K, token_counter="approx")
    return data.subset(np.arange(400)).split(seed=0, test_fraction=0.5)


@pytest.mark.parametrize("kind", sorted(ROUTERS))
def test_live_decisions_are_the_offline_decisions(logs, kind: str, tmp_path) -> None:
    train, test = logs
    router = make_router(kind, WEAK, STRONG, n_features=64).fit(train)
    point, _ = calibrate(router, train, **({"share": 0.5} if router.n_models == 2 else {}))
    save_router(tmp_path / "r", router, point,
                {"training": {"token_counter": train.token_counter}})
    live = LiveRouter.load(tmp_path / "r")
    assert live.token_counter == "approx"  # as the training logs were counted
    offline = np.array(test.models)[router.route(test, point)]
    answers = None
    if router.reads_answers:  # a cascade asks for the weak answer first
        first = live.route(test.prompts[0])
        assert first.needs_answer and first.model == WEAK and first.score is None
        answers = [row[test.model_index(WEAK)] or "" for row in test.responses]
    decisions = live.route_many(test.prompts, answers)
    assert [d.model for d in decisions] == offline.tolist()
    # one at a time: the same as in a batch (scores up to the BLAS's rounding)
    for i in (0, 7, 123):
        one = live.route(test.prompts[i], None if answers is None else answers[i])
        assert one.model == decisions[i].model and one.point == decisions[i].point
        assert one.win == pytest.approx(decisions[i].win, rel=1e-12)
    if router.n_models == 2:
        np.testing.assert_allclose([d.score for d in decisions], router.scores(test))
    if kind in ("priced", "multi-priced"):
        np.testing.assert_allclose([list(d.expected_costs.values()) for d in decisions],
                                   router.expected_costs(test))
    else:
        assert decisions[0].expected_costs is None


def test_bad_requests_are_refused(logs, tmp_path) -> None:
    train, _ = logs
    router = make_router("logistic", WEAK, STRONG, n_features=16).fit(train)
    save_router(tmp_path / "r", router, 0.5)
    live = LiveRouter.load(tmp_path / "r")
    assert live.token_counter == "auto"  # nothing recorded: tiktoken if it loads
    with pytest.raises(ValueError, match="prompts: expected non-empty strings"):
        live.route("")
    with pytest.raises(ValueError, match="answers: expected 2, got 1"):
        live.route_many(["a", "b"], ["x"])
    with pytest.raises(FileNotFoundError, match="no such file"):
        LiveRouter.load(tmp_path / "missing")
    # another operating point than the saved one
    assert live.route("what is 2 + 2?", point=-1.0).model == STRONG
    assert live.route("what is 2 + 2?", point=2.0).model == WEAK
    with pytest.raises(ValueError, match="point"):
        live.route("what is 2 + 2?", point=float("nan"))
    multi = make_router("multi-logistic", WEAK, STRONG, n_features=16).fit(train)
    save_router(tmp_path / "m", multi, 0.0)
    with pytest.raises(ValueError, match="point"):
        LiveRouter.load(tmp_path / "m").route("what is 2 + 2?", point=-1.0)  # lam >= 0
