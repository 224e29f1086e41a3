"""What running the experiments' units as Ray tasks costs against local processes (issue #40).

Usage: ``python benchmarks/scheduler_overhead.py [--units N] [--repeats R]
[--skip-experiment] [--output FILE.md]``

Two measurements, each on 1 and 2 workers, through the one scheduler
(:func:`experiments.shared.scheduler.run_units`): local processes (``--jobs``) and a
one-machine Ray cluster of as many CPUs (``--address local``).

``--jobs 1`` runs the units in the driver's own process, as the command does.

* **Per unit**: ``N`` units that sleep 50 ms each (``time.sleep``: no import in the
  worker); the wall time less the sleeping (``N x 50 ms / workers``), over ``N``. Local
  processes start a pool on every call (each experiment's call pays it), Ray joins its
  cluster once per command (the first, start-up call did). **Start-up**: one empty unit
  per worker (the pool's spawn; ``ray.init`` and the first tasks' workers).
* **A smoke experiment**: ``budgets`` at the smoke scale on ToolBench-v0's ``ppo`` and
  ``lora-ppo`` rows (4 units of about 10 s): its wall time, and Ray's over the local
  processes'.

The machine line gives the load average at the end: on a shared machine the ratios move
with it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from throughput import machine, publish  # noqa: E402  # the one home of the machine line

from experiments.shared.scheduler import run_units  # noqa: E402

SLEEP = 0.05
ENVS = {"cost_envs/ToolBench-v0": ("ppo", "lora-ppo")}


def _timed(units: list[float], workers: int, address: str | None) -> float:
    start = time.perf_counter()
    run_units(time.sleep, units, jobs=workers, address=address)
    return time.perf_counter() - start


def _experiment(workers: int, address: str | None) -> float:
    from experiments.budgets import runner as budgets

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        budgets.report(Path(out), "smoke", jobs=workers, envs=ENVS, address=address,
                       log=lambda _: None)
        return time.perf_counter() - start


def measure(units: int, experiment: bool, repeats: int
            ) -> list[tuple[str, int, float, float, float | None]]:
    """Per backend and workers: start-up, per-unit overhead, the experiment's wall time.

    Each the best of ``repeats`` rounds.
    """
    import ray

    from experiments.budgets import runner  # noqa: F401  # imported before any timing

    best: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeats):  # rounds interleave the backends: the load hits each alike
        for workers in (1, 2):
            for address in (None, "local"):
                start_up = _timed([0.0] * workers, workers, address)  # --jobs 1: this process
                wall = _timed([SLEEP] * units, workers, address)
                per_unit = (wall - units * SLEEP / workers) / units
                seconds = _experiment(workers, address) if experiment else float("nan")
                if address:
                    ray.shutdown()
                name = "Ray, local cluster" if address else "processes (--jobs)"
                cells = [start_up, per_unit, seconds]
                old = best.setdefault((name, workers), cells)
                best[name, workers] = [min(a, b) for a, b in zip(old, cells, strict=True)]
    return [(name, workers, start_up, per_unit, None if seconds != seconds else seconds)
            for (name, workers), (start_up, per_unit, seconds) in best.items()]


def render(rows: list[tuple[str, int, float, float, float | None]], units: int,
           repeats: int) -> str:
    """The Markdown table, and Ray's ratio to the processes' at each number of workers."""
    lines = ["# Units as Ray tasks against local processes (issue #40)", "",
             f"{units} units of {SLEEP * 1000:.0f} ms per measurement; the smoke experiment: "
             "`budgets` on ToolBench-v0's ppo and lora-ppo rows, 2 seeds (4 units). "
             "Per unit: the wall time less the sleeping, over the units. Each cell is the "
             f"best of {repeats} rounds. Local processes start their pool in every "
             "call (the experiment's time includes it); Ray joins its cluster once per "
             "command (the start-up column, not in the experiment's time). `--jobs 1` runs "
             "in the driver's process.", "",
             f"Machine: {machine()}.", "",
             "| backend | workers | start-up | per unit | smoke experiment |",
             "|---|---:|---:|---:|---:|"]
    for name, workers, start_up, per_unit, seconds in rows:
        lines.append(f"| {name} | {workers} | {start_up:.1f} s | {per_unit * 1000:.0f} ms | "
                     + ("-" if seconds is None else f"{seconds:.1f} s") + " |")
    by = {(name.startswith("Ray"), workers): seconds for name, workers, _, _, seconds in rows}
    if all(value is not None for value in by.values()):
        ratios = ", ".join(f"{workers}: {by[True, workers] / by[False, workers]:.2f}"
                           for workers in (1, 2))
        lines += ["", f"Ray's wall time over the processes' on the experiment, by workers: "
                      f"{ratios}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-experiment", action="store_true")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    publish(render(measure(args.units, not args.skip_experiment, args.repeats), args.units,
                   args.repeats), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
