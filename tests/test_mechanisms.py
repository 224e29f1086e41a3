"""Fast tests of central mechanisms whose breaks only slow tests caught (issue #36, point 1).

A tester broke each mechanism below in a copy of the source; the fast tier (``make test``)
still passed, because the only tests that failed trained a policy or played hundreds of
episodes and are marked slow. Each test here asserts the mechanism directly on a tiny
instance, in well under a second, and was checked to fail with its break applied.

* **LoRA-guided PPO trains the actor through its adapters** (break: only the critic
  trains; the actor's gradient never reaches the LoRA adapters):
  ``test_one_lora_guided_ppo_update_moves_the_actors_adapters_and_nothing_frozen``.
* **The FlightPlanner planner never reads the plan's hidden route** (break: it reads the
  env's state) **nor the broken route's price draw**:
  ``test_the_flight_planner_scores_identically_when_only_the_hidden_route_differs``.
* **The FlightPlanner planner charges every call with the env's sign** (break: the call
  cost's sign flipped):
  ``test_the_flight_planners_rollout_returns_are_the_envs_returns_on_a_known_scenario``
  and ``test_an_idle_call_lowers_the_planners_score_by_its_price``.
* **FastPPO's exact backward is autograd's with an entropy bonus** (break: half the
  entropy's gradient dropped; SB3's default ``ent_coef`` is 0, so the other FastPPO tests
  never see it): ``test_the_exact_backward_with_an_entropy_bonus_is_autograds`` and
  ``test_fast_ppo_with_an_entropy_bonus_trains_sb3s_weights``.
* **HardBudget allows ``spent + cost == budget`` and refuses one ulp above it** (break:
  ``<`` for ``<=`` in the mask, the partial masking, the step's check or the zero-action
  fallback): ``test_hard_budget_allows_a_call_costing_exactly_the_remaining_budget`` and
  ``test_hard_budget_falls_back_to_the_zero_action_costing_exactly_the_budget``.

The boundary contract is HardBudget's docstring: an action is affordable when
``spent + cost(action) <= budget``, so the env's ledger may reach the budget exactly and
never passes it.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO

from agents.baselines import OneTurnPlanSearch
from agents.learners.common.exact_backward import ExactStep
from agents.learners.common.fused_network import TanhNetwork
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.lora_ppo import LoraGuidedPPO
from agents.learners.ppo import FastPPO, bernoulli_heads, bernoulli_log_prob
from agents.planning.flight import GRID, NONE, FlightModel, FlightPlanner, _Pool, simulate
from cost_envs.envs.flight_planner import MAX_TURNS
from cost_envs.wrappers import HardBudget

torch.set_num_threads(1)

TOOLBENCH = "cost_envs/ToolBench-v0"
FLIGHT = "cost_envs/FlightPlanner-v0"
SMALL_PLANNER, LARGE_PLANNER, BASIC, PRO, SMALL_VALIDATOR, LARGE_VALIDATOR = range(6)


# ------------------------------------------------------------------ LoRA-guided PPO
@pytest.mark.parametrize("distribution", ["independent", "autoregressive"])
def test_one_lora_guided_ppo_update_moves_the_actors_adapters_and_nothing_frozen(
        distribution: str) -> None:
    # Only the clipped surrogate is in the loss (no value, entropy or cost term): every
    # change of the adapters comes from the actor's gradient. A learner that trains only
    # its critic leaves them where they were.
    env = gym.make(TOOLBENCH)
    model = LoraGuidedPPO(AllocatorPolicy, env, n_steps=32, batch_size=32, n_epochs=1,
                          learning_rate=1e-3, vf_coef=0.0, ent_coef=0.0, cost_coef=0.0,
                          seed=0, device="cpu",
                          policy_kwargs={"hidden_sizes": (16, 16), "lora_rank": 2,
                                         "action_distribution": distribution})
    policy = model.policy
    with torch.no_grad():  # a warm start: lora_B = 0 would give lora_A no gradient
        for name, param in policy.parameter_groups()["adapter"]:
            if "lora_B" in name:
                param.normal_(0.0, 0.3)
    before = {name: p.detach().clone() for name, p in policy.named_parameters()}
    model.learn(32)  # one rollout, one update of one minibatch
    groups = policy.parameter_groups()
    assert len(groups["adapter"]) == 4
    for name, param in groups["adapter"]:
        assert not torch.equal(param, before[name]), f"the actor's {name} did not train"
    for name, param in groups["base"] + groups["action"] + groups["value"]:
        assert torch.equal(param, before[name]), f"{name} moved without a gradient"

    # and it moved the right way: the surrogate of the rollout it learned from went up
    data = next(model.rollout_buffer.get(batch_size=None))
    advantages = (data.advantages - data.advantages.mean()) / (data.advantages.std() + 1e-8)
    with torch.no_grad():
        _, log_prob, _ = policy.evaluate_actions(data.observations, data.actions)
    ratio = torch.exp(log_prob - data.old_log_prob)
    assert float((advantages * ratio).mean()) > float(advantages.mean()) + 1e-4


# --------------------------------------------------------------- FlightPlanner planner
class _Peeking(FlightPlanner):
    """The planner told the plan's true route (the env's state): what it must not be."""

    def follow(self, observation: np.ndarray) -> tuple[int, Any]:
        if getattr(self, "_real", None) is not None:
            self.belief = self._real  # its own belief goes on from what it saw
        turn, seen = super().follow(observation)
        self._real = self.belief
        told = copy.copy(self.belief)
        route = int(self.env._state[0]) + 1  # env: none -1, optimal 0, detour 1, broken 2
        told.weights = np.zeros_like(self.belief.weights)
        told.weights[route] = 1.0 / told.weights.shape[1]
        self.belief = told
        return turn, seen


def _good_and_broken(task: Any) -> list[Any]:
    """Two lucks of ``task`` whose observations agree to the end: every proposal optimal,
    or every proposal broken (priced as the optimum, never noticed nor caught)."""
    route_price = task.route_price.copy()
    route_price[2] = route_price[0]
    broken = np.full_like(task.luck, 0.999)
    good = broken.copy()
    good[:, [SMALL_PLANNER, LARGE_PLANNER]] = 0.0
    return [replace(task, luck=luck, route_price=route_price) for luck in (good, broken)]


def _scores_along(agent_class: type[FlightPlanner], tasks: list[Any]
                  ) -> list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """For each task, (observation, scores, action) at every step the planner played."""
    played = []
    for task in tasks:
        env = gym.make(FLIGHT)
        env.reset(seed=0)
        agent = agent_class(env, samples=8)
        obs, _ = env.reset(options={"task": task})
        steps, done = [], False
        while not done:
            candidates, values = agent.action_values(obs)
            action = candidates[agent.choose(obs, candidates, values)]
            agent.played(env.unwrapped.turn, action)
            steps.append((obs.copy(), values, action.copy()))
            obs, _, done, _, _ = env.step(action)
        played.append(steps)
    return played


def test_the_flight_planner_scores_identically_when_only_the_hidden_route_differs() -> None:
    # The same task twice, identical observations at every turn; only the plan's hidden
    # route differs (optimal or broken). The planner's scores, not just its choices, must be
    # bit-identical; one told the route scores them apart (so this test can fail).
    env = gym.make(FLIGHT)
    env.reset(seed=5)
    tasks = env.unwrapped.sample_tasks(2)
    for task in tasks:
        good, broken = _scores_along(FlightPlanner, _good_and_broken(task))
        assert len(good) == len(broken)
        for (obs_g, values_g, action_g), (obs_b, values_b, action_b) in zip(
                good, broken, strict=True):
            np.testing.assert_array_equal(obs_g, obs_b)
            np.testing.assert_array_equal(values_g, values_b,
                                          err_msg="its scores depend on the hidden route")
            np.testing.assert_array_equal(action_g, action_b)
    # nor the broken route's price draw, which no observation of an optimal plan shows
    good = _good_and_broken(tasks[0])[0]
    route_price = good.route_price.copy()
    route_price[2] *= 1.08
    dearer = _scores_along(FlightPlanner, [good, replace(good, route_price=route_price)])
    for (obs_g, values_g, _), (obs_d, values_d, _) in zip(*dearer, strict=True):
        np.testing.assert_array_equal(obs_g, obs_d)
        np.testing.assert_array_equal(values_g, values_d,
                                      err_msg="its scores depend on the hidden broken price")
    told_good, told_broken = _scores_along(_Peeking, _good_and_broken(tasks[0]))
    assert any(not np.array_equal(g[1], b[1]) for g, b in zip(told_good, told_broken,
                                                                strict=False))


def _scenario(task: Any, k: int = 7) -> Any:
    """``task`` with its broken route priced at grid point ``k``: a scenario the planner's
    model holds exactly (route none at the start, multiplier ``k``, the task's luck)."""
    route_price = task.route_price.copy()
    route_price[2] = route_price[0] * GRID[k]
    return replace(task, route_price=route_price)


class _ThenRule:
    """``first`` at turn 0, then the one-turn rule with ``pair`` (planner, searcher)."""

    def __init__(self, env: gym.Env, first: np.ndarray, pair: tuple[int, int]) -> None:
        self.first, self.rule, self.base = first, OneTurnPlanSearch(env, *pair), env.unwrapped

    def act(self, obs: np.ndarray) -> np.ndarray:
        return self.first.copy() if self.base.turn == 0 else self.rule.act(obs)


def test_the_flight_planners_rollout_returns_are_the_envs_returns_on_a_known_scenario() -> None:
    # simulate() restates the env's dynamics and Eq. 1 over arrays. On one scenario that
    # *is* the task (its luck, its broken price on the grid), each (first action, rule)
    # pair's simulated return must be the return the env pays for playing it: every call
    # charged lam * price + gamma, with the env's sign.
    env = gym.make(FLIGHT)
    env.reset(seed=3)
    base = env.unwrapped
    weights = base.reward_weights
    assert weights.lam > 0 and weights.gamma > 0
    pool = _Pool.of(base)
    roles = np.array(base.pool.roles)
    planner = FlightPlanner(env, samples=1)
    checked = 0
    k = 7
    for task in map(_scenario, base.sample_tasks(3)):
        model = FlightModel.of(task)
        first = planner._candidates[False]  # every action with one planner, at turn 0
        one = np.ones(1, dtype=int)
        values = simulate(model, pool, (weights.alpha, weights.beta), 0, first, planner.bases,
                          one * NONE, one * k, 0.0, task.luck[None], task.fare_luck[None])
        for a in range(0, len(first), 3):
            for p, rule in enumerate(planner.bases):
                pair = tuple(np.flatnonzero(rule)[np.argsort(roles[rule])].tolist())
                player = _ThenRule(env, first[a].astype(np.int8), pair)
                obs, _ = env.reset(options={"task": task})
                total, done = 0.0, False
                while not done:
                    obs, reward, done, _, _ = env.step(player.act(obs))
                    total += reward
                assert values[a, p, 0] == pytest.approx(total, rel=1e-9, abs=1e-12), (a, p)
                checked += 1
    assert checked >= 40


def test_an_idle_call_lowers_the_planners_score_by_its_price() -> None:
    # With no plan a validator checks nothing: adding it to the first action changes
    # nothing but the bill, so every scenario's return drops by exactly lam * c + gamma.
    env = gym.make(FLIGHT)
    env.reset(seed=1)
    base = env.unwrapped
    weights = base.reward_weights
    model = FlightModel.of(base.task)
    pool = _Pool.of(base)
    first = np.zeros((3, base.n_agents), dtype=bool)
    first[1, SMALL_VALIDATOR] = first[2, LARGE_VALIDATOR] = True
    rng = np.random.default_rng(0)
    n = 16
    luck, fare_luck = rng.random((n, MAX_TURNS, 6)), rng.random((n, MAX_TURNS, 6))
    with np.errstate(invalid="ignore"):  # no plan, no search: 0 * inf quotes, never used
        values = simulate(model, pool, (weights.alpha, weights.beta), 0, first,
                          FlightPlanner(env).bases, np.full(n, NONE),
                          rng.integers(0, len(GRID), n), 0.0, luck, fare_luck)
    for row, agent in ((1, SMALL_VALIDATOR), (2, LARGE_VALIDATOR)):
        price = weights.lam * base.pool.costs[agent] + weights.gamma
        assert price > 0
        np.testing.assert_allclose(values[0] - values[row], price, rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------------- FastPPO
def _tiny_fast_ppo(ent_coef: float, cls: type = FastPPO, **kwargs: Any) -> Any:
    return cls(AllocatorPolicy, gym.make(TOOLBENCH), n_steps=32, batch_size=16, n_epochs=2,
               ent_coef=ent_coef, seed=1, device="cpu",
               policy_kwargs={"lora_rank": None, "hidden_sizes": (8, 8)}, **kwargs)


def _minibatch(policy: Any, n: int = 24) -> tuple[torch.Tensor, ...]:
    """Observations, actions, advantages, returns, old values and log-probs near the
    policy's own (ratios around 1, some outside the clip range)."""
    generator = torch.Generator().manual_seed(0)
    obs = torch.rand((n, *policy.observation_space.shape), generator=generator)
    with torch.no_grad():
        logits, values = bernoulli_heads(policy, obs)
        actions = torch.bernoulli(torch.sigmoid(logits), generator=generator)
        log_prob = bernoulli_log_prob(logits, actions)
    old_log_prob = log_prob + 0.3 * torch.randn(n, generator=generator)
    advantages = torch.randn(n, generator=generator)
    returns = torch.randn(n, generator=generator)
    old_values = values.flatten() + 0.2 * torch.randn(n, generator=generator)
    return obs, actions, old_values, old_log_prob, advantages, returns


@pytest.mark.parametrize("clip_range_vf", [None, 0.1])
def test_the_exact_backward_with_an_entropy_bonus_is_autograds(clip_range_vf) -> None:
    # ExactStep writes autograd's gradients of SB3's loss by hand; SB3's default
    # ent_coef is 0, so the entropy's share of them is tested here with a real bonus.
    model = _tiny_fast_ppo(ent_coef=0.3)
    policy, params = model.policy, list(model.policy.parameters())
    with torch.no_grad():  # logits away from 0, where the entropy's gradient is large
        policy.action_net.bias.copy_(torch.linspace(-2.5, 2.5, policy.action_net.bias.numel()))
    batch = _minibatch(policy)
    model._fast_heads = True  # what train() sets for this policy
    network = TanhNetwork.of(policy)
    assert network is not None
    grads = {}
    for ent_coef in (0.0, 0.3):
        model.ent_coef = ent_coef
        eager = model._eager_loss(*batch, 0.2, clip_range_vf, {"aux": []})
        expected = torch.autograd.grad(eager[0], params)
        for param in params:  # stale values the backward must overwrite
            param.grad = torch.full_like(param, 7.0)
        step = ExactStep(network)
        step.loss(*batch, 0.2, clip_range_vf, ent_coef, model.vf_coef, True)
        step.backward()
        for (name, param), theirs in zip(policy.named_parameters(), expected, strict=True):
            # bit for bit, as the module promises (a tolerance of 1e-6 would do to catch a
            # lost share of the entropy's gradient: that share is above 1e-2, see below)
            assert torch.equal(param.grad, theirs), (
                f"{name} (ent_coef {ent_coef}): off by {(param.grad - theirs).abs().max()}")
        grads[ent_coef] = expected
    # not vacuous: the bonus moves the gradients far beyond the tolerance
    bonus = max(float((with_bonus - without).abs().max()) for with_bonus, without in zip(
        grads[0.3], grads[0.0], strict=True))
    assert bonus > 1e-2, bonus


def test_fast_ppo_with_an_entropy_bonus_trains_sb3s_weights() -> None:
    # Two rollouts, two epochs of two minibatches: all but the first minibatch go through
    # the exact backward. The same seed must give SB3's PPO's weights to the last bit.
    calls = []
    real = ExactStep.backward

    def counted(self: ExactStep) -> None:
        calls.append(1)
        real(self)

    states = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ExactStep, "backward", counted)
        for cls in (FastPPO, PPO):
            model = _tiny_fast_ppo(ent_coef=0.2, cls=cls)
            model.learn(64)
            states.append(model.policy.state_dict())
    assert len(calls) == 2 * 2 * 2 - 1
    ours, sb3 = states
    for name, tensor in sb3.items():
        assert torch.equal(ours[name], tensor), name


# ----------------------------------------------------------------------- HardBudget
def _boundary_budget(env_id: str, seed: int, first: list[int], then: list[int]) -> float:
    """A budget that ``first`` then ``then`` spend exactly, summed as the wrapper checks:
    ``spent + price(then)`` with ``spent`` the env's ledger after ``first``."""
    probe = gym.make(env_id)
    probe.reset(seed=seed)
    spent = 0.0 + probe.unwrapped.price(first)[0] if first else 0.0
    return spent + probe.unwrapped.price(then)[0]


@pytest.mark.parametrize("first", [[], [0]], ids=["at-the-start", "after-a-call"])
def test_hard_budget_allows_a_call_costing_exactly_the_remaining_budget(first) -> None:
    env_id, seed, agent, other = TOOLBENCH, 0, 3, 5
    exact = _boundary_budget(env_id, seed, first, [agent])
    for budget, allowed in ((exact, True), (np.nextafter(exact, -np.inf), False)):
        for on_exceed in ("mask", "truncate"):
            env = HardBudget(gym.make(env_id), budget=float(budget), on_exceed=on_exceed)
            env.reset(seed=seed)
            if first:
                action = np.zeros(8, dtype=np.int8)
                action[first] = 1
                _, _, terminated, truncated, _ = env.step(action)
                assert not (terminated or truncated)
            price = env.unwrapped.price([agent])[0]
            assert (price == env.remaining_budget) == allowed  # the boundary, or one ulp over
            assert env.action_masks()[2 * agent + 1] == allowed, (budget, on_exceed)
            assert env.action_masks()[2 * other + 1] == (env.unwrapped.price([other])[0]
                                                          <= env.remaining_budget)
            request = np.zeros(8, dtype=np.int8)
            request[agent] = 1
            if on_exceed == "mask":
                request[other] = 1  # dearer than what is left once the agent is kept
                assert env.unwrapped.price([agent, other])[0] > env.remaining_budget
            _, _, _, truncated, info = env.step(request)
            if allowed:
                assert not truncated and "budget_exceeded" not in info
                expected = np.zeros(8, dtype=np.int8)
                expected[agent] = 1
                np.testing.assert_array_equal(info["calls"], expected)
                assert env.unwrapped.episode_cost == budget  # spent to the last bit
                assert info["budget_remaining"] == 0.0
            else:
                kept = info["calls"]
                assert not kept[agent], (on_exceed, "a call above the budget ran")
                assert env.unwrapped.episode_cost <= budget


def test_hard_budget_falls_back_to_the_zero_action_costing_exactly_the_budget() -> None:
    # AgenticRouting's all-zero action (the small model) is a cheaper way to go on: it is
    # taken when it fits exactly, and the episode is cut short when it is one ulp over.
    env_id = "cost_envs/AgenticRouting-v0"
    exact = _boundary_budget(env_id, 0, [], [])
    assert exact > 0
    for budget, fits in ((exact, True), (np.nextafter(exact, -np.inf), False)):
        env = HardBudget(gym.make(env_id), budget=float(budget))
        env.reset(seed=0)
        assert not env.action_masks()[1]  # the large model does not fit either way
        _, _, _, truncated, info = env.step(np.ones(1, dtype=np.int8))
        assert truncated != fits
        assert info.get("budget_exceeded", False) != fits
        assert info["cost"] == (budget if fits else 0.0)
