"""ExpertRouting-v0's generative model, asserted against the numbers of its class docstring.

The Gymnasium contracts are covered for every env by ``test_envs.py``; this file checks what
the env *means*: accuracies, token prices, the weighted vote, what is observed, the oracle.
Expected values are recomputed here from the docstring's numbers and the price table, not
read back from the env's internals.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

from cost_envs.envs.expert_routing import ExpertRoutingEnv, ExpertTask, ModelProfile
from cost_envs.prices import PriceTable, default_price_table

ENV_ID = "cost_envs/ExpertRouting-v0"
CONTROLLER = "Qwen/Qwen2.5-7B-Instruct"
NANO, GPT41, O3 = 0, 1, 2
EXPERTS = ("gpt-4.1-nano", "gpt-4.1", "o3")
PROFILES = ("gsm8k", "math500", "aime")

# ---- the docstring's numbers, written out independently of the module's constants
DOC_BETA = {"gsm8k": (1.5, 8.0), "math500": (2.5, 4.0), "aime": (8.0, 2.5)}
DOC_PROMPT = {"gsm8k": 110.0, "math500": 150.0, "aime": 220.0}
DOC_CURVE = {CONTROLLER: (0.53, 10.6), "gpt-4.1-nano": (0.59, 5.6), "gpt-4.1": (0.75, 5.2),
             "o3": (1.47, 3.2)}
DOC_MEAN_ACCURACY = {CONTROLLER: (0.96, 0.73, 0.13), "gpt-4.1-nano": (0.90, 0.72, 0.30),
                     "gpt-4.1": (0.95, 0.84, 0.49), "o3": (0.98, 0.97, 0.90)}
DOC_TRUST = {"gpt-4.1-nano": 1.2, "gpt-4.1": 1.6, "o3": 2.5}
DOC_OUTPUT = {"gpt-4.1-nano": 400.0, "gpt-4.1": 450.0, "o3": 250.0}
DOC_REASONING = {"gpt-4.1-nano": 0.0, "gpt-4.1": 0.0, "o3": 1200.0}
SYSTEM, CONTROLLER_READ, CONTROLLER_OUTPUT = 150.0, 400.0, 350.0


def accuracy(model: str, d: float) -> float:
    skill, sharpness = DOC_CURVE[model]
    return 1.0 / (1.0 + math.exp(-sharpness * (skill - d)))


def onehot(m: int, *bits: int) -> np.ndarray:
    action = np.zeros(m, dtype=np.int8)
    action[list(bits)] = 1
    return action


ANSWER = np.zeros(3, dtype=np.int8)


def base_task(env: ExpertRoutingEnv, seed: int = 0) -> ExpertTask:
    env.reset(seed=seed)
    return env.task


def crafted(task: ExpertTask, controller_right: bool, right: set[tuple[int, int]] = frozenset(),
            **changes: Any) -> ExpertTask:
    """``task`` with its luck set so that exactly the (round, expert) pairs in ``right`` are
    right answers (luck 0 is below any accuracy, luck 1 above every one)."""
    luck = np.ones_like(task.luck)
    for t, i in right:
        luck[t, i] = 0.0
    return dataclasses.replace(task, controller_luck=0.0 if controller_right else 1.0,
                               luck=luck, **changes)


def play(env: gym.Env, task: ExpertTask, actions: list[np.ndarray]) -> list[tuple]:
    """Replay ``task`` with ``actions``; the episode must end exactly at the last one."""
    results = [env.reset(options={"task": task})]
    for k, action in enumerate(actions):
        obs, reward, terminated, truncated, info = env.step(action)
        results.append((obs, reward, terminated, truncated, info))
        assert not truncated
        assert terminated == (k == len(actions) - 1), f"step {k}: terminated={terminated}"
    return results


def success(env: gym.Env, task: ExpertTask, actions: list[np.ndarray]) -> bool:
    return play(env, task, actions)[-1][4]["success"]


def parts(env: ExpertRoutingEnv, obs: np.ndarray) -> dict[str, np.ndarray]:
    return {name: obs[s] for name, s in env.observation_layout.items()}


def beta_mean_of(f: Any, a: float, b: float, n: int = 200_000) -> float:
    """E[f(D)], D ~ Beta(a, b), by the midpoint rule."""
    x = (np.arange(n) + 0.5) / n
    log_pdf = ((a - 1) * np.log(x) + (b - 1) * np.log1p(-x)
               + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b))
    return float(np.mean(f(x) * np.exp(log_pdf)))


@pytest.fixture(scope="module")
def env() -> ExpertRoutingEnv:
    return ExpertRoutingEnv()


# =============================================================== (a) accuracies
@pytest.mark.parametrize("model", list(DOC_CURVE))
def test_documented_mean_accuracies_follow_from_the_documented_curves(model: str) -> None:
    skill, sharpness = DOC_CURVE[model]
    for profile, documented in zip(PROFILES, DOC_MEAN_ACCURACY[model], strict=True):
        exact = beta_mean_of(lambda d: 1 / (1 + np.exp(-sharpness * (skill - d))),
                             *DOC_BETA[profile])
        assert exact == pytest.approx(documented, abs=0.01), (profile, exact)


def test_env_curves_are_the_documented_ones(env: ExpertRoutingEnv) -> None:
    d = np.linspace(0, 1, 11)
    for model in (env.controller, *env.experts):
        expected = [accuracy(model.name, x) for x in d]
        np.testing.assert_allclose(model.accuracy(d), expected, rtol=1e-12)
    assert [e.name for e in env.experts] == list(EXPERTS)
    assert [e.trust for e in env.experts] == [DOC_TRUST[n] for n in EXPERTS]
    assert env.controller.trust == 1.0


@pytest.mark.parametrize("profile", PROFILES)
def test_sampled_tasks_follow_the_profile(profile: str) -> None:
    env = ExpertRoutingEnv(profile=profile)
    env.reset(seed=2024)
    tasks = env.sample_tasks(6000)
    d = np.array([t.difficulty for t in tasks])
    assert {t.profile for t in tasks} == {PROFILES.index(profile)}
    assert ((d >= 0) & (d <= 1)).all()
    a, b = DOC_BETA[profile]
    sd = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    assert d.mean() == pytest.approx(a / (a + b), abs=4 * sd / math.sqrt(len(d)))
    assert d.std() == pytest.approx(sd, rel=0.03)
    # mean accuracy of each curve over the drawn difficulties: the docstring's figures
    for model, documented in DOC_MEAN_ACCURACY.items():
        mean = float(np.mean([accuracy(model, x) for x in d]))
        assert mean == pytest.approx(documented[PROFILES.index(profile)], abs=0.02), model
    # the controller perceives d + N(0, 0.1), clipped to [0, 1]
    est = np.array([t.difficulty_estimate for t in tasks])
    assert ((est >= 0) & (est <= 1)).all()
    middle = (d > 0.3) & (d < 0.7)  # clipping at 0 or 1 is (almost) never reached here
    assert middle.sum() > 400
    noise = est[middle] - d[middle]
    assert abs(noise.mean()) < 0.015 and noise.std() == pytest.approx(0.1, rel=0.08)
    assert (est[d > 0.3] > 0).all() and np.mean(est == 0) < 0.2
    # luck is uniform, one draw per round and expert; token factors have mean 1, sigma .25
    luck = np.stack([t.luck for t in tasks])
    assert luck.shape == (len(tasks), 3, 3)
    assert luck.mean() == pytest.approx(0.5, abs=0.01)
    factors = np.stack([t.token_factors for t in tasks])
    assert factors.shape == (len(tasks), 4)
    np.testing.assert_allclose(factors.mean(axis=0), 1.0, atol=0.015)
    np.testing.assert_allclose(np.log(factors).std(axis=0), 0.25, rtol=0.03)


def test_mixed_profile_draws_each_benchmark_uniformly() -> None:
    env = ExpertRoutingEnv()
    env.reset(seed=5)
    profiles = np.array([t.profile for t in env.sample_tasks(6000)])
    np.testing.assert_allclose(np.bincount(profiles, minlength=3) / 6000, 1 / 3, atol=0.025)


def test_prompt_tokens_average_as_documented() -> None:
    env = ExpertRoutingEnv()
    env.reset(seed=7)
    tasks = env.sample_tasks(9000)
    prompts = np.array([t.prompt_tokens for t in tasks])
    profiles = np.array([t.profile for t in tasks])
    assert (prompts == np.round(prompts)).all() and (prompts > 0).all()
    means = {p: prompts[profiles == k].mean() for k, p in enumerate(PROFILES)}
    assert means == pytest.approx(DOC_PROMPT, rel=0.02)


@pytest.mark.parametrize("profile", PROFILES)
def test_answering_now_or_after_one_expert_succeeds_at_that_models_rate(profile: str) -> None:
    env = ExpertRoutingEnv(profile=profile)
    env.reset(seed=99)
    tasks = env.sample_tasks(800)
    n = len(tasks)
    policies = {CONTROLLER: [ANSWER]} | {
        name: [onehot(3, i), ANSWER] for i, name in enumerate(EXPERTS)}
    for model, actions in policies.items():
        wins = 0
        for task in tasks:
            won = success(env, task, actions)
            if model == CONTROLLER:
                right = task.controller_luck < accuracy(CONTROLLER, task.difficulty)
            else:  # one consulted expert outweighs the controller: its answer is final
                right = task.luck[0, EXPERTS.index(model)] < accuracy(model, task.difficulty)
            assert won == right, (model, task)
            wins += won
        documented = DOC_MEAN_ACCURACY[model][PROFILES.index(profile)]
        se = math.sqrt(documented * (1 - documented) / n)
        assert wins / n == pytest.approx(documented, abs=4 * se + 0.01), model


# ====================================================================== (b) costs
def expected_prices(task: ExpertTask, table: PriceTable, experts: tuple[str, ...] = EXPERTS,
                    outputs: dict[str, float] | None = None,
                    reasoning: dict[str, float] | None = None) -> dict[str, Any]:
    """The docstring's token formulas priced with ``table``."""
    outputs = DOC_OUTPUT if outputs is None else outputs
    reasoning = DOC_REASONING if reasoning is None else reasoning
    d, f = task.difficulty, task.token_factors
    call_costs, call_flops = [], []
    for j, name in enumerate(experts):
        p = table[name]
        read = task.prompt_tokens + SYSTEM
        write = outputs[name] * (1 + 2 * d) * f[j]
        reason = reasoning.get(name, 0.0) * math.exp(3 * d) * f[j]
        r_price = p.output if p.reasoning is None else p.reasoning
        call_costs.append((read * p.input + write * p.output + reason * r_price) / 1e6)
        call_flops.append(2 * p.active_params_billion * 1e9 * (read + write + reason))
    c = table[CONTROLLER]
    read = task.prompt_tokens + SYSTEM + CONTROLLER_READ
    write = CONTROLLER_OUTPUT * (1 + 2 * d) * f[len(experts)]
    return {"call_costs": call_costs, "call_flops": call_flops,
            "step_cost": (read * c.input + write * c.output) / 1e6,
            "step_flops": 2 * c.active_params_billion * 1e9 * (read + write)}


def scaled_table(factor: float, **changes: dict[str, Any]) -> dict[str, Any]:
    """The packaged table's dict form with every price times ``factor``."""
    models = []
    for m in default_price_table():
        entry = {k: v for k, v in dataclasses.asdict(m).items() if v is not None}
        for key in ("input", "output", "reasoning"):
            if key in entry:
                entry[key] *= factor
        entry.update(changes.get(m.name, {}))
        models.append({k: v for k, v in entry.items() if v is not None})
    return {"currency": "USD", "unit": "per_million_tokens", "models": models}


def random_episode_actions(rng: np.random.Generator, max_rounds: int = 3) -> list[np.ndarray]:
    """A consultation sequence (non-empty actions), possibly cut short by answering."""
    actions = []
    for _ in range(max_rounds):
        if actions and rng.random() < 0.3:
            return [*actions, ANSWER]
        action = rng.integers(0, 2, 3).astype(np.int8)
        if not action.any():
            action[rng.integers(3)] = 1
        actions.append(action)
    return actions


def test_costs_and_flops_follow_the_token_formulas(env: ExpertRoutingEnv) -> None:
    table = default_price_table()
    env.reset(seed=17)
    tasks = env.sample_tasks(40)
    rng = np.random.default_rng(3)
    for task in tasks:
        expected = expected_prices(task, table)
        actions = random_episode_actions(rng)
        results = play(env, task, actions)
        assert env.step_cost == pytest.approx(expected["step_cost"], rel=1e-12)
        assert env.step_flops == pytest.approx(expected["step_flops"], rel=1e-12)
        np.testing.assert_allclose(env.call_costs, expected["call_costs"], rtol=1e-12)
        np.testing.assert_allclose(env.call_flops, expected["call_flops"], rtol=1e-12)
        calls = np.zeros(3)
        for action, (*_, info) in zip(actions, results[1:], strict=True):
            step = expected["step_cost"] + float(np.dot(expected["call_costs"], action))
            assert info["cost"] == pytest.approx(step, rel=1e-12)
            flops = expected["step_flops"] + float(np.dot(expected["call_flops"], action))
            assert info["flops"] == pytest.approx(flops, rel=1e-12)
            calls += action
        episode = len(actions) * expected["step_cost"] + float(
            np.dot(calls, expected["call_costs"]))
        assert results[-1][4]["episode_cost"] == pytest.approx(episode, rel=1e-12)


def test_answering_now_costs_one_controller_round(env: ExpertRoutingEnv) -> None:
    task = base_task(env, seed=8)
    *_, info = play(env, task, [ANSWER])[-1]
    assert info["episode_cost"] == info["cost"] == env.step_cost > 0
    assert info["calls"].tolist() == [0, 0, 0]


def test_harder_questions_cost_more(env: ExpertRoutingEnv) -> None:
    task = base_task(env, seed=1)
    costs = []
    for d in (0.0, 0.5, 1.0):
        env.reset(options={"task": dataclasses.replace(task, difficulty=d)})
        costs.append([env.step_cost, *env.call_costs])
    costs = np.array(costs)
    assert (np.diff(costs, axis=0) > 0).all()
    # o3's reasoning grows like exp(3d): its price rises most steeply
    assert costs[2, 3] / costs[0, 3] > costs[2, 2] / costs[0, 2]


def test_o3_reasoning_tokens_are_billed(env: ExpertRoutingEnv) -> None:
    table = default_price_table()
    no_reasoning_price = ExpertRoutingEnv(prices=scaled_table(1.0, o3={"reasoning": 0.0}))
    dearer_reasoning = ExpertRoutingEnv(prices=scaled_table(1.0, o3={"reasoning": 24.0}))
    env.reset(seed=4)
    for task in env.sample_tasks(10):
        reason_tokens = DOC_REASONING["o3"] * math.exp(3 * task.difficulty) * \
            task.token_factors[O3]
        costs = []
        for e in (env, no_reasoning_price, dearer_reasoning):
            e.reset(options={"task": task})
            costs.append(np.array(e.call_costs))
        default, free, dear = costs
        billed = reason_tokens * table["o3"].reasoning_price / 1e6
        assert default[O3] - free[O3] == pytest.approx(billed, rel=1e-9)
        assert dear[O3] - free[O3] == pytest.approx(3 * billed, rel=1e-9)
        np.testing.assert_array_equal(default[:2], free[:2])  # the others do not reason
        # reasoning is most of o3's bill
        assert billed > 0.5 * default[O3]


def test_reasoning_without_own_price_is_billed_at_output_price() -> None:
    table = scaled_table(1.0, o3={"output": 10.0})
    for entry in table["models"]:
        entry.pop("reasoning", None)
    env = ExpertRoutingEnv(prices=table)
    task = base_task(env)
    expected = expected_prices(task, PriceTable.from_dict(table))
    assert env.call_costs[O3] == pytest.approx(expected["call_costs"][O3], rel=1e-12)
    read = task.prompt_tokens + SYSTEM
    visible = (read * 2.0 + 250 * (1 + 2 * task.difficulty) * task.token_factors[O3] * 10) / 1e6
    assert env.call_costs[O3] > visible * 1.5


def test_doubled_price_table_doubles_every_cost(tmp_path: Path) -> None:
    path = tmp_path / "doubled.yaml"
    path.write_text(yaml.safe_dump(scaled_table(2.0)), encoding="utf-8")
    single = ExpertRoutingEnv()
    doubled = {"dict": ExpertRoutingEnv(prices=scaled_table(2.0)),
               "file": gym.make(ENV_ID, prices=str(path)).unwrapped}
    single.reset(seed=23)
    rng = np.random.default_rng(1)
    for task in single.sample_tasks(20):
        actions = random_episode_actions(rng)
        base = play(single, task, actions)
        for form, other in doubled.items():
            twice = play(other, task, actions)
            for (*_, a), (*_, b) in zip(base[1:], twice[1:], strict=True):
                # doubling is exact in binary floating point: every sum doubles exactly
                assert b["cost"] == 2 * a["cost"], form
                assert b["flops"] == a["flops"], form
            assert twice[-1][4]["episode_cost"] == 2 * base[-1][4]["episode_cost"]
            assert twice[-1][4]["success"] == base[-1][4]["success"]
    assert doubled["dict"].pool.costs.tolist() == (2 * single.pool.costs).tolist()


@pytest.mark.parametrize("missing", [CONTROLLER, "gpt-4.1", "o3"])
def test_table_without_a_needed_model_is_refused_naming_it(missing: str) -> None:
    data = scaled_table(1.0)
    data["models"] = [m for m in data["models"] if m["name"] != missing]
    table = PriceTable.from_dict(data)  # an object is used as it is, not merged
    with pytest.raises(ValueError, match="ExpertRouting-v0: prices") as excinfo:
        ExpertRoutingEnv(prices=table)
    assert f"[{missing!r}]" in str(excinfo.value)
    # a table without that expert is fine when the expert is not used
    if missing != CONTROLLER:
        others = [e for e in EXPERTS if e != missing]
        assert ExpertRoutingEnv(prices=table, experts=others).action_space.n == 2


def test_custom_expert_must_be_priced() -> None:
    stranger = ModelProfile("gpt-5", skill=0.9, sharpness=5.0, trust=2.0, output_tokens=300)
    with pytest.raises(ValueError, match="gpt-5"):
        ExpertRoutingEnv(experts=["gpt-4.1-nano", stranger])


# ================================================================ (e) arguments
@pytest.mark.parametrize("max_rounds", [1, 2, 5, 8])
def test_episode_ends_after_max_rounds_consultations(max_rounds: int) -> None:
    env = ExpertRoutingEnv(max_rounds=max_rounds)
    obs, _ = env.reset(seed=max_rounds)
    assert env.task.luck.shape == (max_rounds, 3)
    rounds_left = [parts(env, obs)["rounds_left"][0]]
    for t in range(max_rounds):
        obs, _, terminated, truncated, info = env.step(onehot(3, t % 3))
        assert terminated == (t == max_rounds - 1) and not truncated
        rounds_left.append(parts(env, obs)["rounds_left"][0])
    assert "success" in info
    np.testing.assert_allclose(rounds_left, 1 - np.arange(max_rounds + 1) / max_rounds,
                               atol=1e-7)
    assert info["episode_cost"] == pytest.approx(
        max_rounds * env.step_cost + sum(env.call_costs[t % 3] for t in range(max_rounds)),
        rel=1e-12)


def test_replaying_a_task_with_other_rounds_is_refused() -> None:
    task = base_task(ExpertRoutingEnv(max_rounds=3))
    with pytest.raises(ValueError, match="drawn for 3 rounds"):
        ExpertRoutingEnv(max_rounds=2).reset(options={"task": task})


BAD_ARGUMENTS: dict[str, tuple[dict[str, Any], str]] = {
    "profile typo": ({"profile": "gsm9k"}, "profile"),
    "profile case": ({"profile": "GSM8K"}, "profile"),
    "max_rounds 0": ({"max_rounds": 0}, "max_rounds"),
    "max_rounds 9": ({"max_rounds": 9}, "max_rounds"),
    "max_rounds True": ({"max_rounds": True}, "max_rounds"),
    "max_rounds 2.5": ({"max_rounds": 2.5}, "max_rounds"),
    "max_rounds 3.0": ({"max_rounds": 3.0}, "max_rounds"),
    "max_rounds str": ({"max_rounds": "3"}, "max_rounds"),
    "experts empty": ({"experts": []}, "experts"),
    "experts a string": ({"experts": "o3"}, "experts"),
    "experts a dict": ({"experts": {"o3": 1}}, "experts"),
    "experts duplicate": ({"experts": ["o3", "gpt-4.1", "o3"]}, "duplicate"),
    "expert unknown": ({"experts": ["gpt-4.1", "gpt-5"]}, "gpt-5"),
    "expert not a profile": ({"experts": [3]}, "experts"),
    "expert dict unknown key": ({"experts": [{"name": "o3", "skill": 1, "sharpness": 1,
                                              "trust": 1, "output_tokens": 1, "cost": 2}]},
                                "cost"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_arguments_are_refused(case: str) -> None:
    kwargs, fragment = BAD_ARGUMENTS[case]
    with pytest.raises(ValueError, match=fragment):
        ExpertRoutingEnv(**kwargs)


def test_dict_expert_missing_keys_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="experts") as excinfo:
        ExpertRoutingEnv(experts=[{"name": "o3", "skill": 1.0}])
    assert all(k in str(excinfo.value) for k in ("sharpness", "trust", "output_tokens"))


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [({"trust": -1.0}, "trust"), ({"trust": 0.0}, "trust"), ({"sharpness": 0.0}, "sharpness"),
     ({"skill": float("nan")}, "skill"), ({"output_tokens": -5}, "output_tokens"),
     ({"reasoning_tokens": True}, "reasoning_tokens"), ({"name": ""}, "name")],
)
def test_model_profile_validates(changes: dict[str, Any], fragment: str) -> None:
    fields = {"name": "gpt-4.1", "skill": 0.7, "sharpness": 5.0, "trust": 1.5,
              "output_tokens": 100.0}
    with pytest.raises(ValueError, match=fragment):
        ModelProfile(**{**fields, **changes})
    with pytest.raises(ValueError, match=fragment):
        ExpertRoutingEnv(experts=[{**fields, **changes}])


@pytest.mark.parametrize("profile", [*PROFILES, "mixed"])
def test_every_profile_constructs(profile: str) -> None:
    env = gym.make(ENV_ID, profile=profile)
    env.reset(seed=0)
    if profile != "mixed":
        assert env.unwrapped.task.profile == PROFILES.index(profile)


def test_custom_profile_and_dict_experts_are_used() -> None:
    sure = ModelProfile("gpt-4.1", skill=50.0, sharpness=1.0, trust=3.0, output_tokens=100.0,
                        reasoning_tokens=10.0)
    weak = {"name": "gpt-4.1-nano", "skill": 0.0, "sharpness": 1.0, "trust": 0.5,
            "output_tokens": 1000.0}
    env = ExpertRoutingEnv(experts=[sure, weak])
    assert env.action_space.n == 2 and env.observation_space.shape == (14,)
    assert env.pool.names == ("gpt-4.1", "gpt-4.1-nano")
    table = default_price_table()
    env.reset(seed=0)
    for task in env.sample_tasks(20):
        expected = expected_prices(task, table, ("gpt-4.1", "gpt-4.1-nano"),
                                   outputs={"gpt-4.1": 100.0, "gpt-4.1-nano": 1000.0},
                                   reasoning={"gpt-4.1": 10.0})
        # the sure expert (trust 3) always carries the vote, even against the other one
        results = play(env, task, [np.array([1, 1], np.int8), np.zeros(2, np.int8)])
        assert results[-1][4]["success"] is True
        np.testing.assert_allclose(env.call_costs, expected["call_costs"], rtol=1e-12)
        # the weak one (trust 0.5 < 1) cannot override the controller
        results = play(env, crafted(task, True),
                       [np.array([0, 1], np.int8), np.zeros(2, np.int8)])
        assert results[-1][4]["success"] is True
        p = parts(env, results[1][0])
        assert p["agrees_with_leading"].tolist() == [0.0, 0.0]
        assert p["support"][0] == pytest.approx(1.0 / 1.5)
