"""Reproduce the budget-aware routing results of issue #4 into benchmarks/results/.

Three parts, each a function ``report(out_dir, scale, ...)`` in ``agents``:

* ``corl``: CORL's budget-tier controller on ExpertRouting-v0 (``agents.routing.corl``):
  ``corl_tiers.md/.json``, ``pareto_corl.png``;
* ``bopo``: BoPO against its baselines on AgenticRouting-v0, per profile
  (``experiments.bopo``): ``bopo.md/.json``, ``pareto_bopo_<profile>.png``;
* ``traces``: routers on the real RouteLLM GSM8K outcomes, TraceRouting-v0
  (``experiments.traces``): ``trace_routing.md/.json`` and its frontier PNG. It needs
  the RouteLLM data (``--data``, default ``../shared/data/routellm`` beside the
  repository) and is skipped, with the reason printed, when it is absent.

``routing.md`` records what ran, how long each part took and on what machine.

Usage: ``python benchmarks/routing.py [--scale smoke|default] [--parts corl bopo traces]``
(``make reproduce`` runs it at the default scale after ``cost-envs reproduce``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PARTS = ("corl", "bopo", "traces")


def _machine() -> str:
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs, "
            f"Python {platform.python_version()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=("smoke", "default"), default="default")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "routellm",
                        help="folder with the RouteLLM CSVs (read in place, never copied)")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)  # small networks: one thread each, parts run one after another
    args.out.mkdir(parents=True, exist_ok=True)
    timings: list[tuple[str, str]] = []
    for part in args.parts:
        start = time.perf_counter()
        if part == "corl":
            from agents.routing.corl import report as corl_report

            corl_report(args.out, args.scale)
        elif part == "bopo":
            from experiments.bopo import report as bopo_report

            bopo_report(args.out, args.scale)
        else:
            if not args.data.is_dir():
                reason = f"skipped: RouteLLM data not found at {args.data}"
                print(f"traces: {reason}", file=sys.stderr)
                timings.append((part, reason))
                continue
            from experiments.traces import report as trace_report

            trace_report(args.out, args.scale, args.data)
        elapsed = time.perf_counter() - start
        print(f"{part}: {elapsed:.0f} s", file=sys.stderr)
        timings.append((part, f"{elapsed:.0f} s"))
    lines = ["# Budget-aware routing benchmarks (issue #4)", "",
             f"`python benchmarks/routing.py --scale {args.scale}` on {_machine()}, "
             "one torch thread.", "", "| Part | Wall time |", "|---|---|"]
    lines += [f"| {part} | {what} |" for part, what in timings]
    from agents.files import write_text_atomic

    if set(args.parts) == set(PARTS):  # a partial run leaves the full run's record alone
        write_text_atomic(args.out / "routing.md", "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
