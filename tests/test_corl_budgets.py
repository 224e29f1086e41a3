"""CORL's learning curves on ExpertRouting-v1: what they train, score and write (issue #23)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from cost_envs.metrics import bootstrap_gap_closed, bootstrap_mean_ci
from experiments.budgets.report import share_text, stops_improving
from experiments.corl import budgets as corl_budgets
from experiments.shared.gaps import decode_scores
from experiments.shared.task_sets import scored_on

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def _read(markdown: str, columns: str, resamples: int) -> dict[str, np.ndarray]:
    """Check every cell of every row's curve against its CSV; the curves by row."""
    rows = list(csv.DictReader(io.StringIO(columns)))
    ends = {row["row"]: decode_scores(row["scores"]) for row in rows if not row["seed"]}
    curves = {}
    for key in dict.fromkeys(row["row"] for row in rows if row["seed"]):
        mine = [row for row in rows if row["row"] == key]
        steps = sorted({int(row["timesteps"]) for row in mine})
        seeds = sorted({int(row["seed"]) for row in mine})
        curve = np.array([[decode_scores(next(row["scores"] for row in mine
                                              if int(row["seed"]) == seed
                                              and int(row["timesteps"]) == step))
                           for step in steps] for seed in seeds])
        tier = key.split("/")[0]
        rule, planner = ends[f"{tier}/rule"], ends[f"{tier}/planner"]
        heading = f"### {corl_budgets.ROWS[key.split('/', 1)[1]]}"
        section = markdown.split(f"## Tier `{tier}`")[1].split(heading)[1].split("\n#")[0]
        stop = stops_improving(curve, resamples)
        marks = re.findall(r"\| ([\d,]+) \*\*stops\*\* \|", section)
        assert marks == ([] if stop is None else [f"{steps[stop]:,}"])
        for index, step in enumerate(steps):
            mean, low, high = bootstrap_mean_ci(curve[:, index], n_resamples=resamples)
            share = bootstrap_gap_closed(curve[:, index], rule, planner)
            gradient = next(int(row["gradient_steps"]) for row in mine
                            if int(row["timesteps"]) == step)
            mark = " **stops**" if index == stop else ""
            assert (f"| {step:,}{mark} | {gradient:,} | {mean:.3f} [{low:.3f}, {high:.3f}] "
                    f"| {share_text(share)} |") in section
        curves[key] = curve
    return curves


def _result(seed: int, ppo: list[float], adapters: list[float], tasks: int = 40) -> dict:
    """A seed's result whose scores on every query are 1 with the given probabilities."""
    rng = np.random.default_rng(seed)

    def curve(means: list[float], step: int) -> list[dict]:
        return [{"timesteps": index * step, "gradient_steps": index * step // 512 * 80,
                 "scores": {"low": (rng.random(tasks) < mean).astype(float).tolist()}}
                for index, mean in enumerate(means)]

    return {"seed": seed, "ppo": {"curve": curve(ppo, 1024), "seconds": 120.0},
            "lora-ppo": {"low": {"curve": curve(adapters, 512), "seconds": 60.0}}}


SCALE = corl_budgets.CurveScale("test", (0, 1024, 2048, 3072), 3072, (0, 512, 1024),
                                seeds=3, episodes=30, resamples=200, tiers=("low",),
                                fixed="smoke")
GAP = {"low": {"rule": "Controller alone", "rule_scores": [0.0] * 20 + [1.0] * 20,
               "reference_scores": [0.0] * 8 + [1.0] * 32}}


def test_the_stop_mark_and_the_intervals_are_the_datas():
    # PPO rises, then is flat from its second checkpoint; the adapters are still rising.
    results = [_result(seed, [0.1, 0.7, 0.7, 0.7], [0.2, 0.5, 0.95]) for seed in range(3)]
    markdown, columns = corl_budgets.curves_table(results, GAP, {"low": 0.0015}, SCALE)
    curves = _read(markdown, columns, SCALE.resamples)
    assert set(curves) == {"low/ppo", "low/lora-ppo"} and curves["low/ppo"].shape == (3, 4, 40)
    ppo = markdown.split("### PPO")[1].split("###")[0]
    assert "Stops improving at 1,024 env steps" in ppo and "| 1,024 **stops** | 160 |" in ppo
    lora = markdown.split("### LoRA-PPO")[1]
    assert "Still improving at the last checkpoint" in lora and "**stops**" not in lora
    assert "Wall time per seed: 2.0 min" in ppo and "Wall time per seed: 1.0 min" in lora
    # Other data, other marks: the table follows the scores, not the checkpoints.
    results = [_result(seed, [0.1, 0.3, 0.6, 0.95], [0.6, 0.6, 0.6]) for seed in range(3)]
    markdown, columns = corl_budgets.curves_table(results, GAP, {"low": 0.0015}, SCALE)
    _read(markdown, columns, SCALE.resamples)
    assert "| 0 **stops** |" in markdown.split("### LoRA-PPO")[1]
    assert "**stops**" not in markdown.split("### PPO")[1].split("###")[0]


@pytest.mark.parametrize("bad", [{"adapter_from": 512}, {"ppo_checkpoints": (0, 1000)},
                                 {"ppo_checkpoints": (1024, 0)}, {"tiers": ("lowest",)},
                                 {"episodes": 400}])
def test_a_scale_the_curves_cannot_run_is_refused(bad):
    settings = {"name": "bad", "ppo_checkpoints": (0, 1024), "adapter_from": 1024,
                "adapter_checkpoints": (0, 512), "episodes": 30, "fixed": "smoke", **bad}
    with pytest.raises(ValueError, match="CurveScale"):
        corl_budgets.CurveScale(**settings)


@pytest.mark.slow  # trains
def test_scoring_at_checkpoints_leaves_the_training_as_it_was():
    from agents.learners.corl import TierScoresAtSteps, train_shared_ppo

    alone, _ = train_shared_ppo(1024, 3, env_id=corl_budgets.ENV_ID)
    scored = TierScoresAtSteps(corl_budgets.ENV_ID, (0, 512), ("low", "high"), 10,
                               env_kwargs={"profile": "mixed"}, keep=True)
    policy, _ = train_shared_ppo(1024, 3, env_id=corl_budgets.ENV_ID, callbacks=[scored])
    for name, tensor in alone.state_dict().items():
        assert np.array_equal(tensor.numpy(), policy.state_dict()[name].numpy()), name
    assert [entry["timesteps"] for entry in scored.curve] == [0, 512, 1024]
    assert [entry["gradient_steps"] for entry in scored.curve] == [0, 80, 160]
    assert set(scored.curve[0]["scores"]) == {"low", "high"}
    assert all(len(v) == 10 and set(v) <= {0.0, 1.0} for v in scored.curve[-1]["scores"].values())
    # the copy kept at 512 steps is the policy as it was there, not the trained one
    assert sorted(scored.policies) == [0, 512, 1024]
    assert any(not np.array_equal(tensor.numpy(), policy.state_dict()[name].numpy())
               for name, tensor in scored.policies[512].state_dict().items())


@pytest.mark.slow  # trains
def test_a_smoke_run_writes_curves_whose_adapters_start_where_the_shared_policy_was(tmp_path):
    paths = corl_budgets.report(tmp_path, "smoke", log=lambda _: None)
    assert sorted(path.name for path in paths) == ["budgets_ExpertRouting-v1.csv",
                                                   "budgets_ExpertRouting-v1.md"]
    markdown = (tmp_path / "budgets_ExpertRouting-v1.md").read_text(encoding="utf-8")
    columns = (tmp_path / "budgets_ExpertRouting-v1.csv").read_text(encoding="utf-8")
    curves = _read(markdown, columns, corl_budgets.SCALES["smoke"].resamples)
    assert curves["low/ppo"].shape == (2, 3, 30) and curves["low/lora-ppo"].shape == (2, 2, 30)
    # an adapter adds nothing at its start (B = 0): at its step 0 it is the shared policy
    # at 512 steps, query for query
    assert np.array_equal(curves["low/lora-ppo"][:, 0], curves["low/ppo"][:, 1])


def test_the_committed_curves_are_the_full_tables_training_scored_on_the_way():
    """Cells from the CSV; adapters start at the shared PPO's 204,800; the full table's rows
    where that table is scored on the curves' (validation) queries: a table scored on the
    test queries holds other queries, and only the rest is checked."""
    path = RESULTS / "budgets_ExpertRouting-v1.csv"
    columns = path.read_text(encoding="utf-8")
    markdown = path.with_suffix(".md").read_text(encoding="utf-8")
    assert len(_read(markdown, columns, 1000)) == 6  # two rows on each of three tiers
    rows = list(csv.DictReader(io.StringIO(columns)))
    report = json.loads((RESULTS / "full" / "corl_tiers_ExpertRouting-v1.json").read_text(
        encoding="utf-8"))
    assert scored_on(report) in ("validation", "test")
    for tier in ("low", "medium", "high"):
        shared = sorted((int(r["seed"]), decode_scores(r["scores"])) for r in rows
                        if r["row"] == f"{tier}/ppo" and r["timesteps"] == "204800")
        start = sorted((int(r["seed"]), decode_scores(r["scores"])) for r in rows
                       if r["row"] == f"{tier}/lora-ppo" and r["timesteps"] == "0")
        assert len(shared) == len(start) == 5
        for (seed, a), (other, b) in zip(shared, start, strict=True):
            assert seed == other and np.array_equal(a, b)
        if scored_on(report) != "validation":
            continue  # the table scores the test queries, the curves the validation ones
        # the same training as the full-scale table's: its rows, query for query, are the
        # shared PPO at 204,800 steps and the adapters at 51,200
        table = report["gap_closed"]["tasks"][f"ExpertRouting-v1/mixed/{tier}"]
        for key, step in (("ppo", "204800"), ("lora-ppo", "51200")):
            mine = [decode_scores(r["scores"]) for r in sorted(
                (r for r in rows if r["row"] == f"{tier}/{key}" and r["timesteps"] == step),
                key=lambda r: int(r["seed"]))]
            theirs = [decode_scores(s) for s in table["methods"][key]["seed_scores"]]
            assert np.array_equal(mine, theirs), (tier, key)
        ends = {r["row"]: decode_scores(r["scores"]) for r in rows if not r["seed"]}
        assert np.array_equal(ends[f"{tier}/rule"], decode_scores(table["rule_scores"]))
        assert np.array_equal(ends[f"{tier}/planner"], decode_scores(table["reference_scores"]))
