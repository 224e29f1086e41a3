"""Limits before allocation (issue #26, item 9): each size is refused in one line, early.

No test here allocates more than a few MB, on this tree or on one without the limits: the
memory checks are driven by a small :func:`cost_envs.limits.available_memory`
(monkeypatched), the device and FIFO reads run in a child process under a 2 GiB address
space limit and a timeout, and the resample cap is passed by one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import cost_envs
from cost_envs import limits
from cost_envs.multiagent import MULTIAGENT_ENV_IDS, parallel_env
from cost_envs.registration import VECTOR_IDS
from cost_envs.traces import load_traces
from cost_envs.traces.features import hashed_features

ROOT = Path(cost_envs.__file__).resolve().parents[1]
SMALL = 2**20  # "available memory" in the refusal tests: 1 MiB


@pytest.fixture
def small_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`cost_envs.limits.available_memory` says 1 MiB."""
    monkeypatch.setattr(limits, "available_memory", lambda: SMALL)


def one_line(err: pytest.ExceptionInfo[ValueError], *names: str) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    for name in names:
        assert name in message, (name, message)
    return message


# ---------------------------------------------------------------------------- files
DEVICE_SCRIPT = textwrap.dedent("""
    import json, os, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
    from cost_envs.pool import AgentPool
    from cost_envs.prices import PriceTable
    from cost_envs.traces import load_traces
    loader = {"pool": AgentPool.from_file, "prices": PriceTable.from_file,
              "traces": load_traces}[sys.argv[1]]
    try:
        loader(sys.argv[2])
        print(json.dumps(["returned", ""]))
    except BaseException as err:
        print(json.dumps([type(err).__name__, str(err)]))
""")


def _load_in_child(kind: str, path: Path) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", DEVICE_SCRIPT, kind, str(path)],
                              capture_output=True, text=True, env=env, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    lines = done.stdout.strip().splitlines()
    return tuple(json.loads(lines[-1])) if lines else ("crashed", done.stderr[-300:])


@pytest.mark.parametrize(("kind", "name"), [("pool", "pool.json"), ("prices", "prices.yaml"),
                                            ("traces", "log.jsonl"), ("traces", "log.csv")])
def test_loaders_refuse_a_character_device_naming_the_path(tmp_path: Path, kind: str,
                                                           name: str) -> None:
    link = tmp_path / name  # the suffix the loader wants, pointing at /dev/zero
    link.symlink_to("/dev/zero")
    error, message = _load_in_child(kind, link)
    assert error == "ValueError", (error, message)  # today: MemoryError after GiBs read
    assert str(link) in message and "character device" in message, message
    assert "regular file" in message, message


def test_trace_loader_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)
    error, message = _load_in_child("traces", fifo)  # today: blocks until a writer opens
    assert error == "ValueError", (error, message)
    assert str(fifo) in message and "FIFO" in message, message


def test_a_folder_of_logs_skips_a_fifo_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "cached.jsonl")  # today: the RouterArena sniffing opens it, blocks
    error, message = _load_in_child("traces", tmp_path)
    assert error == "ValueError", (error, message)
    assert "a folder without" in message, message


def test_trace_files_over_the_size_cap_are_refused(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"query_id": 1, "model": "a", "correct": True,
                                "input_tokens": 1, "output_tokens": 1}) + "\n")
    monkeypatch.setattr("cost_envs.traces.parsing.MAX_TRACE_BYTES", 16)
    with pytest.raises(ValueError) as err:
        load_traces(path)
    one_line(err, "trace file", str(path), "more than the limit of 16 bytes")


def test_trace_files_larger_than_the_memory_available_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps({"query_id": q, "model": "a", "correct": True,
                                          "input_tokens": 1, "output_tokens": 1})
                              for q in range(100)) + "\n")
    monkeypatch.setattr(limits, "available_memory", lambda: 1000)
    with pytest.raises(ValueError) as err:
        load_traces(path)
    one_line(err, str(path), "1000 bytes available")


# ------------------------------------------------------------------- streamed logs
def _long_prompt_log(path: Path, queries: int = 40, words: int = 8000) -> int:
    """A JSONL of long prompts, each on both of its query's rows; its size in bytes."""
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(2000)] + ["12", "3.5", "$"]
    with path.open("w", encoding="utf-8") as handle:
        for q in range(queries):
            prompt = " ".join(rng.choice(vocab, words))
            for model in ("small", "large"):
                handle.write(json.dumps({"query_id": q, "model": model, "correct": True,
                                         "input_tokens": words, "output_tokens": 5,
                                         "prompt": prompt}) + "\n")
    return path.stat().st_size


def _peak(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_jsonl_log_is_streamed_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    size = _long_prompt_log(path)  # ~3.5 MB
    data, peak = _peak(lambda: load_traces(path))
    assert data.n_queries == 40
    # the dataset holds each prompt once (half the file); the whole text, its lines and a
    # regex's per-character backtracking (today: 2.9 times the file) are never held
    assert peak < 0.8 * size, (peak, size)


def test_scoring_holds_a_chunk_of_queries_features_not_all(monkeypatch) -> None:
    """A router's scores on many queries build their features a chunk at a time."""
    from agents.routers import base, make_router
    from cost_envs.traces import TraceDataset

    rng = np.random.default_rng(0)
    n = 1000
    prompts = tuple(" ".join(rng.choice([f"w{i}" for i in range(200)], 12)) for _ in range(n))
    correct = rng.random((n, 2)) < 0.7
    data = TraceDataset(("weak", "strong"), tuple(map(str, range(n))), prompts,
                        correct.astype(float), correct, np.ones((n, 2)), np.ones((n, 2)),
                        cost=np.ones((n, 2)))
    router = make_router("logistic", "weak", "strong").fit(data.subset(np.arange(200)))
    from cost_envs.traces import features

    def peak_at(chunk: int) -> tuple[np.ndarray, int]:
        monkeypatch.setattr(base, "PREDICT_CHUNK", chunk)
        features._BUCKETS.clear()  # each run hashes its n-grams afresh
        return _peak(lambda: router.scores(data))

    whole, at_once = peak_at(n)
    chunked, peak = peak_at(100)
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=1e-12)
    dense = n * (512 + 7) * 8  # the design matrix of all 1,000 queries: 4 MB
    assert at_once > dense and peak < at_once / 3, (peak, at_once, dense)


def test_hashed_features_of_long_texts_take_bounded_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # chunks of 512 words in texts of 8,000: the same bound as 32,768-word chunks in texts
    # of megabytes, at a fifth of the CPU
    monkeypatch.setattr("cost_envs.traces.features.WORD_CHUNK", 512)
    rng = np.random.default_rng(1)
    vocab = [f"w{i}" for i in range(3000)] + ["17", "1,250", "$", "?"]
    texts = [" ".join(rng.choice(vocab, 8_000)) for _ in range(6)] + ["", "Ann has 12"]
    size = sum(len(t) for t in texts)  # ~270 kB
    features, peak = _peak(lambda: hashed_features(texts, 64))
    assert features.shape == (8, 64)
    assert peak < 2 * size, (peak, size)  # today 0.7 times the texts; all n-grams at once: 64


def test_hashed_features_do_not_depend_on_the_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = ["Ann has 12 apples and buys 7 more: how many $ ?", "", "a b c d e f g"] * 5
    whole = hashed_features(texts, 16)
    monkeypatch.setattr("cost_envs.traces.features.WORD_CHUNK", 3)  # bigrams across chunks
    assert np.array_equal(hashed_features(texts, 16), whole)


# ---------------------------------------------------------------- batched, tenants
@pytest.mark.parametrize("env_id", VECTOR_IDS)
def test_batched_env_refuses_num_envs_beyond_the_memory_available(env_id: str,
                                                                  small_memory: None) -> None:
    with pytest.raises(ValueError) as err:
        gym.make_vec(env_id, 64, vectorization_mode="vector_entry_point")
    one_line(err, "num_envs=64", "1.0 MiB available", "fewer sub-envs")


@pytest.mark.parametrize("env_id", VECTOR_IDS)
def test_the_benchmarks_16384_sub_envs_fit_in_8_gib(env_id: str) -> None:
    single = gym.make(env_id).unwrapped
    assert limits.batched_env_bytes(single, 16384) < 8 * 2**30


@pytest.mark.parametrize("env_id", sorted(MULTIAGENT_ENV_IDS))
def test_multi_tenant_env_refuses_n_tenants_beyond_the_memory_available(
        env_id: str, small_memory: None) -> None:
    with pytest.raises(ValueError) as err:
        parallel_env(env_id, n_tenants=8)
    one_line(err, "n_tenants=8", "1.0 MiB available", "fewer tenants")


def test_multi_tenant_env_still_builds_every_tenant() -> None:
    env = parallel_env("cost_envs/MultiTenantToolBench-v0", n_tenants=3)
    assert len({id(e) for e in env.tenant_envs.values()}) == 3


# ------------------------------------------------------------------------ training
def test_train_refuses_a_rollout_beyond_the_memory_available(small_memory: None) -> None:
    pytest.importorskip("torch")
    from agents.learners.training import train

    # 6 x 512 steps: 1.24 MB with ToolBench's queue (its block of tasks 30 kB since #37)
    with pytest.raises(ValueError) as err:
        train("cost_envs/ToolBench-v0", "ppo", timesteps=64, n_envs=6)
    one_line(err, "n_envs=6", "n_steps=512", "rollout", "1.0 MiB available")


def test_train_cli_refuses_n_envs_and_n_steps_beyond_the_memory_available(
        tmp_path: Path, small_memory: None) -> None:
    pytest.importorskip("torch")
    from agents import cli

    config = tmp_path / "ppo.yaml"
    config.write_text("n_steps: 4096\n")
    for extra, names in ((["--n-envs", "6"], ("n_envs=6", "n_steps=512")),
                         (["--config", str(config)], ("n_envs=1", "n_steps=4096"))):
        with pytest.raises(SystemExit) as info:
            cli.main(["train", "--env", "ToolBench-v0", "--method", "ppo", "--timesteps", "64",
                      "--out", str(tmp_path / "model"), "--no-progress", *extra])
        message = info.value.code
        assert isinstance(message, str) and "\n" not in message, message
        assert all(name in message for name in names), message
        assert not (tmp_path / "model").exists()


def test_rollout_estimate_scales_with_n_envs_and_n_steps() -> None:
    one = limits.rollout_bytes(1, 512, 17, 8)
    assert limits.rollout_bytes(1000, 512, 17, 8) == 1000 * one
    assert limits.rollout_bytes(1, 1024, 17, 8) == 2 * one


# ----------------------------------------------------------------------- bootstrap
def test_bootstraps_refuse_more_resamples_than_the_cap() -> None:
    from cost_envs.metrics.bootstrap import bootstrap_mean_ci, bootstrap_means

    values = np.arange(10.0)
    too_many = limits.MAX_RESAMPLES + 1
    for run in (lambda: bootstrap_mean_ci(values, n_resamples=too_many),
                lambda: bootstrap_means({"x": values}, n_resamples=too_many)):
        with pytest.raises(ValueError) as err:
            run()
        one_line(err, "n_resamples", str(too_many), str(limits.MAX_RESAMPLES))
    assert bootstrap_mean_ci(values, n_resamples=10)[0] == pytest.approx(4.5)


def test_cli_refuses_resamples_over_the_cap_before_any_work(
        capsys: pytest.CaptureFixture[str]) -> None:
    from agents import cli

    with pytest.raises(SystemExit) as info:
        cli.main(["evaluate", "--env", "ToolBench-v0", "--episodes", "2", "--methods",
                  "random", "--resamples", str(limits.MAX_RESAMPLES + 1)])
    assert info.value.code == 2
    assert str(limits.MAX_RESAMPLES) in capsys.readouterr().err


# -------------------------------------------------------------------- the function
def test_available_memory_is_a_positive_byte_count() -> None:
    available = limits.available_memory()
    assert available is None or available > 2**20


def test_check_regular_file_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as err:
        limits.check_regular_file(tmp_path, "pool", 100)
    one_line(err, "pool", str(tmp_path), "a directory")
    with pytest.raises(FileNotFoundError):
        limits.check_regular_file(tmp_path / "missing.json", "pool", 100)
