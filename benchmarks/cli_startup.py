"""How long the ``cost-envs`` command takes to answer an argument or file error (issue #26).

Usage: ``python benchmarks/cli_startup.py [--repeats R] [--before TREE] [--quick]
[--output FILE.md]``

Each case runs ``python -m agents.cli ARGS`` in a fresh process (the interpreter's start-up
and every import included, as a user waits for it), ``R`` times, interleaved (every case
once per round) after an untimed run that fills the bytecode cache (as installing
does); the table gives the median wall time and whether it is under the issue's
1.5 s target. ``--before TREE`` times the same cases on another checkout (its root first on
``PYTHONPATH``, e.g. the main branch before the change) in a second column. The cases:
a missing ``--model`` directory, a config file that is not valid YAML, a missing config
file, an ``--out`` that is a file, a mistyped env id, a mistyped subcommand, and ``list``.
``tests/test_cli_startup.py`` asserts the behaviour (no torch imported before these
errors); this script only times it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import machine, publish  # the one home of the machine line and output

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 1.5
ENV = "cost_envs/ToolBench-v0"


def cases(tmp: Path) -> dict[str, list[str]]:
    """Each case's name -> the command's arguments (files made in ``tmp``)."""
    (tmp / "bad.yaml").write_text("learning_rate: [\n")
    (tmp / "a-file").write_text("x")
    train = ["train", "--env", ENV, "--method", "ppo"]
    return {
        "evaluate --model <missing dir>": ["evaluate", "--env", ENV, "--model",
                                           str(tmp / "missing")],
        "train --config <not YAML>": [*train, "--config", str(tmp / "bad.yaml"),
                                      "--out", str(tmp / "out")],
        "train --config <missing file>": [*train, "--config", str(tmp / "missing.yaml"),
                                          "--out", str(tmp / "out")],
        "train --out <a file>": [*train, "--out", str(tmp / "a-file")],
        "train --env <mistyped id>": ["train", "--env", "cost_envs/ToolBnch-v0", "--method",
                                      "ppo", "--out", str(tmp / "out")],
        "evalute (mistyped subcommand)": ["evalute"],
        "list": ["list"],
    }


def wall_time(tree: Path, argv: list[str], pycache: Path) -> float:
    """Seconds ``python -m agents.cli argv`` takes with ``tree`` first on the path.

    Bytecode is cached (in ``pycache``, not in the trees), as for an installed package,
    whatever ``PYTHONDONTWRITEBYTECODE`` says here: compiling every module on each run
    would add about 0.4 s that a user does not wait for.
    """
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
           "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1",
           "PYTHONPYCACHEPREFIX": str(pycache / tree.name)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "agents.cli", *argv], env=env, cwd=tree,
                   capture_output=True, timeout=600, check=False)
    return time.perf_counter() - start


def measure(trees: list[Path], repeats: int) -> dict[str, list[list[float]]]:
    """Each case's times per tree, rounds interleaved across cases and trees."""
    with tempfile.TemporaryDirectory() as tmp:
        argvs = cases(Path(tmp))
        times = {name: [[] for _ in trees] for name in argvs}
        pycache = Path(tmp) / "pycache"
        for tree in trees:  # untimed: fills the bytecode cache, as an install does
            for argv in argvs.values():
                wall_time(tree, argv, pycache)
        for _ in range(repeats):
            for name, argv in argvs.items():
                for i, tree in enumerate(trees):
                    times[name][i].append(wall_time(tree, argv, pycache))
    return times


def report(times: dict[str, list[list[float]]], trees: list[Path], repeats: int) -> str:
    """The Markdown table of median wall times."""
    before = len(trees) > 1
    header = "| case | median s | < 1.5 s |" + (" before (median s) |" if before else "")
    rule = "| --- | ---: | :---: |" + (" ---: |" if before else "")
    lines = [
        f"Wall time of `python -m agents.cli ARGS` in a fresh process until it exits "
        f"(interpreter start-up and imports included, bytecode cached as for an installed "
        f"package), median of {repeats} interleaved runs after an untimed one; target "
        f"under {TARGET_SECONDS} s for an argument or file error (issue #26)."
        + (f" Before: the same on {trees[1]}." if before else ""),
        "",
        f"Machine: {machine()}",
        "",
        header,
        rule,
    ]
    for name, per_tree in times.items():
        median = statistics.median(per_tree[0])
        row = f"| `{name}` | {median:.2f} | {'yes' if median < TARGET_SECONDS else 'no'} |"
        if before:
            row += f" {statistics.median(per_tree[1]):.2f} |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before", type=Path, default=None,
                        help="another checkout to time the same cases on")
    parser.add_argument("--quick", action="store_true", help="one run: checks the script")
    parser.add_argument("--output", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    trees = [ROOT, *([args.before.resolve()] if args.before is not None else [])]
    publish(report(measure(trees, repeats), trees, repeats), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
