"""Progress bars (agents/progress.py): on stderr, only on a terminal, and off on request."""

from __future__ import annotations

import io
import sys

import gymnasium as gym
import pytest

import cost_envs  # noqa: F401  (registers the envs)
from agents.learners.pretrain import pretrain_base
from agents.learners.supervised import (
    SupervisedConfig,
    policy_for,
    relative_costs,
    traces_for,
    train_supervised,
)
from agents.progress import progress_bar

ENV_ID = "cost_envs/ToolBench-v0"


class Terminal(io.StringIO):
    """A stderr that says it is a terminal and keeps what was written."""

    def isatty(self) -> bool:
        return True


def on_terminal(monkeypatch: pytest.MonkeyPatch) -> Terminal:
    """Point ``sys.stderr`` at a :class:`Terminal` (in the test body: pytest's capture
    sets ``sys.stderr`` again between a fixture's setup and the test)."""
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


def test_a_bar_is_drawn_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = on_terminal(monkeypatch)
    with progress_bar(3, "counting", progress=True) as bar:
        bar.update(3)
    assert "counting" in terminal.getvalue()
    shown = terminal.getvalue()
    with progress_bar(3, "hidden", progress=False) as bar:
        bar.update(3)
    assert terminal.getvalue() == shown  # progress=False: nothing, even on a terminal


def test_no_bar_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()  # a log file, a pipe, CI
    monkeypatch.setattr(sys, "stderr", stream)
    with progress_bar(3, "counting", progress=True) as bar:
        bar.update(3)
    assert stream.getvalue() == ""


def test_the_supervised_stage_shows_episodes_and_epochs(monkeypatch: pytest.MonkeyPatch,
                                                        capsys) -> None:
    terminal = on_terminal(monkeypatch)
    env = gym.make(ENV_ID)
    config = SupervisedConfig(episodes=20, epochs=2)
    traces = traces_for(env, config, seed=5, progress=True)
    train_supervised(policy_for(env), traces, relative_costs(env), config, progress=True)
    text = terminal.getvalue()
    assert "supervised: teacher episodes" in text and "supervised: epochs" in text
    assert capsys.readouterr().out == ""  # stdout stays the result's
    before = terminal.getvalue()
    train_supervised(policy_for(env), traces, relative_costs(env), config)  # default: off
    assert terminal.getvalue() == before


def test_pretraining_shows_pools_and_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = on_terminal(monkeypatch)
    pretrain_base(ENV_ID, n_pools=2, episodes=5, steps=4, progress=True)
    text = terminal.getvalue()
    assert "pretrain: pool traces" in text and "pretrain: steps" in text
