"""BoPO's seeds, its linear cost term and its λ scan (issue #11): pooled rows, a reward
that differs from the paper's exactly where the clip binds, results independent of the
number of workers."""

from __future__ import annotations

import numpy as np
import pytest

from agents.learners import bopo
from cost_envs.metrics import EpisodeRecord
from experiments.bopo import runner as bopo_experiment
from experiments.bopo.report import method_summary
from experiments.bopo.scan import scan_block

#: C_lo = 1 (always-small), C_hi = 3 (always-large); only the large model succeeds.
HARD = bopo.Boundary(False, 1.0, 5, True, 3.0, 4)


def _records(successes, costs) -> list[EpisodeRecord]:
    return [EpisodeRecord(bool(s), 1.0, float(c), float(s), np.array([1]), 4)
            for s, c in zip(successes, costs, strict=True)]


def test_the_linear_cost_term_differs_from_the_paper_exactly_where_the_clip_binds() -> None:
    costs = [0.5, 1.0, 2.0, 3.0, 3.5]  # below, at, between, at, above the boundaries
    for lam in (0.3, 0.9):
        clipped = [bopo.bopo_reward(True, c, HARD, lam) for c in costs]
        linear = [bopo.bopo_reward(True, c, HARD, lam, "linear") for c in costs]
        assert clipped == pytest.approx([1.0, 1.0, 1 - lam / 2, 1 - lam, 1 - lam])
        assert linear == pytest.approx([1 + lam / 4, 1.0, 1 - lam / 2, 1 - lam, 1 - 1.25 * lam])
        same = [a == pytest.approx(b) for a, b in zip(clipped, linear, strict=True)]
        assert same == [False, True, True, True, False]  # the clip binds at 0.5 and 3.5
    # The paper's term refuses lam >= 1; the linear one takes it, and from lam > 1 on a
    # hard task the cheap failure (always-small) becomes the reference: 0 > 1 - lam.
    with pytest.raises(ValueError, match="lam"):
        bopo.bopo_reward(True, 2.0, HARD, 2.0)
    assert bopo.reference_reward(HARD, 2.0, "linear") == 0.0
    assert bopo.guided_reward(True, 3.0, HARD, 2.0, "linear") == pytest.approx(-1.0)
    assert bopo.reference_reward(HARD, 0.5, "linear") == pytest.approx(0.5)  # the large
    with pytest.raises(ValueError, match="cost_term"):
        bopo.bopo_reward(True, 2.0, HARD, 0.5, "quadratic")
    with pytest.raises(ValueError, match="cost_term"):
        bopo.BoPOReward(bopo.make_env("sciworld"), [HARD], 0.5, "quadratic")


def test_a_learned_row_pools_its_seeds_and_widens_when_they_disagree() -> None:
    n = 40
    half = _records([j % 2 for j in range(n)], [1.0 + j % 2 for j in range(n)])
    agree = [half, half]
    disagree = [_records([1] * n, [2.0] * n), _records([0] * n, [1.0] * n)]
    returns = [[float(r.success) for r in run] for run in disagree]
    wide = method_summary(disagree, [HARD] * n, resamples=400, seed=0, returns=returns)
    narrow = method_summary(agree, [HARD] * n, resamples=400, seed=0,
                            returns=[[float(r.success) for r in run] for run in agree])
    for summary in (wide, narrow):  # the point is the mean over the seeds' values
        assert summary["success_rate"] == pytest.approx(0.5)
        assert summary["avg_cost"] == pytest.approx(1.5)
        assert summary["episode_return"] == pytest.approx(0.5)
    assert wide["per_seed"] == {"success_rate": [1.0, 0.0], "avg_cost": [2.0, 1.0],
                                "episode_return": [1.0, 0.0]}

    def width(summary: dict, key: str) -> float:
        low, high = summary[f"{key}_ci"]
        return high - low

    for key in ("success_rate", "avg_cost", "episode_return"):
        assert width(wide, key) > 2 * width(narrow, key), key
    # One run keeps the fixed rows' one-level bootstrap over tasks.
    one = method_summary([half], [HARD] * n, resamples=400, seed=0)
    assert "per_seed" not in one and one["success_rate"] == pytest.approx(0.5)


def test_the_scan_block_pairs_its_spreads_over_seeds_and_tasks() -> None:
    n = 30
    rng = np.random.default_rng(0)
    base = rng.random(n) < 0.6

    def run(shift: int, cost: float) -> tuple[list[EpisodeRecord], list[float]]:
        successes = np.roll(base, shift)
        return _records(successes, [cost] * n), [float(s) - cost for s in successes]

    runs = {"bopo/0.1": [run(0, 2.0), run(1, 2.0)], "bopo/0.9": [run(0, 2.0), run(1, 2.0)],
            "bopo-linear/1": [run(0, 2.0), run(1, 2.0)],
            "bopo-linear/8": [run(0, 1.5), run(1, 1.0)]}
    rule = run(0, 1.8)
    block = scan_block("appworld", runs, [0, 1], {"difficulty-threshold": rule},
                       resamples=200)
    clipped, linear = block["spread"]["clipped"], block["spread"]["linear"]
    assert clipped["success_rate"] == [0.0, 0.0, 0.0]  # identical runs: λ did nothing
    assert linear["avg_cost"][0] == pytest.approx(-0.75)  # (1.5 - 2 + 1 - 2) / 2
    assert linear["avg_cost"][2] < 0  # resolved: a cost drop in every resample
    row = block["rows"]["bopo-linear/8"]
    assert row["cost_term"] == "linear" and row["lam"] == 8.0
    assert row["avg_cost_per_seed"] == pytest.approx([1.5, 1.0])
    # one large call in 4 steps per episode
    assert row["large_steps"] == 0.25 and block["rule"]["large_steps"] == 0.25
    assert row["vs_rule"]["avg_cost"][0] == pytest.approx(1.25 - 1.8)
    assert block["rows"]["bopo/0.1"]["vs_rule"]["success_rate"][0] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="difficulty-threshold"):
        scan_block("appworld", runs, [0, 1], {})
    with pytest.raises(ValueError, match="2 runs per key"):
        scan_block("appworld", {**runs, "bopo/0.5": [rule]}, [0, 1],
                   {"difficulty-threshold": rule})


def test_results_do_not_depend_on_the_number_of_workers() -> None:
    sc = bopo_experiment.BopoScale("tiny", n_train=8, n_eval=4, timesteps=32,
                                   bopo_lams=(0.5,), ppo_lams=(1.0,), seeds=2,
                                   scan_profile="sciworld", linear_lams=(4.0,),
                                   scan_seeds=1, samples=1, sft_epochs=1, n_envs=2,
                                   resamples=10, random_ps=(), patiences=(),
                                   checkpoints=(0,))
    one = bopo_experiment.run_all(sc, profiles=("sciworld",))
    two = bopo_experiment.run_all(bopo_experiment.dataclasses.replace(sc, jobs=2),
                                  profiles=("sciworld",))
    assert list(one.learned["sciworld"]) == ["bopo/0.5", "ppo/1", "bopo-linear/4"]
    for key, runs in one.learned["sciworld"].items():
        assert [r.job.seed for r in runs] == ([0] if key == "bopo-linear/4" else [0, 1])
        assert [(r.records, r.returns) for r in runs] \
            == [(r.records, r.returns) for r in two.learned["sciworld"][key]]
    assert [w.records for w in one.warm["sciworld"]] == [w.records for w in two.warm["sciworld"]]
    assert one.prepared["sciworld"].records == two.prepared["sciworld"].records
    # each seed trains on its own draw
    first, second = one.warm["sciworld"]
    assert first.train_boundaries != second.train_boundaries
