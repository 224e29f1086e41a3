"""``cost-envs route``: train -> save -> score on crafted logs, its errors, its saved files."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import agents
from agents import cli
from agents.cli.route import EXIT_INPUT, EXIT_USAGE
from agents.routers import LogisticRouter as TraceRouter
from agents.routers import calibrate_cost, calibrate_share, load_router
from agents.routers.evaluation import (
    compare_with_random,
    curve_metrics,
    oracle_routing,
    score_routings,
    single_model,
)
from agents.routers.state import router_files
from cost_envs.metrics.routing import oracle_scores, routing_curve
from cost_envs.traces import TraceDataset, load_routerarena, load_traces, records_from_dataset

ROOT = Path(agents.__file__).resolve().parents[1]
WEAK, STRONG = "small", "large"
#: Bootstrap resamples of the scored runs: the tests compare the command's intervals with the
#: library's on the same resamples, which hold for any number of them.
RESAMPLES = "50"
WORDS = ("apples", "trains", "percent", "fraction", "speed", "area", "ages", "coins")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def crafted_rows(n: int = 120, seed: int = 0, models: tuple[str, ...] = (WEAK, STRONG, "mid")
                 ) -> list[dict]:
    """Generic rows: the weak model fails on queries mentioning some words (learnable)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        words = rng.choice(WORDS, size=3)
        hard = bool({"percent", "fraction"} & set(words))
        prompt = f"Question {i}: " + " ".join(words) + " " + "x " * int(rng.integers(1, 30))
        ok = {WEAK: (not hard) and rng.random() < 0.9, STRONG: rng.random() < 0.9,
              "mid": rng.random() < 0.7}
        for model in models:
            tokens = int(rng.integers(20, 200))
            rows.append({"query_id": f"q{i}", "model": model, "correct": bool(ok[model]),
                         "input_tokens": 40, "output_tokens": tokens,
                         "cost": tokens * (1e-6 if model == WEAK else 2e-5),
                         "prompt": prompt, "group": f"g{i % 8}"})
    return rows


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    """The crafted logs, written once: the tests only read them."""
    return write_jsonl(tmp_path_factory.mktemp("route") / "logs.jsonl", crafted_rows())


@pytest.fixture(scope="module")
def logged(logs) -> TraceDataset:
    """``logs`` as the library reads them (read once: the tests only read the dataset)."""
    return load_traces(logs)


def route(capsys, *argv: str) -> dict:
    """``cost-envs route ARGV --json`` in process: its JSON output."""
    assert cli.main(["route", *argv, "--json", "--resamples", RESAMPLES]) == 0
    return json.loads(capsys.readouterr().out)


def train_args(data: Path, save: Path, *extra: str) -> list[str]:
    return ["train", "--data", str(data), "--weak", WEAK, "--strong", STRONG,
            "--save", str(save), *extra]


@pytest.fixture(scope="module")
def trained(logs, tmp_path_factory):
    """``trained(*extra)``: ``route train`` on ``logs`` with ``extra`` options, run once per
    module: its JSON output and the router it saved.

    For the tests that only read both; a test that changes the saved files works on a copy
    (:func:`copy_router`).
    """
    runs: dict[tuple[str, ...], tuple[dict, Path]] = {}

    def train(*extra: str) -> tuple[dict, Path]:
        if extra not in runs:
            save = tmp_path_factory.mktemp("trained") / "r"
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert cli.main(["route", *train_args(logs, save, *extra), "--json",
                                 "--resamples", RESAMPLES]) == 0
            runs[extra] = (json.loads(out.getvalue()), save)
        return runs[extra]

    return train


#: The options of the group-split training the tests share (:func:`trained`).
BY_GROUP = ("--split-by", "group")


def copy_router(saved: Path, to: Path) -> Path:
    """A copy of the router saved at ``saved`` (its two files), saved at ``to``."""
    for source, target in zip(router_files(saved), router_files(to), strict=True):
        shutil.copyfile(source, target)
    return to


def fails(capsys, argv: list[str], *names: str, status: int = EXIT_INPUT) -> str:
    """``cost-envs ARGV`` exits with ``status`` and one line naming ``names``."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == status
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for name in names:
        assert name in err, (name, err)
    return err


# ------------------------------------------------------------------ train and score
@pytest.mark.parametrize("split_by", ["query", "group"])
def test_train_gives_the_in_process_numbers(logs, logged, tmp_path, capsys, split_by):
    out = route(capsys, *train_args(logs, tmp_path / "r", "--split-by", split_by,
                                    "--seed", "3"))
    data = logged.select_models([WEAK, STRONG])
    costs = np.asarray(data.call_costs(None))
    tr, te = data.split_indices(3, 0.5, split_by)
    train, test = data.subset(tr), data.subset(te)
    router = TraceRouter(WEAK, STRONG).fit(train)
    cal = calibrate_share(router.scores(train), 0.5, costs[tr, 0], costs[tr, 1])
    assert out["threshold"] == cal.threshold
    assert out["calibration"]["train_strong_share"] == cal.strong_share
    scores = router.scores(test)
    strong = scores >= cal.threshold
    rows = out["test"]["rows"]
    assert rows["router"]["accuracy"]["value"] == pytest.approx(
        np.where(strong, test.correct[:, 1], test.correct[:, 0]).mean(), abs=1e-12)
    assert rows["router"]["cost_per_query"]["value"] == pytest.approx(
        np.where(strong, costs[te, 1], costs[te, 0]).mean(), abs=1e-15)
    assert rows["router"]["strong_share"]["value"] == pytest.approx(strong.mean())
    assert rows["weak"]["accuracy"]["value"] == pytest.approx(test.correct[:, 0].mean())
    # the intervals are the library's on the same resamples; both random references are
    # matched to the router within each resample (same share; same cost)
    decisions = strong.astype(np.int64)
    expected = score_routings(
        test, {"weak": single_model(test, WEAK), "strong": single_model(test, STRONG),
               "oracle": oracle_routing(test, costs[te])},
        costs[te], strong=STRONG, split_by=split_by, n_resamples=int(RESAMPLES), seed=3)
    matched = compare_with_random(test, {"router": decisions}, costs[te], strong=STRONG,
                                  split_by=split_by, n_resamples=int(RESAMPLES), seed=3)["router"]
    expected.update({"router": matched, "random": matched["random_at_share"],
                     "random_at_cost": matched["random_at_cost"]})
    curves = curve_metrics(test, {"router": scores, "random": None,
                                  "oracle": oracle_scores(test.correct[:, 0], test.correct[:, 1])},
                           WEAK, STRONG, costs[te], split_by=split_by,
                           n_resamples=int(RESAMPLES), seed=3, reference="random")
    for role in ("router", "random", "oracle"):
        assert rows[role]["accuracy"]["ci"] == pytest.approx(expected[role]["accuracy"]["ci"])
        assert rows[role]["aiq"]["value"] == pytest.approx(curves[role]["aiq"]["value"])
        assert rows[role]["aiq"]["ci"] == pytest.approx(curves[role]["aiq"]["ci"])
    apgr = routing_curve(scores, test.correct[:, 0], test.correct[:, 1]).apgr
    assert rows["router"]["apgr"]["value"] == pytest.approx(apgr)
    assert rows["router"]["apgr"]["ci"] == pytest.approx(curves["router"]["apgr"]["ci"])
    assert out["test"]["router_minus_random"]["accuracy"] == (
        matched["minus_random_at_share"]["accuracy"])
    assert out["test"]["router_minus_random_at_cost"]["accuracy"] == (
        matched["minus_random_at_cost"]["accuracy"])
    # matched within each resample: the share (and the cost) differences are exactly 0
    assert out["test"]["router_minus_random"]["strong_share"]["ci"] == [0.0, 0.0]
    assert out["test"]["router_minus_random_at_cost"]["cost_per_query"]["ci"] == pytest.approx(
        [0.0, 0.0], abs=1e-15)
    assert rows["random_at_cost"]["accuracy"] == matched["random_at_cost"]["accuracy"]
    assert out["test"]["resampled"] == ("clusters" if split_by == "group" else "queries")
    assert out["split"]["test_queries"] == test.n_queries


@pytest.mark.parametrize("router", ["logistic", "knn", "priced"])
def test_score_of_the_saved_router_repeats_the_test_numbers(logs, logged, trained, tmp_path,
                                                           capsys, router):
    out, save = trained(*BY_GROUP, "--router", router)
    assert out["router"] == router and load_router(save).name == router
    data = logged.select_models([WEAK, STRONG])
    _, te = data.split_indices(0, 0.5, "group")
    held_out = write_jsonl(tmp_path / "held_out.jsonl", records_from_dataset(data.subset(te)))
    scored = route(capsys, "score", "--router", str(save), "--data", str(held_out),
                   "--split-by", "group")
    assert scored["test"] == out["test"]  # every value and interval, bit for bit
    assert scored["trained_on_these_queries"] is False
    again = route(capsys, "score", "--router", f"{save}.json", "--data", str(logs))
    assert again["trained_on_these_queries"] is True
    assert again["test"]["queries"] == data.n_queries  # every query once


def test_target_cost_keeps_the_training_cost_within_it(logs, logged, tmp_path, capsys):
    data = logged.select_models([WEAK, STRONG])
    costs = np.asarray(data.call_costs(None))
    target = float(costs.mean())  # between all weak and all strong
    out = route(capsys, *train_args(logs, tmp_path / "r", "--target-cost", str(target)))
    tr, _ = data.split_indices(0, 0.5, "query")
    router = TraceRouter(WEAK, STRONG).fit(data.subset(tr))
    cal = calibrate_cost(router.scores(data.subset(tr)), costs[tr, 0], costs[tr, 1], target)
    assert out["calibration"]["target"] == "cost_per_query"
    assert out["threshold"] == cal.threshold
    assert out["calibration"]["train_cost_per_query"] <= target
    assert 0 < out["calibration"]["train_strong_share"] < 1
    assert load_router(tmp_path / "r").threshold == cal.threshold
    fails(capsys, ["route", *train_args(logs, tmp_path / "s", "--target-cost", "0")],
          "--target-cost", "cheapest", status=EXIT_USAGE)


def test_a_zero_share_saves_no_threshold_and_routes_all_weak(logs, tmp_path, capsys):
    out = route(capsys, *train_args(logs, tmp_path / "r", "--target-share", "0"))
    assert out["threshold"] is None
    assert json.loads(router_files(tmp_path / "r")[0].read_text())["threshold"] is None
    assert load_router(tmp_path / "r").threshold == float("inf")
    scored = route(capsys, "score", "--router", str(tmp_path / "r"), "--data", str(logs))
    assert scored["test"]["rows"]["router"]["strong_share"]["value"] == 0.0


def test_the_table_shows_every_row_and_metric(logs, trained, tmp_path, capsys):
    assert cli.main(["route", *train_args(logs, tmp_path / "r"), "--resamples", "50"]) == 0
    text = capsys.readouterr().out
    for title in ("Accuracy", "Cost/query", "Strong share", "APGR", "CPT(50%)", "CPT(80%)",
                  "AIQ", "logistic", "random at", f"only {WEAK}", f"only {STRONG}", "oracle",
                  "random at the same cost", "logistic - random at the same share (paired)",
                  "logistic - random at the same cost (paired)", "saved to"):
        assert title in text, title
    out, _ = trained()  # the same training, as JSON
    router_line = next(line for line in text.splitlines() if line.startswith("| logistic |"))
    assert f"{out['test']['rows']['router']['accuracy']['value']:.3f}" in router_line
    # the first metric column: the router's accuracy minus random's at the same cost
    header = next(line for line in text.splitlines() if line.startswith("| Routing |"))
    assert header.split("|")[2].strip() == "Accuracy - random at the same cost (paired)"
    at_cost = out["test"]["router_minus_random_at_cost"]["accuracy"]["value"]
    assert router_line.split("|")[2].strip().startswith(f"{at_cost:.3f}")


def test_a_folder_of_routerarena_files_uses_their_logged_costs(tmp_path, capsys):
    folder = tmp_path / "arena"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for model, price in ((WEAK, 1e-6), (STRONG, 3e-5)):
        write_jsonl(folder / f"{model}.jsonl", [
            {"global_index": f"D{i % 6}_{i}", "question": f"q {i} " + "w " * (i % 13),
             "llm_selected": model,
             "token_usage": {"input_tokens": 10, "output_tokens": 5 + i},
             "evaluation_result": {"score": float(rng.random() < (0.9 if model == STRONG
                                                                 else 0.5)),
                                   "inference_cost": price * (5 + i)}} for i in range(60)])
    out = route(capsys, "train", "--data", str(folder), "--format", "routerarena",
                "--weak", WEAK, "--strong", STRONG, "--split-by", "group",
                "--save", str(tmp_path / "r"))
    data = load_routerarena(folder)
    _, te = data.split_indices(0, 0.5, "group")
    logged = data.cost[te][:, data.model_index(STRONG)]
    assert out["test"]["rows"]["strong"]["cost_per_query"]["value"] == pytest.approx(
        logged.mean())
    fails(capsys, ["route", "train", "--data", str(folder), "--weak", WEAK, "--strong", STRONG,
                   "--save", str(tmp_path / "s")], "global_index", "--format routerarena")


# ------------------------------------------------------------------------ errors
def test_bad_inputs_exit_with_one_line(logs, tmp_path, capsys):
    save = str(tmp_path / "r")
    fails(capsys, ["route", *train_args(tmp_path / "absent.csv", tmp_path / "r")],
          "absent.csv", "no such file")
    fails(capsys, ["route", "train", "--data", str(logs), "--weak", "gpt-9", "--strong", STRONG,
                   "--save", save], "'gpt-9'", "not in the logs", "'small'", status=EXIT_USAGE)
    fails(capsys, ["route", "train", "--data", str(logs), "--weak", WEAK, "--strong", WEAK,
                   "--save", save], "both", status=EXIT_USAGE)
    rows = crafted_rows(20)
    rows[5]["input_tokens"] = "many"  # line 6 of the file
    bad = write_jsonl(tmp_path / "bad.jsonl", rows)
    fails(capsys, ["route", *train_args(bad, tmp_path / "r")], "bad.jsonl", "line 6",
          "input_tokens")
    empty = tmp_path / "empty"
    empty.mkdir()
    fails(capsys, ["route", *train_args(empty, tmp_path / "r")], "empty", "folder without")
    (tmp_path / "file").write_text("x")
    fails(capsys, ["route", *train_args(logs, tmp_path / "file" / "r")], "--save")
    fails(capsys, ["route", "score", "--router", str(tmp_path / "nothing"), "--data", str(logs)],
          "nothing.json", "no such file")


@pytest.mark.parametrize("kind", ["absent file", "malformed row", "model not in the logs",
                                  "groups the logs lack"])
def test_each_kind_of_error_has_one_status_in_train_and_in_score(logs, trained, tmp_path,
                                                                  capsys, kind):
    """1 for a file that cannot be read, 2 for what valid files cannot meet: alike in both."""
    router = trained()[1]
    rows = crafted_rows(40)
    if kind == "absent file":
        data, extra, status = tmp_path / "absent.jsonl", [], EXIT_INPUT
    elif kind == "malformed row":
        rows[3]["input_tokens"] = "many"
        data, extra, status = write_jsonl(tmp_path / "bad.jsonl", rows), [], EXIT_INPUT
    elif kind == "model not in the logs":  # the router's strong model, named by the router
        data = write_jsonl(tmp_path / "weak.jsonl", [r for r in rows if r["model"] != STRONG])
        extra, status = [], EXIT_USAGE
    else:
        data = write_jsonl(tmp_path / "ungrouped.jsonl",
                           [{k: v for k, v in r.items() if k != "group"} for r in rows])
        extra, status = ["--split-by", "group"], EXIT_USAGE
    fails(capsys, ["route", *train_args(data, tmp_path / "r", *extra)], status=status)
    fails(capsys, ["route", "score", "--router", str(router), "--data", str(data), *extra],
          status=status)


def test_calls_without_a_logged_cost_are_priced_by_the_table(tmp_path, capsys):
    rows = [{k: v for k, v in r.items() if k != "cost"} for r in crafted_rows(40)]
    logs = write_jsonl(tmp_path / "untimed.jsonl", rows)
    fails(capsys, ["route", *train_args(logs, tmp_path / "r")], "--prices", "'small'",
          status=EXIT_USAGE)
    prices = tmp_path / "prices.yaml"
    prices.write_text("currency: USD\nunit: per_million_tokens\nmodels:\n" + "".join(
        f"  - {{name: {m}, input: {p}, output: {p}, source: test, date: 2025-01-01}}\n"
        for m, p in ((WEAK, 1.0), (STRONG, 20.0), ("mid", 5.0))))
    out = route(capsys, *train_args(logs, tmp_path / "r", "--prices", str(prices)))
    data = load_traces(logs)
    _, te = data.split_indices(0, 0.5, "query")
    tokens = data.input_tokens[te, 0] + data.output_tokens[te, 0]
    assert out["test"]["rows"]["weak"]["cost_per_query"]["value"] == pytest.approx(
        tokens.mean() * 1.0 / 1e6)
    assert out["data"]["prices"] == str(prices)
    ungrouped = write_jsonl(tmp_path / "ungrouped.jsonl",
                            [{k: v for k, v in r.items() if k != "group"} for r in rows])
    fails(capsys, ["route", "score", "--router", str(tmp_path / "r"), "--data", str(ungrouped),
                   "--prices", str(prices), "--split-by", "group"], "split_by='group'",
          status=EXIT_USAGE)


@pytest.mark.parametrize("extra, message", [
    (["--test-fraction", "1"], "expected a number in [0, 1), got '1'"),
    (["--target-share", "1.5"], "expected a share in [0, 1]"),
    (["--target-cost", "nan"], "expected a cost per query >= 0"),
    (["--target-share", "0.3", "--target-cost", "1"], "not allowed with argument"),
    (["--router", "forest"], "invalid choice: 'forest'"),
])
def test_bad_options_are_usage_errors(logs, tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as info:
        cli.main(["route", *train_args(logs, tmp_path / "r", *extra)])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert not router_files(tmp_path / "r")[0].exists()


@pytest.fixture
def saved(trained, tmp_path) -> Path:
    """A router ``route train`` saved with the defaults, in this test's own files."""
    return copy_router(trained()[1], tmp_path / "r")


def _score_fails(capsys, path: Path, logs: Path, *names: str) -> None:
    fails(capsys, ["route", "score", "--router", str(path), "--data", str(logs)],
          "cannot load the router", *names)


@pytest.mark.parametrize("content", [b"", b"not json", b'{"a": 1}', b"[1, 2]",
                                     b"\x80\x04\x95 a pickle"])
def test_a_corrupted_or_foreign_json_file_is_refused(saved, logs, capsys, content):
    json_path, _ = router_files(saved)
    json_path.write_bytes(content)
    _score_fails(capsys, saved, logs, str(json_path))


@pytest.mark.parametrize("content", [b"", b"\x08" + b"\0" * 7 + b"{}", b"PK\x03\x04 zip"])
def test_a_corrupted_weights_file_is_refused(saved, logs, capsys, content):
    _, weights = router_files(saved)
    weights.write_bytes(content)
    _score_fails(capsys, saved, logs, str(weights), "arrays_sha256")


def test_weights_of_another_save_and_bad_states_are_refused(saved, logs, tmp_path, capsys):
    other = write_jsonl(tmp_path / "other.jsonl", crafted_rows(seed=5))
    route(capsys, *train_args(other, tmp_path / "o"))
    _, weights = router_files(saved)
    shutil.copy(router_files(tmp_path / "o")[1], weights)
    _score_fails(capsys, saved, logs, "does not match its JSON")
    shutil.copy(router_files(tmp_path / "o")[1], weights)
    json_path = router_files(saved)[0]
    doc = json.loads(router_files(tmp_path / "o")[0].read_text())
    for key, value, name in (("router", "forest", "'forest'"), ("version", 99, "version 99"),
                             ("threshold", "high", "threshold")):
        json_path.write_text(json.dumps({**doc, key: value}))
        _score_fails(capsys, saved, logs, name)
    json_path.write_text(json.dumps({**doc, "state": {**doc["state"], "n_features": 64}}))
    _score_fails(capsys, saved, logs, "coef")
    json_path.write_text(json.dumps({**doc, "state": {**doc["state"], "weak": "mid"}}))
    _score_fails(capsys, saved, logs, "'mid'")
    os.remove(weights)
    _score_fails(capsys, saved, logs, "no such file")


def test_the_saved_files_hold_no_pickle_and_load_without_it(saved, logs, monkeypatch, capsys):
    json_path, weights = router_files(saved)
    doc = json.loads(json_path.read_text())  # plain JSON
    raw = weights.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])  # a safetensors header: float64 arrays only
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"F64"}
    assert set(doc["arrays"]) == set(header) - {"__metadata__"}
    assert b"\x80\x04" not in raw[:16] and not json_path.read_bytes().startswith(b"\x80")

    def refuse(*args, **kwargs):
        raise AssertionError("pickle used")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(np, "load", refuse)
    reloaded = load_router(saved)
    data = load_traces(logs)
    assert np.isfinite(reloaded.router.scores(data)).all()
    route(capsys, "score", "--router", str(saved), "--data", str(logs))


def test_errors_show_no_traceback_in_a_real_process(logs, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "agents.cli", "route", "score", "--router",
                           str(tmp_path / "x"), "--data", str(logs)], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert done.returncode == EXIT_INPUT
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


# ---------------------------------------------------------------------- real data
GSM8K = Path("/work/shared/data/routellm/gsm8k_responses.csv")


@pytest.mark.skipif(not GSM8K.is_file(), reason=f"RouteLLM's GSM8K outcomes are not at {GSM8K}")
def test_gsm8k_round_trip_and_the_router_beats_random(tmp_path, capsys):
    weak, strong = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"
    trained = route(capsys, "train", "--data", str(GSM8K), "--weak", weak, "--strong", strong,
                    "--save", str(tmp_path / "g"))
    data = load_traces(GSM8K).select_models([weak, strong])
    _, te = data.split_indices(0, 0.5, "query")
    held_out = write_jsonl(tmp_path / "test.jsonl", records_from_dataset(data.subset(te)))
    scored = route(capsys, "score", "--router", str(tmp_path / "g"), "--data", str(held_out))
    assert scored["test"] == trained["test"]
    rows = trained["test"]["rows"]
    assert abs(rows["router"]["strong_share"]["value"] - 0.5) < 0.1  # calibrated on train
    assert rows["router"]["accuracy"]["value"] > rows["random"]["accuracy"]["value"]


def test_the_cascade_needs_the_weak_models_answers(logs, tmp_path, capsys):
    # the crafted logs carry no responses: a one-line error naming the router, no file
    fails(capsys, ["route", *train_args(logs, tmp_path / "r", "--router", "cascade")],
          "--router cascade", status=EXIT_USAGE)
    assert not router_files(tmp_path / "r")[0].exists()


# ------------------------------------------------------------ what a user needs (#24)
def test_train_records_the_held_out_groups_and_score_runs_on_exactly_them(
        logs, logged, trained, tmp_path, capsys):
    out, save = trained(*BY_GROUP, "--router", "logistic")
    data = logged.select_models([WEAK, STRONG])
    tr, te = data.split_indices(0, 0.5, "group")
    held = sorted(set(data.subset(te).groups))
    assert out["split"]["test_groups"] == held
    assert out["split"]["train_groups"] == sorted(set(data.subset(tr).groups))
    assert load_router(save).meta["training"]["test_groups"] == held
    # the printed list, and `route score --held-out` on the whole logs scores just them
    assert cli.main(["route", *train_args(logs, tmp_path / "t", "--split-by", "group"),
                     "--resamples", "50"]) == 0
    assert f"held-out groups ({len(held)}; `route score --held-out` scores them): " \
           f"{', '.join(held)}" in capsys.readouterr().out
    scored = route(capsys, "score", "--router", str(save), "--data", str(logs),
                   "--held-out", "--split-by", "group")
    assert scored["test"] == out["test"]  # the same queries: every figure alike
    assert scored["training_overlap"] == {"queries": 0, "of": len(te), "groups": []}
    chosen = route(capsys, "score", "--router", str(save), "--data", str(logs),
                   "--groups", *held, "--split-by", "group")
    assert chosen["test"] == out["test"]
    fails(capsys, ["route", "score", "--router", str(save), "--data", str(logs),
                   "--groups", "g1", "nowhere"], "--groups", "'nowhere'", "not in the logs",
          status=EXIT_USAGE)


def test_held_out_queries_of_a_split_by_query(logs, trained, tmp_path, capsys):
    out, save = trained()
    scored = route(capsys, "score", "--router", str(save), "--data", str(logs), "--held-out")
    assert scored["test"] == out["test"] and not scored["trained_on_these_queries"]
    other = write_jsonl(tmp_path / "other.jsonl", crafted_rows(seed=5))
    fails(capsys, ["route", "score", "--router", str(save), "--data", str(other),
                   "--held-out"], "--held-out", "fingerprint differs", status=EXIT_USAGE)


def test_partial_overlap_with_training_is_noted(logs, logged, trained, tmp_path, capsys):
    _, save = trained(*BY_GROUP, "--router", "logistic")
    data = logged
    training = load_router(save).meta["training"]
    # all training groups but one, and one held-out group: partly seen
    keep = [*training["train_groups"][1:], training["test_groups"][0]]
    rows = [r for r in records_from_dataset(data) if r["group"] in keep]
    part = write_jsonl(tmp_path / "part.jsonl", rows)
    seen = sum(1 for g in load_traces(part).groups if g in training["train_groups"])
    assert 0 < seen < load_traces(part).n_queries
    scored = route(capsys, "score", "--router", str(save), "--data", str(part))
    assert scored["trained_on_these_queries"] is True
    assert scored["training_overlap"] == {"queries": seen, "of": load_traces(part).n_queries,
                                          "groups": sorted(keep[:-1])}
    assert cli.main(["route", "score", "--router", str(save), "--data", str(part),
                     "--resamples", "50"]) == 0
    text = capsys.readouterr().out
    assert f"note: the router was trained on {seen} of these" in text
    assert f"note: {len(keep) - 1} of the scored groups were training groups" in text


def test_test_fraction_zero_trains_on_all(logs, logged, tmp_path, capsys):
    out = route(capsys, *train_args(logs, tmp_path / "r", "--test-fraction", "0"))
    data = logged.select_models([WEAK, STRONG])
    assert out["test"] is None and out["held_out_drift"] is None
    assert out["split"]["train_queries"] == data.n_queries and out["split"]["test_queries"] == 0
    router = TraceRouter(WEAK, STRONG).fit(data)
    assert out["threshold"] == calibrate_share(router.scores(data), 0.5).threshold
    scored = route(capsys, "score", "--router", str(tmp_path / "r"), "--data", str(logs))
    assert scored["training_overlap"]["queries"] == data.n_queries
    fails(capsys, ["route", "score", "--router", str(tmp_path / "r"), "--data", str(logs),
                   "--held-out"], "--held-out", "nothing was held out", status=EXIT_USAGE)
    assert cli.main(["route", *train_args(logs, tmp_path / "s", "--test-fraction", "0")]) == 0
    assert "(--test-fraction 0: trained on all)" in capsys.readouterr().out


@pytest.mark.parametrize("target", [["--target-share", "0.3"], ["--target-cost", "0.0008"]])
def test_held_out_calibration_drift_is_reported(logs, tmp_path, capsys, target):
    out = route(capsys, *train_args(logs, tmp_path / "r", "--split-by", "group", *target))
    drift, router_row = out["held_out_drift"], out["test"]["rows"]["router"]
    key = "strong_share" if target[0] == "--target-share" else "cost_per_query"
    assert drift["target"] == key and drift["value"] == float(target[1])
    assert drift["held_out"] == router_row[key]["value"]
    assert drift["train"] == out["calibration"][f"train_{key}"]
    assert drift["difference"] == pytest.approx(drift["held_out"] - float(target[1]))
    assert cli.main(["route", *train_args(logs, tmp_path / "s", "--split-by", "group",
                                          *target), "--resamples", "50"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith("calibration drift: target "))
    if key == "strong_share":
        assert f"held-out {drift['held_out']:.1%} ({drift['difference'] * 100:+.1f} points)" \
            in line
    else:
        assert f"held-out {drift['held_out']:.4g}" in line
    scored = route(capsys, "score", "--router", str(tmp_path / "r"), "--data", str(logs))
    assert scored["drift"]["held_out"] == scored["test"]["rows"]["router"][key]["value"]
