"""``agents.learners.training.train`` sets torch's thread count itself (issue #13)."""

from __future__ import annotations

import pytest
import torch

from agents.learners import training


class _StopError(Exception):
    pass


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Torch's thread count at the start of training (then training stops there)."""
    counts: list[int] = []

    def record(seed: int) -> None:
        counts.append(torch.get_num_threads())
        raise _StopError

    monkeypatch.setattr(training, "set_random_seed", record)
    return counts


@pytest.mark.parametrize(("torch_threads", "expected"), [
    ("default", training.DEFAULT_TORCH_THREADS), (2, 2), (None, "outside")])
def test_train_runs_with_its_thread_count_and_restores_it(seen, torch_threads, expected):
    previous = torch.get_num_threads()
    outside = 3 if previous != 3 else 4  # a count train's default is not
    torch.set_num_threads(outside)
    try:
        kwargs = {} if torch_threads == "default" else {"torch_threads": torch_threads}
        with pytest.raises(_StopError):
            training.train("cost_envs/ToolBench-v0", "ppo", 64, **kwargs)
        assert seen == [outside if expected == "outside" else expected]
        assert torch.get_num_threads() == outside  # restored, even after an error
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_torch_threads_is_a_value_error_naming_it(seen, bad):
    with pytest.raises(ValueError, match=f"torch_threads.*{bad!r}"):
        training.train("cost_envs/ToolBench-v0", "ppo", 64, torch_threads=bad)
    assert seen == []  # checked before anything runs
