"""What a newcomer copies works as written (issue #36, point 6).

SuperSuit's own SB3 recipe trains PPO on a multi-tenant env as written in its docs, and
docs/howto/add-env.md, followed literally on a copy of the repository, gives an env that
passes every test generated from the registry.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = "cost_envs/MultiTenantToolBench-v0"
GUIDE = ROOT / "docs" / "howto" / "add-env.md"
MODULE = "cost_envs/envs/coin_flip.py"


def supersuit_recipe(n_copies: int = 2, num_cpus: int = 0, **env_kwargs: Any) -> Any:
    """SuperSuit's recipe, as its README and PettingZoo's SB3 tutorial write it."""
    ss = pytest.importorskip("supersuit")
    from cost_envs.multiagent import parallel_env

    env = ss.pettingzoo_env_to_vec_env_v1(parallel_env(ENV, **env_kwargs))
    return ss.concat_vec_envs_v1(env, n_copies, num_cpus=num_cpus,
                                 base_class="stable_baselines3")


def weights(model: Any) -> np.ndarray:
    return np.concatenate([p.detach().cpu().numpy().ravel()
                           for p in model.policy.parameters()])


def test_supersuits_recipe_trains_ppo_on_the_tenants() -> None:
    from stable_baselines3 import PPO

    venv = supersuit_recipe(n_tenants=2)
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, device="cpu")
    model.learn(128)  # SB3's float32 0.0/1.0 actions reach the tenants
    assert model.num_timesteps >= 128
    actions, _ = model.predict(venv.reset(), deterministic=True)
    assert actions.shape == (4, venv.action_space.n)
    venv.close()


def test_the_documented_seed_workaround_makes_supersuits_recipe_reproducible() -> None:
    # SuperSuit's SB3 wrapper forwards SB3's venv.seed to its ConcatVecEnv, which has no
    # seed (SuperSuit 3.11, SB3 2.x): PPO(seed=0) fails without the line in
    # docs/multitenant.md. If a SuperSuit release fixes it, the first check fails and the
    # page can drop the workaround.
    from stable_baselines3 import PPO

    venv = supersuit_recipe(n_tenants=2)
    with pytest.raises(AttributeError, match="'ConcatVecEnv' object has no attribute 'seed'"):
        PPO("MlpPolicy", venv, seed=0)
    venv.close()

    def train() -> np.ndarray:
        venv = supersuit_recipe(n_tenants=2)
        venv.seed = lambda seed=None: venv.venv.reset(seed=seed)  # docs/multitenant.md
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, seed=0, device="cpu")
        model.learn(128)
        venv.close()
        return weights(model)

    assert np.array_equal(train(), train())


def test_a_float_action_that_is_not_0_or_1_is_refused_by_the_vector_env() -> None:
    venv = supersuit_recipe(n_copies=1, n_tenants=2)
    venv.reset()
    with pytest.raises(ValueError, match=r"invalid action .* expected an element of "
                                         r"MultiBinary\(8\)"):
        venv.step(np.full((2, 8), 0.5, dtype=np.float32))
    venv.close()


@pytest.mark.slow
@pytest.mark.parametrize("num_cpus", [0, 2])
def test_supersuits_recipe_with_ppos_defaults(num_cpus: int) -> None:
    # the tester's run, word for word (about 20 s): 2 copies of 4 tenants, PPO's defaults
    from stable_baselines3 import PPO

    venv = supersuit_recipe(2, num_cpus=num_cpus)
    model = PPO("MlpPolicy", venv, device="cpu")
    model.learn(2048)
    assert model.num_timesteps >= 2048
    venv.close()


# ------------------------------------------------------------------ render modes
@pytest.mark.parametrize("env_id", ["cost_envs/ToolBench-v0", "cost_envs/TraceRouting-v0"])
def test_make_vec_env_with_its_defaults_prints_no_render_mode_warning(env_id: str) -> None:
    # SB3 asks every env for render_mode="rgb_array" and falls back on TypeError; gym.make
    # used to warn about it first, once per env.
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_vec_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        venv = make_vec_env(env_id, n_envs=2)
        assert venv.render_mode is None
        venv.close()
        listed = gym.make(env_id, render_mode="ansi_list")  # Gymnasium's "_list" form
        listed.reset(seed=0)
        listed.step(np.zeros(listed.action_space.n, dtype=np.int8))
        assert listed.render_mode == "ansi_list" and len(listed.render()) == 2
    with pytest.raises(ValueError, match="render_mode: expected None or one of"):
        gym.make(env_id, render_mode="human")

# ------------------------------------------------------------------ progress off a terminal
def test_training_with_progress_writes_no_bar_frames_into_a_log(capfd) -> None:
    # `cost-envs train ... > log` used to get SB3's rich bar frames on stdout: the bar is
    # now this project's, on stderr and only on a terminal; a log gets plain lines.
    from agents.learners.training import train

    train("cost_envs/ToolBench-v0", "ppo", 256, progress_bar=True,
          ppo={"n_steps": 64, "batch_size": 64})
    out, err = capfd.readouterr()
    assert out == ""
    assert "\r" not in err and "\x1b" not in err
    lines = err.splitlines()
    assert lines and lines[-1].startswith("ppo RL: 256/256 steps (100%)")
    assert all(line.startswith("ppo RL: ") for line in lines) and len(lines) <= 10


def test_learn_progress_draws_a_bar_only_on_a_terminal() -> None:
    import io

    from agents.progress import learn_progress

    assert learn_progress("x", progress=False) is None

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    from stable_baselines3 import PPO

    for stream, bar in ((io.StringIO(), False), (Terminal(), True)):
        callback = learn_progress("x", stream=stream)
        PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, n_epochs=1,
            device="cpu").learn(640, callback=callback)
        lines = stream.getvalue().splitlines()
        assert (lines == []) == bar  # a bar is tqdm's, on stderr; a log gets 10 lines
        if not bar:
            assert [line.split(" steps")[0] for line in lines] == [
                f"x: {n}/640" for n in range(64, 641, 64)]

# ------------------------------------------------------------------ the add-env guide
def guide_blocks(language: str) -> list[str]:
    """The guide's fenced blocks of ``language``, indented ones (in list items) included."""
    text = GUIDE.read_text(encoding="utf-8")
    found = re.finditer(r"^( *)```(\w*)\n(.*?)^\1```", text, re.MULTILINE | re.DOTALL)
    return [re.sub(rf"^{m.group(1)}", "", m.group(3), flags=re.MULTILINE)
            for m in found if m.group(2) == language]


def guide_module() -> str:
    """The env module the guide's step 2 puts in ``cost_envs/envs/coin_flip.py``."""
    (code,) = [c for c in guide_blocks("python") if c.startswith(f"# {MODULE}\n")]
    return code


def test_the_guides_example_keeps_what_the_generated_tests_ask() -> None:
    # The three the tests once tripped on: pool=, rule_based_action, agent 0 never ends
    # an episode alone. The full run on a registered copy is the slow test below.
    from cost_envs import AgentPool, StepLimit

    module = types.ModuleType("coin_flip_guide")
    sys.modules[module.__name__] = module  # a dataclass looks its module up
    try:
        exec(compile(guide_module(), MODULE, "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    env_class = module.CoinFlipEnv
    env = env_class()
    smaller = env_class(pool=AgentPool(env.pool.agents[::2], env.pool.skills))
    assert smaller.n_agents == len(env.pool.agents[::2]) < env.n_agents
    obs, _ = env.reset(seed=0)
    assert env.rule_based_action(obs).shape == (env.n_agents,)
    first = np.eye(env.n_agents, dtype=np.int8)[0]
    for seed in range(50):
        limited = StepLimit(env_class(), max_steps=2)
        limited.reset(seed=seed)
        for _ in range(2):
            _, _, terminated, _, _ = limited.step(first)
            assert not terminated


#: What following the guide edits or the tests import, copied; the rest is linked.
COPIED = ("cost_envs", "agents", "tests", "experiments", "pyproject.toml", "setup.cfg")


def copy_repository(to: Path) -> None:
    """The repository's tracked files as they are in the working tree.

    The code is copied (the tests find the root from their own resolved path); the other
    top-level entries (benchmarks' results, docs, README) are read only, and linked.
    """
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout
    to.mkdir(parents=True, exist_ok=True)
    for name in filter(None, listed.split("\0")):
        top = name.split("/")[0]
        source = ROOT / name
        if top not in COPIED:
            if not (to / top).exists():
                (to / top).symlink_to(ROOT / top)
        elif source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)


def follow_the_guide(repo: Path, env: dict[str, str]) -> None:
    """Steps 1 to 4 of docs/howto/add-env.md, as a reader does them, in ``repo``."""
    (repo / MODULE).write_text(guide_module(), encoding="utf-8")  # steps 1 and 2
    for init, module in (("cost_envs/envs/__init__.py", "cost_envs.envs.coin_flip"),
                         ("cost_envs/__init__.py", "cost_envs.envs")):  # the exports
        path = repo / init
        path.write_text(path.read_text(encoding="utf-8") + f"\nfrom {module} import "
                        "CoinFlipEnv  # noqa: E402\n__all__ += [\"CoinFlipEnv\"]\n",
                        encoding="utf-8")
    (diff,) = guide_blocks("diff")  # step 3: the id in ENV_IDS
    added = "".join(line[1:] + "\n" for line in diff.splitlines() if line.startswith("+"))
    registration = repo / "cost_envs/registration.py"
    text = registration.read_text(encoding="utf-8")
    start = text.index("ENV_IDS = {")
    end = text.index("\n}\n", start) + 1
    registration.write_text(text[:end] + added + text[end:], encoding="utf-8")
    (record,) = guide_blocks("bash")  # step 4: the fingerprint, recorded as the guide says
    digest = subprocess.run(["bash", "-c", record], cwd=repo, env=env, capture_output=True,
                            text=True, timeout=300, check=True).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{24}", digest), digest
    fingerprints = repo / "tests/test_step_fingerprints.py"
    text = fingerprints.read_text(encoding="utf-8")
    anchor = "CASES: dict[tuple[str, tuple[tuple[str, Any], ...]], str] = {\n"
    fingerprints.write_text(text.replace(anchor, f"{anchor}    (\"cost_envs/CoinFlip-v0\", "
                                         f"()): \"{digest}\",\n"), encoding="utf-8")
    (zoo,) = guide_blocks("yaml")  # and the zoo's entries
    for name in ("ppo.yml", "lora_ppo.yml"):
        path = repo / "agents/zoo" / name
        path.write_text(path.read_text(encoding="utf-8") + zoo, encoding="utf-8")


@pytest.mark.slow
def test_following_the_add_env_guide_passes_every_generated_test(tmp_path: Path) -> None:
    # About 2 minutes: every test generated from the registry, on the guide's CoinFlip-v0,
    # plus the tests that check every registered id has its entry.
    repo = tmp_path / "repo"
    copy_repository(repo)
    python = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1",
           "PATH": f"{python}{os.pathsep}{os.environ.get('PATH', '')}"}
    follow_the_guide(repo, env)
    selected = ("CoinFlip or every_registered_id or every_env_id_has_an_entry "
                "or registration_is_idempotent")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p",
                          "no:cacheprovider", "-k", selected, "tests"], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed and int(passed.group(1)) >= 100, run.stdout[-2000:]  # all of them ran
    where = subprocess.run([sys.executable, "-c", "import cost_envs; print(cost_envs.__file__, "
                            "'cost_envs/CoinFlip-v0' in cost_envs.ENV_IDS)"], cwd=repo,
                           env=env, capture_output=True, text=True, check=True).stdout.split()
    assert where == [str(repo / "cost_envs/__init__.py"), "True"]  # the copy was tested


# ------------------------------------------------------------------ figure labels
def _covered(figure: Any) -> list[str]:
    """The movable labels that cover a marker or an error bar after placement."""
    from experiments.shared import figures

    figures.place_labels(figure)
    renderer = figure.canvas.get_renderer()
    found = []
    for axis in figure.axes:
        marks = figures._marks(axis, figure.dpi)
        for text in axis.texts:
            if getattr(text, figures._PLACES, None):
                box = text.get_window_extent(renderer)
                if any(figures._area(box, mark) > 0 for mark in marks):
                    found.append(text.get_text())
    return found


def test_reference_and_group_labels_are_moved_off_markers() -> None:
    from experiments.shared.figures import pyplot, reference_lines, tag_points

    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    # a marker at the left edge on the oracle's line, where its name used to be written
    axis.errorbar([0.07, 0.3, 0.31], [0.88, 0.5, 0.5], yerr=0.02, fmt="o", capsize=2)
    axis.errorbar([0.305], [0.53], yerr=0.01, fmt="s")  # right above the group's tag
    tag_points(axis, [["a", "b"]], {"a": (0.3, 0.5), "b": (0.31, 0.5)})
    reference_lines(axis, [("oracle", 0.88)])
    assert _covered(figure) == []
    plt.close(figure)


def test_the_reported_figures_labels_sit_on_no_marker() -> None:
    import json

    from experiments.bopo import report as bopo_report
    from experiments.lora_ppo import report as lora_ppo_report

    results = ROOT / "benchmarks" / "results"
    bopo = json.loads((results / "bopo_long" / "bopo.json").read_text(encoding="utf-8"))
    table = lora_ppo_report.read_report(results / "table_ToolBench-v0.json")
    for figure in (bopo_report.draw_pareto("appworld", bopo["profiles"]["appworld"]),
                   lora_ppo_report.draw_pareto(table)):
        assert _covered(figure) == []
        from experiments.shared.figures import pyplot

        pyplot().close(figure)
