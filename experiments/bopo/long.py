"""BoPO's AppWorld profile at the ``long`` scale: PPO (λ=1) and BoPO past ``--scale full``.

At five times the default RL steps (``--scale full``) PPO (λ=1) closed 0.17 [-0.03, 0.36]
of AppWorld's gap between the best fixed rule and the planner when this run was made
(0.23 [0.02, 0.43] since the 2026-12-07 regeneration, on those 400 tasks). This run
doubles those steps (327,680 per router), scores on 1000 evaluation tasks instead of
400 (task seed 0, so the intervals can resolve a gain of that size) and trains the
table's AppWorld rows only: PPO (λ=1), the tuned PPO, BoPO as in the paper, with 5
seeds (:data:`experiments.bopo.jobs.SCALES` ``"long"``): 0.10 [-0.02, 0.21] for PPO,
not resolved. About 14 minutes on one core of a shared 2-core machine.

``python -m experiments.bopo.long [--out DIR] [--tasks validation|test]`` writes
``bopo.md``, ``bopo.json`` and ``pareto_bopo_appworld.png``/``.svg`` into ``DIR`` (default
``benchmarks/results/bopo_long``), all or nothing. ``--tasks test`` scores every row on the
test tasks (:mod:`experiments.shared.task_sets`; the gap's rule end still chosen on the
validation tasks, the report names its set); the default is the validation set of the
committed report.

``--curve`` runs the learning curves of PPO (λ=1) and BoPO instead, to four times these
steps (:mod:`experiments.bopo.curve`; about an hour on one core) and writes
``budgets_AgenticRouting-v0.md``/``.csv`` into ``DIR`` (default ``benchmarks/results``;
``--scale smoke``: ``benchmarks/results/smoke``, plumbing). ``--progress FILE`` keeps the
curves so far after every checkpoint; ``--from-progress FILE`` writes the table of such a
file (a run stopped early: its checkpoints up to the last one every run reached).
``--tuned`` trains the tuned PPO (the equal-budget sweep's choice) instead, into
``budgets_AgenticRouting-v0_tuned.md``/``.csv``. The curves are where the stop marks are
read, so they are scored on the validation tasks and refuse ``--tasks test``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments.bopo.curve import SCALES as CURVE_SCALES
from experiments.bopo.curve import report as curve_report
from experiments.bopo.curve import report_from
from experiments.bopo.runner import report
from experiments.shared.task_sets import DEFAULT_TASKS, TASK_SETS

#: Where the results go by default.
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
OUT = RESULTS / "bopo_long"


def main(argv: list[str] | None = None) -> None:
    """Run the AppWorld rows at the ``long`` scale and write the report."""
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m experiments.bopo.long",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help=f"output folder (default {OUT}; "
                        f"with --curve {RESULTS})")
    parser.add_argument("--curve", action="store_true",
                        help="the learning curves of PPO (λ=1) and BoPO (experiments.bopo.curve)")
    parser.add_argument("--scale", choices=sorted(CURVE_SCALES), default="curve",
                        help="with --curve: the curve's scale (smoke: plumbing)")
    parser.add_argument("--progress", type=Path, default=None,
                        help="with --curve: keep the curves so far in this JSON file")
    parser.add_argument("--tuned", action="store_true",
                        help="with --curve: the tuned PPO instead (into budgets_*_tuned.*)")
    parser.add_argument("--from-progress", type=Path, default=None,
                        help="with --curve: write the table of this progress file, train nothing")
    parser.add_argument("--tasks", choices=list(TASK_SETS), default=DEFAULT_TASKS,
                        help="without --curve: the task set every row is scored on "
                             "(validation, the default, or test; the gap's rule end is "
                             "chosen on validation either way)")
    args = parser.parse_args(argv)
    if not args.curve:
        if args.progress or args.from_progress or args.tuned or args.scale != "curve":
            parser.error("--scale, --progress, --tuned and --from-progress go with --curve")
        report(args.out or OUT, "long", log=print, profiles=("appworld",), tasks=args.tasks)
        return
    if args.tasks != DEFAULT_TASKS:
        parser.error("--tasks: the curves are where the stop marks are read, on the "
                     f"{DEFAULT_TASKS} tasks; --tasks goes without --curve")
    out = args.out or (RESULTS / "smoke" if args.scale == "smoke" else RESULTS)
    if args.from_progress is not None:
        written = report_from(args.from_progress, out)
    else:
        written = curve_report(out, args.scale, progress=args.progress, tuned=args.tuned)
    print("wrote " + ", ".join(str(path) for path in written))


if __name__ == "__main__":
    main()
