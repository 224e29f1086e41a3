"""Why LoRA-guided PPO barely moves its warm start: saturation and the adapter's step size.

Usage: ``python benchmarks/warm_start.py [--timesteps N] [--seeds S] [--output FILE.md]``

The supervised stage fits GreedyHeuristic labels, which are a deterministic function of
the observation, so with enough epochs the call probabilities approach 0 or 1. PPO's
gradient on a Bernoulli logit is proportional to ``p (1 - p)``, and LoRA-guided PPO
trains only the adapter under a frozen action head at lr 5e-5, so a saturated warm
start leaves it little to move. This script crosses the supervised stage's length (2 or
20 epochs, the default) with the adapter's learning rate (the paper's 5e-5, or SB3's
default 3e-4), measures the saturation of the warm start (mean ``|2p - 1|`` over the
observations it visits; 1 = fully deterministic) and scores the supervised allocator and
LoRA-guided PPO after ``--timesteps`` steps on the 400 tasks of ``make reproduce``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import cost_envs  # noqa: F401  (registers the environments)
from agents.evaluation import evaluate
from agents.files import write_files_atomic
from agents.learners.lora_ppo import LoraGuidedPPO
from agents.learners.pretrain import pretrained_base_path
from agents.learners.supervised import (
    SupervisedConfig,
    greedy_traces,
    policy_for,
    relative_costs,
    train_supervised,
)
from agents.learners.training import PPO_SETTINGS
from agents.seeds import TRACE_TASK_SEED, TRAIN_TASK_SEED

EPOCHS = (2, 20)
LEARNING_RATES = (5e-5, 3e-4)


def saturation(policy, env_id: str, episodes: int = 100) -> float:
    """Mean ``|2p - 1|`` of the policy's call probabilities along its own episodes."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=0)
    values = []
    for _ in range(episodes):
        done = False
        while not done:
            probs = policy.action_probabilities(torch.as_tensor(obs[None]))[0].detach()
            values.append(float((2 * probs - 1).abs().mean()))
            action, _ = policy.predict(obs, deterministic=True)
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
        obs, _ = env.reset()
    return float(np.mean(values))


def score(allocator, env_id: str) -> tuple[float, float]:
    summary = evaluate(allocator, env_id, episodes=400, seed=0).summary(n_resamples=10)
    return summary["success_rate"], summary["cps"]


def run(env_id: str, epochs: int, seed: int, timesteps: int) -> dict[str, float]:
    """Supervised warm start, then LoRA-guided PPO at each learning rate."""
    torch.manual_seed(seed)
    env = gym.make(env_id)
    policy = policy_for(env, base=str(pretrained_base_path(env_id)))
    config = SupervisedConfig(epochs=epochs)
    traces = greedy_traces(env, config.episodes, seed=TRACE_TASK_SEED + seed)
    train_supervised(policy, traces, relative_costs(env), config, seed=seed)
    row = {"saturation": saturation(policy, env_id)}
    row["sup_success"], row["sup_cps"] = score(policy, env_id)
    for learning_rate in LEARNING_RATES:
        model = LoraGuidedPPO.from_supervised(policy, env, device="cpu", seed=seed,
                                              learning_rate=learning_rate, **PPO_SETTINGS)
        model.get_env().seed(TRAIN_TASK_SEED + seed)
        model.learn(timesteps)
        row[f"success@{learning_rate:g}"], row[f"cps@{learning_rate:g}"] = score(model, env_id)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    lines = [
        "# Warm-start saturation and LoRA-guided PPO", "",
        f"`python benchmarks/warm_start.py --timesteps {args.timesteps} --seeds {args.seeds}`: "
        "pretrained base; each cell is success / CPS on the 400 evaluation tasks "
        "(task seed 0), mean over seeds.", "",
        "| env | supervised epochs | saturation | supervised | LoRA-PPO, lr 5e-5 "
        "| LoRA-PPO, lr 3e-4 |",
        "| --- | ---: | ---: | --- | --- | --- |",
    ]
    for env_id in ("cost_envs/FlightPlanner-v0", "cost_envs/ToolBench-v0"):
        for epochs in EPOCHS:
            rows = [run(env_id, epochs, seed, args.timesteps) for seed in range(args.seeds)]
            mean = {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}
            cells = [f"{mean['sup_success']:.3f} / {mean['sup_cps']:.4f}"] + [
                f"{mean[f'success@{lr:g}']:.3f} / {mean[f'cps@{lr:g}']:.4f}"
                for lr in LEARNING_RATES]
            lines.append(f"| {env_id.split('/')[-1]} | {epochs} | {mean['saturation']:.3f} | "
                         + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output is not None:
        write_files_atomic(args.output.parent, {args.output.name: text})
    return 0


if __name__ == "__main__":
    sys.exit(main())
