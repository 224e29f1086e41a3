"""PPO training steps per second on the batched ToolBench-v0: today's SB3 PPO against FastPPO.

Usage: ``python benchmarks/ppo_throughput.py [--min-steps S] [--repeats K] [--envs 1,16,64]
[--baseline-ref REF] [--big-batches] [--quick] [--output FILE.md]``

Every learner trains what ``agents.learners.training.train(env_id, "ppo", ...)`` trains: the
paper's A.4 settings (``PPO_SETTINGS``: ``n_steps`` 512, minibatch 64, 10 epochs), the
``AllocatorPolicy`` without LoRA, ``CostMetricsCallback`` on every step, a silent logger,
one torch thread, the native batched env (``make_batched_vec_env``), seed 0, for
``max(2 rollouts, S env steps)``. The learners:

* ``SB3 PPO @ REF``: SB3's ``PPO`` run from the source tree of git ``REF`` (default
  :data:`BASELINE_REF`, main before the faster learner: today's path, its policy and
  callback included), extracted with ``git archive``; without git or the ref, the row is
  left out and the ratios are to ``SB3 PPO`` below;
* ``SB3 PPO``: SB3's ``PPO`` on this tree (its faster policy forward and callback);
* ``FastPPO``: :class:`agents.learners.ppo.FastPPO`, SB3's updates bit for bit (autograd's
  backward replayed without a graph);
* ``FastPPO fused``: ``FastPPO(fused_loss=True)``, the loss's and the network's gradient
  by hand, the whole gradient step in numpy (float-close).

Each run is a fresh process (its imports are not timed); per ``n_envs`` (1, 16, 64) each
round runs every learner once, the order reversed every other round. A rate is env steps
over the wall time of ``learn``: each learner's median over rounds; a ratio is the median
over rounds of the ratio within a round (the machine is shared: a round's runs see about
the same load). ``collect / train`` split the time per env step between
``collect_rollouts`` (policy, env, callback, buffer) and ``train`` (the updates).
``weights`` compares the final weights with this tree's ``SB3 PPO``'s (same seed, same
env): ``same`` bit for bit, else the largest absolute difference. (The ref tree runs its
own env, whose ToolBench-v0 task stream predates 2026-12-07, so its weights differ.)

``--big-batches`` adds FastPPO at minibatches of 256 and 512: a different setting (fewer,
larger updates, not the paper's), reported apart. ``--quick`` (2,048 steps, one round, 1
and 16 sub-envs) checks the script, not the speed.

Where the bit-for-bit ``FastPPO``'s time goes (issue #37: cProfile, ``torch.profiler``'s
operation counts and timers around each part, these settings, one torch thread, on the
machine of ``results/ppo_throughput.md`` at a load of about 1.5, on ToolBench-v0's task
stream before 2026-12-07; "before" is the code that
measured 2.19x / 2.40x at 16 / 64 sub-envs). An update runs 10 epochs of minibatches of 64,
10/64 of a minibatch per env step:

* ``train``, about 50-60 µs per env step at 16 and at 64 sub-envs (78-83 before): ~315 µs
  a minibatch (465 before), of which SB3's loss ~105 µs (149), autograd's backward
  replayed ~117 µs (173), the gradient clipping ~24 µs (27), Adam ~24 µs (38) and cutting
  the minibatch from the epoch's gather ~7 µs (10). Torch dispatches 129 top-level
  operations a minibatch (111 before): 41 that compute (10 ``sum``, 7 ``mm``, 4 ``addmm``,
  ``tanh`` and ``tanh_backward`` twice, ``sigmoid``, ``log_sigmoid``, ``exp``, ``std``,
  ``mse_loss`` and its backward, ``sigmoid_backward``, ``add_``; the clipping's
  ``_foreach_norm`` over 8 tensors, ``stack`` and ``vector_norm``; Adam's ``lerp_``,
  ``addcmul_``, ``sqrt``, ``div_`` and ``addcdiv_``), 9 views, and the passages between
  torch and numpy (``.numpy()`` is four aten calls, ``from_numpy`` one: under a µs each).
  The ~45 elementwise operations between the kernels run in numpy, ~30 µs a minibatch.
* ``collect_rollouts`` at 16 sub-envs, 35 µs per env step (40 before): the env's step 25
  µs, ``CostMetricsCallback`` 1.8, the policy's forward pass 5.1 (7.1 before), the rollout
  buffer 0.75 (1.75), SB3's info buffer 0.3, the loop 2.3. At 64 sub-envs 13.5 µs: the env
  9.3, the callback 1.15, the forward pass 1.8, the buffer 0.25, the info buffer 0.2, the
  loop 0.8.

Why it stops about there: those 41 kernels must be torch's for SB3's bits. The matrix
products (MKL's order of summation), every reduction (torch's order; a ``mean`` is its
``sum`` over the count), the transcendental functions and ``sqrt`` (SLEEF's vectorised
approximations: numpy's correctly rounded ``sqrt`` differs in the last bit) and the fused
kernels (``tanh_backward``, ``sigmoid_backward``, ``mse_loss_backward``, Adam's ``lerp_`` /
``addcmul_`` / ``addcdiv_``, which round once where numpy's two operations round twice).
On tensors of 64 rows each is 2-8 µs of dispatch around well under a µs of arithmetic, some
150-200 µs of a minibatch's ~315, whatever runs around them; and at 16 sub-envs the env
and the callback (27 µs per env step) are not the learner's. ``fused_loss=True`` computes
those in numpy too, float-close instead of bit-identical.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import machine, publish  # the one home of the machine line and output

ENV_ID = "cost_envs/ToolBench-v0"
REPO = Path(__file__).resolve().parent.parent
#: main just before the faster learner (issue #23, point 5): "today's" PPO path.
BASELINE_REF = "c3fd72f881f252f075b334c45085f7c960bfb4d0"
TARGET_RATIO = 3.0
N_ENVS = (1, 16, 64)
QUICK = {"min_steps": 2048, "repeats": 1, "envs": (1, 16)}

#: The child process: trains one learner, prints its rate and split, saves its weights.
CHILD = r"""
import json, sys, time
import torch
from stable_baselines3 import PPO
from agents.callbacks import CostMetricsCallback
from agents.vec_env import make_batched_vec_env
spec = json.loads(sys.argv[1])
if spec["learners_package"]:
    from agents.learners.common.policies import AllocatorPolicy
    from agents.learners.training import PPO_SETTINGS, quiet_logger
else:  # a tree from before agents/learners/ (issue #25), the baseline ref's
    from agents.lora.policies import AllocatorPolicy
    from agents.lora.training import PPO_SETTINGS, quiet_logger
torch.set_num_threads(1)
if spec["learner"] == "sb3":
    base = PPO
else:
    from agents.learners.ppo import FastPPO as base
seconds = {"collect": 0.0, "train": 0.0}
class Timed(base):
    def collect_rollouts(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return super().collect_rollouts(*args, **kwargs)
        finally:
            seconds["collect"] += time.perf_counter() - start
    def train(self):
        start = time.perf_counter()
        super().train()
        seconds["train"] += time.perf_counter() - start
venv = make_batched_vec_env(spec["env_id"], spec["n_envs"], seed=0)
model = Timed(AllocatorPolicy, venv, policy_kwargs={"lora_rank": None},
              **{**PPO_SETTINGS, **spec["settings"]}, **spec["extra"], seed=0, device="cpu")
quiet_logger(model)
start = time.perf_counter()
model.learn(spec["steps"], callback=CostMetricsCallback())
elapsed = time.perf_counter() - start
torch.save(model.policy.state_dict(), spec["weights"])
steps = model.num_timesteps
print(json.dumps({"rate": steps / elapsed, "collect_us": 1e6 * seconds["collect"] / steps,
                  "train_us": 1e6 * seconds["train"] / steps}))
"""


def baseline_tree(ref: str, into: Path) -> Path | None:
    """This repository's tree at ``ref``, extracted under ``into`` (``None``: no git or ref)."""
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return into


def learners(baseline: Path | None, big_batches: bool) -> dict[str, dict[str, Any]]:
    """Name -> (source tree, learner, PPO overrides, extra constructor arguments)."""
    out: dict[str, dict[str, Any]] = {}
    if baseline is not None:
        out["SB3 PPO @ ref"] = {"tree": baseline, "learner": "sb3", "settings": {},
                                "extra": {}}
    out["SB3 PPO"] = {"tree": REPO, "learner": "sb3", "settings": {}, "extra": {}}
    out["FastPPO"] = {"tree": REPO, "learner": "fast", "settings": {}, "extra": {}}
    out["FastPPO fused"] = {"tree": REPO, "learner": "fast", "settings": {},
                            "extra": {"fused_loss": True}}
    if big_batches:
        for size in (256, 512):
            out[f"FastPPO, batch_size {size}"] = {"tree": REPO, "learner": "fast",
                                                  "settings": {"batch_size": size},
                                                  "extra": {}}
    return out


def has_learners_package(tree: Path) -> bool:
    """Whether ``tree`` keeps its learners in ``agents/learners/`` (not before issue #25).

    The child imports the policy and the settings from where the tree has them: it must
    not import an older tree's missing ``agents.learners`` from this checkout (an
    editable install would resolve it here).
    """
    return (tree / "agents" / "learners").is_dir()


def run(spec: dict[str, Any], n_envs: int, steps: int, weights: Path) -> dict[str, Any]:
    """One learner's training run in a fresh process."""
    import torch

    arguments = json.dumps({"env_id": ENV_ID, "n_envs": n_envs, "steps": steps,
                            "learner": spec["learner"], "settings": spec["settings"],
                            "extra": spec["extra"], "weights": str(weights),
                            "learners_package": has_learners_package(Path(spec["tree"]))})
    env = {**os.environ, "PYTHONPATH": str(spec["tree"]), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, arguments], env=env, check=True,
                          capture_output=True, text=True, cwd=str(spec["tree"]))
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["weights"] = torch.load(weights, weights_only=True)  # tensors only
    return result


def measure(envs: tuple[int, ...], min_steps: int, repeats: int, specs: dict[str, Any],
            scratch: Path) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """Per ``n_envs``, each learner's runs, rounds alternating the order."""
    out: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for n_envs in envs:
        steps = max(2 * 512 * n_envs, min_steps)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in specs}
        for round_ in range(repeats):
            order = list(specs) if round_ % 2 == 0 else list(specs)[::-1]
            for name in order:
                runs[name].append(run(specs[name], n_envs, steps, scratch / "weights.pt"))
        out[n_envs] = runs
    return out


def _weights(a: dict[str, Any], b: dict[str, Any]) -> str:
    import torch

    if a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a):
        return "same"
    return f"{max(float((a[k] - b[k]).abs().max()) for k in a):.1e}"


def report(results: dict[int, dict[str, list[dict[str, Any]]]], min_steps: int,
           repeats: int, ref: str | None) -> str:
    """The Markdown tables."""
    first = "SB3 PPO @ ref" if ref is not None else "SB3 PPO"
    lines = [
        f"PPO on the batched {ENV_ID}: `agents.learners.training.train(..., \"ppo\")`'s model "
        "(`AllocatorPolicy` without LoRA, the paper's A.4 `PPO_SETTINGS`: n_steps 512, "
        "batch_size 64, 10 epochs; `CostMetricsCallback`; one torch thread; seed 0), "
        f"max(2 rollouts, {min_steps:,} env steps) per run, {repeats} round(s), each run a "
        "fresh process. Rates: env steps per second of wall time, median over rounds; "
        f"ratios: median over rounds of the learner's rate over {first}'s in the same "
        "round; collect / train: µs per env step in `collect_rollouts` / `train` (median); "
        "weights: the final weights against this tree's SB3 PPO's (the same env), `same` "
        "bit for bit or the largest absolute difference. "
        + (f"`SB3 PPO @ ref` runs the tree of git {ref[:7]} (main before this work: "
           "today's path), its env included: its ToolBench-v0 task stream predates "
           "2026-12-07, so its weights differ and its env steps cost a little more "
           "(collect is the smaller part of a step)." if ref is not None else
           "Today's tree (git ref) was not available: ratios are to this tree's SB3 PPO."),
        "",
        f"Machine: {machine()}",
        "",
        f"| n_envs | learner | steps/s | ratio | >= {TARGET_RATIO:.0f}x | collect / train "
        "| weights |",
        "| ---: | --- | ---: | ---: | :---: | ---: | :---: |",
    ]
    for n_envs, runs in results.items():
        base = runs[first]
        for name, mine in runs.items():
            if name.startswith("FastPPO, batch_size"):
                continue
            ratio = statistics.median(m["rate"] / b["rate"] for m, b in zip(mine, base,
                                                                           strict=True))
            meets = "" if name == first else ("yes" if ratio >= TARGET_RATIO else "**no**")
            label = f"SB3 PPO @ {ref[:7]}" if name == "SB3 PPO @ ref" and ref else name
            lines.append(f"| {n_envs} | {label} | {_median(mine, 'rate'):,.0f} | {ratio:.2f} "
                         f"| {meets} | {_split(mine)} | "
                         f"{_weights(runs['SB3 PPO'][0]['weights'], mine[0]['weights'])} |")
    extra = [(n_envs, name, runs[name], runs[first]) for n_envs, runs in results.items()
             for name in runs if name.startswith("FastPPO, batch_size")]
    if extra:
        lines += [
            "",
            "A different setting (larger minibatches: fewer updates per rollout, not the "
            f"paper's), against {first} at the paper's settings in the same round:",
            "",
            f"| n_envs | learner | steps/s | ratio to {first} (batch 64) | collect / train |",
            "| ---: | --- | ---: | ---: | ---: |",
        ]
        for n_envs, name, mine, base in extra:
            ratio = statistics.median(m["rate"] / b["rate"] for m, b in zip(mine, base,
                                                                           strict=True))
            lines.append(f"| {n_envs} | {name} | {_median(mine, 'rate'):,.0f} | {ratio:.2f} "
                         f"| {_split(mine)} |")
    return "\n".join(lines) + "\n"


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _split(runs: list[dict[str, Any]]) -> str:
    return f"{_median(runs, 'collect_us'):.0f} / {_median(runs, 'train_us'):.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--min-steps", type=int, default=16_384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs", default=",".join(map(str, N_ENVS)),
                        help="comma-separated sub-env counts (default 1,16,64)")
    parser.add_argument("--baseline-ref", default=BASELINE_REF,
                        help="git ref whose tree runs the baseline SB3 PPO ('' for none)")
    parser.add_argument("--big-batches", action="store_true",
                        help="also FastPPO at batch_size 256 and 512 (a different setting)")
    parser.add_argument("--quick", action="store_true", help="checks the script, measures little")
    parser.add_argument("--output", type=Path, help="also write the tables to this file")
    args = parser.parse_args(argv)
    try:
        envs = tuple(int(n) for n in args.envs.split(","))
    except ValueError:
        parser.error(f"--envs: expected comma-separated ints, got {args.envs!r}")
    min_steps, repeats = args.min_steps, args.repeats
    if args.quick:
        min_steps, repeats, envs = QUICK["min_steps"], QUICK["repeats"], QUICK["envs"]
    for name, value in (("min-steps", min_steps), ("repeats", repeats),
                        *(("envs", n) for n in envs)):
        if value < 1:
            parser.error(f"--{name}: expected ints >= 1, got {value}")
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "baseline").mkdir()
        tree = (baseline_tree(args.baseline_ref, Path(scratch) / "baseline")
                if args.baseline_ref else None)
        specs = learners(tree, args.big_batches)
        results = measure(envs, min_steps, repeats, specs, Path(scratch))
    publish(report(results, min_steps, repeats, args.baseline_ref if tree else None),
            args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
