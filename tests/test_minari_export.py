"""Minari export: what is written is what was played, bit for bit, and loads back.

Rollouts (every registered env), logged traces (the packaged example, and RouteLLM's
real MMLU outcomes read in place when ../shared/data is there), the supervised stage's
teacher episodes, the CLI, and bad input: one line, nothing written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import cost_envs
from agents.baselines import RandomAllocator, RuleBased
from cost_envs.minari_io import DATASETS_PATH_VARIABLE, EpisodeRecorder, write_dataset

ROOT = Path(__file__).resolve().parents[1]
REAL_MMLU = ROOT.parent / "shared" / "data" / "routellm" / "mmlu" / "mmlu_college_physics.csv"
needs_minari = pytest.mark.skipif(
    find_spec("minari") is None or find_spec("pyarrow") is None,
    reason="needs the minari extra: pip install 'cost-envs[minari]'")


@pytest.fixture
def datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A datasets directory that minari.load_dataset reads, and a HOME nothing may touch."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv(DATASETS_PATH_VARIABLE, str(tmp_path / "datasets"))
    return tmp_path / "datasets"


def _play(env_id: str, allocator_cls: type, episodes: int, seed: int,
          **env_kwargs: object) -> list[dict[str, list]]:
    """The reference: a plain Gymnasium loop, independent of the exporter."""
    env = gym.make(env_id, **env_kwargs)
    allocator = allocator_cls(env)
    played = []
    for index in range(episodes):
        obs, info = env.reset(seed=seed if index == 0 else None)
        steps: dict[str, list] = {"obs": [obs], "actions": [], "rewards": [],
                                  "terminations": [], "truncations": [], "infos": [info]}
        done = False
        while not done:
            action, _ = allocator.predict(obs)
            obs, reward, terminated, truncated, info = env.step(action)
            for key, value in (("obs", obs), ("actions", action), ("rewards", reward),
                               ("terminations", terminated), ("truncations", truncated),
                               ("infos", info)):
                steps[key].append(value)
            done = terminated or truncated
        played.append(steps)
    env.close()
    return played


@needs_minari
@pytest.mark.parametrize("env_id", cost_envs.ENV_IDS)
def test_a_rollout_loads_back_bit_for_bit_and_recovers_its_env(env_id: str,
                                                               datasets: Path) -> None:
    import minari

    from agents.minari_export import export_rollouts

    kwargs = {"budget": 0.05, "on_exceed": "truncate"}  # some episodes end by truncation
    path = export_rollouts(env_id, RandomAllocator, episodes=6, seed=7, env_kwargs=kwargs,
                           name="random")
    dataset_id = f"{env_id}/random-v0"
    assert path == datasets / dataset_id
    dataset = minari.load_dataset(dataset_id)
    reference = _play(env_id, RandomAllocator, 6, 7, **kwargs)
    assert dataset.total_episodes == 6
    assert dataset.total_steps == sum(len(r["actions"]) for r in reference)
    for episode, ref in zip(dataset.iterate_episodes(), reference, strict=True):
        assert episode.observations.dtype == np.float32
        assert np.array_equal(episode.observations, np.stack(ref["obs"]))
        assert np.array_equal(episode.actions, np.stack(ref["actions"]))
        assert episode.actions.dtype == np.int8
        assert episode.rewards.tolist() == [float(r) for r in ref["rewards"]]
        assert episode.terminations.tolist() == ref["terminations"]
        assert episode.truncations.tolist() == ref["truncations"]
        infos = episode.infos
        assert infos["cost"][1:].tolist() == [i["cost"] for i in ref["infos"][1:]]
        assert infos["flops"][1:].tolist() == [i["flops"] for i in ref["infos"][1:]]
        assert np.array_equal(infos["calls"][1:], np.stack([i["calls"] for i in ref["infos"][1:]]))
        last = ref["infos"][-1]
        assert bool(infos["success"][-1]) == last["success"]
        assert infos["quality"][-1] == last["quality"]
        assert infos["episode_cost"][-1] == last["episode_cost"]

    env = dataset.recover_environment()
    assert env.spec.id == env_id and env.spec.kwargs == kwargs
    # the recovered env replays the dataset: same task stream, same actions, same outcomes
    for index, episode in enumerate(dataset.iterate_episodes()):
        obs, _ = env.reset(seed=7 if index == 0 else None)
        assert np.array_equal(obs, episode.observations[0])
        for t, action in enumerate(episode.actions):
            obs, reward, *_ = env.step(action)
            assert np.array_equal(obs, episode.observations[t + 1])
            assert reward == episode.rewards[t]
    env.close()


@needs_minari
def test_a_fixed_policy_gives_the_same_dataset_twice(datasets: Path) -> None:
    from agents.minari_export import export_rollouts
    from cost_envs.minari_io import load_dataset

    for version, author in ((0, None), (1, "A. Researcher")):
        export_rollouts("cost_envs/ToolBench-v0", RuleBased, 5, name="rule-based",
                        dataset_id=f"cost_envs/ToolBench-v0/rule-based-v{version}",
                        author=author)
    first, second = (load_dataset(f"cost_envs/ToolBench-v0/rule-based-v{v}") for v in (0, 1))
    # never "Author Unknown" (issue #25): the exporting program, or whom the caller names
    assert first.storage.metadata["author"] == {"cost-envs (export-minari)"}
    assert second.storage.metadata["author"] == {"A. Researcher"}  # Minari keeps a set
    for a, b in zip(first.iterate_episodes(), second.iterate_episodes(), strict=True):
        assert np.array_equal(a.observations, b.observations)
        assert np.array_equal(a.actions, b.actions)
    assert first.spec.dataset_id == "cost_envs/ToolBench-v0/rule-based-v0"
    assert first.storage.metadata["algorithm_name"] == "rule-based"


def _check_traces(dataset, data, env_kwargs: dict) -> None:
    """Every logged (query, model) outcome is one episode with the logged values."""
    from cost_envs.prices import coerce_prices

    env = dataset.recover_environment()
    assert env.spec.id == "cost_envs/TraceRouting-v0" and env.spec.kwargs == env_kwargs
    costs = data.call_costs(coerce_prices(env_kwargs.get("prices")))
    env.close()
    n, m = data.n_queries, data.n_models
    assert dataset.total_episodes == n * m
    meta = list(dataset.storage.get_episode_metadata(range(n * m)))
    assert [(e["query_id"], e["model"]) for e in meta] == [
        (q, model) for q in data.query_ids for model in data.models]
    cascade = env_kwargs.get("cascade", False)
    for index, episode in enumerate(dataset.iterate_episodes()):
        q, j = divmod(index, m)
        call = [int(k == j) for k in range(m)]
        # with the cascade, the answer bought is accepted by the all-zero action
        assert episode.actions.tolist() == ([call, [0] * m] if cascade else [call])
        assert episode.terminations.tolist() == ([False, True] if cascade else [True])
        assert bool(episode.infos["success"][-1]) == bool(data.correct[q, j])
        assert episode.infos["quality"][-1] == 10.0 * data.scores[q, j]
        assert episode.infos["cost"][1] == costs[q, j]  # billed at the first step
        assert episode.infos["episode_cost"][-1] == costs[q, j]  # the one call bought


@needs_minari
def test_the_packaged_traces_round_trip_their_logged_outcomes(datasets: Path) -> None:
    import minari

    from cost_envs.traces import example_traces
    from cost_envs.traces.minari_export import export_traces

    export_traces()
    dataset = minari.load_dataset("cost_envs/TraceRouting-v0/logged-v0")
    _check_traces(dataset, example_traces(), {})
    cascade = {"cascade": True, "split": "test"}
    export_traces(env_kwargs=cascade, dataset_id="cost_envs/TraceRouting-v0/cascade-v0")
    test_split = gym.make("cost_envs/TraceRouting-v0", split="test").unwrapped.dataset
    _check_traces(minari.load_dataset("cost_envs/TraceRouting-v0/cascade-v0"), test_split,
                  cascade)


@needs_minari
@pytest.mark.skipif(not REAL_MMLU.is_file(), reason=f"real RouteLLM data not at {REAL_MMLU}")
def test_real_routellm_outcomes_round_trip(datasets: Path) -> None:
    from cost_envs.minari_io import load_dataset
    from cost_envs.traces import load_traces
    from cost_envs.traces.minari_export import export_traces

    export_traces(REAL_MMLU, dataset_id="routellm/mmlu/college-physics-v0")
    _check_traces(load_dataset("routellm/mmlu/college-physics-v0"), load_traces(REAL_MMLU),
                  {"data": str(REAL_MMLU)})


@needs_minari
def test_the_supervised_dataset_is_what_the_stage_trains_on(datasets: Path) -> None:
    import minari

    from agents.learners.supervised import SupervisedConfig, traces_for
    from agents.minari_export import export_supervised
    from agents.seeds import TRACE_TASK_SEED

    config = SupervisedConfig(episodes=8, teacher="greedy", threshold=0.6)
    export_supervised("cost_envs/ToolBench-v0", seed=3, config=config)
    dataset = minari.load_dataset("cost_envs/ToolBench-v0/supervised-greedy-v0")
    env = gym.make("cost_envs/ToolBench-v0")
    traces = traces_for(env, config, seed=TRACE_TASK_SEED + 3)
    episodes = list(dataset.iterate_episodes())
    assert len(episodes) == 8
    assert np.array_equal(np.concatenate([e.observations[:-1] for e in episodes]),
                          traces.observations)
    assert np.array_equal(np.concatenate([e.actions for e in episodes]).astype(np.float32),
                          traces.labels)


@needs_minari
def test_a_failed_write_leaves_no_dataset(datasets: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    import minari
    from minari.dataset._storages.arrow_storage import ArrowStorage

    from agents.minari_export import export_rollouts

    write = ArrowStorage.update_episodes

    def fail_after_one(self, episodes):
        write(self, list(episodes)[:1])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ArrowStorage, "update_episodes", fail_after_one)
    with pytest.raises(OSError, match="No space left"):
        export_rollouts("cost_envs/ToolBench-v0", RuleBased, 3, name="rule")
    assert minari.list_local_datasets() == {}
    assert [p.name for p in datasets.iterdir()] == []  # no staging folder left either


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


@needs_minari
def test_bad_arguments_fail_in_one_line_and_write_nothing(
        datasets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agents.minari_export import export_rollouts
    from cost_envs.traces import example_traces
    from cost_envs.traces.minari_export import export_traces

    toolbench = "cost_envs/ToolBench-v0"
    cases = [
        (lambda: export_rollouts(toolbench, RuleBased, 2, dataset_id="no-namespace-v0"),
         r"dataset_id: expected 'namespace/name-vN'.*got 'no-namespace-v0'"),
        (lambda: export_rollouts(toolbench, RuleBased, 0), r"episodes: expected an int >= 1"),
        (lambda: export_rollouts(toolbench, RuleBased, 2, seed=-1), r"seed: expected"),
        (lambda: export_rollouts(toolbench, "rule", 2),
         r"expected an allocator \(with predict\) or a factory"),
        (lambda: export_traces(example_traces()),
         r"data: expected a path to a trace file or None.*got TraceDataset"),
        (lambda: export_traces(tmp_path / "missing.csv"), r"data: no such file"),
        (lambda: export_rollouts(toolbench, RuleBased, 2, env_kwargs={"reward_weights": {
            "alpha": np.float32(1)}}), r"ToolBench-v0: expected gym.make kwargs that are JSON"),
        (lambda: export_rollouts(toolbench, RuleBased, 2, out=tmp_path / "f.txt"),
         r"out: expected a directory, got the file"),
    ]
    (tmp_path / "f.txt").write_text("x")
    for call, pattern in cases:
        with pytest.raises(ValueError) as error:
            call()
        assert _one_line(error)
        assert __import__("re").search(pattern, str(error.value)), str(error.value)
    monkeypatch.delenv(DATASETS_PATH_VARIABLE)
    with pytest.raises(ValueError, match=r"^out: expected a directory .*MINARI_DATASETS_PATH"):
        export_rollouts(toolbench, RuleBased, 2)
    assert not (tmp_path / "home").exists()  # never ~/.minari
    assert not datasets.exists() or list(datasets.iterdir()) == []


@needs_minari
def test_an_existing_id_or_an_unfinished_episode_is_refused(datasets: Path) -> None:
    from agents.minari_export import export_rollouts

    export_rollouts("cost_envs/ToolBench-v0", RuleBased, 2, name="rule")
    with pytest.raises(ValueError, match=r"'cost_envs/ToolBench-v0/rule-v0' already exists"):
        export_rollouts("cost_envs/ToolBench-v0", RuleBased, 2, name="rule")
    env = gym.make("cost_envs/ToolBench-v0")
    recorder = EpisodeRecorder()
    recorder.reset(*env.reset(seed=0))
    with pytest.raises(ValueError, match=r"^episodes\[0\]: expected a finished episode"):
        write_dataset("cost_envs/ToolBench-v0/half-v0", [recorder], env)
    with pytest.raises(ValueError, match=r"^action: expected values of dtype int8"):
        recorder.step(np.full(8, 0.5), *env.step(np.zeros(8, dtype=np.int8)))


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "agents.cli", "export-minari", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


@needs_minari
def test_the_cli_writes_a_dataset_and_rejects_bad_input_in_one_line(
        datasets: Path, tmp_path: Path) -> None:
    import minari

    out = tmp_path / "out"
    done = _cli("--env", "FlightPlanner-v0", "--policy", "rule", "--episodes", "3",
                "--out", str(out), "--env-kwargs", '{"budget": 0.2}', cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "cost_envs/FlightPlanner-v0/rule-v0" in done.stdout
    os.environ[DATASETS_PATH_VARIABLE] = str(out)  # the fixture's monkeypatch restores it
    dataset = minari.load_dataset("cost_envs/FlightPlanner-v0/rule-v0")
    assert dataset.total_episodes == 3
    assert dataset.recover_environment().spec.kwargs == {"budget": 0.2}
    bad = [
        (("--env", "ToolBench-v0", "--logged", "--out", str(out)), 1,
         "--logged: expected --env cost_envs/TraceRouting-v0"),
        (("--env", "ToolBench-v0", "--policy", "rule", "--out", str(out),
          "--dataset-id", "x"), 1, "dataset_id: expected 'namespace/name-vN'"),
        (("--env", "ToolBench-v0", "--policy", "rule", "--out", str(out),
          "--env-kwargs", '{"bogus": 1}'), 1, "takes no argument(s) ['bogus']"),
        (("--env", "FlightPlanner-v0", "--policy", "rule", "--out", str(out),
          "--episodes", "3", "--env-kwargs", '{"budget": 0.2}'), 1, "already exists"),
        (("--env", "ToolBench-v0", "--policy", "always-small", "--out", str(out)), 1,
         "AlwaysSmall: expected a small/large routing environment"),
        (("--env", "Nope-v0", "--policy", "rule"), 2, "unknown environment 'Nope-v0'"),
    ]
    for args, status, text in bad:
        done = _cli(*args, cwd=tmp_path)
        assert done.returncode == status, (args, done.stderr)
        assert text in done.stderr, done.stderr
        if status == 1:
            assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert sorted(minari.list_local_datasets()) == ["cost_envs/FlightPlanner-v0/rule-v0"]


def test_cost_envs_and_the_exporters_import_without_minari() -> None:
    code = ("import sys\n"
            "sys.modules['minari'] = None\n"  # as if not installed
            "import cost_envs, cost_envs.minari_io, cost_envs.traces.minari_export\n"
            "try:\n"
            "    cost_envs.traces.minari_export.export_traces(out='unused')\n"
            "except ImportError as err:\n"
            "    print(str(err))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("exporting a Minari dataset needs the 'minari' extra "
                                   "(missing: minari): pip install 'cost-envs[minari]'")


@needs_minari
def test_the_cli_exports_a_trained_model_the_supervised_data_and_logged_traces(
        datasets: Path, tmp_path: Path) -> None:
    import minari

    from agents.learners.checkpoints import load_allocator, save_allocator
    from agents.learners.supervised import SupervisedConfig
    from agents.learners.training import train

    kwargs = {"budget": 0.3}
    trained = train("cost_envs/ToolBench-v0", "lora", 1, seed=2, env_kwargs=kwargs,
                    supervised=SupervisedConfig(episodes=5, epochs=1))
    model_dir = save_allocator(trained, tmp_path / "model")
    # no --out: MINARI_DATASETS_PATH (the fixture's) is the directory
    for args in (("--env", "ToolBench-v0", "--model", str(model_dir), "--episodes", "4",
                  "--seed", "5"),
                 ("--env", "ToolBench-v0", "--supervised", "greedy", "--episodes", "3"),
                 ("--env", "TraceRouting-v0", "--logged", "--env-kwargs", '{"split": "test"}')):
        done = _cli(*args, "--no-progress", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert sorted(minari.list_local_datasets()) == [
        "cost_envs/ToolBench-v0/lora-v0", "cost_envs/ToolBench-v0/supervised-greedy-v0",
        "cost_envs/TraceRouting-v0/logged-v0"]
    dataset = minari.load_dataset("cost_envs/ToolBench-v0/lora-v0")
    assert dataset.recover_environment().spec.kwargs == kwargs  # the model's env arguments
    reference = _play("cost_envs/ToolBench-v0", lambda env: load_allocator(model_dir), 4, 5,
                      **kwargs)
    for episode, ref in zip(dataset.iterate_episodes(), reference, strict=True):
        assert np.array_equal(episode.observations, np.stack(ref["obs"]))
        assert np.array_equal(episode.actions, np.stack(ref["actions"]).astype(np.int8))
    logged = minari.load_dataset("cost_envs/TraceRouting-v0/logged-v0")
    test_env = gym.make("cost_envs/TraceRouting-v0", split="test")
    assert logged.total_episodes == test_env.unwrapped.dataset.n_queries * 3
    done = _cli("--env", "FlightPlanner-v0", "--model", str(model_dir), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (f"cost-envs export-minari: --model: {model_dir} was trained on "
                           "cost_envs/ToolBench-v0, not cost_envs/FlightPlanner-v0\n")


@needs_minari
def test_info_keys_some_steps_or_episodes_lack_are_filled_as_documented(datasets: Path) -> None:
    from agents.evaluation import rollout
    from cost_envs.minari_io import load_dataset

    env = gym.make("cost_envs/ToolBench-v0")
    recorders = [EpisodeRecorder(seed=0), EpisodeRecorder(seed=1)]
    rollout(RuleBased(env), env, seed=0, observer=recorders[0])
    for info in recorders[0].infos:  # an int key only the first episode has, at every entry
        info["retries"] = 3
    obs, info = env.reset(seed=1)
    recorders[1].reset(obs, info)
    allocator, done = RuleBased(env), False
    while not done:
        action, _ = allocator.predict(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        if done:  # a nested mapping (a wrapper's summary), at the last step only
            info = {**info, "_flat_probe": {"r": 1.5}}
        recorders[1].step(action, obs, reward, terminated, truncated, info)
    write_dataset("tests/fill-v0", recorders, env, algorithm_name="rule-based")
    first, second = load_dataset("tests/fill-v0").iterate_episodes()
    assert first.infos["retries"].tolist() == [3.0] * len(first.infos["cost"])
    assert np.isnan(second.infos["retries"]).all()
    assert np.isnan(first.infos["_flat_probe.r"]).all()
    assert second.infos["_flat_probe.r"][-1] == 1.5
    assert np.isnan(second.infos["_flat_probe.r"][:-1]).all()
    assert first.infos["success"][:-1].tolist() == [False] * len(first.actions)  # T + 1 entries
    assert np.isnan(first.infos["cost"][0])  # reset's info has no cost
    assert not first.infos["calls"][0].any()
