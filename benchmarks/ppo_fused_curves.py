"""FastPPO's fused loss (float-close) against its exact path: the same learning curves?

Usage: ``python benchmarks/ppo_fused_curves.py [--steps T] [--seeds S] [--n-envs N]
[--output FILE.md]``

``FastPPO(fused_loss=True)`` computes the loss's gradient by hand: the same updates up to
float rounding, so its weights drift from SB3's (which the exact ``FastPPO`` reproduces bit
for bit) as rounding differences compound. This trains both on the batched ToolBench-v0
with the paper's A.4 settings for ``S`` seeds (each seed's network initialisation and
training tasks as ``agents.learners.training.train`` draws them) and compares the training
curves of ``CostMetricsCallback`` (success rate and CPS over the last 100 episodes, per
rollout): the mean per rollout, the first rollout where each seed's two curves differ, and
the paired difference over the last four rollouts with a 95% t-interval over seeds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import machine, publish  # the one home of the machine line and output

ENV_ID = "cost_envs/ToolBench-v0"
KEYS = {"success rate": "rollout/success_rate", "CPS": "cost/cps"}


def curves(steps: int, seeds: int, n_envs: int) -> dict[tuple[int, bool], list[dict]]:
    """``(seed, fused) -> CostMetricsCallback.history``."""
    import torch

    from agents.callbacks import CostMetricsCallback
    from agents.learners.common.policies import AllocatorPolicy
    from agents.learners.ppo import FastPPO
    from agents.learners.training import PPO_SETTINGS, quiet_logger
    from agents.seeds import train_task_seeds
    from agents.vec_env import make_batched_vec_env

    torch.set_num_threads(1)
    out = {}
    for seed in range(seeds):
        for fused in (False, True):
            venv = make_batched_vec_env(ENV_ID, n_envs)
            model = FastPPO(AllocatorPolicy, venv, policy_kwargs={"lora_rank": None},
                            seed=seed, device="cpu", fused_loss=fused, **PPO_SETTINGS)
            quiet_logger(model)
            venv.unwrapped.seed_each(train_task_seeds(seed, n_envs))
            callback = CostMetricsCallback()
            model.learn(steps, callback=callback)
            out[(seed, fused)] = callback.history
    return out


def report(histories: dict[tuple[int, bool], list[dict]], steps: int, seeds: int,
           n_envs: int) -> str:
    """The Markdown table."""
    from scipy import stats

    lines = [
        f"FastPPO exact (SB3's updates bit for bit) against `fused_loss=True` on {ENV_ID}, "
        f"{n_envs} sub-envs, the paper's A.4 settings, {steps:,} steps, seeds 0-{seeds - 1}. "
        "Curves: `CostMetricsCallback` per rollout (last 100 episodes); the paired "
        "difference (fused - exact) is over the last four rollouts, 95% t-interval over "
        "seeds.",
        "",
        f"Machine: {machine()}",
        "",
        "| metric | exact, last 4 rollouts | fused, last 4 rollouts | paired difference "
        "| first rollout that differs (per seed) |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for label, key in KEYS.items():
        exact = np.array([[h[key] for h in histories[(s, False)]] for s in range(seeds)])
        fused = np.array([[h[key] for h in histories[(s, True)]] for s in range(seeds)])
        diff = fused[:, -4:].mean(axis=1) - exact[:, -4:].mean(axis=1)
        half = (stats.t.ppf(0.975, seeds - 1) * diff.std(ddof=1) / np.sqrt(seeds)
                if seeds > 1 else float("nan"))
        first = [next((i for i, (a, b) in enumerate(zip(e, f, strict=True)) if a != b), "-")
                 for e, f in zip(exact, fused, strict=True)]
        lines.append(f"| {label} | {exact[:, -4:].mean():.4f} | {fused[:, -4:].mean():.4f} "
                     f"| {diff.mean():+.4f} [{diff.mean() - half:+.4f}, "
                     f"{diff.mean() + half:+.4f}] | {', '.join(map(str, first))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=98_304)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--n-envs", type=int, default=16)
    parser.add_argument("--output", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    for name, value in (("steps", args.steps), ("seeds", args.seeds), ("n-envs", args.n_envs)):
        if value < 1:
            parser.error(f"--{name}: expected an int >= 1, got {value}")
    histories = curves(args.steps, args.seeds, args.n_envs)
    publish(report(histories, args.steps, args.seeds, args.n_envs), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
