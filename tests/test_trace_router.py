"""The learned router, its env policy (agents.routers) and the GSM8K report
(experiments.traces.runner)."""

from __future__ import annotations

import json
import math
import types
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import cost_envs  # noqa: F401  (registers the envs)
from agents.routers import CascadeRouter, cascade_curve
from agents.routers import LogisticRouter as TraceRouter
from agents.routers.policy import RouterPolicy, cascade_observations
from agents.routers.solvers import LogisticRegression
from agents.routers.statistics import (
    ANSWER_STATISTICS,
    answer_statistics,
    arithmetic_value,
    text_statistics,
)
from cost_envs.metrics.routing import routing_curve
from cost_envs.traces import (
    APPROX_COUNTER,
    dataset_from_records,
    example_traces,
    load_traces,
    readers,
)
from experiments.traces import runner as trace_report
from experiments.traces.runner import _experiment, report

ROUTELLM = Path(__file__).resolve().parents[2] / "shared" / "data" / "routellm"
ENV_ID = "cost_envs/TraceRouting-v0"


def test_logistic_regression_recovers_the_signal() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 3))
    y = rng.random(2000) < 1 / (1 + np.exp(-(2 * x[:, 0] - x[:, 1] + 0.5)))
    model = LogisticRegression(l2=1.0).fit(x, y)
    assert model.coef_ is not None
    np.testing.assert_allclose(model.coef_, [2, -1, 0, 0.5], atol=0.25)
    assert ((model.predict_proba(x) > 0.5) == y).mean() > 0.75
    with pytest.raises(ValueError, match="call fit first"):
        LogisticRegression().predict_proba(x)
    with pytest.raises(ValueError, match="l2: expected a finite number > 0"):
        LogisticRegression(l2=0)


def test_text_statistics() -> None:
    stats = text_statistics(["Ann has 1,250 apples. She sells 50 percent of them.", ""])
    row = dict(zip(("chars", "words", "numbers", "sentences", "digits", "percent", "frac"),
                   stats[0], strict=True))
    assert row["numbers"] == pytest.approx(math.log1p(2))
    assert row["sentences"] == pytest.approx(math.log1p(2))
    assert row["digits"] == 4 and row["percent"] == 1 and row["frac"] == 0
    assert not stats[1].any()


@pytest.mark.parametrize("text", [
    "1/2 of it", "a/b", "HALF the cake", "behalf of", "half", "Thirds", "a QUARTER",
    "the fifth", "fifty", "quarterly", "no fraction here", "", "Ünder a HALF", "x 3/4 y",
    "\uff48\uff41\uff4c\uff46",  # "half" in fullwidth letters
    "two HALVES", "one-third", "the 1st"])
def test_the_fraction_column_is_the_regex_s(text: str) -> None:
    """The cheap check before the search changes no answer (ASCII or not)."""
    from agents.routers.statistics import _FRACTION

    assert text_statistics([text])[0, 6] == float(bool(_FRACTION.search(text)))


def test_router_learns_a_visible_difficulty() -> None:
    # the weak model fails the "tricky" questions (and 10% of the rest), the strong one
    # never: a router that reads the word reaches PGR 1 at a 40-50% strong-call share.
    # "tricky" and "simple" have the same length, so only the word features (hashed
    # n-grams) tell them apart: the text statistics (length, numbers, ...) cannot.
    rng = np.random.default_rng(0)
    records = []
    for q in range(400):
        tricky = rng.random() < 0.45
        prompt = f"question {q} is {'tricky' if tricky else 'simple'} about {rng.integers(9)}"
        weak_ok = not tricky and rng.random() > 0.1
        for model, ok in (("weak", weak_ok), ("strong", True)):
            records.append({"query_id": q, "model": model, "correct": ok, "prompt": prompt,
                            "input_tokens": 10, "output_tokens": 5})
    train, test = dataset_from_records(records).split(seed=0)
    scores = TraceRouter("weak", "strong", n_features=64).fit(train).scores(test)
    curve = routing_curve(scores, test.correct[:, 0], test.correct[:, 1])
    best = routing_curve(~test.correct[:, 0], test.correct[:, 0], test.correct[:, 1])
    assert curve.apgr > best.apgr - 0.05 and curve.apgr > 0.7  # random routing: 0.5


def test_router_fits_the_packaged_example() -> None:
    data = example_traces()
    train, test = data.split(seed=0, test_fraction=0.5)
    chosen = TraceRouter("gpt-4.1-nano", "o3", n_features=64).cross_validate(
        train, l2_grid=(1.0, 10.0), weight_grid=(0.0, 1.0), folds=3)
    assert len(chosen["cv_aiq"]) == 4
    assert chosen["cv_aiq"][f"l2={chosen['l2']:g},w={chosen['hashed_weight']:g}"] == max(
        chosen["cv_aiq"].values())
    with pytest.raises(KeyError, match="gpt-5"):
        TraceRouter("gpt-5", "o3").fit(train)
    with pytest.raises(ValueError, match="call fit first"):
        TraceRouter("gpt-4.1-nano", "o3").scores(test)


def test_router_policy_acts_in_the_env() -> None:
    train_env = gym.make(ENV_ID, split="train")
    test_env = gym.make(ENV_ID, split="test")
    policy = RouterPolicy(test_env, weak="gpt-4.1-nano", strong="o3").fit(train_env)
    obs, _ = test_env.reset(seed=0)
    for threshold, expected in ((-1.0, [0, 0, 1]), (2.0, [1, 0, 0])):
        policy.threshold = threshold
        assert policy.predict(obs)[0].tolist() == expected
        assert policy.predict(np.stack([obs, obs]))[0].tolist() == [expected, expected]
    scores = policy.scores(train_env.unwrapped.initial_observations())
    assert scores.shape == (train_env.unwrapped.dataset.n_queries,)
    assert 0 < (scores >= 0.5).mean() < 1  # it separates queries

    cascade = gym.make(ENV_ID, cascade=True)
    cpol = RouterPolicy(cascade).fit()
    obs, _ = cascade.reset(seed=0)
    first, _ = cpol.predict(obs)
    assert first.sum() == 1
    obs, *_ = cascade.step(first)
    assert not cpol.predict(obs)[0].any()  # second step: accept
    with pytest.raises(ValueError, match="TraceRouting"):
        RouterPolicy(gym.make("cost_envs/ToolBench-v0"))


def test_report_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="scale"):
        report(tmp_path, "huge", ROUTELLM)
    with pytest.raises(FileNotFoundError, match="outside the repository"):
        report(tmp_path, "smoke", tmp_path / "nowhere")


NO_DATA = f"{ROUTELLM} not found: the RouteLLM data lives outside the repository"


def fake_routellm(folder: Path, n: int = 120) -> Path:
    """A small RouteLLM-format GSM8K file: the weak model fails the long questions."""
    rng = np.random.default_rng(0)
    lines = ["prompt,mistralai/Mixtral-8x7B-Instruct-v0.1,gpt-4-1106-preview,"
             "mistralai/Mixtral-8x7B-Instruct-v0.1_response"]
    for q in range(n):
        long = rng.random() < 0.5
        prompt = f"Question {q}: Ann has {q} apples" + (" and more words" * 8 if long else "")
        weak_ok = not long and rng.random() > 0.1
        answer = f"{q} + 1 = {q + 1}\n#### {q + 1}" if weak_ok else "I think it is about 3?"
        lines.append(f'"{prompt}",{weak_ok},{rng.random() > 0.05},"{answer}"')
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gsm8k_responses.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_report_pins_the_approximate_token_counter(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    class Encoding:  # stands in for an installed tiktoken: 1 token per text
        def encode_ordinary_batch(self, texts):
            return [[0] for _ in texts]

    monkeypatch.setattr(readers, "_tiktoken_encoding", lambda: Encoding())
    data_dir = fake_routellm(tmp_path / "data")
    assert load_traces(data_dir / "gsm8k_responses.csv").token_counter != APPROX_COUNTER
    text = report(tmp_path / "out", "smoke", data_dir)
    gsm = json.loads((tmp_path / "out" / "trace_routing.json").read_text("utf-8"))["gsm8k"]
    assert gsm["token_counter"] == APPROX_COUNTER and APPROX_COUNTER in text
    assert 'token_counter="approx"' in text


@pytest.mark.parametrize("broken", ["markdown", "figure", "json_ready", "json"])
def test_a_rendering_failure_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            broken: str) -> None:
    data_dir = fake_routellm(tmp_path / "data")
    out = tmp_path / "out"
    out.mkdir()
    (out / "trace_routing.md").write_text("old", encoding="utf-8")

    def fail(*args, **kwargs):
        raise RuntimeError("rendering failed")

    # "json": the JSON text fails to render (it used to be rendered after the PNG was written)
    monkeypatch.setattr(trace_report, broken,
                        types.SimpleNamespace(dumps=fail) if broken == "json" else fail)
    with pytest.raises(RuntimeError, match="rendering failed"):
        report(out, "smoke", data_dir)
    assert [p.name for p in out.iterdir()] == ["trace_routing.md"]  # no new file, no temp
    assert (out / "trace_routing.md").read_text(encoding="utf-8") == "old"
    monkeypatch.undo()
    text = report(out, "smoke", data_dir)
    assert sorted(p.name for p in out.iterdir()) == [
        "trace_routing.json", "trace_routing.md", "trace_routing.png", "trace_routing.svg"]
    assert (out / "trace_routing.md").read_text(encoding="utf-8") == text
    assert (out / "trace_routing.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def smoke_report(smoke_all) -> tuple[Path, str]:
    """The smoke report the session's ``experiments all --scale smoke`` wrote (conftest.py).

    ``all`` reads the RouteLLM data where this module does; the same report is not
    computed again.
    """
    if not (ROUTELLM / "gsm8k_responses.csv").is_file():
        pytest.skip(NO_DATA)
    call = smoke_all.reports["traces"]
    out, scale, data_dir = call["args"]
    assert scale == "smoke" and data_dir.resolve() == ROUTELLM.resolve()
    return out, call["returned"]


def test_smoke_report_on_gsm8k_beats_random_routing_on_cpt80(
        smoke_report: tuple[Path, str]) -> None:
    tmp_path, text = smoke_report
    assert (tmp_path / "trace_routing.md").read_text(encoding="utf-8") == text
    assert (tmp_path / "trace_routing.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((tmp_path / "trace_routing.json").read_text(encoding="utf-8"))
    gsm = results["gsm8k"]
    assert gsm["test"] + gsm["train"] == 1319
    assert gsm["weak"] == "mistralai/Mixtral-8x7B-Instruct-v0.1"
    metrics = gsm["metrics"]
    learned, oracle = metrics["learned"], metrics["oracle"]
    # the done-when: fewer strong calls than random routing (0.8) for CPT(80%),
    # the whole 95% interval over test queries included
    assert learned["cpt_80"]["ci"][1] < 0.8
    assert learned["apgr"]["ci"][0] > 0.5
    assert oracle["cpt_80"]["ci"][1] < learned["cpt_80"]["ci"][0]
    assert metrics["random"]["cpt_80"]["value"] == 0.8
    assert "| learned |" in text and gsm["token_counter"] in text
    # the K-model block: MultiRouter held out on the real (two-model) logs, said so
    k_model = results["heldout"]["gsm8k"]["k_model"]
    assert sorted(k_model["models"]) == sorted([gsm["weak"], gsm["strong"]])
    assert set(k_model["rows"]) == {"multi-logistic", "multi-logistic (cv)", "multi-priced",
                                    "multi-cluster", "multi-rule"}
    # every learned row beside the best training-free rule over K models, at the same cost
    assert all(row["verdict_vs_rule"] in ("beats", "loses", "not resolved")
               for name, row in k_model["rows"].items() if name != "multi-rule")
    assert "accuracy - best rule at the same cost (paired)" in text
    assert "## Routing over K models" in text
    assert "No shipped log has more than two models" in text
    assert "| GSM8K queries (660 queries, 660 queries resampled) | multi-logistic |" in text


# ------------------------------------------------------------------------------ cascade
WEAK, STRONG = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"


def test_arithmetic_value_evaluates_plain_arithmetic_only() -> None:
    assert arithmetic_value("12+5*3+4*1.5") == pytest.approx(33.0)
    assert arithmetic_value("1,250 x 2") == 2500.0
    assert arithmetic_value("(80000+50000)/-2") == -65000.0
    assert arithmetic_value("2 \\* 3") == 6.0  # Markdown-escaped star
    for bad in ("2/0", "2**10", "__import__('os')", "abs(-1)", "", "1+", "2/3 of 6"):
        assert arithmetic_value(bad) is None, bad


def test_answer_statistics_read_what_the_answer_shows() -> None:
    prompt = "Janet has 16 eggs and eats 3. She sells the rest for $2 each."
    answers = [
        "She has 16 - 3 = <<16-3=13>>13 eggs.\nShe makes 13 * 2 = $<<13*2=26>>26.\n#### 26",
        "She has 16 - 3 = <<16-3=12>>12 eggs. However, assume half break: 12 * 0.5 = 6.5\n"
        "#### 6.5 dollars",
        "She has 16 - 3 = <<16-3=13>>13 eggs, so she makes 13 * 2 = $",  # cut off
        "",
    ]
    stats = answer_statistics(answers, [prompt] * 4)
    assert stats.shape == (4, len(ANSWER_STATISTICS))
    col = {name: stats[:, j] for j, name in enumerate(ANSWER_STATISTICS)}
    assert col["has_final"].tolist() == [1, 1, 0, 0]
    assert col["final_not_integer"].tolist() == [0, 1, 0, 0]
    assert col["final_is_last_result"].tolist() == [1, 1, 0, 0]
    assert col["final_has_words"].tolist() == [0, 1, 0, 0]
    assert col["annotation_error"].tolist() == [0, 1, 0, 0]  # 16 - 3 is not 12
    assert col["log_annotations"][:3] == pytest.approx(np.log1p([2, 1, 1]))
    assert col["log_hedges"][1] == pytest.approx(np.log1p(2))  # "However", "assume"
    assert col["log_hedges"][0] == 0
    assert col["final_in_prompt"].tolist() == [0, 0, 0, 0]
    assert col["log_decimals"].tolist() == pytest.approx([0, np.log1p(2), 0, 0])
    # the prompt's numbers are 16, 3 and 2: the second answer never uses the 2
    assert col["prompt_numbers_used"].tolist() == pytest.approx([1, 2 / 3, 1, 0])
    assert not stats[3].any()
    with pytest.raises(ValueError, match="as many prompts"):
        answer_statistics(["#### 1"], [])


def _gsm_like(n: int = 240, seed: int = 0) -> list[dict]:
    """Synthetic GSM8K-like traces whose weak answers show when they are wrong."""
    rng = np.random.default_rng(seed)
    records = []
    for q in range(n):
        a, b = (int(x) for x in rng.integers(2, 90, size=2))
        prompt = f"Ann has {a} apples and buys {b} more. How many apples does she have?"
        weak_ok = rng.random() < 0.6
        if weak_ok:
            weak = f"Ann has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"
        else:
            weak = rng.choice([
                f"Ann has {a} + {b} = <<{a}+{b}={a + b + 3}>>{a + b + 3} apples.\n"
                f"#### {a + b + 3}",
                f"However, assume she eats half: ({a} + {b}) / 2 = {(a + b) / 2}\n"
                f"#### {(a + b) / 2}",
                f"Ann has {a} apples and then",
            ])
        strong_ok = rng.random() < 0.95
        for model, ok, text in ((WEAK, weak_ok, weak),
                                (STRONG, strong_ok, f"She has {a + b} apples.")):
            records.append({"query_id": q, "model": model, "correct": ok, "prompt": prompt,
                            "response": str(text), "input_tokens": 30,
                            "output_tokens": 10 + len(str(text)) // 4})
    return records


def _edited(records: list[dict], edit) -> list[dict]:
    return [edit(dict(r)) for r in records]


def test_cascade_features_read_the_weak_answer_only() -> None:
    records = _gsm_like()
    data = dataset_from_records(records)
    router = CascadeRouter(WEAK, STRONG, n_features=32)
    base = np.hstack(router.inputs(data))
    assert base.shape == (data.n_queries, 7 + len(ANSWER_STATISTICS) + 2 * 32)

    def strong_text(r: dict) -> dict:
        if r["model"] == STRONG:
            r["response"] = "Wait, however, approximately #### 3.5 <<1+1=3>>"
        return r

    def labels(r: dict) -> dict:
        r["correct"] = not r["correct"]
        return r

    for edit in (strong_text, labels):
        other = dataset_from_records(_edited(records, edit))
        assert other.fingerprint != data.fingerprint
        np.testing.assert_array_equal(np.hstack(router.inputs(other)), base)
    # the column order of the models does not matter, the weak model's name does
    swapped = data.select_models([STRONG, WEAK])
    np.testing.assert_array_equal(np.hstack(router.inputs(swapped)), base)

    def weak_text(r: dict) -> dict:
        if r["model"] == WEAK:
            r["response"] = r["response"] + " Wait, that is approximately right?"
        return r

    assert not np.array_equal(np.hstack(router.inputs(dataset_from_records(
        _edited(records, weak_text)))), base)
    no_text = dataset_from_records(_edited(records, lambda r: {
        k: v for k, v in r.items() if k != "response"}))
    with pytest.raises(ValueError, match="no answer texts"):
        router.fit(no_text)


def test_cascade_curve_is_a_valid_routing_curve() -> None:
    data = dataset_from_records(_gsm_like())
    train, test = data.split(seed=0)
    scores = CascadeRouter(WEAK, STRONG, n_features=32).fit(train).scores(test)
    w, s = test.correct[:, 0], test.correct[:, 1]
    rng = np.random.default_rng(1)
    wc, sc = rng.uniform(0.1, 0.2, test.n_queries), rng.uniform(1.0, 3.0, test.n_queries)
    curve = cascade_curve(scores, w, s, wc, sc)
    plain = routing_curve(scores, w, s, wc, sc)
    np.testing.assert_array_equal(curve.strong_share, plain.strong_share)
    np.testing.assert_array_equal(curve.accuracy, plain.accuracy)
    assert curve.strong_share[0] == 0 and curve.strong_share[-1] == 1
    assert (np.diff(curve.strong_share) > 0).all()
    assert curve.accuracy[0] == pytest.approx(w.mean())
    assert curve.accuracy[-1] == pytest.approx(s.mean())
    # the weak call is paid on every query: from its mean cost to both models' together
    assert curve.cost[0] == pytest.approx(wc.mean())
    assert curve.cost[-1] == pytest.approx(wc.mean() + sc.mean())
    assert (np.diff(curve.cost) >= 0).all()
    # ... and an escalated query pays both: the non-cascade cost plus its weak call
    escalated_weak = routing_curve(scores, w, s, np.zeros_like(wc), wc).cost
    np.testing.assert_allclose(curve.cost - plain.cost, escalated_weak)
    # the answers give the failures away: far better than random routing (APGR 0.5)
    assert curve.apgr > 0.8 and curve.cpt(0.8) < 0.6


def test_cascade_router_is_fitted_on_train_only() -> None:
    records = _gsm_like(n=200, seed=2)
    data = dataset_from_records(records)
    train_idx, test_idx = data.split_indices(seed=0, test_fraction=0.5)
    test_ids = {data.query_ids[i] for i in test_idx}
    train_ids = {data.query_ids[i] for i in train_idx}
    base = _experiment(data, n_resamples=20, seed=0, cv=False, keep_curves=False)
    assert set(base["_scores"]) >= {"learned", "cascade", "no_final"}

    def scramble(ids: set[str], strong_text: bool):
        def edit(r: dict) -> dict:
            if str(r["query_id"]) in ids:  # the weak outcome flipped, the strong one right
                r["correct"] = r["model"] == STRONG or not r["correct"]
            if strong_text and r["model"] == STRONG:
                r["response"] = "#### 7"
            return r
        return edit

    # outcomes of the test queries and the strong model's answers: no effect at all
    other = dataset_from_records(_edited(records, scramble(test_ids, strong_text=True)))
    changed = _experiment(other, n_resamples=20, seed=0, cv=False, keep_curves=False)
    for name in ("learned", "cascade", "no_final"):
        np.testing.assert_array_equal(changed["_scores"][name], base["_scores"][name])
    assert changed["cascade"]["router"] == base["cascade"]["router"]
    # outcomes of the training queries: the router learns from them
    other = dataset_from_records(_edited(records, scramble(train_ids, strong_text=False)))
    changed = _experiment(other, n_resamples=20, seed=0, cv=False, keep_curves=False)
    assert not np.allclose(changed["_scores"]["cascade"], base["_scores"]["cascade"])
    # cross-validation picks the hyperparameters on the training split alone as well
    cv = _experiment(data, n_resamples=20, seed=0, cv=True, keep_curves=False)
    assert "cv_aiq" in cv["cascade"]["router"]


def test_cascade_observations_replay_the_second_step() -> None:
    env = gym.make(ENV_ID, cascade=True, split="test")
    base = env.unwrapped
    obs = cascade_observations(env)
    layout = base.observation_layout
    assert obs.shape == (base.dataset.n_queries, base.observation_space.shape[0])
    assert (obs[:, layout["turn"]] == 1).all() and (obs[:, layout["task_embedding"]] == 1).all()
    called = obs[:, layout["called"]]
    assert (called[:, base.cheapest] == 1).all() and called.sum() == len(obs)
    with pytest.raises(ValueError, match="cascade=True"):
        cascade_observations(gym.make(ENV_ID))


def test_smoke_report_cascade_beats_the_prompt_router(smoke_report: tuple[Path, str]) -> None:
    out, text = smoke_report
    gsm = json.loads((out / "trace_routing.json").read_text(encoding="utf-8"))["gsm8k"]
    metrics, cascade = gsm["metrics"], gsm["cascade"]
    cpt = metrics["cascade"]["cpt_80"]
    # robust over split seeds 0-5 (smoke and CV hyperparameters alike): the cascade's
    # CPT(80%) is 0.32-0.41 and the prompt router's 0.60-0.70, paired difference < -0.13
    assert cpt["value"] < metrics["learned"]["cpt_80"]["value"]
    assert cascade["minus_learned"]["cpt_80"]["ci"][1] < 0
    assert cpt["ci"][1] < 0.8 and metrics["cascade"]["minus_random"]["cpt_80"]["ci"][1] < 0
    assert metrics["cascade"]["apgr"]["ci"][0] > metrics["learned"]["apgr"]["value"]
    # its cost includes the weak call on every query
    weak_cost = gsm["cost_per_query_test"][gsm["weak"]]
    strong_cost = gsm["cost_per_query_test"][gsm["strong"]]
    assert cascade["weak_cost_per_query"] == pytest.approx(weak_cost)
    assert gsm["cost_at_cpt_80"]["cascade"] > weak_cost + 0.5 * cpt["value"] * strong_cost
    assert gsm["cost_at_cpt_80"]["cascade"] < gsm["cost_at_cpt_80"]["learned"]
    curve = gsm["curves"]["cascade"]
    assert curve["cost_per_query"][0] == pytest.approx(weak_cost)
    assert "| cascade: weak model first, learned on its answer |" in text
    assert "it beats the learned router" in text


def test_cascade_beats_the_prompt_router_on_every_split_seed() -> None:
    if not (ROUTELLM / "gsm8k_responses.csv").is_file():
        pytest.skip(NO_DATA)
    data = load_traces(ROUTELLM / "gsm8k_responses.csv")
    for seed in range(6):
        train, test = data.split(seed=seed)
        w, s = test.correct[:, 0], test.correct[:, 1]
        prompt = routing_curve(TraceRouter(WEAK, STRONG).fit(train).scores(test), w, s)
        cascade = routing_curve(CascadeRouter(WEAK, STRONG).fit(train).scores(test), w, s)
        assert cascade.cpt(0.8) < prompt.cpt(0.8) - 0.15, seed
