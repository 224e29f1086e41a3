"""FastPPO's fused path against its exact one at the converged end: FlightPlanner-v1's PPO.

Usage: ``python benchmarks/ppo_fused_converged.py [--seeds S] [--exact-timing SEED ...]
[--scale default|smoke] [--out DIR] [--output FILE.md]``

``benchmarks/ppo_fused_curves.py`` compares the two paths' training curves on ToolBench-v0
at 98k steps. This compares them where the converged report reads them
(:mod:`experiments.converged`): FlightPlanner-v1's PPO row (the paper's A.4 settings, 16
batched sub-envs, 2M env steps), scored after its last update on the report's 10,000
validation tasks.

* **Fused runs**: each seed's PPO run on FastPPO's fused path (``fused_loss=True``), made
  and kept exactly as ``python -m experiments converged --ppo-path fused --rows ppo``
  makes them (``<out>/converged_runs_fused/ppo_seed<s>.json``: per-task returns, wall
  time, process CPU time), then that report (``converged_FlightPlanner-v1_fused.md`` and
  ``.csv``) written from them. A kept run is reused, never trained again.
* **Exact runs**: the committed ones (``<out>/converged_runs/ppo_seed<s>.json``, FastPPO's
  exact path: SB3's updates bit for bit), read, never trained or rewritten here.
* **Agreement**, paired over seeds (seed ``s`` of both paths starts from the same network
  and training tasks) and tasks (the same 10,000): per seed, fused - exact in mean return
  [95% bootstrap over tasks, :func:`cost_envs.metrics.bootstrap_mean_ci`] and in share of
  the rule-to-planner gap [Fieller interval, :func:`cost_envs.metrics.bootstrap_gap_closed`,
  the difference's share being the share of ``rule + fused - exact``]; pooled, the same
  with seeds and tasks resampled together. Beside them, the exact seeds' own spread.
* **Time**: each fused run's wall and process CPU time (``time.process_time``, the fairer
  figure on a shared machine: it does not count the time another process held the core)
  and the 1-minute load average before and after it. The committed exact runs kept their
  wall time only; ``--exact-timing SEED ...`` trains those exact seeds again here (one at
  a time, in this process, never written over the committed files), checks that their
  per-task returns are the committed ones to the last kept digit, and records their wall
  and CPU time under the same conditions as the fused runs. These timings are kept in
  ``<out>/kept_units/ppo_fused_converged/`` (git-ignored) so an interrupted run resumes.

Runs one training at a time; give it a core (``OMP_NUM_THREADS=1``, one torch thread).
``--scale smoke`` (1,024 steps, 30 tasks; needs the exact smoke runs in ``--out``, e.g.
from ``python -m experiments converged --scale smoke --rows ppo --out DIR``) checks the
script, not the agreement.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(REPO)]  # run from a checkout
# experiments first: it fixes torch's CPU kernels before torch is imported (as the
# committed runs were made)
from experiments.budgets import runner as budgets  # noqa: E402
from experiments.budgets.settings import on_path  # noqa: E402
from experiments.converged import runner as converged  # noqa: E402
from experiments.converged.settings import ENV_ID, FIXED_FILE, OUT, SCALES, Scale  # noqa: E402
from experiments.shared.common import machine  # noqa: E402
from experiments.shared.gaps import decode_scores, encode_scores  # noqa: E402
from experiments.shared.kept import UNITS, keep, read_kept, run_file  # noqa: E402
from experiments.shared.task_sets import DEFAULT_TASKS  # noqa: E402

ROW = "ppo"
#: Where the exact reruns' timings (and every run's load) are kept, in ``--out``.
TIMINGS = f"{UNITS}/ppo_fused_converged"


def load() -> float:
    """The 1-minute load average (``nan`` where the system has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def exact_runs(out: Path, scale: Scale) -> np.ndarray:
    """The kept exact runs' per-task returns, seeds x tasks.

    Raises:
        ValueError: A seed's run is missing (or of other settings).
    """
    folder = out / converged.runs_folder(DEFAULT_TASKS)
    rows = []
    for seed in range(scale.seeds):
        kept = read_kept(run_file(folder, ROW, seed), scale.settings())
        if kept is None:
            raise ValueError(f"{run_file(folder, ROW, seed)}: no exact run kept; make it with "
                             "python -m experiments converged --rows ppo first")
        rows.append(decode_scores(kept["returns"]))
    return np.array(rows)


def fixed_rows(out: Path, scale: Scale) -> tuple[np.ndarray, np.ndarray, str]:
    """The rule's and the planner's per-task returns (the exact report's fixed file)."""
    path = out / converged.runs_folder(DEFAULT_TASKS) / FIXED_FILE
    kept = read_kept(path, {**scale.settings(), "rule_tasks": scale.rule_tasks})
    if kept is None:
        raise ValueError(f"{path}: no fixed rows kept; run the exact report first")
    rows = kept["rows"]
    return (decode_scores(rows[kept["rule"]]["returns"]),
            decode_scores(rows["planner"]["returns"]), rows[kept["rule"]]["label"])


def fused_run(out: Path, scale: Scale, seed: int, timings: dict[str, Any],
              log: Any) -> dict[str, Any]:
    """Seed ``seed``'s fused run as the converged runner keeps it: read, or trained and kept."""
    path = run_file(out / converged.runs_folder(DEFAULT_TASKS, fused=True), ROW, seed)
    kept = read_kept(path, on_path(scale.settings(), fused=True))
    if kept is not None:
        return kept
    log(f"fused seed {seed}: training")
    before = load()
    content = converged.train_row(budgets.Job(ENV_ID, ROW, seed, scale.budget_scale(),
                                              fused=True))
    keep(path, content)
    timings[f"fused {seed}"] = {"load_before": before, "load_after": load()}
    log(f"fused seed {seed}: {content['seconds']:.0f} s wall, {content['cpu_seconds']:.0f} s CPU")
    return content


def exact_rerun(scale: Scale, seed: int, committed: np.ndarray, timings: dict[str, Any],
                log: Any) -> dict[str, Any]:
    """Seed ``seed``'s exact run trained again for its CPU time; checked against the kept one."""
    name = f"exact {seed}"
    if name in timings:
        return dict(timings[name])
    log(f"exact seed {seed}: training again for its CPU time")
    before = load()
    result = budgets.run_job(budgets.Job(ENV_ID, ROW, seed, scale.budget_scale()))
    returns = decode_scores(encode_scores(result["curve"][-1]["returns"]))
    timings[name] = {"seconds": result["seconds"], "cpu_seconds": result["cpu_seconds"],
                     "load_before": before, "load_after": load(),
                     "same_returns": bool(np.array_equal(returns, committed))}
    log(f"exact seed {seed}: {result['seconds']:.0f} s wall, {result['cpu_seconds']:.0f} s CPU, "
        f"returns {'the same' if timings[name]['same_returns'] else 'NOT the same'}")
    return dict(timings[name])


def cell(values: np.ndarray, resamples: int, sign: str = "+") -> str:
    """``mean [low, high]`` (:func:`cost_envs.metrics.bootstrap_mean_ci`), 4 decimals.

    ``sign``: ``"+"`` for a difference (its sign always shown), ``""`` for a return.
    """
    from cost_envs.metrics import bootstrap_mean_ci

    mean, low, high = bootstrap_mean_ci(values, n_resamples=resamples)
    return f"{mean:{sign}.4f} [{low:{sign}.4f}, {high:{sign}.4f}]"


def share_cell(values: np.ndarray, rule: np.ndarray, planner: np.ndarray) -> str:
    """The share of the gap ``values`` close, with Fieller's interval, 3 decimals."""
    from cost_envs.metrics import bootstrap_gap_closed

    point, low, high = bootstrap_gap_closed(values, rule, planner)
    return f"{point:+.3f} [{low:+.3f}, {high:+.3f}]"


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.2f}"


def _loads(entry: dict[str, Any] | None) -> str:
    if entry is None or "load_before" not in entry:
        return "-"
    return f"{entry['load_before']:.1f} / {entry['load_after']:.1f}"


def report(exact: np.ndarray, fused: np.ndarray, rule: np.ndarray, planner: np.ndarray,
           rule_label: str, scale: Scale, exact_seconds: list[float],
           fused_kept: list[dict[str, Any]], timings: dict[str, Any]) -> str:
    """The Markdown page: agreement per seed and pooled, then the time per seed."""
    r = scale.resamples
    seeds, tasks = exact.shape
    difference = fused - exact
    means = exact.mean(axis=1)
    lines = [
        f"# FastPPO fused against exact at the converged end: {ENV_ID}, PPO", "",
        f"PPO (the paper's A.4 settings, 16 batched sub-envs) trained {seeds} seeds x "
        f"{scale.timesteps:,} env steps on FastPPO's exact path (SB3's updates bit for bit: "
        "the committed `converged_runs/ppo_seed*.json`) and on its fused path "
        "(`fused_loss=True`, float-close: `converged_runs_fused/ppo_seed*.json`), each "
        f"scored after its last update on the same {tasks:,} validation tasks (task seed 0). "
        "Seed s of both paths starts from the same network and training tasks. "
        "Differences are fused - exact, paired over seeds and tasks: mean Eq. 1 return "
        f"[95% bootstrap interval, {r} resamples; per seed over tasks, pooled over seeds and "
        "tasks together] and share of the gap from the best fixed row "
        f"({rule_label}, {rule.mean():.4f}) to the planner ({planner.mean():.4f}) "
        "[Fieller's interval]. Made by `benchmarks/ppo_fused_converged.py`.", "",
        f"Machine: {machine()}. One training at a time, one torch thread, "
        "`nice -n 19`, on a machine shared with other work: the load is given per run.", "",
        "## Agreement", "",
        "| seed | exact return | fused return | fused - exact, return | fused - exact, "
        "share of the gap |",
        "| --- | ---: | ---: | ---: | ---: |"]
    for seed in range(seeds):
        lines.append(f"| {seed} | {exact[seed].mean():.4f} | {fused[seed].mean():.4f} | "
                     f"{cell(difference[seed], r)} | "
                     f"{share_cell(rule + difference[seed], rule, planner)} |")
    lines.append(f"| **pooled** | {cell(exact, r, '')} | {cell(fused, r, '')} | "
                 f"{cell(difference, r)} | {share_cell(rule + difference, rule, planner)} |")
    from cost_envs.metrics import bootstrap_mean_ci

    _, low, high = bootstrap_mean_ci(difference, n_resamples=r)
    verdict = ("contains 0: no difference between the paths is resolved" if low <= 0 <= high
               else "excludes 0: the paths differ")
    lines += [
        "",
        f"The pooled difference's interval (seeds and tasks resampled together) {verdict}. "
        "Per seed the two paths start alike and part as float rounding compounds (on "
        "ToolBench-v0 the curves part after 4 to 9 rollouts, `ppo_fused_curves.md`), so at "
        "2M steps seed s's two runs are two runs of one learner: a per-seed difference "
        "resolved over the tasks says how far two runs land apart, as the exact seeds "
        "land apart among themselves; the pooled interval, which resamples the seeds, is "
        "the test of agreement.", "",
        f"Share of the gap: exact {share_cell(exact, rule, planner)}, fused "
        f"{share_cell(fused, rule, planner)}. The exact seeds' means span "
        f"{means.min():.4f} to {means.max():.4f} ({means.max() - means.min():.4f}); the fused "
        f"seeds' {fused.mean(axis=1).min():.4f} to {fused.mean(axis=1).max():.4f}.", "",
        "## Time per seed", "",
        "Minutes of one 2M-step seed (training and the scoring on the tasks). Wall: "
        "`time.perf_counter`; CPU: the process's `time.process_time` (not counting the "
        "time other processes held the core). Exact, committed: the kept runs' wall time "
        "(as the converged runner recorded it; no CPU time, nor how many ran at once); "
        "exact, again: the "
        "same seed trained again here, one at a time like the fused runs, its per-task "
        "returns checked against the committed ones. Load: the 1-minute load average "
        "before / after the run.", "",
        "| seed | exact, committed: wall | exact, again: wall | CPU | load | same returns "
        "| fused: wall | CPU | load |",
        "| --- | ---: | ---: | ---: | ---: | :---: | ---: | ---: | ---: |"]
    for seed in range(seeds):
        again = timings.get(f"exact {seed}")
        kept = fused_kept[seed]
        same = "-" if again is None else ("yes" if again["same_returns"] else "**no**")
        lines.append(
            f"| {seed} | {_minutes(exact_seconds[seed])} | "
            f"{_minutes(None if again is None else again['seconds'])} | "
            f"{_minutes(None if again is None else again['cpu_seconds'])} | {_loads(again)} | "
            f"{same} | {_minutes(kept['seconds'])} | {_minutes(kept.get('cpu_seconds'))} | "
            f"{_loads(timings.get(f'fused {seed}'))} |")
    again = [timings[f"exact {seed}"] for seed in range(seeds) if f"exact {seed}" in timings]
    fused_cpu = [kept["cpu_seconds"] for kept in fused_kept if "cpu_seconds" in kept]
    summary = (f"Mean per seed: exact, committed {np.mean(exact_seconds) / 60:.2f} min of "
               f"wall time; fused {np.mean([k['seconds'] for k in fused_kept]) / 60:.2f} "
               "min of wall time")
    if fused_cpu:
        summary += f", {np.mean(fused_cpu) / 60:.2f} min of CPU"
    if again:
        exact_cpu = float(np.mean([entry["cpu_seconds"] for entry in again]))
        summary += (f"; exact again ({len(again)} seed{'s' if len(again) > 1 else ''}) "
                    f"{np.mean([entry['seconds'] for entry in again]) / 60:.2f} min of wall "
                    f"time, {exact_cpu / 60:.2f} min of CPU")
        paired = [(timings[f"exact {s}"]["cpu_seconds"], fused_kept[s]["cpu_seconds"])
                  for s in range(seeds) if f"exact {s}" in timings
                  and "cpu_seconds" in fused_kept[s]]
        if paired:
            ratio = np.mean([e / f for e, f in paired])
            summary += (f"; exact / fused CPU time on the seeds run both ways here: "
                        f"{ratio:.2f}")
    lines += ["", summary + ".", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=list(SCALES), default="default")
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds 0..S-1 (default: the scale's, 5)")
    parser.add_argument("--exact-timing", type=int, nargs="*", default=[],
                        help="exact seeds to train again for their CPU time")
    parser.add_argument("--out", type=Path, default=OUT,
                        help=f"the converged report's folder (default {OUT})")
    parser.add_argument("--output", type=Path, help="also write the page to this file")
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    if args.seeds is not None:
        if args.seeds < 1:
            parser.error(f"--seeds: expected an int >= 1, got {args.seeds}")
        scale = dataclasses.replace(scale, seeds=args.seeds)
    bad = [seed for seed in args.exact_timing if not 0 <= seed < scale.seeds]
    if bad:
        parser.error(f"--exact-timing: expected seeds in 0..{scale.seeds - 1}, got {bad}")

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    from experiments.shared.common import check_writable

    out = check_writable(args.out)
    exact = exact_runs(out, scale)  # before any training: the exact runs must be there
    rule, planner, rule_label = fixed_rows(out, scale)
    timing_file = out / TIMINGS / f"{args.scale}.json"
    timings: dict[str, Any] = (json.loads(timing_file.read_text(encoding="utf-8"))
                               if timing_file.exists() else {})
    fused_kept = []
    for seed in range(scale.seeds):  # one training at a time, fused then exact
        fused_kept.append(fused_run(out, scale, seed, timings, log))
        keep(timing_file, timings)
        if seed in args.exact_timing:
            exact_rerun(scale, seed, exact[seed], timings, log)
            keep(timing_file, timings)
    # the fused report, from the kept runs (nothing left to train)
    for path in converged.report(out, scale, jobs=1, rows=(ROW,), log=log, fused=True):
        log(f"wrote {path}")
    fused = np.array([decode_scores(kept["returns"]) for kept in fused_kept])
    folder = out / converged.runs_folder(DEFAULT_TASKS)
    exact_seconds = [json.loads(run_file(folder, ROW, seed).read_text(encoding="utf-8"))
                     ["seconds"] for seed in range(scale.seeds)]
    page = report(exact, fused, rule, planner, rule_label, scale, exact_seconds, fused_kept,
                  timings)
    print(page)
    if args.output is not None:
        from agents.files import write_files_atomic

        write_files_atomic(args.output.parent, {args.output.name: page})
    return 0


if __name__ == "__main__":
    sys.exit(main())
