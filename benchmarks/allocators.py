"""Cost of the LoRA allocator: PPO training speed, predict() latency, reproduction memory.

Usage: ``python benchmarks/allocators.py [--steps N] [--repeats R] [--scale default|smoke|none]
[--output FILE.md]``

1. **PPO fps, LoRA vs plain.** SB3 PPO with
   :class:`agents.learners.common.policies.AllocatorPolicy` with LoRA (r=8, frozen
   pretrained base) and without (the same 64-64 network, all trainable), same env, same
   settings, runs interleaved in one process; best of ``--repeats``. The issue's target
   for the ratio is >= 0.85.
2. **predict() latency** on one observation: the LoRA policy unmerged, merged with
   :func:`agents.learners.checkpoints.merge_adapter`, and the plain network; median of 2000 calls.
3. **Peak memory of ``python -m experiments lora_ppo``** at ``--scale``: the summed resident memory
   of the command and all its worker processes, sampled every 0.1 s with psutil (target
   under 2 GB), and its wall time.

One torch thread throughout, as ``make reproduce`` uses.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil
import torch
from stable_baselines3 import PPO

import cost_envs
from agents.learners.checkpoints import merge_adapter
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.pretrain import pretrained_base_path
from agents.learners.training import PPO_SETTINGS

ENV_ID = "cost_envs/ToolBench-v0"
FPS_TARGET = 0.85
MEMORY_TARGET_GB = 2.0


def _policy_kwargs(lora: bool) -> dict:
    if lora:
        return {"lora_rank": 8, "base": str(pretrained_base_path(ENV_ID))}
    return {"lora_rank": None}


def ppo_fps(steps: int, repeats: int) -> dict[str, float]:
    """Best PPO steps/s with and without LoRA, runs interleaved so drift hits both."""
    best = {"lora": 0.0, "plain": 0.0}
    for repeat in range(repeats):
        for name in best:
            env = gym.make(ENV_ID)
            model = PPO(AllocatorPolicy, env, policy_kwargs=_policy_kwargs(name == "lora"),
                        seed=repeat, device="cpu", **PPO_SETTINGS)
            model.learn(PPO_SETTINGS["n_steps"])  # warm-up: first rollout and update
            start = time.perf_counter()
            model.learn(steps, reset_num_timesteps=False)
            best[name] = max(best[name], steps / (time.perf_counter() - start))
            env.close()
    return best


def predict_latency(calls: int = 2000) -> dict[str, float]:
    """Median microseconds of ``predict`` on one observation."""
    env = gym.make(ENV_ID)
    obs, _ = env.reset(seed=0)
    lora = AllocatorPolicy(env.observation_space, env.action_space, lambda _: 3e-4,
                           **_policy_kwargs(True))
    plain = AllocatorPolicy(env.observation_space, env.action_space, lambda _: 3e-4,
                            **_policy_kwargs(False))
    policies = {"LoRA, unmerged": lora, "LoRA, merged": merge_adapter(lora),
                "plain MLP": plain}
    out = {}
    for name, policy in policies.items():
        for _ in range(200):
            policy.predict(obs, deterministic=True)
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            policy.predict(obs, deterministic=True)
            times.append(time.perf_counter() - start)
        out[name] = float(np.median(times) * 1e6)
    return out


def reproduce_memory(scale: str) -> tuple[float, float]:
    """Peak summed RSS (GB) of ``python -m experiments lora_ppo`` and its workers, wall seconds."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "experiments", "lora_ppo", "--scale", scale,
                   "--out", out]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        start = time.perf_counter()
        process = psutil.Popen(command, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[1])
        peak = 0
        while process.poll() is None:
            try:
                tree = [process, *process.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
            except psutil.Error:
                pass  # a worker exited between listing and reading it
            time.sleep(0.1)
        if process.returncode != 0:
            raise SystemExit(f"python -m experiments lora_ppo failed with exit code "
                             f"{process.returncode}")
        return peak / 1e9, time.perf_counter() - start


def machine() -> str:
    return (f"{platform.platform()}, {platform.machine()}, Python {platform.python_version()}, "
            f"{os.cpu_count()} CPUs, torch {torch.__version__}, one torch thread")


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale", choices=("default", "smoke", "none"), default="default",
                        help="reproduction to measure memory of ('none' skips it)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    fps = ppo_fps(args.steps, args.repeats)
    ratio = fps["lora"] / fps["plain"]
    latency = predict_latency()
    lines = [
        f"# Allocator benchmarks ({cost_envs.__version__})", "",
        f"Machine: {machine()}", "",
        f"## PPO training speed on {ENV_ID}", "",
        f"{args.steps} steps after a warm-up rollout, best of {args.repeats}, runs "
        "interleaved; PPO settings of `agents.learners.training.PPO_SETTINGS`.", "",
        "| policy | steps/s |", "| --- | ---: |",
        f"| LoRA r=8 on the frozen pretrained base | {fps['lora']:,.0f} |",
        f"| plain MLP, same size, all trainable | {fps['plain']:,.0f} |",
        "", f"Ratio LoRA / plain: **{ratio:.2f}** (target >= {FPS_TARGET}: "
        f"{'met' if ratio >= FPS_TARGET else 'NOT met'}).", "",
        "## predict() latency, one observation", "",
        "| policy | median µs |", "| --- | ---: |",
        *(f"| {name} | {value:.0f} |" for name, value in latency.items()),
    ]
    if args.scale != "none":
        peak, seconds = reproduce_memory(args.scale)
        lines += ["", f"## `python -m experiments lora_ppo` ({args.scale})", "",
                  f"Peak memory, command and workers summed: **{peak:.2f} GB** "
                  f"(target < {MEMORY_TARGET_GB} GB: "
                  f"{'met' if peak < MEMORY_TARGET_GB else 'NOT met'}); "
                  f"wall time {seconds / 60:.1f} min."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output is not None:
        from agents.files import write_files_atomic

        write_files_atomic(args.output.parent, {args.output.name: text})
    return 0


if __name__ == "__main__":
    sys.exit(main())
