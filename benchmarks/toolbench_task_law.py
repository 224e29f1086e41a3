"""ToolBench-v0's task law and two baselines' returns, on the code this runs with.

Usage: ``python benchmarks/toolbench_task_law.py [TASKS] [EPISODES]``

Issue #37 point 1 changed how ToolBench-v0 draws its tasks (one call of float32 uniforms
per block, turned into tasks elementwise), not their law. Run this on the code before and
after (``PYTHONPATH=<checkout>``) and compare: over ``TASKS`` tasks (default 20,000, task
seed 123) the stage counts, the stage difficulties' mean, std and clipped shares, the answer
length, the skill shares, the luck's means, beside the exact values of the documented law
(quadrature for the difficulties); then RuleBased's and Random's mean return, success and
quality over ``EPISODES`` episodes (default 3,000), with standard errors. It writes nothing.
"""

from __future__ import annotations

import math
import sys

import gymnasium as gym
import numpy as np

import cost_envs
from agents.baselines import RandomAllocator, RuleBased
from agents.evaluation import rollout
from cost_envs.envs.toolbench import STAGE_DIFFICULTY_NOISE


def exact_difficulty() -> tuple[float, float, float, float]:
    """Mean, std, P(d = 0) and P(d = 1) of ``clip(delta + N(0, .15), 0, 1)``, delta ~ Beta(2, 2)."""
    x = (np.arange(4000) + 0.5) / 4000  # delta's midpoint grid
    prior = 6 * x * (1 - x) / 4000
    z = (np.arange(-8000, 8000) + 0.5) / 1000  # the noise in standard deviations
    normal = np.exp(-0.5 * z**2) / math.sqrt(2 * math.pi) / 1000
    d = np.clip(x[:, None] + STAGE_DIFFICULTY_NOISE * z, 0.0, 1.0)
    weight = prior[:, None] * normal
    mean = float((weight * d).sum())
    std = math.sqrt(float((weight * d**2).sum()) - mean**2)
    return mean, std, float(weight[d == 0].sum()), float(weight[d == 1].sum())


def _se(x: np.ndarray) -> float:
    return float(x.std(ddof=1) / np.sqrt(len(x)))


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 20000
    episodes = int(argv[1]) if len(argv) > 1 else 3000
    print("cost_envs from", cost_envs.__file__)
    env = gym.make("cost_envs/ToolBench-v0")
    env.reset(seed=123)
    tasks = env.unwrapped.sample_tasks(n)
    k = np.array([t.n_stages for t in tasks])
    d = np.concatenate([t.stage_difficulty for t in tasks])
    length = np.array([len(t.reference) for t in tasks])
    skills = np.concatenate([t.stage_skill[:-1] for t in tasks])
    answer = np.array([t.stage_skill[-1] for t in tasks])
    luck = np.concatenate([np.asarray(t.luck, np.float64).ravel() for t in tasks])
    recall = np.concatenate([np.asarray(t.recall_luck[0], np.float64) for t in tasks])
    rate = np.array([float(t.hallucination_rate[0]) for t in tasks])
    hit = np.array([np.isin(t.hallucination_tokens[0], t.reference).mean() for t in tasks])
    mean, std, at_zero, at_one = exact_difficulty()
    rows = [
        ("stage count 2 / 3 / 4", " / ".join(f"{np.mean(k == j):.4f}" for j in (2, 3, 4)),
         "0.35 / 0.40 / 0.25"),
        ("stage difficulty mean (se)", f"{d.mean():.4f} ({_se(d):.4f})", f"{mean:.4f}"),
        ("stage difficulty std", f"{d.std():.4f}", f"{std:.4f}"),
        ("clipped at 0 / at 1", f"{np.mean(d == 0):.4f} / {np.mean(d == 1):.4f}",
         f"{at_zero:.4f} / {at_one:.4f}"),
        ("answer length mean (se) / std",
         f"{length.mean():.3f} ({_se(length):.3f}) / {length.std():.3f}",
         f"14 / {math.sqrt((13**2 - 1) / 12):.3f}"),
        ("answer length min / max", f"{length.min()} / {length.max()}", "8 / 20"),
        ("intermediate skill shares 0..4",
         " / ".join(f"{np.mean(skills == j):.4f}" for j in range(5)), "0.2 each"),
        ("answer skill shares 4 / 5", " / ".join(f"{np.mean(answer == j):.4f}" for j in (4, 5)),
         "0.5 each"),
        ("luck / recall luck / hallucination rate mean",
         f"{luck.mean():.4f} / {recall.mean():.4f} / {rate.mean():.4f}", "0.5 each"),
        ("spurious token in the reference, share", f"{hit.mean():.4f}", "about 1/3"),
    ]
    print(f"| statistic over {n:,} tasks (task seed 123) | drawn | law |")
    print("| --- | --- | --- |")
    for name, value, law in rows:
        print(f"| {name} | {value} | {law} |")
    makers = (("RuleBased", RuleBased), ("Random", lambda e: RandomAllocator(e, seed=3)))
    for name, make in makers:
        played = gym.make("cost_envs/ToolBench-v0")
        agent = make(played)
        runs = [rollout(agent, played, seed=7 if i == 0 else None) for i in range(episodes)]
        returns = np.array([r.episode_return for r in runs])
        success = np.array([float(r.record.success) for r in runs])
        quality = np.array([float(r.record.quality) for r in runs])
        print(f"{name}: return {returns.mean():.4f} ({_se(returns):.4f}), success "
              f"{success.mean():.4f} ({_se(success):.4f}), quality {quality.mean():.3f} "
              f"({_se(quality):.3f}) over {episodes:,} episodes (seed 7)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
