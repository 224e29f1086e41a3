"""RouterArena's cached_results loader (cost_envs.traces.routerarena)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cost_envs.prices import default_price_table
from cost_envs.traces import dataset_from_records, load_routerarena

ROUTERARENA = Path(__file__).resolve().parents[2] / "shared" / "data" / "routerarena"
HAIKU, FLASH = "claude-3-haiku-20240307", "gemini-2.0-flash-001"


def line(qid: str, model: str, score: float, cost: float, tokens: tuple[int, int] = (10, 5),
         question: str | None = None) -> dict[str, Any]:
    return {"global_index": qid, "question": question or f"what is {qid}?",
            "llm_selected": model, "generated_answer": f"{model} says {qid}",
            "token_usage": {"input_tokens": tokens[0], "output_tokens": tokens[1],
                            "total_tokens": sum(tokens)},
            "success": True,
            "evaluation_result": {"score": score, "metric": "mcq_accuracy",
                                  "inference_cost": cost}}


def model_lines(model: str, scale: float) -> list[dict[str, Any]]:
    ids = ["MMLUPro_history_3", "AIME_12", "MMLUPro_history_7", "OpenTDB_Science: Computers_1"]
    return [line(q, model, score=float(i % 2) if model == "m1" else 0.6, cost=scale * (i + 1),
                 tokens=(10 + i, 5 * (i + 1))) for i, q in enumerate(ids)]


def write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n"
                            for x in lines), encoding="utf-8")
    return path


def folder(tmp_path: Path) -> Path:
    write(tmp_path / "m1.jsonl", model_lines("m1", 1e-4))
    write(tmp_path / "m2.jsonl", model_lines("m2", 1e-5))
    return tmp_path


def test_fields_become_the_dataset(tmp_path: Path) -> None:
    data = load_routerarena(folder(tmp_path))
    assert data.models == ("m1", "m2")
    assert data.query_ids[0] == "MMLUPro_history_3" and data.n_queries == 4
    assert data.groups == ("MMLUPro_history", "AIME", "MMLUPro_history",
                           "OpenTDB_Science: Computers")
    assert data.prompts[1] == "what is AIME_12?"
    np.testing.assert_array_equal(data.input_tokens[:, 0], [10, 11, 12, 13])
    np.testing.assert_array_equal(data.output_tokens[:, 1], [5, 10, 15, 20])
    np.testing.assert_array_equal(data.scores[:, 1], 0.6)
    np.testing.assert_array_equal(data.correct[:, 0], [False, True, False, True])
    assert data.correct[:, 1].all()  # 0.6 >= 0.5
    assert data.responses is not None and data.responses[2][1] == "m2 says MMLUPro_history_7"
    # the logged dollars are the costs: no price table needed, and one given is overridden
    expected = np.array([[1e-4 * (i + 1), 1e-5 * (i + 1)] for i in range(4)])
    np.testing.assert_allclose(data.call_costs(None), expected, rtol=1e-12)
    np.testing.assert_allclose(data.call_costs(default_price_table()), expected, rtol=1e-12)
    assert data.token_counter == "logged"
    # a list of files in another order: models in that order
    again = load_routerarena([tmp_path / "m2.jsonl", tmp_path / "m1.jsonl"])
    assert again.models == ("m2", "m1")
    np.testing.assert_array_equal(again.scores[:, ::-1], data.scores)


def test_negative_scores_count_as_zero(tmp_path: Path) -> None:
    lines = model_lines("m1", 1e-4)
    lines[0]["evaluation_result"]["score"] = -0.033  # RouterArena's METEOR did this once
    write(tmp_path / "m1.jsonl", lines)
    assert load_routerarena(tmp_path / "m1.jsonl").scores[0, 0] == 0.0


def test_prices_none_needs_every_cost_logged() -> None:
    records = [{"query_id": "q", "model": m, "correct": True, "input_tokens": 1,
                "output_tokens": 1, **({"cost": 0.1} if m == "a" else {})} for m in "ab"]
    with pytest.raises(ValueError, match=r"prices=None, but the calls of model\(s\) \['b'\]"):
        dataset_from_records(records).call_costs(None)


def edited(field: str, value: Any) -> list[Any]:
    """m1's lines with ``field`` (dotted) of the third line set to ``value`` (or deleted)."""
    lines = copy.deepcopy(model_lines("m1", 1e-4))
    *parents, key = field.split(".")
    target = lines[2]
    for p in parents:
        target = target[p]
    if value is KeyError:
        del target[key]
    else:
        target[key] = value
    return lines


BAD = {
    # name: (m1's lines, line, field, text)
    "not JSON": ([*model_lines("m1", 1e-4)[:2], '{"global_index": "x_1",'], 3, None,
                 "not valid JSON"),
    "not an object": ([*model_lines("m1", 1e-4)[:1], "[1, 2]"], 2, None,
                      "expected a JSON object"),
    "missing score": (edited("evaluation_result.score", KeyError), 3,
                      "evaluation_result.score", "missing value"),
    "score above 1": (edited("evaluation_result.score", 1.5), 3, "evaluation_result.score",
                      "expected a number <= 1, got 1.5"),
    "score not a number": (edited("evaluation_result.score", "high"), 3,
                           "evaluation_result.score", "got 'high'"),
    "negative cost": (edited("evaluation_result.inference_cost", -1), 3,
                      "evaluation_result.inference_cost", "expected a number >= 0"),
    "no evaluation": (edited("evaluation_result", KeyError), 3, "evaluation_result.score",
                      "missing value"),
    "evaluation not an object": (edited("evaluation_result", 3), 3,
                                 "evaluation_result.score", "expected an object"),
    "fractional tokens": (edited("token_usage.output_tokens", 2.5), 3,
                          "token_usage.output_tokens", "expected an integer >= 0"),
    "missing question": (edited("question", KeyError), 3, "question", "missing value"),
    "id without domain": (edited("global_index", "AIME12"), 3, "global_index",
                          "expected '<domain>_<number>'"),
    "id not a string": (edited("global_index", 12), 3, "global_index", "expected a string"),
    "two models": (edited("llm_selected", "m9"), 3, "llm_selected", "one model per file"),
    "duplicate query": (edited("global_index", "MMLUPro_history_3"), 3, "global_index",
                        "duplicate query 'MMLUPro_history_3' (first on line 1)"),
    "answer not text": (edited("generated_answer", 5), 3, "generated_answer",
                        "expected a string"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_lines_name_file_line_and_field(tmp_path: Path, case: str) -> None:
    lines, at, field, text = BAD[case]
    path = write(tmp_path / "m1.jsonl", lines)
    with pytest.raises(ValueError) as err:
        load_routerarena(path)
    message = str(err.value)
    assert message.startswith(f"{path}: line {at}: "), message
    if field is not None:
        assert f"column {field!r}" in message, message
    assert text in message, message


def test_files_must_agree_on_the_queries(tmp_path: Path) -> None:
    first = write(tmp_path / "m1.jsonl", model_lines("m1", 1e-4))
    other = model_lines("m2", 1e-5)
    path = write(tmp_path / "m2.jsonl", other[:3])
    with pytest.raises(ValueError, match="no line for query 'OpenTDB_Science: Computers_1'"
                       ) as err:
        load_routerarena([first, path])
    assert str(err.value).startswith(str(path))
    write(path, [*other, line("AIME_99", "m2", 1.0, 0.1)])
    with pytest.raises(ValueError, match=r"line 5: column 'global_index': query 'AIME_99' "
                                         "is not in"):
        load_routerarena([first, path])
    other[1]["question"] = "something else"
    write(path, other)
    with pytest.raises(ValueError, match="line 2: column 'question': query 'AIME_12' has "
                                         "another question on line 2 of"):
        load_routerarena([first, path])
    write(path, model_lines("m1", 1e-5))
    with pytest.raises(ValueError, match="model 'm1' is also the model of"):
        load_routerarena([first, path])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no \*\.jsonl files"):
        load_routerarena(tmp_path / "empty")
    write(path, ["", " "])
    with pytest.raises(ValueError, match="the file is empty"):
        load_routerarena(path)
    with pytest.raises(FileNotFoundError):
        load_routerarena(tmp_path / "missing.jsonl")


def test_real_routerarena_matches_its_readme() -> None:
    if not (ROUTERARENA / f"{HAIKU}.jsonl").is_file():
        pytest.skip(f"{ROUTERARENA} not found: the RouterArena data lives outside the "
                    "repository")
    data = load_routerarena(ROUTERARENA)
    assert data.models == (HAIKU, FLASH) and data.n_queries == 809
    assert len(set(data.groups)) == 78  # prefixes before the last "_"
    assert data.scores.mean(axis=0).round(3).tolist() == [0.523, 0.690]
    assert data.call_costs(None).sum(axis=0).round(3).tolist() == [0.142, 0.038]
    assert (data.input_tokens > 0).all() and data.responses is not None


def test_trace_routing_env_replays_logged_costs_without_prices(tmp_path: Path) -> None:
    import gymnasium as gym

    data = load_routerarena(folder(tmp_path))  # models m1, m2: in no price table
    env = gym.make("cost_envs/TraceRouting-v0", data=data)
    env.reset(seed=0)
    q = env.unwrapped.task.query
    _, _, _, _, info = env.step(np.array([0, 1], dtype=np.int8))
    assert info["cost"] == pytest.approx(data.cost[q, 1]) and info["flops"] == 0.0
    env.close()
