"""The LoRA-Guided PPO paper's tables (experiments.lora_ppo) through ``python -m experiments``."""

import json
import math
import stat
import struct

import gymnasium as gym
import pytest

from agents.rules import BestFixedRule
from cost_envs.metrics import HEADLINE_METRICS
from experiments.__main__ import main
from experiments.lora_ppo import report as out_files
from experiments.lora_ppo import runner as rep

ENV_NAMES = {env_id: env_id.split("/")[-1] for env_id in rep.ENVS}
FILE_NAMES = {f"{kind}_{name}.{ext}" for name in ENV_NAMES.values()
              for kind, ext in (("table", "md"), ("table", "json"), ("pareto", "png"),
                                ("pareto", "svg"), ("learning_curves", "png"),
                                ("learning_curves", "svg"), ("learning_curves", "csv"))}
SVG_START = b"<?xml"
ABLATIONS = ("lora/random-base", "lora-ppo/random-base")
RL_ROWS = [key for key, row in rep.LEARNED_ROWS.items() if row.method != "lora"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMOKE = rep.SCALES["smoke"]
#: Env id -> its learned rows (tuned rows where a tuned configuration is committed).
ROWS = {env_id: rep.rows_on(env_id, list(rep.LEARNED_ROWS), SMOKE) for env_id in rep.ENVS}


@pytest.fixture(scope="session")
def smoke(smoke_all):
    """The smoke run of ``lora_ppo`` inside the session's ``experiments all --scale smoke``.

    ``all`` (tests/conftest.py, shared with the other experiments' tests) runs it as
    ``python -m experiments lora_ppo --scale smoke`` does, in its two worker processes; a
    spy kept what ``reproduce`` computed (30 small models), so it is not trained again.
    """
    call = smoke_all.reports["lora_ppo"]
    [scale] = call["args"]
    return {"status": smoke_all.status, "out": smoke_all.out, "progress": smoke_all.progress,
            "scale": scale, "kwargs": call["kwargs"], "reports": call["returned"]}


@pytest.fixture(scope="session")
def written(smoke):
    """The output directory of the CLI run (it has finished: ``smoke_all`` checks)."""
    return smoke["out"]


def load_table(smoke, env_id):
    """The env's report as its written JSON file and learning-curve CSV hold it."""
    return out_files.read_report(smoke["out"] / f"table_{ENV_NAMES[env_id]}.json")


def pool_names(env_id):
    env = gym.make(env_id)
    names = list(env.unwrapped.pool.names)
    env.close()
    return names


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_command_runs_the_smoke_scale_in_its_worker_processes(smoke, written):
    assert smoke["status"] == 0
    assert smoke["scale"] == SMOKE
    assert smoke["kwargs"]["jobs"] == 2  # the default of --jobs
    assert list(smoke["reports"]) == list(rep.ENVS)
    for name in sorted(FILE_NAMES):
        assert f"lora_ppo: wrote {written / name}" in smoke["progress"]
    # a progress line per training run, as each one finishes (the scheduler's)
    lines = [line for line in smoke["progress"].splitlines() if "] lora_ppo: " in line]
    assert sum(" seed " in line and " done (" in line for line in lines) == 2 * sum(
        len(rows) for rows in ROWS.values())


def test_command_passes_jobs_to_reproduce(tmp_path, monkeypatch):
    calls = []

    def stop(scale, **kwargs):
        calls.append((scale, kwargs["jobs"]))
        raise RuntimeError("stopped before training")

    monkeypatch.setattr(rep, "reproduce", stop)
    for jobs in ("1", "3"):
        with pytest.raises(RuntimeError, match="stopped before training"):
            main(["lora_ppo", "--scale", "smoke", "--jobs", jobs, "--out", str(tmp_path)])
    assert calls == [(SMOKE, 1), (SMOKE, 3)]
    assert list(tmp_path.iterdir()) == []


def test_command_writes_exactly_the_tables_and_figures(written):
    # the other experiments of ``all`` write into the same directory: every other file is
    # theirs (no name of a lora_ppo env in it), so no temporary of lora_ppo's is left behind
    paths = [path for path in written.iterdir()
             if path.name in FILE_NAMES or any(env in path.name for env in ENV_NAMES.values())]
    assert {path.name for path in paths} == FILE_NAMES
    for path in paths:  # shareable like any result file, not mkstemp's 0600
        assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_json_tables_have_every_method_with_intervals(smoke):
    for env_id in rep.ENVS:
        table = load_table(smoke, env_id)
        assert table["env_id"] == env_id
        assert table["scale"]["name"] == "smoke"
        assert table["scale"]["seeds"] == 2
        assert table["scale"]["timesteps"] == SMOKE.timesteps
        methods = table["methods"]
        assert list(methods) == [*rep.baseline_rows(env_id), *ROWS[env_id]]
        assert set(rep.PAPER_METHODS) <= set(methods)
        assert (set(ABLATIONS) <= set(methods)) == (env_id in rep.PAPER_ENVS)
        for key, entry in methods.items():
            for metric in HEADLINE_METRICS:
                value = entry[metric]
                low, high = entry[f"{metric}_ci"]
                assert math.isfinite(value), (env_id, key, metric)
                assert low <= value <= high, (env_id, key, metric, low, value, high)
            assert list(entry["call_ratio"]) == pool_names(env_id)
            assert all(0.0 <= ratio <= 1.0 for ratio in entry["call_ratio"].values())


def test_baseline_rows_are_scored_once_on_the_shared_tasks(smoke):
    for env_id in rep.ENVS:
        methods = load_table(smoke, env_id)["methods"]
        for key, (label, _) in rep.baseline_rows(env_id).items():
            assert methods[key]["label"] == label
            assert methods[key]["seeds"] == 1
            assert methods[key]["episodes"] == SMOKE.episodes
            assert "per_seed" not in methods[key]


def test_flightplanner_tables_have_the_one_turn_rule_and_toolbench_has_not(smoke):
    flight = [env_id for env_id in rep.ENVS if "FlightPlanner" in env_id]
    assert flight == ["cost_envs/FlightPlanner-v0", "cost_envs/FlightPlanner-v1"]
    rows = {}
    for env_id in rep.ENVS:
        methods = load_table(smoke, env_id)["methods"]
        if env_id not in flight:
            assert "one-turn" not in methods
            continue
        rule = methods["one-turn"]
        assert rule["label"] == "One-turn plan+search rule"
        # Strongest planner and searcher only: never a weak one, never a validator.
        assert {name for name, ratio in rule["call_ratio"].items() if ratio > 0} == {
            "planner_large", "search_pro"}
        rows[env_id] = methods
    # FlightPlanner-v1 has v0's tasks and dynamics: on the same task seed, rules that read
    # only what v0 shows (and the oracle) score exactly as on v0.
    v0, v1 = (rows[env_id] for env_id in flight)
    for key in ("one-turn", "oracle", "all"):
        for metric in ("success_rate", "avg_cost", "avg_quality"):
            assert v1[key][metric] == v0[key][metric], (key, metric)


def test_every_table_has_the_best_fixed_rule_searched_on_training_tasks(smoke, written):
    for env_id, name in ENV_NAMES.items():
        entry = load_table(smoke, env_id)["methods"]["best-rule"]
        assert entry["label"] == "Best fixed rule (searched on training tasks)"
        # The rule a search on the smoke scale's training tasks (their own seed range, not
        # the evaluation tasks) freezes, named in the JSON and under the Markdown table.
        search = BestFixedRule(gym.make(env_id), n_tasks=SMOKE.rule_tasks)
        assert entry["rule"] == search.description
        assert entry["rule"].startswith(("open loop: ", "threshold: ", "hand-written: "))
        text = (written / f"table_{name}.md").read_text()
        assert f"\nBest fixed rule (searched on training tasks): {entry['rule']}.\n" in text


def test_learned_rows_pool_both_seeds(smoke):
    for env_id in rep.ENVS:
        methods = load_table(smoke, env_id)["methods"]
        for key in ROWS[env_id]:
            entry = methods[key]
            assert entry["label"] == rep.LEARNED_ROWS[key].label
            assert entry["seeds"] == 2
            assert entry["episodes"] == 2 * SMOKE.episodes
            assert len(entry["per_seed"]) == 2
            for metric in HEADLINE_METRICS:
                assert all(math.isfinite(seed[metric]) for seed in entry["per_seed"])
            # Both seeds play the same number of tasks, so pooled means are seed means.
            for metric in ("success_rate", "avg_cost", "avg_quality"):
                mean = sum(seed[metric] for seed in entry["per_seed"]) / 2
                assert entry[metric] == pytest.approx(mean), (env_id, key, metric)


def test_learning_curves_have_the_timesteps(smoke):
    for env_id in rep.ENVS:
        curves = load_table(smoke, env_id)["learning_curves"]
        assert list(curves) == ROWS[env_id]
        for key, histories in curves.items():
            assert len(histories) == 2
            if key not in RL_ROWS:  # supervised only: no RL, no curve
                assert histories == [[], []]
                continue
            for history in histories:
                # One point per rollout: one 512-step rollout per run at smoke scale
                # with the paper's settings, 512 / n_steps with a tuned configuration.
                arguments = rep.LEARNED_ROWS[key].arguments(env_id, SMOKE.supervised)
                n_steps = arguments.get("ppo", {}).get("n_steps", 512)
                assert [point["timesteps"] for point in history] == list(
                    range(n_steps, SMOKE.timesteps + 1, n_steps))
                for point in history:
                    assert math.isfinite(point["cost/cps"])
                    assert 0.0 <= point["rollout/success_rate"] <= 1.0


def test_markdown_tables_list_every_row(smoke, written):
    for env_id, name in ENV_NAMES.items():
        text = (written / f"table_{name}.md").read_text()
        assert text == out_files.markdown_table(smoke["reports"][env_id])
        assert text.startswith(f"# LoRA-Guided PPO paper, Tables 1-2: {env_id}\n")
        assert "Reproduce with `python -m experiments lora_ppo --scale smoke`." in text
        headline = text.split("## Return and the share of the gap closed", 1)[0]
        rows = [line for line in headline.splitlines() if line.startswith("| ")]
        assert rows[0].startswith("| Method | Success | CPS |")
        labels = [row.split("|")[1].strip() for row in rows[1:]]
        assert labels == [*(label for label, _ in rep.baseline_rows(env_id).values()),
                          *(rep.LEARNED_ROWS[key].label for key in ROWS[env_id])]


def test_figures_are_pngs_of_the_figure_size(written):
    for name in ENV_NAMES.values():
        pareto = written / f"pareto_{name}.png"
        curves = written / f"learning_curves_{name}.png"
        for path in (pareto, curves):
            width, height = png_size(path)
            assert width >= 600 and height >= 400, (path, width, height)  # dpi 120 figures
            assert path.stat().st_size > 20_000, path  # axes, points and text, not blank


def test_write_reports_writes_what_the_command_wrote(smoke, written, tmp_path):
    paths = out_files.write_reports(smoke["reports"], tmp_path)
    assert sorted(path.name for path in paths) == sorted(FILE_NAMES)
    assert {path.name for path in tmp_path.iterdir()} == FILE_NAMES
    for env_id, name in ENV_NAMES.items():
        for suffix in (".md", ".json"):
            ours = (tmp_path / f"table_{name}{suffix}").read_text()
            assert ours == (written / f"table_{name}{suffix}").read_text()
        assert json.loads((tmp_path / f"table_{name}.json").read_text()) == json.loads(
            out_files.json_report(smoke["reports"][env_id]))
        curves = f"learning_curves_{name}.csv"
        assert (tmp_path / curves).read_text() == (written / curves).read_text()
        # what the files hold is what the run computed, curves included (as JSON has it:
        # a tuple comes back a list)
        assert out_files.read_report(tmp_path / f"table_{name}.json") == json.loads(
            json.dumps(smoke["reports"][env_id]))
        for kind in ("pareto", "learning_curves"):
            assert (tmp_path / f"{kind}_{name}.png").read_bytes()[:8] == PNG_MAGIC
            assert (tmp_path / f"{kind}_{name}.svg").read_bytes().startswith(SVG_START)
            for suffix in (".png", ".svg"):  # a second render writes the same bytes
                ours = (tmp_path / f"{kind}_{name}{suffix}").read_bytes()
                assert ours == (written / f"{kind}_{name}{suffix}").read_bytes()


def test_an_unknown_scale_fails_before_any_work(tmp_path, monkeypatch, capsys):
    def must_not_run(scale, **kwargs):
        raise AssertionError(f"reproduce ran at scale {scale.name!r}")

    monkeypatch.setattr(rep, "reproduce", must_not_run)
    with pytest.raises(SystemExit) as exc:
        main(["lora_ppo", "--scale", "huge", "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'huge'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="scale"):
        rep.report(tmp_path / "out", "huge")


def test_a_failed_run_leaves_previous_results_untouched(tmp_path, monkeypatch, capsys):
    out = tmp_path / "results"
    out.mkdir()
    old = out / "table_FlightPlanner-v0.md"
    old.write_text("previous results\n")

    def boom(job):
        raise RuntimeError(f"simulated failure in {job.key}")

    monkeypatch.setattr(rep, "run_job", boom)
    assert main(["lora_ppo", "--scale", "smoke", "--jobs", "1", "--out", str(out)]) == 1
    error = capsys.readouterr().err
    # every run failed, each reported with its traceback; the fixed rows finished
    assert "RuntimeError: simulated failure in ppo" in error
    assert "units failed" in error and "To run the failed ones alone" in error
    assert old.read_text() == "previous results\n"
    # no report written; what finished (each env's fixed rows) kept to resume from
    assert sorted(path.name for path in out.iterdir()) == ["kept_units", old.name]


def test_a_failed_figure_leaves_previous_results_untouched(smoke, tmp_path, monkeypatch):
    out = tmp_path / "results"
    out.mkdir()
    previous = {name: f"previous {name}\n" for name in sorted(FILE_NAMES)}
    for name, text in previous.items():
        (out / name).write_text(text)

    def boom(report):
        raise RuntimeError("simulated plotting failure")

    # The computed reports are replayed: only the writing step runs again.
    monkeypatch.setattr(rep, "reproduce", lambda scale, **kwargs: smoke["reports"])
    monkeypatch.setattr(out_files, "pareto_figure", boom)
    with pytest.raises(RuntimeError, match="simulated plotting failure"):
        main(["lora_ppo", "--scale", "smoke", "--jobs", "1", "--out", str(out)])
    assert {path.name: path.read_text() for path in out.iterdir()} == previous


def test_worker_processes_give_the_same_results_as_one_process():
    # `make reproduce` runs the grid in spawned workers; they must compute what one
    # process computes (the runs are seeded, so the records are identical).
    scale = rep.Scale("tiny", timesteps=64, seeds=2, episodes=8, resamples=20,
                      supervised=rep.SupervisedConfig(episodes=10, epochs=1), rule_tasks=3)
    kwargs = {"envs": ["cost_envs/FlightPlanner-v0"], "rows": ["lora"],
              "log": lambda *_: None}
    serial = rep.reproduce(scale, jobs=1, **kwargs)
    parallel = rep.reproduce(scale, jobs=2, **kwargs)
    assert serial == parallel
    assert serial["cost_envs/FlightPlanner-v0"]["methods"]["lora"]["seeds"] == 2


def test_scale_rejects_bad_values():
    with pytest.raises(ValueError, match=r"Scale\.seeds: expected an int >= 1, got 0"):
        rep.Scale("bad", timesteps=1, seeds=0, episodes=1, resamples=1)


# ------------------------------------------------------ the share of the gap closed
def test_gap_closed_runs_from_the_best_fixed_row_to_the_planner(smoke):
    for env_id, report in smoke["reports"].items():
        methods = report["methods"]
        if "planner" not in methods:
            assert "gap_closed" not in report, env_id
            continue
        block = report["gap_closed"]
        assert block["experiment"] == "lora_ppo"
        (task,) = block["tasks"].values()
        # the Bayes reference is a fixed row but never the rule of the gap
        assert "bayes-planner" in methods
        fixed = {key: entry["episode_return"] for key, entry in methods.items()
                 if key not in rep.LEARNED_ROWS and key not in rep.PRIVILEGED_ROWS
                 and key not in rep.REFERENCE_ROWS}
        best = max(fixed, key=fixed.get)
        assert task["rule"] == pytest.approx(fixed[best])
        assert task["rule_row"] == methods[best]["label"]
        assert task["reference"] == pytest.approx(methods["planner"]["episode_return"])
        assert set(task["methods"]) == set(ROWS[env_id])
        gap = task["reference"] - task["rule"]
        for key, share in task["methods"].items():
            seeds = [one["episode_return"] for one in methods[key]["per_seed"]]
            assert len(seeds) == SMOKE.seeds
            assert methods[key]["episode_return"] == pytest.approx(sum(seeds) / len(seeds))
            expected = [(value - task["rule"]) / gap for value in seeds]
            assert share["per_seed"] == pytest.approx(expected)


def test_every_table_states_each_rows_return(smoke):
    for report in smoke["reports"].values():
        text = out_files.markdown_table(report)
        section = text.split("## Return and the share of the gap closed", 1)[1]
        for entry in report["methods"].values():
            assert f"| {entry['label']} | {entry['episode_return']:.3f} " in section
        if "gap_closed" not in report:
            assert "has no planner" in section


def test_tuned_rows_train_with_the_committed_configuration(monkeypatch):
    tuned = {"learning_rate": 1e-3, "supervised_epochs": 2, "action_head": "trained",
             "cost_coef": 0.0, "ent_coef": 0.001}
    monkeypatch.setattr(rep.tune, "chosen", lambda method, env_id: (
        tuned if (method, env_id) == ("lora-ppo", "cost_envs/ToolBench-v0") else None))
    assert "lora-ppo/tuned" in rep.rows_on("cost_envs/ToolBench-v0", list(rep.LEARNED_ROWS),
                                           SMOKE)
    assert not {"lora-ppo/tuned", "ppo/tuned"} & set(
        rep.rows_on("cost_envs/FlightPlanner-v0", list(rep.LEARNED_ROWS), SMOKE))
    arguments = rep.LEARNED_ROWS["lora-ppo/tuned"].arguments("cost_envs/ToolBench-v0",
                                                             SMOKE.supervised)
    assert arguments["supervised"].epochs == 2  # the tuned warm start ...
    assert arguments["supervised"].episodes == SMOKE.supervised.episodes  # ... at the scale's size
    assert arguments["ppo"] == {"learning_rate": 1e-3, "cost_coef": 0.0, "ent_coef": 0.001,
                                "action_lr_scale": 1.0}
    paper = rep.LEARNED_ROWS["lora-ppo"].arguments("cost_envs/ToolBench-v0", SMOKE.supervised)
    assert paper == {"supervised": SMOKE.supervised}


def test_planner_taught_rows_are_where_they_are_listed_and_a_planner_exists(smoke):
    assert "lora-ppo/planner" in ROWS["cost_envs/ToolBench-v0"]
    for env_id, rows in ROWS.items():
        expected = env_id in rep.PLANNER_TAUGHT_ENVS and rep.has_planner(env_id)
        assert ("lora/planner" in rows) == ("lora-ppo/planner" in rows) == expected, env_id
        if expected:
            arguments = rep.LEARNED_ROWS["lora-ppo/planner"].arguments(env_id, SMOKE.supervised)
            assert arguments["supervised"].teacher == "planner"
            assert arguments["supervised"].episodes == SMOKE.supervised.episodes
            # a different teacher is a different warm start: the rows differ
            table = load_table(smoke, env_id)["methods"]
            assert table["lora/planner"]["per_seed"] != table["lora"]["per_seed"]


def test_a_scale_sets_each_envs_steps_its_rows_and_its_sub_envs(monkeypatch):
    # The converged-budget tables (issue #23): each env its own RL steps, on the batched
    # env, for the rows the scale names.
    flight, toolbench = "cost_envs/FlightPlanner-v0", "cost_envs/ToolBench-v0"
    scale = rep.Scale("tiny", timesteps=64, seeds=1, episodes=4, resamples=20, rule_tasks=3,
                      n_envs=2, env_timesteps=((flight, 512),), rows=("ppo",))
    assert scale.steps_on(flight) == 512 and scale.steps_on(toolbench) == 64
    assert rep.rows_on(flight, tuple(rep.LEARNED_ROWS), scale) == ["ppo"]
    calls = []
    real_train = rep.train

    def spy(env_id, method, timesteps, **kwargs):
        calls.append((env_id, method, timesteps, kwargs["n_envs"]))
        return real_train(env_id, method, timesteps, **kwargs)

    monkeypatch.setattr(rep, "train", spy)
    report = rep.reproduce(scale, envs=[flight], jobs=1, log=lambda *_: None)[flight]
    assert calls == [(flight, "ppo", 512, 2)]
    assert report["timesteps"] == 512 and set(report["learning_curves"]) == {"ppo"}
    page = out_files.markdown_table(report)
    assert "1 seeds x 512 environment steps on 2 batched sub-envs" in page


def test_a_scale_refuses_rows_it_does_not_know():
    with pytest.raises(ValueError, match=r"Scale\.rows: expected keys of .*got \['nope'\]"):
        rep.Scale("bad", timesteps=1, seeds=1, episodes=1, resamples=1, rows=("nope",))
    with pytest.raises(ValueError, match=r"Scale\.env_timesteps: expected env ids of .*got 'x'"):
        rep.Scale("bad", timesteps=1, seeds=1, episodes=1, resamples=1,
                  env_timesteps=(("x", 10),))
    with pytest.raises(ValueError, match=r"Scale\.env_timesteps\['cost_envs/ToolBench-v0'\]: "
                                         r"expected an int >= 1"):
        rep.Scale("bad", timesteps=1, seeds=1, episodes=1, resamples=1,
                  env_timesteps=(("cost_envs/ToolBench-v0", 0),))
