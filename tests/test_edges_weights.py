"""Weights files at the edges (issue #26, items 6 and 9): every loader, one policy.

Every loader of a safetensors file (models, adapters, frozen bases, saved routers):

* refuses a path that is not a regular file (``/dev/zero``, a FIFO, a directory) and a
  file over :data:`cost_envs.limits.MAX_WEIGHTS_BYTES` before reading a byte, in one line
  naming the path and what was expected (a FIFO blocked the read; ``/dev/zero`` read
  until memory ran out);
* names a truncated file, or a header claiming more bytes than the file has, as such in
  one line before any torch code runs (the command line: before torch is imported);
* takes one dtype per format from the header (float32 allocators, float64 routers).

No test here allocates more than a few MB, on this tree or on one without the checks: the
tests that offer ``/dev/zero`` or an oversized file run with the address space bounded
(``bounded_memory``: a loader reading them fails with ``MemoryError``), and a FIFO is fed
a valid file after a few seconds (a loader opening it reads that file, and the test fails
rather than hangs).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.numpy import load as load_numpy
from safetensors.numpy import save as save_numpy
from safetensors.torch import load_file, save_file
from test_cli_startup import probe  # the fresh-process probe of the CLI tests

import agents.learners.common.policies as policies
from agents.learners.checkpoints import (
    load_adapter,
    load_allocator,
    save_adapter,
    save_allocator,
)
from agents.learners.common.policies import load_base, read_tensors
from agents.learners.pretrain import pretrained_base_path
from agents.learners.supervised import SupervisedConfig, policy_for
from agents.learners.training import train
from agents.routers import load_router, make_router, save_router
from cost_envs.limits import MAX_WEIGHTS_BYTES
from cost_envs.traces import TraceDataset

torch.set_num_threads(1)

FLIGHT = "cost_envs/FlightPlanner-v0"
#: Seconds a FIFO waits for its reader before a writer feeds it a valid file: a loader
#: that opened it without checking then reads that file and the test fails, not hangs.
FIFO_PATIENCE = 3.0


@pytest.fixture(scope="module")
def allocator():
    return train(FLIGHT, "lora", 1, seed=3, supervised=SupervisedConfig(episodes=30, epochs=2))


@pytest.fixture(scope="module")
def saved(allocator, tmp_path_factory) -> Path:
    return save_allocator(allocator, tmp_path_factory.mktemp("saved") / "model")


@pytest.fixture(scope="module")
def adapter(allocator, tmp_path_factory) -> Path:
    return save_adapter(allocator.policy, tmp_path_factory.mktemp("adapter") / "adapter")


def _dataset(n: int = 120) -> TraceDataset:
    rng = np.random.default_rng(0)
    correct = rng.random((n, 2)) < np.array([0.5, 0.9])
    return TraceDataset(("weak", "strong"), tuple(f"q{i}" for i in range(n)),
                        tuple(f"question {i} about {rng.integers(9)}" for i in range(n)),
                        correct.astype(float), correct, np.ones((n, 2)), np.ones((n, 2)),
                        cost=np.column_stack([np.ones(n), np.full(n, 10.0)]))


@pytest.fixture(scope="module")
def router(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("router") / "r"
    save_router(path, make_router("logistic", "weak", "strong").fit(_dataset()), 0.5)
    return path


def _copy(source: Path, tmp_path: Path) -> Path:
    shutil.copytree(source, tmp_path / source.name)
    return tmp_path / source.name


def _base_copy(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    shipped = pretrained_base_path(FLIGHT)
    weights = tmp_path / shipped.name
    shutil.copy(shipped, weights)
    shutil.copy(shipped.with_suffix(".json"), weights.with_suffix(".json"))
    return weights


def _refused(load: Callable[[], object], *names: str) -> str:
    """``load()`` must raise one ``ValueError`` of one line naming every ``names``."""
    with pytest.raises(ValueError) as caught:
        load()
    message = str(caught.value)
    assert "\n" not in message, message
    for name in names:
        assert name in message, (name, message)
    return message


@pytest.fixture
def torch_unreached(monkeypatch) -> None:
    """Fail if the bytes reach safetensors' torch loader (the checks come first)."""
    def reached(*_args, **_kwargs):
        raise AssertionError("the bytes reached safetensors.torch.load")

    monkeypatch.setattr(policies, "load", reached)


# ------------------------------------------------------ not a regular file, too large
#: Address space a test offering /dev/zero or an oversized file may add to the process's.
HEADROOM = 2**30


@pytest.fixture
def bounded_memory() -> Iterator[None]:
    """The address space capped at its current size plus :data:`HEADROOM` for the test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm", encoding="ascii") as statm:
        used = int(statm.read().split()[0]) * resource.getpagesize()
    cap = used + HEADROOM if hard == resource.RLIM_INFINITY else min(hard, used + HEADROOM)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


class _Feeder:
    """Writes ``content`` into the FIFO ``path`` once a reader has waited ``FIFO_PATIENCE``."""

    def __init__(self, path: Path, content: bytes) -> None:
        self.path, self.content, self.stop = path, content, threading.Event()
        self.thread = threading.Thread(target=self._feed, daemon=True)

    def _feed(self) -> None:
        if self.stop.wait(FIFO_PATIENCE):
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self.stop.is_set():
            try:  # non-blocking: fails (ENXIO) while no reader has opened it
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.05)
                continue
            os.set_blocking(fd, True)
            with os.fdopen(fd, "wb") as handle:
                handle.write(self.content)
            return


@pytest.fixture
def not_regular(request, tmp_path, bounded_memory) -> Iterator[Callable[[Path], str]]:
    """Replace a file by ``/dev/zero`` (a link to it), a FIFO or a directory; its kind."""
    feeders: list[_Feeder] = []

    def replace(path: Path) -> str:
        content = path.read_bytes()
        path.unlink()
        if request.param == "/dev/zero":
            path.symlink_to("/dev/zero")
            return "a character device"
        if request.param == "FIFO":
            os.mkfifo(path)
            feeders.append(_Feeder(path, content))
            feeders[-1].thread.start()
            return "a FIFO"
        path.mkdir()
        return "a directory"

    yield replace
    for feeder in feeders:
        feeder.stop.set()
        feeder.thread.join(timeout=5)


KINDS = ["/dev/zero", "FIFO", "directory"]
EXPECTED = "expected a regular file of at most 4.0 GiB"


@pytest.mark.parametrize("not_regular", KINDS, indirect=True)
def test_tensors_and_bases_refuse_what_is_not_a_regular_file(tmp_path, not_regular):
    weights = _base_copy(tmp_path / "weights")
    kind = not_regular(weights)
    _refused(lambda: read_tensors(weights), str(weights), kind, EXPECTED)
    _refused(lambda: load_base(weights), str(weights), kind, EXPECTED)
    weights = _base_copy(tmp_path / "config")
    config = weights.with_suffix(".json")
    kind = not_regular(config)
    _refused(lambda: load_base(weights), str(config), kind, "expected a regular file")


@pytest.mark.parametrize("not_regular", KINDS, indirect=True)
def test_models_and_adapters_refuse_what_is_not_a_regular_file(saved, adapter, tmp_path,
                                                                not_regular):
    model = _copy(saved, tmp_path)
    kind = not_regular(model / "model.safetensors")
    _refused(lambda: load_allocator(model), str(model / "model.safetensors"), kind, EXPECTED)
    adapter = _copy(adapter, tmp_path)
    kind = not_regular(adapter / "adapter.safetensors")
    policy = policy_for(gym.make(FLIGHT), base=str(pretrained_base_path(FLIGHT)))
    _refused(lambda: load_adapter(policy, adapter), str(adapter / "adapter.safetensors"),
             kind, EXPECTED)


@pytest.mark.parametrize("not_regular", KINDS, indirect=True)
@pytest.mark.parametrize("suffix", [".safetensors", ".json"])
def test_routers_refuse_what_is_not_a_regular_file(router, tmp_path, not_regular, suffix):
    for source in router.parent.iterdir():
        shutil.copy(source, tmp_path / source.name)
    path = tmp_path / router.name
    kind = not_regular(path.with_name(path.name + suffix))
    _refused(lambda: load_router(path), str(path.with_name(path.name + suffix)), kind,
             "expected a regular file")


def _oversized(path: Path) -> None:
    """``path`` as a sparse file one byte over the limit (no disk space, no memory used)."""
    path.unlink()
    with open(path, "wb") as handle:
        handle.truncate(MAX_WEIGHTS_BYTES + 1)


def test_every_loader_refuses_a_file_over_the_limit_before_reading_it(saved, router,
                                                                     tmp_path, bounded_memory):
    limit = "more than the limit of 4.0 GiB"
    weights = _base_copy(tmp_path)
    _oversized(weights)
    _refused(lambda: read_tensors(weights), str(weights), limit)
    _refused(lambda: load_base(weights), str(weights), limit)
    model = _copy(saved, tmp_path)
    _oversized(model / "model.safetensors")
    _refused(lambda: load_allocator(model), str(model / "model.safetensors"), limit)
    for source in router.parent.iterdir():
        shutil.copy(source, tmp_path / source.name)
    _oversized(tmp_path / f"{router.name}.safetensors")
    _refused(lambda: load_router(tmp_path / router.name), f"{router.name}.safetensors", limit)


# ------------------------------------------------------------- truncated, before torch
def _header_claims_more(data: bytes) -> bytes:
    """The header length raised past the file's end."""
    return struct.pack("<Q", len(data)) + data[8:]


TRUNCATIONS = {
    "cut in the data": lambda data: data[:-5],
    "cut in half": lambda data: data[: len(data) // 2],
    "cut in the header": lambda data: data[:40],
    "cut in the header length": lambda data: data[:5],
    "header claims more bytes than the file has": _header_claims_more,
}


@pytest.mark.parametrize("truncation", list(TRUNCATIONS))
def test_a_truncated_file_is_named_before_torch_code_runs(saved, tmp_path, truncation,
                                                          torch_unreached):
    weights = _base_copy(tmp_path)
    weights.write_bytes(TRUNCATIONS[truncation](weights.read_bytes()))
    _refused(lambda: read_tensors(weights), str(weights), "truncated")
    _refused(lambda: load_base(weights), str(weights), "truncated")
    model = _copy(saved, tmp_path)
    file = model / "model.safetensors"
    file.write_bytes(TRUNCATIONS[truncation](file.read_bytes()))
    _refused(lambda: load_allocator(model), str(file), "truncated")


def test_the_command_line_names_a_truncated_model_before_importing_torch(saved, tmp_path):
    model = _copy(saved, tmp_path)
    file = model / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-5])
    status, heavy, _, err = probe("evaluate", "--env", FLIGHT, "--model", str(model))
    assert status == 1, err
    assert heavy == [], heavy
    assert str(file) in err and "truncated" in err, err


# ------------------------------------------------------------------ one dtype policy
def test_an_allocator_tensor_of_another_dtype_is_refused_from_the_header(saved, tmp_path,
                                                                        torch_unreached):
    model = _copy(saved, tmp_path)
    tensors = load_file(model / "model.safetensors")
    tensors["value_net.bias"] = tensors["value_net.bias"].double()
    save_file(tensors, model / "model.safetensors")
    _refused(lambda: load_allocator(model), "'value_net.bias'",
             "expected a float32 tensor, got float64")


def test_a_router_array_of_another_dtype_is_refused(router, tmp_path):
    for source in router.parent.iterdir():
        shutil.copy(source, tmp_path / source.name)
    path = tmp_path / router.name
    weights, doc_path = (path.with_name(path.name + s) for s in (".safetensors", ".json"))
    arrays = load_numpy(weights.read_bytes())
    name = next(iter(arrays))
    content = save_numpy({**arrays, name: arrays[name].astype(np.float32)})
    weights.write_bytes(content)
    doc = json.loads(doc_path.read_text())
    doc["arrays_sha256"] = hashlib.sha256(content).hexdigest()  # a consistent pair
    doc_path.write_text(json.dumps(doc))
    _refused(lambda: load_router(path), str(weights), repr(name),
             "expected a float64 tensor, got float32")


def test_a_saved_router_with_a_nan_coefficient_is_refused(tmp_path):
    """A non-finite array would route silently wrong: the loader names the arrays."""
    import hashlib
    import json

    import numpy as np
    from safetensors.numpy import load, save

    from cost_envs.traces import example_traces

    data = example_traces()
    router = make_router("logistic", "gpt-4.1-nano", "o3").fit(data)
    save_router(tmp_path / "r", router, 0.5)
    arrays = load((tmp_path / "r.safetensors").read_bytes())
    name = sorted(arrays)[0]
    arrays[name] = arrays[name].copy()
    arrays[name].flat[0] = np.nan
    content = save(arrays)
    (tmp_path / "r.safetensors").write_bytes(content)
    doc = json.loads((tmp_path / "r.json").read_text())
    doc["arrays_sha256"] = hashlib.sha256(content).hexdigest()
    (tmp_path / "r.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"hold NaN or infinite values"):
        load_router(tmp_path / "r")
