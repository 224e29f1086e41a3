"""PPO training steps per second on the batched ToolBench-v0: SB3's PPO against FastPPO.

Usage: ``python benchmarks/ppo_throughput.py [--rollouts R] [--repeats K] [--envs 1,16,64]
[--big-batches] [--quick] [--output FILE.md]``

Both learners train what ``agents.lora.training.train(env_id, "ppo", ...)`` trains: the
paper's A.4 settings (``PPO_SETTINGS``: ``n_steps`` 512, minibatch 64, 10 epochs), the
``AllocatorPolicy`` without LoRA, ``CostMetricsCallback`` on every step, a silent logger,
one torch thread, the native batched env (``make_batched_vec_env``), seed 0. Per
``n_envs`` (1, 16 and 64 sub-envs) each round runs SB3's ``PPO`` and
``agents.lora.fast_ppo.FastPPO`` for ``R`` rollouts each (``R * n_envs * 512`` env steps),
alternating which goes first; a rate is env steps over the wall time of ``learn``, each
learner's median over rounds, and the ratio is the median over rounds of the ratio within
a round (the machine is shared, so a round's two runs see about the same load). The
columns ``collect`` and ``train`` split each learner's time per env step between
``collect_rollouts`` (policy forward, env step, callback, buffer) and ``train`` (the
updates). ``same weights`` compares the two learners' final weights after each round, bit
for bit (FastPPO computes SB3's updates; ``tests/test_fast_ppo.py``).

``--big-batches`` adds FastPPO at minibatches of 256 and 512: a different setting (fewer,
larger updates), not the paper's, reported apart. ``--quick`` (one rollout, one round,
1 and 16 sub-envs) checks the script, not the speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import machine, publish  # the one home of the machine line and output

ENV_ID = "cost_envs/ToolBench-v0"
SEED = 0
TARGET_RATIO = 3.0
N_ENVS = (1, 16, 64)
QUICK = {"rollouts": 1, "repeats": 1, "envs": (1, 16)}


def timed(cls: type) -> type:
    """``cls`` with the seconds spent in ``collect_rollouts`` and ``train`` counted."""

    class Timed(cls):  # type: ignore[misc, valid-type]
        seconds: dict[str, float]

        def collect_rollouts(self, *args: Any, **kwargs: Any) -> bool:
            start = time.perf_counter()
            try:
                return super().collect_rollouts(*args, **kwargs)
            finally:
                self.seconds["collect"] += time.perf_counter() - start

        def train(self) -> None:
            start = time.perf_counter()
            super().train()
            self.seconds["train"] += time.perf_counter() - start

    Timed.__name__ = cls.__name__
    return Timed


def run(learner: str, n_envs: int, rollouts: int, **settings: Any) -> dict[str, Any]:
    """One training run: its rate, its split of time and its final weights."""
    from stable_baselines3 import PPO

    from agents.callbacks import CostMetricsCallback
    from agents.lora.fast_ppo import FastPPO
    from agents.lora.policies import AllocatorPolicy
    from agents.lora.training import PPO_SETTINGS, quiet_logger
    from agents.vec_env import make_batched_vec_env

    cls = timed({"SB3 PPO": PPO, "FastPPO": FastPPO}[learner.split(" (")[0]])
    venv = make_batched_vec_env(ENV_ID, n_envs, seed=SEED)
    model = cls(AllocatorPolicy, venv, policy_kwargs={"lora_rank": None},
                **{**PPO_SETTINGS, **settings}, seed=SEED, device="cpu")
    model.seconds = {"collect": 0.0, "train": 0.0}
    quiet_logger(model)
    start = time.perf_counter()
    model.learn(rollouts * n_envs * model.n_steps, callback=CostMetricsCallback())
    seconds = time.perf_counter() - start
    venv.close()
    steps = model.num_timesteps
    return {"rate": steps / seconds, "collect_us": 1e6 * model.seconds["collect"] / steps,
            "train_us": 1e6 * model.seconds["train"] / steps,
            "weights": {k: v.clone() for k, v in model.policy.state_dict().items()}}


def measure(envs: tuple[int, ...], rollouts: int, repeats: int,
            big_batches: bool) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """Per ``n_envs``, each learner's runs, rounds alternating the order."""
    torch.set_num_threads(1)
    learners = {"SB3 PPO": {}, "FastPPO": {}}
    if big_batches:
        learners.update({f"FastPPO (batch_size {b})": {"batch_size": b} for b in (256, 512)})
    out: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for n_envs in envs:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in learners}
        for round_ in range(repeats):
            order = list(learners) if round_ % 2 == 0 else list(learners)[::-1]
            for name in order:
                runs[name].append(run(name, n_envs, rollouts, **learners[name]))
        out[n_envs] = runs
    return out


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def report(results: dict[int, dict[str, list[dict[str, Any]]]], rollouts: int,
           repeats: int) -> str:
    """The Markdown tables."""
    lines = [
        f"PPO on the batched {ENV_ID} (`agents.lora.training.train(..., \"ppo\")`'s model: "
        "`AllocatorPolicy` without LoRA, the paper's A.4 `PPO_SETTINGS` - n_steps 512, "
        "batch_size 64, 10 epochs - `CostMetricsCallback`, one torch thread, seed 0): "
        f"{rollouts} rollout(s) per run, {repeats} round(s) alternating the two learners. "
        "Rates are env steps per second of wall time (median over rounds); the ratio is "
        "the median over rounds of FastPPO's rate over SB3's in the same round; collect "
        "and train are µs per env step (median), `collect_rollouts` and `train`.",
        "",
        f"Machine: {machine()}",
        "",
        "| n_envs | SB3 PPO steps/s | FastPPO steps/s | ratio | >= "
        f"{TARGET_RATIO:.0f}x | SB3 collect / train | FastPPO collect / train "
        "| same weights |",
        "| ---: | ---: | ---: | ---: | :---: | ---: | ---: | :---: |",
    ]
    extra = []
    for n_envs, runs in results.items():
        sb3, fast = runs["SB3 PPO"], runs["FastPPO"]
        ratio = statistics.median(f["rate"] / s["rate"] for f, s in zip(fast, sb3, strict=True))
        same = all(_same(f["weights"], s["weights"]) for f, s in zip(fast, sb3, strict=True))
        meets = "yes" if ratio >= TARGET_RATIO else "**no**"
        lines.append(f"| {n_envs} | {_median(sb3, 'rate'):,.0f} | {_median(fast, 'rate'):,.0f} "
                     f"| {ratio:.2f} | {meets} | {_split(sb3)} | {_split(fast)} "
                     f"| {'yes' if same else '**no**'} |")
        for name, big in runs.items():
            if name.startswith("FastPPO ("):
                big_ratio = statistics.median(b["rate"] / s["rate"]
                                              for b, s in zip(big, sb3, strict=True))
                extra.append(f"| {n_envs} | {name} | {_median(big, 'rate'):,.0f} | "
                             f"{big_ratio:.2f} | {_split(big)} |")
    if extra:
        lines += [
            "",
            "A different setting (larger minibatches: fewer updates per rollout, not the "
            "paper's), against SB3 PPO at the paper's settings in the same round:",
            "",
            "| n_envs | learner | steps/s | ratio to SB3 PPO (batch 64) | collect / train |",
            "| ---: | --- | ---: | ---: | ---: |",
            *extra,
        ]
    return "\n".join(lines) + "\n"


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _split(runs: list[dict[str, Any]]) -> str:
    return f"{_median(runs, 'collect_us'):.0f} / {_median(runs, 'train_us'):.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs", default=",".join(map(str, N_ENVS)),
                        help="comma-separated sub-env counts (default 1,16,64)")
    parser.add_argument("--big-batches", action="store_true",
                        help="also FastPPO at batch_size 256 and 512 (a different setting)")
    parser.add_argument("--quick", action="store_true", help="checks the script, measures little")
    parser.add_argument("--output", type=Path, help="also write the tables to this file")
    args = parser.parse_args(argv)
    try:
        envs = tuple(int(n) for n in args.envs.split(","))
    except ValueError:
        parser.error(f"--envs: expected comma-separated ints, got {args.envs!r}")
    rollouts, repeats = args.rollouts, args.repeats
    if args.quick:
        rollouts, repeats, envs = QUICK["rollouts"], QUICK["repeats"], QUICK["envs"]
    for name, value in (("rollouts", rollouts), ("repeats", repeats), *(
            ("envs", n) for n in envs)):
        if value < 1:
            parser.error(f"--{name}: expected ints >= 1, got {value}")
    results = measure(envs, rollouts, repeats, args.big_batches)
    publish(report(results, rollouts, repeats), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
