"""How long the test tiers take: what the README and docs/index.md quote (issue #36).

Usage: ``python benchmarks/test_tiers.py [--all] [--output FILE.md]``

Runs the fast tier as ``make test`` runs it (``pytest -m "not slow" -n auto --dist
loadscope``, ruff and mypy left out: ``make lint`` times them), and with ``--all`` the
whole suite as ``make test-all`` does, each in a child process, and writes one line per
tier: tests passed, wall time, CPU time of the child processes (every pytest-xdist worker
counted) and the machine. Run it on an idle machine: other work moves the wall time, the
CPU time much less.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.shared.common import machine  # noqa: E402

TIERS = {"fast (`make test`)": ["-m", "not slow"], "all (`make test-all`)": []}


def run_tier(marks: list[str]) -> tuple[str, float, float]:
    """``(pytest's summary line, wall seconds, CPU seconds of the children)``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *marks, "-n", "auto", "--dist", "loadscope"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = next((line for line in reversed(done.stdout.splitlines())
                    if re.search(r"\d+ (passed|failed)", line)), "no summary")
    if done.returncode != 0:
        failed = [line for line in done.stdout.splitlines()
                  if line.startswith(("FAILED", "ERROR"))]
        raise SystemExit(f"pytest {' '.join(marks)} failed: {summary}\n" + "\n".join(failed))
    return summary.strip("= "), wall, cpu


def main(argv: list[str] | None = None) -> int:
    """Time the tiers and print (or write) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--all", action="store_true", help="also time the whole suite")
    parser.add_argument("--output", type=Path, help="write the table here (Markdown)")
    args = parser.parse_args(argv)
    rows = []
    for name, marks in TIERS.items():
        if marks or args.all:
            summary, wall, cpu = run_tier(marks)
            rows.append(f"| {name} | {summary} | {wall:.0f} | {cpu:.0f} |")
    text = "\n".join([
        "# How long the test tiers take (issue #36)", "",
        f"`python benchmarks/test_tiers.py{' --all' if args.all else ''}` on {machine()}, "
        f"{os.cpu_count()} pytest-xdist workers (`-n auto --dist loadscope`), lint not "
        "included. Wall and CPU seconds; CPU counts every worker.", "",
        "| tier | pytest | wall (s) | CPU (s) |", "| --- | --- | ---: | ---: |", *rows, ""])
    if args.output:
        args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
