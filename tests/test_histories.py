"""Learning-curve histories as CSV beside the reports (issue #25): exact round trips.

The committed tables and CORL reports were converted from indented JSON to a JSON summary
and a CSV of the histories; these tests hold the writer and the reader to giving back
exactly the numbers they were given, and the committed files to what the writers write.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from experiments.corl import runner as corl
from experiments.lora_ppo import report as lora_ppo_report
from experiments.shared.histories import attach, detach, read_csv, same_numbers, to_csv

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
#: sha256 of ``json.dumps(report["learning_curves"])`` of the committed
#: ``table_FlightPlanner-v1.json`` as ``python -m experiments all --tasks test`` wrote it
#: with the fixed numeric paths on 2026-12-07 (AMD EPYC; issue #38 point 3. Before it,
#: 8c991209... for the Intel Xeon file of 005c423, issue #36, and the JSON of 25dcfd6 that
#: held the histories): the CSV must give back those very numbers.
FLIGHT_V1_CURVES_SHA256 = "8f302b0c0b940dbabf91f7abfac4fcf2863cd44377470d55e3984a81c0fcb1e5"

TRICKY = {
    "ppo": [
        [{"timesteps": 512, "cost/cps": 0.1 + 0.2, "rollout/success_rate": 1.0},
         {"timesteps": 1024, "cost/cps": 2741219407407407.5, "rollout/success_rate": 0.0},
         {"timesteps": 1536, "cost/cps": 1e-300, "rollout/success_rate": -0.0}],
        [],  # a seed that logged nothing
        [{"timesteps": 512, "cost/cps": 5e-324}]],  # a metric it did not log
    "lora": [[], []],  # supervised only: no RL, no history
    "lora-ppo/random-base": [[{"timesteps": 0, "extra": 123456789012345678901234567890,
                               "cost/cps": float("inf")}]],
}


def test_a_round_trip_gives_back_exactly_the_numbers_ints_and_floats() -> None:
    text = to_csv(TRICKY)
    back = read_csv(text, {method: len(runs) for method, runs in TRICKY.items()})
    assert same_numbers(back, TRICKY)
    assert back["ppo"][0][0]["cost/cps"] == 0.30000000000000004
    assert type(back["ppo"][0][1]["timesteps"]) is int
    assert type(back["ppo"][0][1]["rollout/success_rate"]) is float
    assert math.copysign(1.0, back["ppo"][0][2]["rollout/success_rate"]) == -1.0
    assert "rollout/success_rate" not in back["ppo"][2][0]
    assert back["lora"] == [[], []]
    assert text.splitlines()[0] == "method,seed,timesteps,cost/cps,rollout/success_rate,extra"


def test_same_numbers_tells_ints_from_floats_and_takes_nan_as_nan() -> None:
    assert same_numbers({"a": [1.0, float("nan")], "b": 2}, {"b": 2, "a": [1.0, float("nan")]})
    assert not same_numbers({"a": 1}, {"a": 1.0})
    assert not same_numbers({"a": 1}, {"a": 1, "b": 2})
    assert not same_numbers([0.1], [0.1, 0.1])
    assert not same_numbers([0.30000000000000004], [0.3])


def test_detach_keeps_the_key_order_and_attach_restores_the_report(tmp_path) -> None:
    report = {"env_id": "x", "learning_curves": TRICKY, "gap_closed": {"a": 1}}
    summary, text = detach(report, "learning_curves", "curves.csv")
    assert list(summary) == ["env_id", "learning_curves_csv", "gap_closed"]
    assert summary["learning_curves_csv"] == {
        "file": "curves.csv", "seeds": {"ppo": 3, "lora": 2, "lora-ppo/random-base": 1}}
    (tmp_path / "curves.csv").write_text(text, encoding="utf-8")
    assert same_numbers(attach(json.loads(json.dumps(summary)), "learning_curves", tmp_path),
                        report)


@pytest.mark.parametrize(("text", "seeds", "message"), [
    ("seed,method,timesteps\n", {"ppo": 1}, "expected it to start with"),
    ("", {"ppo": 1}, "the header is None"),
    ("method,seed,timesteps\nppo,0,1,2\n", {"ppo": 1}, "line 2 has 4 cells, expected 3"),
    ("method,seed,timesteps\nsac,0,1\n", {"ppo": 1}, "line 2 is 'sac' seed '0'"),
    ("method,seed,timesteps\nppo,1,1\n", {"ppo": 1}, "line 2 is 'ppo' seed '1'"),
    ("method,seed,timesteps\nppo,0.5,1\n", {"ppo": 1}, "seed '0.5'"),
    ("method,seed,timesteps\nppo,0,many\n", {"ppo": 1},
     "line 2's timesteps is 'many', expected a number"),
])
def test_a_malformed_csv_is_refused_naming_the_line(text, seeds, message) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_csv(text, seeds)


@pytest.mark.parametrize(("histories", "message"), [
    ({"ppo": [[{"timesteps": 1, "done": True}]]}, "ppo done is True, expected an int"),
    ({"ppo": [[{"timesteps": "1"}]]}, "ppo timesteps is '1', expected an int"),
    ({"ppo": [[{"seed": 1}]]}, "a metric is named 'seed'"),
])
def test_what_would_not_read_back_is_refused(histories, message) -> None:
    with pytest.raises(ValueError, match=message):
        to_csv(histories)


def test_attach_names_a_missing_pointer_or_file(tmp_path) -> None:
    with pytest.raises(ValueError, match="'learning_curves_csv' = None"):
        attach({"env_id": "x"}, "learning_curves", tmp_path)
    pointer = {"file": "gone.csv", "seeds": {}}
    with pytest.raises(ValueError, match=r"cannot read .*gone\.csv"):
        attach({"learning_curves_csv": pointer}, "learning_curves", tmp_path)


def _committed(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} is not in this checkout")
    return path


def test_the_committed_curves_are_the_histories_the_json_held() -> None:
    path = _committed(RESULTS / "table_FlightPlanner-v1.json")
    report = lora_ppo_report.read_report(path)
    curves = json.dumps(report["learning_curves"])
    assert hashlib.sha256(curves.encode()).hexdigest() == FLIGHT_V1_CURVES_SHA256
    assert [len(run) for run in report["learning_curves"]["ppo"]] == [40] * 5
    assert report["learning_curves"]["lora"] == [[]] * 5


@pytest.mark.parametrize("path", sorted(RESULTS.glob("**/table_*.json")),
                         ids=lambda p: str(p.relative_to(RESULTS)))
def test_the_writer_writes_the_committed_table_files_from_what_they_read_back(path) -> None:
    report = lora_ppo_report.read_report(path)
    assert lora_ppo_report.json_report(report) == path.read_text(encoding="utf-8")
    csv_path = path.parent / lora_ppo_report.curves_file(report)
    assert lora_ppo_report.curves_csv(report) == csv_path.read_text(encoding="utf-8")
    assert lora_ppo_report.markdown_table(report) == path.with_suffix(".md").read_text(
        encoding="utf-8")


@pytest.mark.parametrize("path", sorted(RESULTS.glob("**/corl_tiers*.json")),
                         ids=lambda p: str(p.relative_to(RESULTS)))
def test_the_writer_writes_the_committed_corl_files_from_what_they_read_back(path) -> None:
    result = corl.read_result(path)
    assert len(result["training_curves"]) == len(result["seeds"])
    for name, text in corl.json_files(result).items():
        assert text == (path.parent / name).read_text(encoding="utf-8"), name
