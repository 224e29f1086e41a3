"""Joint baselines on the multi-tenant env: independent tenants, the central scheduler."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from agents.baselines import FixedSequence, RuleBased
from agents.multiagent import CentralScheduler, IndependentTenants
from cost_envs.multiagent import parallel_env, run_episode


def test_independent_tenants_play_the_single_agent_rule_on_their_own_observation() -> None:
    par = parallel_env("cost_envs/MultiTenantToolBench-v0", n_tenants=3, capacity=None)
    policy = IndependentTenants(par, RuleBased)
    obs, _ = par.reset(seed=0)
    policy.reset(obs)
    actions = policy(obs)
    single = par.tenant_envs["tenant_0"]
    for agent, action in actions.items():
        own = obs[agent][par.observation_layout["own"]]
        assert np.array_equal(action, single.rule_based_action(own))


def test_a_wait_does_not_advance_an_open_loop_rule() -> None:
    par = parallel_env("cost_envs/MultiTenantAgenticRouting-v0", n_tenants=2, capacity=1,
                       max_steps=5)
    policy = IndependentTenants(par, lambda env: FixedSequence(env, [[1], [1]]))
    ran: dict[str, list[int]] = {a: [] for a in par.possible_agents}
    obs, _ = par.reset(seed=0)
    policy.reset(obs)
    while par.agents:
        obs, _, _, _, infos = par.step(policy(obs))
        policy.observe(infos)
        for agent, info in infos.items():
            if not info["waited"]:
                ran[agent].append(int(info["calls"][0]))
    # each tenant runs large, large, then small, however the waits fall
    for calls in ran.values():
        assert calls[:3] == [1, 1, 0]


@pytest.mark.parametrize("env_id", ["cost_envs/MultiTenantToolBench-v0",
                                    "cost_envs/MultiTenantExpertRouting-v0",
                                    "cost_envs/MultiTenantAgenticRouting-v0"])
def test_the_scheduler_s_admitted_proposals_always_fit(env_id: str) -> None:
    par = parallel_env(env_id, n_tenants=6, capacity=1, org_budget=0.05, budget_window=4,
                       price_slope=1.0, max_steps=40)
    policy = CentralScheduler(par, RuleBased)
    obs, _ = par.reset(seed=1)
    policy.reset(obs)
    held = admitted = 0
    while par.agents:
        joint = policy(obs)
        obs, _, _, _, infos = par.step(joint)
        policy.observe(infos)
        for agent, action in joint.items():
            # a proposal the scheduler admits is never refused by the env
            assert infos[agent]["waited"] == (action is None)
            held += action is None
            admitted += action is not None
    assert held > 0 and admitted > 0


def test_the_scheduler_admits_the_best_value_per_dollar_first() -> None:
    # AgenticRouting with capacity 1: every tenant asks for the large model, at one price
    # per task; the scheduler admits the tenant whose call is worth most per dollar.
    par = parallel_env("cost_envs/MultiTenantAgenticRouting-v0", n_tenants=4, capacity=1)
    policy = CentralScheduler(par, lambda env: FixedSequence(env, [[1]]))
    obs, _ = par.reset(seed=3)
    policy.reset(obs)
    joint = policy(obs)
    chosen = [a for a, action in joint.items() if action is not None]
    assert len(chosen) == 1

    def score(agent: str) -> float:
        tenant = par.tenant_envs[agent]
        need = obs[agent][par.observation_layout["own"]][policy.embedding]
        value = 1.0 + float(policy.capabilities[0] @ need)
        return value / (tenant.step_cost + tenant.call_costs[0])

    assert score(chosen[0]) == max(score(a) for a in par.possible_agents)


def test_baselines_run_through_run_episode() -> None:
    par = parallel_env("cost_envs/MultiTenantExpertRouting-v0", n_tenants=4, capacity=1,
                       max_steps=30)
    for policy in (IndependentTenants(par, RuleBased), CentralScheduler(par, RuleBased)):
        metrics = run_episode(par, policy, seed=0).metrics()
        assert metrics["finished_per_step"] > 0 and 0 < metrics["fairness"] <= 1


@pytest.mark.parametrize("policy_class", [IndependentTenants, CentralScheduler])
def test_the_rule_is_fitted_on_the_tenants_own_pool(policy_class: type) -> None:
    # a 4-model pool: a rule fitted on the default 8-model ToolBench would call model 6
    par = parallel_env("cost_envs/MultiTenantToolBench-v0", n_tenants=2, max_steps=6,
                       env_kwargs={"pool_size": 4})
    policy = policy_class(par)
    run = run_episode(par, policy, seed=0)  # raised on the 8-bit actions before
    assert run.steps == 6 and sum(run.completed.values()) > 0
