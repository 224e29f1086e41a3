"""``python -m experiments rules`` (experiments/rules/runner.py) at smoke scale: one section per
registered env, the searched rule frozen and scored on the evaluation tasks, files written
together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cost_envs
from experiments.rules import runner as rules


@pytest.fixture(scope="module")
def smoke(smoke_all) -> tuple[list[Path], dict]:
    """The smoke report the session's ``experiments all --scale smoke`` wrote (conftest.py).

    ``all`` searches in its two worker processes; the same report is not computed again.
    """
    call = smoke_all.reports["rules"]
    out, scale = call["args"]
    assert scale == "smoke" and call["kwargs"]["jobs"] == 2
    return call["returned"], json.loads((out / "rule_search.json").read_text())


def test_every_registered_env_is_searched_and_written(smoke) -> None:
    written, report = smoke
    assert sorted(p.name for p in written) == ["rule_search.json", "rule_search.md"]
    assert [entry["env_id"] for entry in report["envs"]] == list(cost_envs.ENV_IDS)
    text = written[0].read_text() if written[0].suffix == ".md" else written[1].read_text()
    for env_id in cost_envs.ENV_IDS:
        assert f"## {env_id}" in text


def test_the_frozen_rule_is_within_one_standard_error_of_the_top(smoke) -> None:
    for entry in smoke[1]["envs"]:
        chosen, top, open_loop = (entry["rows"][key]["training"]
                                  for key in ("chosen", "top", "open_loop"))
        assert chosen["mean_return"] >= top["mean_return"] - top["stderr"] - 1e-12
        assert top["mean_return"] >= max(chosen["mean_return"], open_loop["mean_return"])
        assert open_loop["rule"].startswith("open loop: ")


def test_logged_queries_are_scored_on_the_test_split_once_each(smoke) -> None:
    import gymnasium as gym

    entry = next(e for e in smoke[1]["envs"] if e["env_id"] == "cost_envs/TraceRouting-v0")
    test = gym.make("cost_envs/TraceRouting-v0", split="test").unwrapped.dataset.n_queries
    assert entry["rows"]["chosen"]["episodes"] == test
    other = next(e for e in smoke[1]["envs"] if e["env_id"] == "cost_envs/ToolBench-v0")
    assert other["rows"]["chosen"]["episodes"] == rules.SCALES["smoke"].episodes


def test_an_unknown_scale_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="scale"):
        rules.report(tmp_path, "huge")
    assert not list(tmp_path.iterdir())
