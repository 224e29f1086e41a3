"""The supervised LoRA allocator: the loss terms, the greedy labels and the fit itself."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents.baselines import GreedyHeuristic
from agents.learners.pretrain import pretrained_base_path
from agents.learners.supervised import (
    SupervisedConfig,
    greedy_traces,
    policy_for,
    relative_costs,
    supervised_loss,
    train_supervised,
)
from cost_envs.envs.flight_planner import flight_planner_pool
from cost_envs.pool import AgentPool, AgentSpec

torch.set_num_threads(1)

FLIGHT = "cost_envs/FlightPlanner-v0"
TOOLBENCH = "cost_envs/ToolBench-v0"


# ------------------------------------------------------------------ the loss
def test_supervised_loss_terms_match_hand_computation():
    probs = torch.tensor([[0.9, 0.2, 0.6], [0.3, 0.7, 0.1]], dtype=torch.float64)
    labels = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    costs = torch.tensor([1.0, 0.5, 0.25], dtype=torch.float64)
    lambda_1, lambda_c, lambda_cov, rho = 0.1, 0.2, 0.3, 0.4

    # -[y log p + (1 - y) log(1 - p)] for each of the six entries, averaged
    bce = -(math.log(0.9) + math.log(1 - 0.2) + math.log(0.6)
            + math.log(1 - 0.3) + math.log(0.7) + math.log(1 - 0.1)) / 6
    l1 = ((0.9 + 0.2 + 0.6) + (0.3 + 0.7 + 0.1)) / 2
    cost = ((1.0 * 0.9 + 0.5 * 0.2 + 0.25 * 0.6) + (1.0 * 0.3 + 0.5 * 0.7 + 0.25 * 0.1)) / 2
    coverage = (((0.9 + 0.2 + 0.6) / 3 - 0.4) ** 2 + ((0.3 + 0.7 + 0.1) / 3 - 0.4) ** 2) / 2
    total = bce + 0.1 * l1 + 0.2 * cost + 0.3 * coverage

    terms = supervised_loss(probs, labels, costs, lambda_1, lambda_c, lambda_cov, rho)

    assert set(terms) == {"bce", "l1", "cost", "coverage", "total"}
    assert float(terms["bce"]) == pytest.approx(bce, rel=1e-12)
    assert float(terms["l1"]) == pytest.approx(1.4, rel=1e-12)
    assert float(terms["l1"]) == pytest.approx(l1, rel=1e-12)
    assert float(terms["cost"]) == pytest.approx(0.9125, rel=1e-12)
    assert float(terms["cost"]) == pytest.approx(cost, rel=1e-12)
    assert float(terms["coverage"]) == pytest.approx(coverage, rel=1e-12)
    assert float(terms["total"]) == pytest.approx(total, rel=1e-12)


def test_supervised_loss_total_is_the_weighted_sum_and_weights_matter():
    generator = torch.Generator().manual_seed(0)
    probs = torch.rand(5, 4, generator=generator, dtype=torch.float64) * 0.98 + 0.01
    labels = (torch.rand(5, 4, generator=generator, dtype=torch.float64) > 0.5).double()
    costs = torch.tensor([0.1, 1.0, 0.4, 0.0], dtype=torch.float64)

    unweighted = supervised_loss(probs, labels, costs, 0.0, 0.0, 0.0, 0.3)
    assert float(unweighted["total"]) == pytest.approx(float(unweighted["bce"]), rel=1e-12)

    terms = supervised_loss(probs, labels, costs, 0.5, 2.0, 3.0, 0.3)
    expected = (terms["bce"] + 0.5 * terms["l1"] + 2.0 * terms["cost"]
                + 3.0 * terms["coverage"])
    assert float(terms["total"]) == pytest.approx(float(expected), rel=1e-12)
    # the unweighted terms do not depend on the weights
    for key in ("bce", "l1", "cost", "coverage"):
        assert float(terms[key]) == float(unweighted[key])


def test_supervised_loss_coverage_is_zero_at_target_and_cost_ignores_free_agents():
    probs = torch.tensor([[0.5, 0.25, 0.75]], dtype=torch.float64)
    labels = torch.tensor([[1.0, 0.0, 1.0]], dtype=torch.float64)
    terms = supervised_loss(probs, labels, torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64),
                            0.0, 0.0, 0.0, rho=0.5)
    assert float(terms["coverage"]) == pytest.approx(0.0, abs=1e-15)
    assert float(terms["cost"]) == pytest.approx(0.75, rel=1e-12)


# ------------------------------------------------------------- greedy traces
def _replay_greedy(env_id: str, episodes: int, seed: int, threshold: float, gamma: float):
    """Play the heuristic by hand: observations, actions and discounted returns per step."""
    env = gym.make(env_id)
    heuristic = GreedyHeuristic(env, threshold=threshold)
    observations, actions, returns, lengths = [], [], [], []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        rewards = []
        done = False
        while not done:
            action = heuristic.act(obs)
            observations.append(obs)
            actions.append(action)
            obs, reward, terminated, truncated, _ = env.step(action)
            rewards.append(float(reward))
            done = terminated or truncated
        # G_t = sum_k gamma^k r_{t+k}, written out rather than accumulated backwards
        returns += [sum(gamma ** k * r for k, r in enumerate(rewards[t:]))
                    for t in range(len(rewards))]
        lengths.append(len(rewards))
        obs, _ = env.reset()
    env.close()
    return np.array(observations), np.array(actions), np.array(returns), lengths


@pytest.mark.parametrize("env_id", [FLIGHT, TOOLBENCH])
def test_greedy_traces_labels_are_the_heuristics_actions(env_id):
    env = gym.make(env_id)
    traces = greedy_traces(env, episodes=8, seed=31, threshold=0.6)
    n_agents = env.action_space.n
    obs_dim = env.observation_space.shape[0]
    n = len(traces.observations)

    assert n >= 8  # at least one step per episode
    assert traces.observations.shape == (n, obs_dim)
    assert traces.labels.shape == (n, n_agents)
    assert traces.returns.shape == (n,)
    for array in (traces.observations, traces.labels, traces.returns):
        assert array.dtype == np.float32
    assert set(np.unique(traces.labels)) <= {0.0, 1.0}
    # a fresh heuristic with the same threshold labels each recorded observation the same
    heuristic = GreedyHeuristic(env, threshold=0.6)
    expected = np.stack([heuristic.act(obs) for obs in traces.observations])
    np.testing.assert_array_equal(traces.labels, expected.astype(np.float32))
    env.close()


def test_greedy_traces_threshold_changes_the_labels():
    env = gym.make(TOOLBENCH)
    traces = greedy_traces(env, episodes=20, seed=3, threshold=0.3)
    low = np.stack([GreedyHeuristic(env, threshold=0.3).act(o) for o in traces.observations])
    high = np.stack([GreedyHeuristic(env, threshold=1.0).act(o) for o in traces.observations])
    np.testing.assert_array_equal(traces.labels, low)
    # the threshold is not a no-op on these observations, so the equality above means it
    # was passed on to the heuristic
    assert (high != low).any()
    env.close()


@pytest.mark.parametrize("env_id", [FLIGHT, TOOLBENCH])
def test_greedy_traces_returns_are_discounted_sums_of_a_replay(env_id):
    gamma = 0.9  # far from the default so that ignoring gamma would show
    env = gym.make(env_id)
    traces = greedy_traces(env, episodes=3, seed=7, threshold=0.7, gamma=gamma)
    env.close()
    observations, actions, returns, lengths = _replay_greedy(env_id, 3, 7, 0.7, gamma)

    assert len(traces.observations) == sum(lengths)
    np.testing.assert_array_equal(traces.observations, observations.astype(np.float32))
    np.testing.assert_array_equal(traces.labels, actions.astype(np.float32))
    np.testing.assert_allclose(traces.returns, returns, rtol=1e-5, atol=1e-6)


def test_greedy_traces_one_short_episode_by_hand():
    gamma = 0.5
    env = gym.make(FLIGHT)
    traces = greedy_traces(env, episodes=1, seed=11, gamma=gamma)
    # the same task, played step by step with the rewards kept
    replay = gym.make(FLIGHT)
    heuristic = GreedyHeuristic(replay)
    obs, _ = replay.reset(seed=11)
    rewards = []
    done = False
    while not done:
        obs, reward, terminated, truncated, _ = replay.step(heuristic.act(obs))
        rewards.append(float(reward))
        done = terminated or truncated
    assert len(traces.returns) == len(rewards)
    assert traces.returns[-1] == pytest.approx(rewards[-1], abs=1e-6)
    g0 = sum(gamma ** k * r for k, r in enumerate(rewards))
    assert traces.returns[0] == pytest.approx(g0, rel=1e-5, abs=1e-6)
    env.close()
    replay.close()


# ------------------------------------------------------------ the supervised fit
def _trained(env_id: str, episodes: int = 60, epochs: int = 15, **config):
    env = gym.make(env_id)
    traces = greedy_traces(env, episodes, seed=5)
    torch.manual_seed(0)
    policy = policy_for(env, base=str(pretrained_base_path(env_id)))
    before = {name: param.detach().clone() for name, param in policy.named_parameters()}
    groups = {group: [name for name, _ in members]
              for group, members in policy.parameter_groups().items()}
    history = train_supervised(
        policy, traces, relative_costs(env),
        SupervisedConfig(episodes=episodes, epochs=epochs, batch_size=64, **config), seed=0)
    env.close()
    return policy, traces, history, before, groups


@pytest.mark.parametrize("env_id", [FLIGHT, TOOLBENCH])
def test_train_supervised_fits_adapter_and_heads_only(env_id):
    policy, _, history, before, groups = _trained(env_id)
    after = dict(policy.named_parameters())

    assert groups["base"] and groups["adapter"] and groups["action"] and groups["value"]
    for name in groups["base"]:
        assert torch.equal(after[name].detach(), before[name]), f"frozen {name} moved"
        assert not after[name].requires_grad
    for name in groups["adapter"] + groups["action"]:
        assert after[name].requires_grad
    # lora_B starts at zero; training must have moved every adapter and the action head
    for group in ("adapter", "action", "value"):
        for name in groups[group]:
            assert not torch.equal(after[name].detach(), before[name]), f"{name} did not train"
    # the optimizer is left over exactly the trained groups
    assert sorted(g["name"] for g in policy.optimizer.param_groups) == [
        "action", "adapter", "value"]
    assert not policy.training

    assert len(history) == 15
    assert history[-1]["bce"] < history[0]["bce"]
    assert history[-1]["bce"] < 0.5 * history[0]["bce"]
    assert history[-1]["value"] < history[0]["value"]
    for key in ("bce", "l1", "cost", "coverage", "total", "value"):
        assert all(math.isfinite(epoch[key]) for epoch in history)


@pytest.mark.parametrize("env_id", [FLIGHT, TOOLBENCH])
def test_train_supervised_reproduces_the_greedy_labels(env_id):
    policy, traces, _, _, _ = _trained(env_id)
    with torch.no_grad():
        probs = policy.action_probabilities(torch.as_tensor(traces.observations)).numpy()
    per_agent = ((probs > 0.5) == (traces.labels > 0.5)).mean(axis=0)
    assert per_agent.min() >= 0.9, per_agent
    # the SB3 deterministic action is the same thresholding
    actions, _ = policy.predict(traces.observations, deterministic=True)
    np.testing.assert_array_equal(actions, (probs > 0.5).astype(actions.dtype))


def test_train_supervised_value_head_learns_the_returns():
    policy, traces, _, _, _ = _trained(FLIGHT)
    with torch.no_grad():
        values = policy.predict_values(torch.as_tensor(traces.observations)).squeeze(-1).numpy()
    fitted = float(np.mean((values - traces.returns) ** 2))
    constant = float(np.var(traces.returns))
    assert fitted < constant


def test_train_supervised_first_epoch_uses_label_mean_as_rho():
    env = gym.make(FLIGHT)
    traces = greedy_traces(env, 10, seed=2)
    costs = relative_costs(env)
    policy = policy_for(env, base=str(pretrained_base_path(FLIGHT)))
    obs = torch.as_tensor(traces.observations)
    labels = torch.as_tensor(traces.labels)
    with torch.no_grad():
        probs = policy.action_probabilities(obs)
    rho = float(labels.mean())
    expected = supervised_loss(probs, labels, torch.as_tensor(costs), 1e-3, 1e-2, 1e-2, rho)
    # one epoch of one batch: the recorded terms are those of the untrained policy
    history = train_supervised(
        policy, traces, costs,
        SupervisedConfig(episodes=10, epochs=1, batch_size=len(obs) + 1), seed=0)
    for key in ("bce", "l1", "cost", "coverage", "total"):
        assert history[0][key] == pytest.approx(float(expected[key]), rel=1e-4, abs=1e-7)
    env.close()


def test_train_supervised_is_deterministic_given_seed():
    first = _trained(FLIGHT, episodes=20, epochs=3)
    second = _trained(FLIGHT, episodes=20, epochs=3)
    assert first[2] == second[2]
    for (name, a), b in zip(first[0].state_dict().items(), second[0].state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name


def test_train_supervised_without_lora_trains_the_base():
    env = gym.make(FLIGHT)
    traces = greedy_traces(env, 20, seed=5)
    policy = policy_for(env, lora_rank=None)
    base = [(name, param.detach().clone()) for name, param in policy.parameter_groups()["base"]]
    history = train_supervised(policy, traces, relative_costs(env),
                               SupervisedConfig(episodes=20, epochs=3, batch_size=64))
    after = dict(policy.named_parameters())
    assert base
    assert all(not torch.equal(after[name].detach(), value) for name, value in base)
    assert sorted(g["name"] for g in policy.optimizer.param_groups) == [
        "action", "base", "value"]
    assert history[-1]["bce"] < history[0]["bce"]
    env.close()


# ------------------------------------------------------------------- config
def test_supervised_config_defaults_are_valid():
    config = SupervisedConfig()
    assert config.rho is None
    assert SupervisedConfig(rho=0.0).rho == 0.0
    assert SupervisedConfig(rho=1.0).rho == 1.0
    assert SupervisedConfig(lambda_1=0.0, lambda_c=0.0, lambda_cov=0.0).lambda_1 == 0.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lambda_1", -0.1),
        ("lambda_c", -1e-3),
        ("lambda_cov", -1),
        ("rho", -0.01),
        ("rho", 1.5),
        ("rho", True),
        ("epochs", 0),
        ("epochs", -3),
        ("epochs", True),
        ("episodes", 0),
        ("batch_size", 0),
        ("learning_rate", 0.0),
        ("learning_rate", False),
        ("gamma", -0.1),
        ("gamma", 1.5),
        ("threshold", -0.5),
        ("threshold", 1.5),
        ("epochs", 2.5),
        ("lambda_c", float("nan")),
        ("lambda_1", float("inf")),
        ("lambda_1", "0.1"),
        ("episodes", None),
    ],
)
def test_supervised_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=rf"SupervisedConfig\.{field}\b") as info:
        SupervisedConfig(**{field: value})
    assert repr(value) in str(info.value)


# ----------------------------------------------------------- relative costs
@pytest.mark.parametrize("env_id", [FLIGHT, TOOLBENCH])
def test_relative_costs_max_one_and_proportional(env_id):
    env = gym.make(env_id)
    costs = np.asarray(env.unwrapped.pool.costs, dtype=np.float64)
    relative = relative_costs(env)
    assert relative.shape == costs.shape
    assert relative.max() == pytest.approx(1.0)
    assert int(np.argmax(relative)) == int(np.argmax(costs))
    np.testing.assert_allclose(relative * costs.max(), costs, rtol=1e-6)
    env.close()


def test_relative_costs_do_not_depend_on_the_price_level():
    preset = flight_planner_pool()
    pricier = AgentPool(tuple(AgentSpec(a.name, a.role, a.cost * 250.0, a.flops, a.capability)
                              for a in preset.agents), preset.skills)
    cheap = relative_costs(gym.make(FLIGHT, pool=preset))
    dear = relative_costs(gym.make(FLIGHT, pool=pricier))
    np.testing.assert_allclose(cheap, dear, rtol=1e-6)
    # 0.03 is the preset's highest price (planner_large)
    np.testing.assert_allclose(cheap, np.asarray(preset.costs) / 0.03, rtol=1e-6)


def test_relative_costs_of_a_free_pool_are_zero():
    preset = flight_planner_pool()
    free = AgentPool(tuple(AgentSpec(a.name, a.role, 0.0, a.flops, a.capability)
                           for a in preset.agents), preset.skills)
    relative = relative_costs(gym.make(FLIGHT, pool=free))
    np.testing.assert_array_equal(relative, np.zeros(len(preset)))
    assert np.all(np.isfinite(relative))


# ------------------------------------------------------------------ the planner teacher
def test_planner_teacher_labels_are_the_planners_actions_on_its_own_trajectories():
    from agents.evaluation import rollout
    from agents.learners.supervised import traces_for
    from agents.planning import planner

    env = gym.make(TOOLBENCH)
    config = SupervisedConfig(episodes=6, teacher="planner")
    traces = traces_for(env, config, seed=17)
    # the same tasks played again by a fresh planner: the same observations and actions
    fresh = planner(env)
    played = [rollout(fresh, env, seed=17 if i == 0 else None, record_steps=True)
              for i in range(6)]
    np.testing.assert_array_equal(
        traces.observations, np.concatenate([p.observations for p in played]))
    np.testing.assert_array_equal(traces.labels,
                                  np.concatenate([p.actions for p in played]).astype(np.float32))
    # ... and they are not the greedy heuristic's labels on those observations
    greedy = traces_for(env, SupervisedConfig(episodes=6), seed=17)
    assert not np.array_equal(greedy.labels, traces.labels[: len(greedy.labels)])
    env.close()


def test_planner_teacher_is_refused_where_no_planner_models_the_env():
    env = gym.make("cost_envs/TraceRouting-v0")
    from agents.learners.supervised import traces_for

    with pytest.raises(ValueError, match="planner: no planner models TraceRoutingEnv"):
        traces_for(env, SupervisedConfig(episodes=2, teacher="planner"), seed=0)
    with pytest.raises(ValueError, match="SupervisedConfig.teacher: expected one of "
                                         r"\['greedy', 'planner', 'bayes'\], got 'oracle'"):
        SupervisedConfig(teacher="oracle")
    with pytest.raises(ValueError, match="bayes_planner: no Bayes reference models "
                                         "TraceRoutingEnv"):
        traces_for(env, SupervisedConfig(episodes=2, teacher="bayes"), seed=0)
