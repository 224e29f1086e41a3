"""CORL's budget-tier controller on ExpertRouting-v0: one policy for every budget tier.

CORL (arXiv 2511.02755) trains a single controller that sees the query's budget tier
and is rewarded with its task performance gated by that tier's budget. Here:

* :func:`train_shared_ppo` trains SB3 PPO with the plain :class:`AllocatorPolicy` on
  ``BudgetTier(ExpertRouting-v0)``, a tier drawn per query, gated reward;
* :func:`train_tier_adapters` is the LoRA variant: the shared PPO encoder becomes a frozen
  base, and each tier gets its own LoRA adapter (with its own value head), trained by
  :class:`agents.lora.lora_ppo.LoraGuidedPPO` on that tier only (with its expected-cost term
  off, so both variants optimise the same gated reward), starting from the shared
  policy (LoRA's B = 0, so each adapter starts as exactly the shared policy);
  :class:`TierAdapters` routes each observation to its tier's adapter;
* :func:`tier_table` scores methods per tier on one fixed task set: accuracy, accuracy
  within budget (CORL's gated metric), average cost, the expert-call ratio (share of
  queries that consult at least one expert) and the calls per query of each expert,
  with 95% bootstrap intervals over queries.

Training tasks use task seeds ``TRAIN_TASK_SEED + seed`` and evaluation small seeds, as
everywhere in :mod:`agents`.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.utils import set_random_seed

import cost_envs  # noqa: F401  (registers the envs)
from agents.callbacks import CostMetricsCallback
from agents.evaluation import evaluate, value_interval
from agents.lora.lora_ppo import LoraGuidedPPO
from agents.lora.policies import AllocatorPolicy
from agents.lora.pretrain import save_base
from agents.lora.training import PPO_SETTINGS, quiet_logger
from agents.seeds import TRAIN_TASK_SEED
from cost_envs.metrics import bootstrap_mean_ci
from cost_envs.wrappers import TIERS, BudgetTier

EXPERT_ROUTING = "cost_envs/ExpertRouting-v0"
#: Adapter learning rate of the per-tier variant. The paper's LoRA-PPO rate (5e-5) barely
#: moves a saturated policy (benchmarks/results/warm_start.md); a tier adapter has to.
ADAPTER_LEARNING_RATE = 1e-3


def make_tier_env(env_kwargs: Mapping[str, Any] | None = None, tier: str | None = None,
                  reward: str = "gated") -> BudgetTier:
    """``BudgetTier(gym.make("cost_envs/ExpertRouting-v0", **env_kwargs))``."""
    return BudgetTier(gym.make(EXPERT_ROUTING, **dict(env_kwargs or {})), tier=tier,
                      reward=reward)


def train_shared_ppo(timesteps: int, seed: int = 0, env_kwargs: Mapping[str, Any] | None = None,
                     verbose: int = 0) -> tuple[AllocatorPolicy, list[dict[str, Any]]]:
    """PPO on every tier at once (a tier drawn per query); returns the policy and history."""
    set_random_seed(seed)
    env = make_tier_env(env_kwargs)
    model = PPO(AllocatorPolicy, env, policy_kwargs={"lora_rank": None}, seed=seed,
                device="cpu", **PPO_SETTINGS)
    quiet_logger(model, verbose)
    model.get_env().seed(TRAIN_TASK_SEED + seed)
    callback = CostMetricsCallback()
    model.learn(timesteps, callback=callback)
    env.close()
    return model.policy, callback.history


@dataclass
class TierAdapters:
    """One LoRA-adapted policy per tier over a shared frozen base; an allocator.

    Each observation goes to the policy of the tier its one-hot names (the four last
    entries of a ``BudgetTier`` observation are the tier one-hot and the budget left).
    """

    policies: dict[str, AllocatorPolicy]
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def predict(self, observation: np.ndarray, state: Any = None,
                episode_start: np.ndarray | None = None, deterministic: bool = True
                ) -> tuple[np.ndarray, Any]:
        """The action of the observation's tier adapter (one observation or a batch)."""
        obs = np.asarray(observation, dtype=np.float32)
        batch = obs.reshape(1, -1) if obs.ndim == 1 else obs
        one_hot = batch[:, -1 - len(TIERS):-1]
        tiers = np.argmax(one_hot, axis=1)
        actions = []
        for row, tier in zip(batch, tiers, strict=True):
            action, _ = self.policies[TIERS[int(tier)]].predict(row, None, None, deterministic)
            actions.append(action)
        stacked = np.stack(actions)
        return (stacked[0] if obs.ndim == 1 else stacked), state


def train_tier_adapters(
    shared: AllocatorPolicy,
    timesteps: int,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    learning_rate: float = ADAPTER_LEARNING_RATE,
    verbose: int = 0,
) -> TierAdapters:
    """A LoRA adapter per tier on the frozen encoder of ``shared`` (module docstring)."""
    if shared.lora_rank is not None:
        raise ValueError("train_tier_adapters: expected the plain shared PPO policy "
                         "(lora_rank=None) whose encoder becomes the frozen base")
    encoder = shared.features_extractor.net
    obs_dim = int(encoder[0].in_features)
    policies: dict[str, AllocatorPolicy] = {}
    history: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        state = {k: v.detach().clone().contiguous() for k, v in encoder.state_dict().items()}
        base = save_base(state, {"obs_dim": obs_dim,
                                 "hidden_sizes": list(shared.hidden_sizes)},
                         Path(tmp) / "shared_encoder")
        for offset, tier in enumerate(TIERS):
            set_random_seed(seed)
            env = make_tier_env(env_kwargs, tier=tier)
            # cost_coef=0: the gated reward is the whole objective, as for the shared PPO
            # (LoRA-PPO's expected-cost term prices calls nominally, the same in every tier).
            model = LoraGuidedPPO(
                AllocatorPolicy, env, learning_rate=learning_rate, cost_coef=0.0, seed=seed,
                device="cpu",
                policy_kwargs={"hidden_sizes": shared.hidden_sizes, "lora_rank": 8,
                               "base": str(base)},
                **PPO_SETTINGS)
            # Start from the shared policy: its heads, and adapters that add nothing (B=0).
            model.policy.action_net.load_state_dict(shared.action_net.state_dict())
            model.policy.value_net.load_state_dict(shared.value_net.state_dict())
            quiet_logger(model, verbose)
            model.get_env().seed(TRAIN_TASK_SEED + 100 * (offset + 1) + seed)
            callback = CostMetricsCallback()
            model.learn(timesteps, callback=callback)
            env.close()
            policies[tier] = model.policy
            history[tier] = callback.history
    return TierAdapters(policies, history)


# ------------------------------------------------------------------ evaluation
class FixedConsultation:
    """Consult a fixed set of experts in the first round, then answer (``[]``: alone).

    The reference points of CORL's tables: the controller alone and each single expert.
    """

    def __init__(self, experts: list[int], n_experts: int) -> None:
        self.action = np.zeros(n_experts, dtype=np.int8)
        self.action[experts] = 1

    def predict(self, observation: np.ndarray, state: Any = None,
                episode_start: np.ndarray | None = None, deterministic: bool = True
                ) -> tuple[np.ndarray, Any]:
        """``self.action`` while no expert has been consulted, then answer now."""
        env_obs = np.asarray(observation)
        rounds_left = float(env_obs[4])
        first_round = rounds_left >= 1.0 - 1e-6
        return (self.action.copy() if first_round else np.zeros_like(self.action)), state


@dataclass(frozen=True)
class TierScores:
    """One method's scores on one tier, each a point with a 95% interval."""

    accuracy: tuple[float, float, float]
    accuracy_within_budget: tuple[float, float, float]
    avg_cost: tuple[float, float, float]
    expert_call_ratio: tuple[float, float, float]
    calls_per_query: dict[str, float]
    over_budget: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"accuracy": list(self.accuracy),
                "accuracy_within_budget": list(self.accuracy_within_budget),
                "avg_cost": list(self.avg_cost),
                "expert_call_ratio": list(self.expert_call_ratio),
                "calls_per_query": dict(self.calls_per_query),
                "over_budget": self.over_budget}


def score_tier(allocator_for: Callable[[gym.Env], Any], tier: str, episodes: int, seed: int,
               env_kwargs: Mapping[str, Any] | None = None, n_resamples: int = 1000
               ) -> TierScores:
    """Run one method on ``episodes`` queries of ``tier`` (task set of ``seed``)."""
    env = make_tier_env(env_kwargs, tier=tier)
    budget = env.budgets[tier]
    result = evaluate(allocator_for(env), env, episodes, seed)
    env.close()
    records, names = result.records, result.agent_names
    success = np.array([r.success for r in records], dtype=float)
    cost = np.array([r.cost for r in records])
    within = success * (cost <= budget)
    consulted = np.array([r.calls.sum() > 0 for r in records], dtype=float)
    calls = np.stack([r.calls for r in records]).mean(axis=0)
    return TierScores(
        accuracy=bootstrap_mean_ci(success, n_resamples=n_resamples, seed=seed),
        accuracy_within_budget=bootstrap_mean_ci(within, n_resamples=n_resamples, seed=seed + 1),
        avg_cost=bootstrap_mean_ci(cost, n_resamples=n_resamples, seed=seed + 2),
        expert_call_ratio=bootstrap_mean_ci(consulted, n_resamples=n_resamples, seed=seed + 3),
        calls_per_query={n: float(c) for n, c in zip(names, calls, strict=True)},
        over_budget=float(np.mean(cost > budget)),
    )


def tier_table(methods: Mapping[str, Callable[[gym.Env], Any]], episodes: int, seed: int = 0,
               env_kwargs: Mapping[str, Any] | None = None, n_resamples: int = 1000
               ) -> dict[str, dict[str, TierScores]]:
    """``{tier: {method: scores}}`` on the same queries for every method and tier."""
    return {tier: {name: score_tier(factory, tier, episodes, seed, env_kwargs, n_resamples)
                   for name, factory in methods.items()} for tier in TIERS}


# ------------------------------------------------------------------ the report
@dataclass(frozen=True)
class CorlScale:
    """How much to train and evaluate."""

    ppo_timesteps: int
    adapter_timesteps: int
    episodes: int
    n_resamples: int


CORL_SCALES = {
    "smoke": CorlScale(ppo_timesteps=1024, adapter_timesteps=512, episodes=30, n_resamples=50),
    "default": CorlScale(ppo_timesteps=60_000, adapter_timesteps=15_000, episodes=400,
                         n_resamples=1000),
}
PROFILES_EVALUATED = ("mixed", "gsm8k", "math500", "aime")


def _policy_allocator(policy: Any) -> Callable[[gym.Env], Any]:
    return lambda env: policy


def corl_methods(shared: AllocatorPolicy, adapters: TierAdapters, n_experts: int,
                 expert_names: list[str]) -> dict[str, Callable[[gym.Env], Any]]:
    """Table rows: the references (alone, each single expert, rule, oracle) and the learned."""
    from agents.baselines import CostOptOracle, RuleBased

    methods: dict[str, Callable[[gym.Env], Any]] = {
        "Controller alone": lambda env: FixedConsultation([], n_experts)}
    for i, name in enumerate(expert_names):
        methods[f"Single expert: {name}"] = (
            lambda env, i=i: FixedConsultation([i], n_experts))
    methods["Escalate until agreement (rule)"] = RuleBased
    methods["Oracle (privileged, ignores the tier)"] = CostOptOracle
    methods["PPO, one policy for all tiers"] = _policy_allocator(shared)
    methods["LoRA-PPO, one adapter per tier"] = _policy_allocator(adapters)
    return methods


LEARNED = ("PPO, one policy for all tiers", "LoRA-PPO, one adapter per tier")


def run_corl(scale: str = "default", seed: int = 0) -> dict[str, Any]:
    """Train both variants and score every method per profile and tier (JSON-ready)."""
    if scale not in CORL_SCALES:
        raise ValueError(f"scale: expected one of {list(CORL_SCALES)}, got {scale!r}")
    settings = CORL_SCALES[scale]
    shared, shared_history = train_shared_ppo(settings.ppo_timesteps, seed)
    adapters = train_tier_adapters(shared, settings.adapter_timesteps, seed)
    probe = gym.make(EXPERT_ROUTING)
    names = list(probe.unwrapped.pool.names)
    budgets = dict(probe.unwrapped.tier_budgets)
    probe.close()
    methods = corl_methods(shared, adapters, len(names), names)
    results = {}
    for profile in PROFILES_EVALUATED:
        table = tier_table(methods, settings.episodes, seed=0,
                           env_kwargs={"profile": profile}, n_resamples=settings.n_resamples)
        results[profile] = {tier: {m: s.as_dict() for m, s in rows.items()}
                            for tier, rows in table.items()}
    return {"scale": scale, "seed": seed, "settings": settings.__dict__, "budgets": budgets,
            "experts": names, "results": results,
            "training_curve": [{k: v for k, v in point.items()} for point in shared_history]}


def best_single_expert(rows: Mapping[str, Any]) -> str:
    """The single-expert row with the highest accuracy within budget (ties: the cheaper)."""
    singles = [m for m in rows if m.startswith("Single expert: ")]
    return max(singles, key=lambda m: (rows[m]["accuracy_within_budget"][0],
                                       -rows[m]["avg_cost"][0]))


def _cell(value: list[float], fmt: str) -> str:
    return value_interval(*value, fmt=fmt)


def corl_markdown(report: Mapping[str, Any]) -> str:
    """The per-tier tables (mixed profile in full, then the learned rows per profile)."""
    names = report["experts"]
    budgets = report["budgets"]
    lines = [
        "# CORL on ExpertRouting-v0: one controller for three budget tiers",
        "",
        f"Scale `{report['scale']}`, training seed {report['seed']}: "
        f"PPO {report['settings']['ppo_timesteps']} steps over all tiers, then "
        f"{report['settings']['adapter_timesteps']} steps per tier adapter; "
        f"{report['settings']['episodes']} evaluation queries per profile and tier, the same "
        "for every method; 95% bootstrap intervals over queries. Budgets per query: "
        + ", ".join(f"{t} ${b:g}" for t, b in budgets.items()) + ".",
        "",
        "*Accuracy within budget* is CORL's gated metric (a right answer that cost more "
        "than the tier's budget counts as wrong); the *expert-call ratio* is the share of "
        "queries on which at least one expert was consulted; calls/query counts each "
        f"expert's calls ({' / '.join(names)}).",
        "",
    ]
    for profile, table in report["results"].items():
        lines += [f"## Profile `{profile}`", "",
                  "| Tier | Method | Accuracy | Accuracy within budget | Avg cost ($) "
                  "| Expert-call ratio | Calls/query | Over budget |",
                  "|---|---|---|---|---|---|---|---|"]
        for tier, rows in table.items():
            best = best_single_expert(rows)
            for method, s in rows.items():
                if profile != "mixed" and not (method in LEARNED or method == best
                                               or method.startswith("Controller")):
                    continue
                label = f"{method} (best single expert)" if method == best else method
                calls = " / ".join(f"{s['calls_per_query'][n]:.2f}" for n in names)
                lines.append(
                    f"| {tier} | {label} | {_cell(s['accuracy'], '.3f')} | "
                    f"{_cell(s['accuracy_within_budget'], '.3f')} | "
                    f"{_cell(s['avg_cost'], '.4f')} | {_cell(s['expert_call_ratio'], '.2f')} | "
                    f"{calls} | {s['over_budget']:.2f} |")
        lines.append("")
    lines += ["## Learned controllers against the controller alone and the best single expert",
              "", "Accuracy within budget, mixed profile; the best single expert is the one "
              "with the highest accuracy within that tier's budget.", "",
              "| Tier | Controller alone | Best single expert | PPO | LoRA-PPO |",
              "|---|---|---|---|---|"]
    mixed = report["results"]["mixed"]
    for tier, rows in mixed.items():
        best = best_single_expert(rows)
        cells = [_cell(rows[m]["accuracy_within_budget"], ".3f")
                 for m in ("Controller alone", best, *LEARNED)]
        cells[1] += f" ({best.removeprefix('Single expert: ')})"
        lines.append(f"| {tier} | " + " | ".join(cells) + " |")
    lines += ["", "## Does the expert-call ratio rise with the tier?", ""]
    for profile, table in report["results"].items():
        for method in LEARNED:
            ratios = [table[t][method]["expert_call_ratio"][0] for t in TIERS]
            calls = [sum(table[t][method]["calls_per_query"].values()) for t in TIERS]
            costs = [table[t][method]["avg_cost"][0] for t in TIERS]
            rising = all(a <= b for a, b in itertools.pairwise(ratios))
            lines.append(
                f"- `{profile}`, {method}: ratio {' -> '.join(f'{r:.2f}' for r in ratios)}, "
                f"calls/query {' -> '.join(f'{c:.2f}' for c in calls)}, cost "
                f"{' -> '.join(f'${c:.4f}' for c in costs)}: "
                f"{'rises (never falls)' if rising else 'does NOT rise monotonically'}.")
    return "\n".join(lines) + "\n"


def corl_figure(report: Mapping[str, Any]) -> bytes:
    """Accuracy within budget vs average cost per profile; colour = tier (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from agents.files import figure_png

    profiles = list(report["results"])
    figure, axes = plt.subplots(1, len(profiles), figsize=(4.2 * len(profiles), 4.2))
    colours = {"low": "tab:green", "medium": "tab:orange", "high": "tab:red"}
    markers = "osD^vP*X"
    for axis, profile in zip(np.atleast_1d(axes), profiles, strict=True):
        for tier, rows in report["results"][profile].items():
            for index, (method, s) in enumerate(rows.items()):
                axis.errorbar(
                    s["avg_cost"][0], s["accuracy_within_budget"][0],
                    yerr=[[s["accuracy_within_budget"][0] - s["accuracy_within_budget"][1]],
                          [s["accuracy_within_budget"][2] - s["accuracy_within_budget"][0]]],
                    fmt=markers[index % len(markers)], color=colours[tier],
                    markerfacecolor=colours[tier] if method in LEARNED else "none",
                    markersize=7 if method in LEARNED else 5, capsize=2,
                    label=method if tier == "high" else None)
            axis.axvline(report["budgets"][tier], color=colours[tier], linestyle=":",
                         linewidth=0.8)
        axis.set_xscale("log")
        axis.set_title(f"profile {profile}", fontsize=10)
        axis.set_xlabel("average cost per query ($, log)")
        axis.grid(True, alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("accuracy within budget")
    handles, labels = np.atleast_1d(axes)[0].get_legend_handles_labels()
    figure.legend(handles, labels, fontsize=7, loc="lower center", ncol=4)
    figure.suptitle("ExpertRouting-v0: colour = tier (green low, orange medium, red high); "
                    "dotted = tier budget; filled = learned", fontsize=10)
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    png = figure_png(figure)
    plt.close(figure)
    return png


def report(out_dir: Path, scale: str = "default", seed: int = 0) -> str:
    """Run :func:`run_corl`, write ``corl_tiers.md/.json`` and ``pareto_corl.png``.

    Everything is rendered before anything is written; each file is written atomically.
    Returns the Markdown.
    """
    import json

    from agents.files import write_files_atomic

    result = run_corl(scale, seed)
    markdown = corl_markdown(result)
    text = json.dumps(result, indent=2) + "\n"
    png = corl_figure(result)
    write_files_atomic(out_dir, {"corl_tiers.md": markdown, "corl_tiers.json": text,
                                 "pareto_corl.png": png})
    return markdown
