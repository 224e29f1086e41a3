"""Memory of the native batched envs: the task queue per sub-env and the peak at reset.

Usage: ``python benchmarks/vector_memory.py [--num-envs N ...] [--output FILE.md]``

For every id with a batched implementation and each N (default 1024 and 4096), with
``tracemalloc`` (numpy reports its arrays' buffers to it): the bytes the task queue holds
per sub-env (``env.unwrapped.blocks``: each sub-env's block of ``task_block`` tasks), what
the env holds after ``reset(seed=0)`` (the queue and the state arrays) and the peak during
that reset (the reset draws every sub-env's first block, the largest refill there is),
per sub-env and in total. The env's construction comes before the measurement.
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import gymnasium as gym

import cost_envs  # noqa: F401  (registers the ids)
from cost_envs.registration import VECTOR_IDS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import machine, publish  # the one home of the machine line and output

SIZES = (1024, 4096)


def reset_memory(env_id: str, num_envs: int) -> dict[str, float]:
    """Bytes of the queue, held after the first reset and peak during it (tracemalloc)."""
    env: Any = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        env.reset(seed=0)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    queue = sum(array.nbytes for array in env.unwrapped.blocks)
    env.close()
    return {"queue": float(queue), "held": float(held - start), "peak": float(peak - start)}


def report(rows: dict[tuple[str, int], dict[str, float]]) -> str:
    """The Markdown table."""
    lines = [
        "Memory of the native batched envs (`gym.make_vec(id, N, vectorization_mode="
        "\"vector_entry_point\")`), measured with `tracemalloc` around the first "
        "`reset(seed=0)`, which draws every sub-env's block of tasks: the queue (each "
        "sub-env's block), what the env holds after it and the peak during it.",
        "",
        f"Machine: {machine()}",
        "",
        "| env | N | queue per sub-env, kB | held per sub-env, kB | peak per sub-env, kB "
        "| peak, MB |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (env_id, n), row in rows.items():
        lines.append(f"| {env_id} | {n:,} | {row['queue'] / n / 1e3:.1f} | "
                     f"{row['held'] / n / 1e3:.1f} | {row['peak'] / n / 1e3:.1f} | "
                     f"{row['peak'] / 1e6:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--output", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    for n in args.num_envs:
        if n < 1:
            parser.error(f"--num-envs: expected ints >= 1, got {n}")
    rows = {(env_id, n): reset_memory(env_id, n)
            for env_id in sorted(VECTOR_IDS) for n in args.num_envs}
    publish(report(rows), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
