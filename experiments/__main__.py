"""Run the papers' experiments from a checkout: ``python -m experiments EXPERIMENT``.

``EXPERIMENT`` is ``lora_ppo``, ``corl``, ``bopo``, ``traces``, ``rules`` or ``all`` (those
five, in that order); ``aggregates`` reads their JSON files in ``--out`` and pools each
experiment's envs and profiles (:mod:`experiments.aggregates`). Each writes its tables,
JSON and figures into ``--out`` (all of one experiment's files or none of them), and
``all`` also records the wall time of corl, bopo and traces in ``routing.md``. ``--out``
is checked writable before any work starts. Without ``--out`` a smoke run writes into
``benchmarks/results/smoke`` (``tune``: ``benchmarks/results/smoke/tuned``), which git
ignores: its numbers are plumbing, never results.
Progress lines go to stderr as the work goes.

``tune`` (not part of ``all``) runs the equal-budget sweeps of :mod:`experiments.tune` on
Ray Tune, locally or on the cluster at ``--address``, and writes the chosen
configurations into ``--out`` (default ``experiments/tuned``). It needs the ``tune``
extra (``pip install -e '.[tune]'``).

``multitenant`` (not part of ``all``) sweeps tenants x capacity on the multi-tenant env
(:mod:`experiments.multitenant`, issue #14; the ``multiagent`` extra).

``budgets`` (not part of ``all``) trains the learned rows to where they stop improving,
scoring each at checkpoints on the tables' evaluation tasks (:mod:`experiments.budgets`,
issue #23).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from agents.files import write_files_atomic
from experiments.common import check_writable, machine

PROG = "python -m experiments"
REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results"
#: Where a smoke run writes without ``--out``: git-ignored, so plumbing numbers never
#: replace the committed results (writing those at smoke scale takes an explicit --out).
SMOKE_OUT = DEFAULT_OUT / "smoke"
#: Where ``tune`` writes the chosen configurations (``experiments.tune.TUNED_DIR``).
TUNED_DIR = REPO / "experiments" / "tuned"
#: The RouteLLM evaluation CSVs live beside the repository, never inside it.
DEFAULT_DATA = REPO.parent / "shared" / "data" / "routellm"
EXPERIMENTS = ("lora_ppo", "corl", "bopo", "traces", "rules")
#: The routing experiments whose wall times ``routing.md`` records.
ROUTING = ("corl", "bopo", "traces")
#: Run on request only, never by ``all`` (which ends with the aggregates of its tables).
ON_REQUEST = ("tune", "aggregates", "multitenant", "budgets")
SCALES = ("smoke", "default", "full")
EPILOG = """\
scales:
  smoke    seconds per experiment: plumbing for the tests, not a result
  default  what `make reproduce` runs: about 12 minutes for `all` on 2 cores
  full     the converged budgets: lora_ppo's RL rows to where PPO stops improving
           (ToolBench-v0: 524k steps on 16 batched sub-envs; FlightPlanner, not yet
           measured, the same), corl and bopo at five times their default steps;
           traces and rules have no larger scale and run `default`
multitenant (not part of all): tenants x capacity on one pool; default ~2 minutes
  (rules and the central scheduler), full adds shared-parameter PPO (3 capacities x
  5 seeds x 40k tenant-steps, --jobs processes) into multitenant_full.*
budgets (not part of all): learning curves of the learned rows to where they stop
  improving (ToolBench-v0; default 1M steps x 5 seeds x 4 rows, about 2 h on 2 cores)
tune (not part of all): equal-budget sweeps on Ray Tune + Optuna, written to
  experiments/tuned; smoke 2 trials x 2048 steps, default 12 x 20480, full 32 x 3 x 61440;
  --address auto or ray://HOST:10001 runs them on an existing Ray cluster
"""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        """Print ``prog: error: message`` on one line and exit with 2."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m experiments``."""
    parser = _Parser(prog=PROG, description="Run the papers' experiments and write their "
                     "tables, JSON and figures into --out.",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=(*EXPERIMENTS, "all", *ON_REQUEST),
                        help="what to run; all: lora_ppo, corl, bopo, traces, rules in that "
                             "order, then aggregates; aggregates: pool their JSON; tune: the "
                             "tuning sweeps; multitenant: tenants x capacity on one pool; "
                             "budgets: learning curves to convergence")
    parser.add_argument("--scale", choices=SCALES, default="default",
                        help="how much work (see below; default: default)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory, created if needed (default: "
                             "benchmarks/results in the repository, benchmarks/results/full "
                             "at the full scale, the git-ignored benchmarks/results/smoke at "
                             "the smoke scale; tune: experiments/tuned, at smoke "
                             "benchmarks/results/smoke/tuned)")
    parser.add_argument("--jobs", type=_positive_int, default=None,
                        help="worker processes of lora_ppo, corl and bopo, concurrent "
                             "trials of tune (default: 2; corl and bopo smoke: 1)")
    parser.add_argument("--address", default=None,
                        help="tune only: the Ray cluster to run on, passed to "
                             "ray.init(address=...), e.g. auto or ray://HOST:10001 "
                             "(default: start Ray on this machine)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="the RouteLLM folder of traces, read in place (default: "
                             "../shared/data/routellm beside the repository); traces is "
                             "skipped when it is absent")
    return parser


class Progress:
    """Prints progress lines to stderr at once, each with the time since the start."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        """Print ``[elapsed] message``."""
        print(f"[{time.perf_counter() - self.start:5.0f} s] {message}", file=sys.stderr,
              flush=True)


def _routing_scale(scale: str) -> str:
    """The scale traces and rules run: they have no ``full`` scale and run ``default``."""
    return "default" if scale == "full" else scale


def _run_lora_ppo(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments import lora_ppo

    for path in lora_ppo.report(args.out, args.scale, jobs=args.jobs or 2, log=log):
        log(f"lora_ppo: wrote {path}")


def _run_corl(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments import corl

    corl.report(args.out, args.scale, log=log, jobs=args.jobs)


def _run_bopo(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments import bopo

    bopo.report(args.out, args.scale, log=lambda m: log(f"bopo: {m}"),
                jobs=args.jobs)


def _run_traces(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments import traces

    traces.report(args.out, _routing_scale(args.scale), args.data)


def _run_rules(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments import rules

    rules.report(args.out, _routing_scale(args.scale), jobs=args.jobs or 2, log=log)


def _run_aggregates(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments import aggregates

    for path in aggregates.report(args.out, log=log):
        log(f"aggregates: wrote {path}")


def _run_multitenant(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments import multitenant

    for path in multitenant.report(args.out, args.scale, log=log, jobs=args.jobs or 2):
        log(f"multitenant: wrote {path}")


def _run_budgets(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments import budgets

    for path in budgets.report(args.out, args.scale, jobs=args.jobs or 2, log=log):
        log(f"budgets: wrote {path}")


def _run_tune(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments import tune

    for path in tune.report(args.out, args.scale, address=args.address, jobs=args.jobs or 2,
                            log=log):
        log(f"tune: wrote {path}")


RUNNERS: dict[str, Callable[[argparse.Namespace, Callable[[str], None]], None]] = {
    "lora_ppo": _run_lora_ppo, "corl": _run_corl, "bopo": _run_bopo, "traces": _run_traces,
    "rules": _run_rules, "aggregates": _run_aggregates, "tune": _run_tune,
    "multitenant": _run_multitenant, "budgets": _run_budgets}


def routing_record(scale: str, timings: Sequence[tuple[str, str]]) -> str:
    """``routing.md``: the command, the machine and each routing experiment's wall time."""
    lines = ["# Budget-aware routing benchmarks (issue #4)", "",
             f"`{PROG} all --scale {scale}` on {machine()}, one torch thread.", "",
             "| Part | Wall time |", "|---|---|"]
    lines += [f"| {part} | {what} |" for part, what in timings]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    """Run the chosen experiments into the (already checked) ``args.out``."""
    from agents.learners.training import configure_torch_threads

    # Small networks: one torch thread each; parallelism comes from worker processes.
    configure_torch_threads()
    names = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    timings: list[tuple[str, str]] = []
    for name in names:
        if name == "traces" and not args.data.is_dir():
            reason = f"skipped: RouteLLM data not found at {args.data}"
            log(f"traces: {reason}")
            timings.append((name, reason))
            continue
        # The others run default at full.
        own_scales = ("lora_ppo", "corl", "bopo", "tune", "multitenant", "budgets")
        scale = args.scale if name in own_scales else _routing_scale(args.scale)
        log(f"{name}: started at scale {scale}")
        start = time.perf_counter()
        RUNNERS[name](args, log)
        elapsed = time.perf_counter() - start
        log(f"{name}: done in {elapsed:.0f} s")
        if name in ROUTING:
            timings.append((name, f"{elapsed:.0f} s"))
    if args.experiment == "all":  # a partial run leaves the full run's record alone
        write_files_atomic(args.out, {"routing.md": routing_record(args.scale, timings)})
        log(f"wrote {args.out / 'routing.md'}")
        _aggregate_after_all(args, log)


def _aggregate_after_all(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    """``all`` ends with the aggregates of the tables it wrote, where there is a gap to pool.

    At the smoke scale the planner may not beat the rule on any task (a handful of
    episodes), so there may be nothing to aggregate: that is said, not an error.
    """
    try:
        _run_aggregates(args, log)
    except ValueError as error:
        log(f"aggregates: skipped: {error}")


def default_out(experiment: str, scale: str) -> Path:
    """Where results go without ``--out``: each scale apart, smoke's where git ignores it."""
    if scale == "smoke":
        return SMOKE_OUT / "tuned" if experiment == "tune" else SMOKE_OUT
    if experiment == "tune":
        return TUNED_DIR
    return DEFAULT_OUT / "full" if scale == "full" else DEFAULT_OUT


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, check ``--out``, run; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.address is not None and args.experiment != "tune":
        parser.error("--address: only tune runs on Ray")
    if args.out is None:
        args.out = default_out(args.experiment, args.scale)
    try:
        args.out = check_writable(args.out)
    except ValueError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    log = Progress()
    try:
        run(args, log)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the running experiment wrote nothing", file=sys.stderr)
        return 130
    except ValueError as error:  # bad input (e.g. nothing to aggregate): one line, no trace
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    log(f"{args.experiment}: finished")
    return 0


if __name__ == "__main__":  # spawned workers import this module without running it
    sys.exit(main())
