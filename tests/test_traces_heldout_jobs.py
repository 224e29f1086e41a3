"""The held-out routing evaluations give the same result in worker processes as in one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.traces import runner

ROUTELLM = Path(__file__).resolve().parents[2] / "shared" / "data" / "routellm"

pytestmark = pytest.mark.skipif(not (ROUTELLM / runner.GSM8K).is_file(),
                                reason=f"RouteLLM data not found at {ROUTELLM}")


@pytest.mark.slow  # about a minute: every held-out evaluation twice
def test_worker_processes_give_the_held_out_evaluations_of_one_process() -> None:
    arena = ROUTELLM.parent / runner.ROUTERARENA_DIR
    alone = runner.heldout(ROUTELLM, arena, 50)
    spread = runner.heldout(ROUTELLM, arena, 50, jobs=2)
    # as the report writes them (NaN, where a fold has no such query, is not equal to itself)
    assert json.dumps(spread, sort_keys=True, default=str) == json.dumps(alone, sort_keys=True,
                                                                          default=str)
    assert [name for name in spread if "skipped" not in spread[name]]  # something was run


def test_a_bad_jobs_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="jobs"):
        runner.report(tmp_path / "out", "smoke", ROUTELLM, jobs=0)
    assert not (tmp_path / "out").exists()
