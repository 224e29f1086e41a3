"""Budget tiers (CORL): one controller, three per-query budgets, your own price table.

Trains nothing: it scores two hand-written policies per tier on ExpertRouting-v0 wrapped
in BudgetTier, once with the packaged prices and once with a user table in which o3
costs ten times more. Run with --timesteps N to also train CORL's tier-conditioned PPO.
"""

import argparse
import tempfile
from pathlib import Path

import yaml

import cost_envs  # noqa: F401  (registers cost_envs/* ids)
from agents.baselines import FixedConsultation, RuleBased
from agents.learners.corl import score_tier, train_shared_ppo
from cost_envs.prices import default_price_table
from cost_envs.wrappers import TIERS

parser = argparse.ArgumentParser(allow_abbrev=False)  # a misspelt option is an error
parser.add_argument("--episodes", type=int, default=200)
parser.add_argument("--timesteps", type=int, default=0, help="also train PPO (0: skip)")
args = parser.parse_args()

# A user price table: the packaged one with o3 ten times dearer (same schema, own source).
table = {"currency": "USD", "unit": "per_million_tokens", "models": []}
for model in default_price_table():
    entry = {"name": model.name, "input": model.input, "output": model.output,
             "active_params_billion": model.active_params_billion,
             "source": model.source, "date": model.date}
    if model.name == "o3":
        entry.update(input=model.input * 10, output=model.output * 10,
                     source="what-if: o3 at ten times the list price")
    table["models"].append(entry)
workdir = tempfile.TemporaryDirectory()  # removed when the script ends
prices_file = Path(workdir.name) / "my_prices.yaml"
prices_file.write_text(yaml.safe_dump(table))

methods = {"controller alone": lambda env: FixedConsultation(env, []), "rule": RuleBased}
if args.timesteps:
    policy, _ = train_shared_ppo(args.timesteps, seed=0)
    methods["ppo"] = lambda env: policy

for label, kwargs in (("packaged prices", {}), ("o3 x10", {"prices": str(prices_file)})):
    print(f"\n{label}")
    print("| tier | method | accuracy within budget | avg cost ($) | expert-call ratio |")
    print("|---|---|---|---|---|")
    for tier in TIERS:
        for name, factory in methods.items():
            s = score_tier(factory, tier, args.episodes, seed=0, env_kwargs=kwargs,
                           n_resamples=200)
            print(f"| {tier} | {name} | {s.accuracy_within_budget[0]:.3f} | "
                  f"{s.avg_cost[0]:.4f} | {s.expert_call_ratio[0]:.2f} |")
