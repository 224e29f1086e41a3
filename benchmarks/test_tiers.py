"""How long the test tiers take: what the README and docs/index.md quote (issue #36).

Usage: ``python benchmarks/test_tiers.py [--all] [--repeats K] [--output FILE.md]``

Clones the repository's ``HEAD`` beside it (so that ``../shared`` is the same data) and runs
``make test`` there, with this checkout's venv: a fresh clone's first run (no
``__pycache__``: every module is compiled from scratch), then ``make lint`` (ruff and a
cold mypy cache: every module type-checked from scratch), ``make test`` and, with
``--all``, ``make test-all`` again, as a developer meets them after that. One line per
run: what pytest printed, wall time and CPU time of the child processes (every
pytest-xdist worker and every interpreter the tests start). Run it on an idle machine:
other work moves the wall time, the CPU time much less. The speed of a shared virtual
machine drifts as well (the same tree's fast tier took 97 to 148 s within an hour here),
so ``--repeats K`` runs the warm ``make test`` K times in a row and the table gives their
median beside each run.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The environment the tiers run in: taken before :mod:`experiments` is imported, since it
#: pins torch's and MKL's slowest kernels for the experiments (not for the tests).
ENVIRON = dict(os.environ)
sys.path.insert(0, str(ROOT))

from experiments.shared.common import cpu_model  # noqa: E402


def run_make(target: str, clone: Path, venv: Path) -> tuple[str, float, float]:
    """``(pytest's summary line or "ok", wall seconds, CPU seconds of the children)``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # -o install: the venv is this checkout's, installed already (its editable install
    # points here); PYTHONPATH makes every interpreter the tests start import the clone
    env = {**ENVIRON, "PYTHONPATH": str(clone)}
    done = subprocess.run(["make", "-o", "install", target, f"VENV={venv}"], cwd=clone,
                          env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = next((line for line in reversed(done.stdout.splitlines())
                    if re.search(r"\d+ (passed|failed)", line)), "ok")
    if done.returncode != 0:
        # the row keeps what pytest printed (its failures counted); the failures' own
        # report goes to stderr, so a flaky test can be read after the clone is gone
        print(f"make {target} failed:\n{done.stdout[-12000:]}{done.stderr[-2000:]}",
              file=sys.stderr)
        summary = "make failed" if summary == "ok" else summary
    return summary.strip("= "), wall, cpu


def main(argv: list[str] | None = None) -> int:
    """Time the tiers in a fresh clone and print (or write) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--all", action="store_true", help="also time the whole suite")
    parser.add_argument("--repeats", type=int, default=1,
                        help="warm make test runs, one after another (default 1)")
    parser.add_argument("--output", type=Path, help="write the table here (Markdown)")
    args = parser.parse_args(argv)
    venv = ROOT / ".venv"
    if not (venv / "bin" / "python").is_file():
        raise SystemExit(f"no venv at {venv}: run make install first")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    if args.repeats < 1:
        parser.error(f"--repeats: expected an integer >= 1, got {args.repeats}")
    tiers = ["test"] * args.repeats + (["test-all"] if args.all else [])
    rows, warm = [], []
    # beside this checkout, so that the tests find ../shared's data as here
    clone = Path(tempfile.mkdtemp(prefix="tiers-", dir=ROOT.parent))
    try:
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        # the first make test compiles every module; the lint row after it type-checks on
        # a cold mypy cache (make test-all runs mypy beside the tests, warm by then)
        for run, target in (("fresh clone", "test"), ("again", "lint"),
                            *(("again", tier) for tier in tiers)):
            summary, wall, cpu = run_make(target, clone, venv)
            rows.append(f"| `make {target}` | {run} | {summary} | {wall:.0f} | {cpu:.0f} |")
            if (run, target) == ("again", "test"):
                warm.append((wall, cpu))
    finally:
        shutil.rmtree(clone, ignore_errors=True)
    text = "\n".join([
        "# How long the test tiers take (issue #36)", "",
        f"`python benchmarks/test_tiers.py{' --all' if args.all else ''}"
        f"{f' --repeats {args.repeats}' if args.repeats > 1 else ''}` at {commit} on "
        f"{platform.system()} {platform.machine()}, {cpu_model()}, {os.cpu_count()} logical "
        f"CPUs, Python {platform.python_version()}, {os.cpu_count()} pytest-xdist workers. "
        "`make test` runs ruff, then the fast tier; `make lint` ruff and mypy; `make test-all` "
        "ruff, then mypy beside the whole suite. "
        "Wall and CPU seconds; CPU counts every process.", "",
        "| command | run | pytest | wall (s) | CPU (s) |", "| --- | --- | --- | ---: | ---: |",
        *rows, ""] + ([
        f"Median of the {len(warm)} warm `make test` runs: "
        f"{statistics.median(w for w, _ in warm):.0f} s of wall time, "
        f"{statistics.median(c for _, c in warm):.0f} s of CPU "
        f"(range {min(w for w, _ in warm):.0f} to {max(w for w, _ in warm):.0f} s).", ""]
        if len(warm) > 1 else []))
    if args.output:
        args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
