"""``cost-envs evaluate`` on TraceRouting-v0 over the real logs (RouteLLM, RouterArena).

With one episode per test query every query is met once, so the env's deterministic
baselines must give exactly what the exact scorer (agents/routers/evaluation.py) gives
on the same queries; the random router must agree in expectation. The data lives outside
the repository: each case skips, naming the folder, where it is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from agents import cli
from agents.routers.evaluation import (
    call_costs,
    oracle_routing,
    random_shares,
    score_routings,
    single_model,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CASES = {
    "gsm8k": (DATA / "routellm" / "gsm8k_responses.csv", "query"),
    "mmlu": (DATA / "routellm" / "mmlu", "group"),
    "routerarena": (DATA / "routerarena", "group"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_evaluate_runs_on_the_real_logs_and_agrees_with_the_exact_scorer(name, capsys):
    path, split_by = CASES[name]
    if not path.exists():
        pytest.skip(f"{path} not found: the real logs live outside the repository "
                    "(../shared/data)")
    kwargs = {"data": str(path), "split": "test", "split_by": split_by}
    env = gym.make("cost_envs/TraceRouting-v0", **kwargs)
    base = env.unwrapped
    test = base.dataset
    strongest = test.models[base.strongest]
    env.close()
    n = test.n_queries
    status = cli.main(["evaluate", "--env", "cost_envs/TraceRouting-v0",
                       "--env-kwargs", json.dumps(kwargs), "--methods",
                       "capability,all,oracle,random-router", "--episodes", str(n),
                       "--resamples", "300", "--json"])
    assert status == 0
    out = json.loads(capsys.readouterr().out)
    assert all(out[m]["episodes"] == n for m in out)
    c = call_costs(test)
    exact = score_routings(test, {"strongest": single_model(test, strongest),
                                  "oracle": oracle_routing(test, c),
                                  "uniform": random_shares(test)}, c, n_resamples=0)
    # capability matching calls the most accurate model (on training) on every query
    assert out["capability"]["success_rate"] == pytest.approx(
        exact["strongest"]["accuracy"]["value"], abs=1e-12)
    assert out["capability"]["avg_cost"] == pytest.approx(
        exact["strongest"]["cost_per_query"]["value"], rel=1e-9)
    assert out["capability"]["avg_quality"] == pytest.approx(
        10 * exact["strongest"]["quality"]["value"], rel=1e-9)
    # calling every model pays every call and keeps the strongest called model's answer
    assert out["all"]["success_rate"] == pytest.approx(
        exact["strongest"]["accuracy"]["value"], abs=1e-12)
    assert out["all"]["avg_cost"] == pytest.approx(c.sum(axis=1).mean(), rel=1e-9)
    # the oracle is right wherever some model is: the exact oracle's accuracy
    assert out["oracle"]["success_rate"] == pytest.approx(
        exact["oracle"]["accuracy"]["value"], abs=1e-12)
    assert out["oracle"]["success_rate"] == pytest.approx(test.correct.any(axis=1).mean())
    # one model per query, uniformly: its draws land around the exact expectation
    rr = out["random-router"]
    assert sum(rr["call_ratio"].values()) == pytest.approx(1.0)
    low, high = rr["success_rate_ci"]
    assert low <= exact["uniform"]["accuracy"]["value"] <= high
    low, high = rr["avg_cost_ci"]
    assert low <= exact["uniform"]["cost_per_query"]["value"] <= high
    assert np.isfinite(rr["cps"])


# ------------------------------------------------------------- folders as ``data``
def _arena_line(qid: str, model: str, score: float) -> dict:
    return {"global_index": qid, "question": f"what is {qid}?", "llm_selected": model,
            "generated_answer": "x", "success": True,
            "token_usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
            "evaluation_result": {"score": score, "metric": "mcq_accuracy",
                                  "inference_cost": 1e-5 if model == "a" else 1e-4}}


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_a_folder_is_its_files_or_routerarenas_cached_results(tmp_path) -> None:
    from cost_envs.traces import load_routerarena, load_traces
    from cost_envs.traces.readers import folder_files, is_routerarena_folder

    arena = tmp_path / "arena"
    arena.mkdir()
    for model in ("a", "b"):
        _jsonl(arena / f"{model}.jsonl", [_arena_line(f"AIME_{i}", model, i % 2)
                                          for i in range(6)])
    assert is_routerarena_folder(arena)
    data = load_traces(arena)
    assert data.fingerprint == load_routerarena(arena).fingerprint and data.cost is not None
    generic = tmp_path / "generic"
    generic.mkdir()
    for group in ("x", "y"):
        _jsonl(generic / f"{group}.jsonl", [
            {"query_id": f"q{i}", "model": m, "correct": bool(i % 2), "prompt": f"p{i}",
             "input_tokens": 3, "output_tokens": 4, "cost": 0.1}
            for i in range(3) for m in ("a", "b")])
    (generic / "notes.txt").write_text("not a trace file")
    assert not is_routerarena_folder(generic)
    assert [p.name for p in folder_files(generic)] == ["x.jsonl", "y.jsonl"]
    combined = load_traces(generic)
    assert combined.n_queries == 6 and sorted(set(combined.groups)) == ["x", "y"]
    # the env takes the folder as data, and splits it by group
    env = gym.make("cost_envs/TraceRouting-v0", data=str(generic), split="test",
                   split_by="group")
    assert len(set(env.unwrapped.dataset.groups)) == 1
    env.close()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"a folder without \.csv/\.jsonl/\.ndjson files"):
        load_traces(empty)
