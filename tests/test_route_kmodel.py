"""K-model routers end to end: lam calibration, saved files, ``cost-envs route`` with K models."""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from agents import cli
from agents.cli.route import EXIT_INPUT, EXIT_USAGE
from agents.routers import (
    MultiRouter,
    calibrate_lam,
    cross_validate,
    load_router,
    save_router,
    sweep_metrics,
)
from agents.routers.evaluation import compare_with_random
from cost_envs.traces import TraceDataset, load_traces

MODELS = ("small", "mid", "large")
KINDS = ("capital of the country", "sum of the numbers", "integral of the series")
PRICES = {"small": 1e-6, "mid": 5e-6, "large": 2e-5}
#: Bootstrap resamples of the scored runs: the tests compare the command's intervals with the
#: library's on the same resamples, which hold for any number of them.
RESAMPLES = "50"


def rows(n: int = 240, seed: int = 0) -> list[dict]:
    """Generic JSONL rows of three models: the words say the cheapest model that is right."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        kind = int(rng.integers(0, 3))
        noise = "".join(rng.choice(list("abcdefghij"), 5))
        prompt = f"what is the {KINDS[kind]} {noise}?"
        for j, model in enumerate(MODELS):
            tokens = int(rng.integers(50, 150))
            out.append({"query_id": f"q{i}", "model": model,
                        "correct": bool(kind <= j and rng.random() < 0.95),
                        "input_tokens": 40, "output_tokens": tokens,
                        "cost": tokens * PRICES[model], "prompt": prompt,
                        "group": f"g{i % 8}"})
    return out


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    """The logs of :func:`rows`, written once: the tests only read them."""
    return write(tmp_path_factory.mktemp("kmodel") / "three.jsonl", rows())


def route(capsys, *argv: str) -> dict:
    assert cli.main(["route", *argv, "--json", "--resamples", RESAMPLES]) == 0
    return json.loads(capsys.readouterr().out)


def fails(capsys, argv: list[str], *names: str, status: int = EXIT_INPUT) -> str:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == status
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for name in names:
        assert name in err, (name, err)
    return err


# ------------------------------------------------------------------------ calibration
def test_calibrate_lam_takes_the_smallest_lam_within_the_target() -> None:
    costs = np.array([[1.0, 4.0, 10.0]] * 4)
    lams = np.array([0.0, 0.5, 1.0, 2.0])
    d = np.array([[2, 2, 1, 0], [2, 1, 1, 0], [2, 1, 0, 0], [1, 1, 0, 0]])
    # mean costs per point: 8.5, 5.5, 3.25, 1.0
    cal = calibrate_lam(lams, d, costs, 5.5)
    assert cal.lam == 0.5 and cal.cost_per_query == 5.5
    assert cal.model_share == (0.0, 0.75, 0.25)
    assert calibrate_lam(lams, d, costs, 100).lam == 0.0
    assert calibrate_lam(lams, d, costs, 3.3).lam == 1.0
    with pytest.raises(ValueError, match="the cheapest is 1"):
        calibrate_lam(lams, d, costs, 0.5)
    with pytest.raises(ValueError, match="lams: expected a non-empty ascending"):
        calibrate_lam(lams[::-1], d, costs, 5)
    with pytest.raises(ValueError, match="train_decisions: expected"):
        calibrate_lam(lams, d + 1, costs, 5)
    with pytest.raises(ValueError, match="target"):
        calibrate_lam(lams, d, costs, -1)


# ------------------------------------------------------------------------ saved files
@pytest.fixture(scope="module")
def logged(logs) -> TraceDataset:
    """``logs`` as the library reads them (read once: the tests only read the dataset)."""
    return load_traces(logs)


@pytest.fixture(scope="module")
def fitted(logged) -> tuple[MultiRouter, TraceDataset]:
    """A K-model router fitted once on all of ``logs``, and those logs: tests save and
    compare it, never change it."""
    return MultiRouter(n_features=64, l2=1.0).fit(logged), logged


def test_a_saved_k_model_router_routes_as_the_fitted_one(fitted, tmp_path, monkeypatch) -> None:
    router, data = fitted
    files = save_router(tmp_path / "r", router, 0.3, {"note": "x"})
    raw = files[1].read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"F64"}
    doc = json.loads(files[0].read_text())
    assert doc["models"] == list(MODELS) and doc["lam"] == 0.3 and doc["note"] == "x"
    assert "weak" not in doc and "threshold" not in doc

    def refuse(*args, **kwargs):
        raise AssertionError("pickle used")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    saved = load_router(tmp_path / "r")
    assert not saved.two_model and saved.name == "multi-logistic"
    assert saved.models == MODELS and saved.lam == 0.3
    np.testing.assert_array_equal(saved.router.correctness(data), router.correctness(data))
    np.testing.assert_array_equal(saved.router.route(data, 0.3), router.route(data, 0.3))


def _edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("change,message", [
    (lambda d: d.update(lam=-1), "lam: expected a number >= 0"),
    (lambda d: d.update(lam="0.5"), "lam: expected a number >= 0"),
    (lambda d: d.pop("models"), "models: expected a list"),
    (lambda d: d.update(models=["small", "mid", "huge"]), "state: models"),
    (lambda d: d["state"].update(l2=-1), "l2"),
    (lambda d: d["state"].update(extra=1), "unknown ['extra']"),
    (lambda d: d.update(arrays_sha256="0" * 64), "does not match its JSON file"),
])
def test_a_tampered_k_model_file_is_refused(fitted, tmp_path, change, message) -> None:
    router, _ = fitted
    json_path, _ = save_router(tmp_path / "r", router, 0.1, {})
    _edit(json_path, change)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_router(json_path)


def test_weights_of_another_k_model_save_are_refused(fitted, tmp_path) -> None:
    router, data = fitted
    a = save_router(tmp_path / "a", router, 0.1, {})
    other = MultiRouter(n_features=64, l2=5.0).fit(data)
    b = save_router(tmp_path / "b", other, 0.1, {})
    a[1].write_bytes(b[1].read_bytes())
    with pytest.raises(ValueError, match="another save's weights"):
        load_router(tmp_path / "a")
    with pytest.raises(ValueError, match="lam: expected a finite number"):
        save_router(tmp_path / "c", router, float("nan"), {})


# ------------------------------------------------------------------------------- CLI
def test_train_routes_k_models_by_default_and_gives_the_in_process_numbers(
        logs, logged, tmp_path, capsys) -> None:
    out = route(capsys, "train", "--data", str(logs), "--save", str(tmp_path / "r"),
                "--split-by", "group", "--seed", "1")
    assert out["router"] == "multi-logistic" and out["models"] == list(MODELS)
    data = logged
    costs = data.call_costs(None)
    tr, te = data.split_indices(1, 0.5, "group")
    train, test = data.subset(tr), data.subset(te)
    router = MultiRouter(MODELS).fit(train, costs[tr])
    mean = costs[tr].mean(axis=0)
    target = (mean.min() + mean.max()) / 2
    lams = router.lams(train)
    cal = calibrate_lam(lams, router.sweep(train, lams), costs[tr], target)
    assert out["lam"] == cal.lam and out["calibration"]["value"] == pytest.approx(target)
    assert out["calibration"]["train_cost_per_query"] <= target
    d = router.route(test, cal.lam)
    row = out["test"]["rows"]["router"]
    assert row["accuracy"]["value"] == pytest.approx(test.correct[np.arange(len(d)), d].mean())
    cost = costs[te][np.arange(len(d)), d].mean()
    assert row["cost_per_query"]["value"] == pytest.approx(cost)
    # where the held-out cost landed against the calibration's target
    assert out["held_out_drift"] == {"target": "cost_per_query", "value": target,
                                     "train": out["calibration"]["train_cost_per_query"],
                                     "held_out": row["cost_per_query"]["value"],
                                     "difference": row["cost_per_query"]["value"] - target}
    # the references are random routing matched to the router within each resample: on
    # the single models' hull at its cost (frontier), and at its model shares (random)
    expected = compare_with_random(test, {"router": d}, costs[te], split_by="group",
                                   n_resamples=int(RESAMPLES), seed=1)["router"]
    assert out["test"]["rows"]["frontier"]["accuracy"] == expected["random_at_cost"]["accuracy"]
    assert out["test"]["router_minus_frontier"]["accuracy"] == (
        expected["minus_random_at_cost"]["accuracy"])
    assert out["test"]["rows"]["random"]["accuracy"] == expected["random_at_share"]["accuracy"]
    assert out["test"]["router_minus_random"]["accuracy"] == (
        expected["minus_random_at_share"]["accuracy"])
    # at the same cost, exactly: the frontier row's cost is the router's on every resample
    assert out["test"]["router_minus_frontier"]["cost_per_query"]["ci"] == pytest.approx(
        [0.0, 0.0], abs=1e-12)
    aiqs = sweep_metrics(test, {"router": router.sweep(test)}, costs[te], split_by="group",
                         n_resamples=int(RESAMPLES), seed=1)
    assert row["aiq"]["value"] == pytest.approx(aiqs["router"]["value"])
    assert out["test"]["router_minus_frontier"]["aiq"]["value"] == pytest.approx(
        aiqs["router"]["minus_single models"]["value"])
    # the words say who is right: the router is well above the frontier here
    assert out["test"]["router_minus_frontier"]["aiq"]["ci"][0] > 0


@pytest.fixture(scope="module")
def trained(logs, tmp_path_factory) -> Path:
    """Where ``route train`` (K models, ``--target-cost 2e-3``) saved its router, run once:
    the tests that take it only score and load the saved files."""
    save = tmp_path_factory.mktemp("trained") / "r"
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["route", "train", "--data", str(logs), "--save", str(save),
                         "--target-cost", "2e-3", "--json", "--resamples", RESAMPLES]) == 0
    return save


def test_score_of_a_saved_k_model_router_repeats_its_numbers(logs, logged, trained,
                                                             capsys) -> None:
    save = trained
    saved = load_router(save)
    assert saved.meta["calibration"]["value"] == 2e-3 and not saved.meta["calibration"][
        "default"]
    out = route(capsys, "score", "--router", str(save), "--data", str(logs))
    assert out["trained_on_these_queries"] is True  # the logs it was trained on (half)
    training = saved.meta["training"]
    assert out["training_overlap"]["queries"] == training["train_queries"]  # that half
    data = logged
    d = saved.router.route(data, saved.lam)
    assert out["lam"] == saved.lam
    assert out["test"]["rows"]["router"]["accuracy"]["value"] == pytest.approx(
        data.correct[np.arange(len(d)), d].mean())
    # a table too, with the K-model rows
    assert cli.main(["route", "score", "--router", str(save), "--data", str(logs),
                     "--resamples", "50"]) == 0
    text = capsys.readouterr().out
    for needle in ("| multi-logistic |", "random on the single models' frontier",
                   "| only mid |", "| oracle |", "- frontier at the same cost (paired)",
                       "- random at the same model shares (paired)", "AIQ over cost"):
        assert needle in text, needle


def test_cv_chooses_l2_on_the_training_split(logs, logged, tmp_path, capsys) -> None:
    out = route(capsys, "train", "--data", str(logs), "--save", str(tmp_path / "r"),
                "--split-by", "group", "--cv", "3")
    data = logged
    tr, _ = data.split_indices(0, 0.5, "group")
    choice = cross_validate("multi-logistic", data.subset(tr), costs=data.call_costs(None)[tr],
                            folds=3, split_by="group")
    assert out["cv"] == json.loads(json.dumps(choice.as_json()))
    assert load_router(tmp_path / "r").router.l2 == choice.value
    two = route(capsys, "train", "--data", str(logs), "--save", str(tmp_path / "k"),
                "--weak", "small", "--strong", "large", "--router", "knn", "--cv", "4",
                "--split-by", "query")
    assert two["cv"]["setting"] == "k" and two["cv"]["folds"] == 4
    assert load_router(tmp_path / "k").router.k == two["cv"]["value"]


@pytest.mark.parametrize("extra,message,status", [
    (["--router", "multi-logistic", "--weak", "small"], "not --weak/--strong", EXIT_USAGE),
    (["--target-share", "0.3"], "--target-share is a two-model calibration", EXIT_USAGE),
    (["--models", "small", "huge"], "model 'huge' is not in the logs", EXIT_USAGE),
    (["--models", "small"], "at least two distinct models", EXIT_USAGE),
    (["--target-cost", "1e-9"], "--target-cost: target=1e-09: no lam keeps", EXIT_USAGE),
    (["--router", "logistic"], "a two-model router takes --weak and --strong", EXIT_USAGE),
])
def test_bad_k_model_options_exit_with_one_line(logs, tmp_path, capsys, extra, message,
                                                status) -> None:
    fails(capsys, ["route", "train", "--data", str(logs), "--save", str(tmp_path / "r"),
                   *extra], message, status=status)


def test_cv_needs_two_folds(logs, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["route", "train", "--data", str(logs), "--save", str(tmp_path / "r"),
                  "--cv", "1"])
    assert info.value.code == EXIT_USAGE
    assert "argument --cv: expected a number of folds >= 2, got '1'" in capsys.readouterr().err


def test_a_saved_k_model_router_needs_its_models_in_the_logs(trained, tmp_path, capsys) -> None:
    two = write(tmp_path / "two.jsonl", [r for r in rows() if r["model"] != "mid"])
    fails(capsys, ["route", "score", "--router", str(trained), "--data", str(two)],
          "model 'mid' is not in the logs", status=EXIT_USAGE)


ROUTERARENA = Path(__file__).resolve().parents[2] / "shared" / "data" / "routerarena"


def test_a_k_model_router_on_routerarenas_two_models(tmp_path, capsys) -> None:
    """The real logs have two models: ``--models`` (or ``--router multi-logistic``) routes
    between them as a K-model router, and the saved router routes the test queries as
    the printed test block says."""
    if not ROUTERARENA.is_dir():
        pytest.skip(f"{ROUTERARENA} not found: the real logs live outside the repository")
    models = ["gemini-2.0-flash-001", "claude-3-haiku-20240307"]
    out = route(capsys, "train", "--data", str(ROUTERARENA), "--format", "routerarena",
                "--models", *models, "--split-by", "group", "--save", str(tmp_path / "r"))
    assert out["router"] == "multi-logistic" and out["models"] == models
    assert out["test"]["resampled"] == "clusters"
    saved = load_router(tmp_path / "r")
    assert not saved.two_model and list(saved.models) == models
    data = load_traces(ROUTERARENA).select_models(models)
    test = data.subset(data.split_indices(0, 0.5, "group")[1])
    d = saved.router.route(test, saved.lam)
    assert out["test"]["rows"]["router"]["accuracy"]["value"] == pytest.approx(
        test.correct[np.arange(len(d)), d].mean())
