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

Every experiment runs its independent units (env x row x seed) through one scheduler
(:mod:`experiments.shared.scheduler`): in ``--jobs`` local processes, or as Ray tasks on
the cluster at ``--address`` (``auto``, ``ray://HOST:10001``; probed first: an address
nobody answers at is one line within seconds), with the same results either way. Each
unit is kept as it finishes (in ``--out``/kept_units until the experiment's files are
written), so the same command after an interruption or a lost worker runs only what is
missing; a unit that fails is reported with its traceback once the others have finished,
and with the command that reruns it alone (``--unit NAME``: only the units named, among
those not kept; in ``all``, the command of the unit's own experiment).

``tune`` (not part of ``all``) runs the equal-budget sweeps of :mod:`experiments.tune` on
Ray Tune, locally or on the cluster at ``--address``, and writes the chosen configurations into
``--out`` (default ``experiments/tuned``); ``--methods ppo,lora`` runs some of them.
Ray Tune's own files stay in ``--out``/ray_results, and running the same command again
after an interruption resumes the sweeps from them. It needs the ``tune`` extra
(``pip install -e '.[tune]'``).

Bad input is one line and a non-zero exit before ``--out`` is created (``traces`` with a
``--data`` that is not the RouteLLM folder, an unknown method, an unreachable cluster);
a run that fails or is interrupted removes the ``--out`` it created when it left nothing
there.

``multitenant`` (not part of ``all``) sweeps tenants x capacity on the multi-tenant env
(:mod:`experiments.multitenant`, issue #14; the ``multiagent`` extra).

``budgets`` (not part of ``all``) trains the learned rows to where they stop improving,
scoring each at checkpoints on the tables' evaluation tasks (:mod:`experiments.budgets`,
issue #23).

``--tasks`` (``lora_ppo``, ``corl``, ``bopo``, ``rules``, ``converged`` and ``all``): the
task set the headline tables are scored on (:mod:`experiments.shared.task_sets`):
``validation`` (the default, where every choice is made: rule searches, stop marks,
tuning, teacher settings, thresholds, the rule end of each gap; today's committed tables)
or ``test`` (tasks no choice has seen: every method is scored there, and the gap's rule
end is still chosen on the validation tasks; the report names the set). In ``all`` it
applies to lora_ppo, corl, bopo and rules; traces already scores on its test split.
``budgets`` refuses it: its curves are where the stop marks are read, on the validation
tasks.

``--ppo-path`` (``budgets`` and ``converged``): FastPPO's ``exact`` path (the default, SB3's
updates bit for bit: the committed curves and runs) or its ``fused`` one (``fused_loss=True``,
float-close, faster); a fused run's units, kept runs and files are apart (``*_fused``),
never mixed with the exact ones.

``memory`` (not part of all) trains RecurrentPPO against PPO at the same settings and
says whether memory pays on each env (:mod:`experiments.memory`, issue #23).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from agents.files import write_files_atomic
from cost_envs.config import suggestion
from experiments.shared.cluster import probe
from experiments.shared.common import check_writable, machine
from experiments.shared.kept import clears_deferred
from experiments.shared.scheduler import (
    UnitsFailedError,
    UnitsLeftError,
    add_scheduling_arguments,
    selected_units,
)

PROG = "python -m experiments"
REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results"
#: Where a smoke run writes without ``--out``: git-ignored, so plumbing numbers never
#: replace the committed results (writing those at smoke scale takes an explicit --out).
SMOKE_OUT = DEFAULT_OUT / "smoke"
#: Where ``tune`` writes the chosen configurations (``experiments.tune.runner.TUNED_DIR``).
TUNED_DIR = REPO / "experiments" / "tuned"
#: The RouteLLM evaluation CSVs live beside the repository, never inside it.
DEFAULT_DATA = REPO.parent / "shared" / "data" / "routellm"
#: The file ``traces`` cannot run without (``experiments.traces.runner.GSM8K``, named here so the
#: check of ``--data`` imports nothing heavy).
TRACES_FILE = "gsm8k_responses.csv"
EXPERIMENTS = ("lora_ppo", "corl", "bopo", "traces", "rules")
#: The routing experiments whose wall times ``routing.md`` records.
ROUTING = ("corl", "bopo", "traces")
#: Run on request only, never by ``all`` (which ends with the aggregates of its tables).
ON_REQUEST = ("tune", "aggregates", "multitenant", "budgets", "memory", "converged")
#: The methods ``tune --methods`` chooses from: those of ``experiments.tune.methods.SWEEPS``
#: in its order, named here so that a mistyped one is refused before torch and SB3 are
#: imported (it took 37 s); ``tests/test_cli_reliability.py`` keeps the two the same.
TUNE_METHODS = ("ppo", "lora-ppo", "lora", "corl-ppo", "corl-adapters", "bopo", "bopo-ppo")
SCALES = ("smoke", "default", "full")
#: The task sets of ``--tasks`` (``experiments.shared.task_sets.TASK_SETS``, named here so
#: the parser imports nothing heavy) and the experiments that take it.
TASK_SETS = ("validation", "test")
TAKE_TASKS = ("lora_ppo", "corl", "bopo", "rules", "converged", "all")
#: FastPPO's paths of ``--ppo-path`` and the experiments that take it.
PPO_PATHS = ("exact", "fused")
TAKE_PPO_PATH = ("budgets", "converged")
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
converged (not part of all): FlightPlanner-v1's learned rows at their converged budget
  on 10,000 tasks (default 16 runs of 5-9 minutes each on 2 cores, converged_*.md; full
  runs default; --ppo-path fused: the RL stages on the fused path)
memory (not part of all): RecurrentPPO against PPO at the same settings on FlightPlanner
  v0 and v1; default 8,192 steps x 5 seeds, about 8 CPU-minutes (ToolBench-v0 too:
  python -m experiments.memory --envs)
tune (not part of all): equal-budget sweeps on Ray Tune + Optuna, written to
  experiments/tuned; smoke 2 trials x 2048 steps, default 12 x 20480, full 32 x 3 x 61440;
  --methods ppo,lora some of them; Ray Tune's files stay in OUT/ray_results, from which
  the same command resumes an interrupted run
--address auto or ray://HOST:10001 (every experiment): run the units as Ray tasks on
  that cluster (every node needs cost-envs installed); the results are those of --jobs
--tasks validation|test (lora_ppo, corl, bopo, rules, converged, all): score the headline
  tables on the validation tasks, where every choice is made (default; today's committed
  tables), or on the test tasks that no choice has seen (each gap's rule end still chosen
  on the validation tasks)
--ppo-path exact|fused (budgets, converged): train on FastPPO's exact path (default;
  SB3's updates bit for bit, the committed files) or its fused one (float-close, faster),
  kept and written apart (budgets_<Env>_fused.*, converged_runs_fused/)
--unit NAME (repeatable; not tune, traces, aggregates): run only that unit of those not
  kept yet, named as in the progress lines and a failure's message (which gives the
  command); the experiment goes on if no other unit is missing, else stops in one line
"""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and exit code 2), with no abbreviations.

    A prefix of an option is not taken for it (``--scal`` is not ``--scale``): an unknown
    option is an error naming the closest one.
    """

    def __init__(self, *args: Any, allow_abbrev: bool = False, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = allow_abbrev  # by keyword only (mypy: not after *args)
        super().__init__(*args, **kwargs)

    def parse_args(  # type: ignore[override]  # argparse's stubs overload namespace
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None,
    ) -> argparse.Namespace:
        """As argparse's, but an unknown option gets the closest known one."""
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            options = [option for action in self._actions for option in action.option_strings]
            hints = (suggestion(word.split("=", 1)[0], options) for word in unknown
                     if word.startswith("-"))
            hint = next((hint for hint in hints if hint), "")
            self.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
        return parsed

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


def _names(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m experiments``."""
    parser = _Parser(prog=PROG, description="Run the papers' experiments and write their "
                     "tables, JSON and figures into --out.",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=(*EXPERIMENTS, "all", *ON_REQUEST),
                        help="what to run; all: lora_ppo, corl, bopo, traces, rules in that "
                             "order, then aggregates; aggregates: pool their JSON; tune: the "
                             "tuning sweeps; multitenant: tenants x capacity on one pool; "
                             "budgets: learning curves to convergence; memory: RecurrentPPO "
                             "against PPO")
    parser.add_argument("--scale", choices=SCALES, default="default",
                        help="how much work (see below; default: default)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory, created if needed (default: "
                             "benchmarks/results in the repository, benchmarks/results/full "
                             "at the full scale, the git-ignored benchmarks/results/smoke at "
                             "the smoke scale; tune: experiments/tuned, at smoke "
                             "benchmarks/results/smoke/tuned)")
    parser.add_argument("--jobs", type=_positive_int, default=None,
                        help="local worker processes, concurrent trials of tune (default: "
                             "2; corl and bopo smoke: 1); with --address local, the "
                             "one-machine Ray cluster's CPUs")
    add_scheduling_arguments(parser, address_help="the Ray cluster to run the units on, "
                             "passed to ray.init(address=...), e.g. auto or ray://HOST:10001 "
                             "(default: local processes; tune: start Ray on this machine)")
    parser.add_argument("--methods", type=_names, default=None,
                        help="tune only: comma-separated methods to sweep, e.g. ppo,lora "
                             "(default: every sweep of experiments.tune.methods.SWEEPS)")
    parser.add_argument("--tasks", choices=TASK_SETS, default="validation",
                        help="the task set the headline tables are scored on: validation "
                             "(default; where every choice is made) or test (no choice has "
                             "seen it; each gap's rule end still chosen on validation); "
                             "lora_ppo, corl, bopo, rules, converged and all only")
    parser.add_argument("--ppo-path", choices=PPO_PATHS, default="exact",
                        help="FastPPO's path: exact (default; SB3's updates bit for bit) or "
                             "fused (fused_loss=True, float-close, faster; kept and written "
                             "apart); budgets and converged only")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="the RouteLLM folder of traces (gsm8k_responses.csv, mmlu/), "
                             "read in place (default: ../shared/data/routellm beside the "
                             "repository); all skips traces when the default is absent")
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
    """The scale traces, rules and converged run: no ``full`` scale, they run ``default``."""
    return "default" if scale == "full" else scale


def _run_lora_ppo(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments.lora_ppo import runner as lora_ppo

    for path in lora_ppo.report(args.out, args.scale, jobs=args.jobs or 2, log=log,
                                address=args.address, tasks=args.tasks):
        log(f"lora_ppo: wrote {path}")


def _run_corl(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments.corl import runner as corl

    corl.report(args.out, args.scale, log=log, jobs=args.jobs, address=args.address,
                tasks=args.tasks)


def _run_bopo(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments.bopo import runner as bopo

    bopo.report(args.out, args.scale, log=lambda m: log(f"bopo: {m}"),
                jobs=args.jobs, address=args.address, tasks=args.tasks)


def _run_traces(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments.traces import runner as traces

    if args.address is not None:
        log("traces: runs in this process (its routers are fitted one after another)")
    traces.report(args.out, _routing_scale(args.scale), args.data, jobs=args.jobs or 2)


def _run_rules(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments.rules import runner as rules

    rules.report(args.out, _routing_scale(args.scale), jobs=args.jobs or 2, log=log,
                 address=args.address, tasks=args.tasks)


def _run_aggregates(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments.aggregates import runner as aggregates

    reps = aggregates.SMOKE_REPS if args.scale == "smoke" else aggregates.REPS
    for path in aggregates.report(args.out, reps=reps, log=log):
        log(f"aggregates: wrote {path}")


def _run_multitenant(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments.multitenant import runner as multitenant

    for path in multitenant.report(args.out, args.scale, log=log, jobs=args.jobs or 2,
                                   address=args.address):
        log(f"multitenant: wrote {path}")


def _run_budgets(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments.budgets import runner as budgets

    for path in budgets.report(args.out, args.scale, jobs=args.jobs or 2, log=log,
                               address=args.address, fused=args.ppo_path == "fused"):
        log(f"budgets: wrote {path}")


def _run_converged(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments.converged import runner as converged

    for path in converged.report(args.out, _routing_scale(args.scale), jobs=args.jobs or 2,
                                 log=log, address=args.address, tasks=args.tasks,
                                 fused=args.ppo_path == "fused"):
        log(f"converged: wrote {path}")


def _run_memory(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments.memory import runner as memory

    for path in memory.report(args.out, args.scale, jobs=args.jobs or 2, log=log,
                              address=args.address):
        log(f"memory: wrote {path}")


def _run_tune(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    from experiments.tune import runner as tune

    for path in tune.report(args.out, args.scale, address=args.address, jobs=args.jobs or 2,
                            methods=args.methods, log=log):
        log(f"tune: wrote {path}")


RUNNERS: dict[str, Callable[[argparse.Namespace, Callable[[str], None]], None]] = {
    "lora_ppo": _run_lora_ppo, "corl": _run_corl, "bopo": _run_bopo, "traces": _run_traces,
    "rules": _run_rules, "aggregates": _run_aggregates, "tune": _run_tune,
    "multitenant": _run_multitenant, "budgets": _run_budgets, "memory": _run_memory,
    "converged": _run_converged}


def routing_record(scale: str, timings: Sequence[tuple[str, str]],
                   tasks: str = "validation") -> str:
    """``routing.md``: the command, the machine and each routing experiment's wall time."""
    option = "" if tasks == "validation" else f" --tasks {tasks}"
    lines = ["# Budget-aware routing benchmarks (issue #4)", "",
             f"`{PROG} all --scale {scale}{option}` on {machine()}, one torch thread.", "",
             "| Part | Wall time |", "|---|---|"]
    lines += [f"| {part} | {what} |" for part, what in timings]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    """Run the chosen experiments into the (already checked) ``args.out``."""
    from agents.learners.training import configure_torch_threads

    # Small networks: one torch thread each; parallelism comes from worker processes.
    configure_torch_threads()
    names = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    with clears_deferred() if args.experiment == "all" else contextlib.nullcontext():
        _run_each(args, names, log)


def _run_each(args: argparse.Namespace, names: Sequence[str],
              log: Callable[[str], None]) -> None:
    timings: list[tuple[str, str]] = []
    for name in names:
        if name == "traces" and data_problem(args.data) is not None:  # all, default --data
            reason = f"skipped: RouteLLM data not found at {args.data}"
            log(f"traces: {reason}")
            timings.append((name, reason))
            continue
        # The others run default at full.
        own_scales = ("lora_ppo", "corl", "bopo", "tune", "multitenant", "budgets",
                      "memory")
        scale = args.scale if name in own_scales else _routing_scale(args.scale)
        log(f"{name}: started at scale {scale}")
        start = time.perf_counter()
        try:
            RUNNERS[name](args, log)
        except UnitsFailedError as error:  # all --unit would rerun the experiments before
            if args.experiment != "all":
                raise
            raise error.rerun_alone_with(experiment_arguments(sys.argv[1:], name)) from None
        elapsed = time.perf_counter() - start
        log(f"{name}: done in {elapsed:.0f} s")
        if name in ROUTING:
            timings.append((name, f"{elapsed:.0f} s"))
    if args.experiment == "all":  # a partial run leaves the full run's record alone
        write_files_atomic(args.out, {"routing.md": routing_record(args.scale, timings,
                                                                   args.tasks)})
        log(f"wrote {args.out / 'routing.md'}")
        _aggregate_after_all(args, log)


def experiment_arguments(arguments: Sequence[str], experiment: str) -> list[str]:
    """``arguments`` (of this command line) with ``experiment`` in place of the one they name.

    In ``all`` a failed unit is rerun alone by its own experiment's command: ``all`` starts
    again from the first experiment, whose kept units are gone once its files are written.
    """
    words, value = list(arguments), False
    for position, word in enumerate(words):
        if not value and not word.startswith("-"):
            words[position] = experiment
            break
        value = word.startswith("--") and "=" not in word  # every option takes a value
    return words


def _aggregate_after_all(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    """``all`` ends with the aggregates of the tables it wrote, where there is a gap to pool.

    At the smoke scale the planner may not beat the rule on any task (a handful of
    episodes), so there may be nothing to aggregate: that is said, not an error.
    """
    try:
        _run_aggregates(args, log)
    except ValueError as error:
        log(f"aggregates: skipped: {error}")


def data_problem(data: Path) -> str | None:
    """Why ``data`` is not a RouteLLM folder ``traces`` can read, or ``None`` if it is."""
    if not data.exists():
        return "it does not exist"
    if not data.is_dir():
        return "it is not a directory"
    if (data / TRACES_FILE).is_file():
        return None
    try:
        return f"it has no {TRACES_FILE}" if any(data.iterdir()) else "it is empty"
    except OSError as error:
        return f"it cannot be read ({error.strerror or error})"


def check_data(args: argparse.Namespace) -> None:
    """Refuse a ``--data`` that ``traces`` cannot read, before anything is created.

    ``traces`` needs it; ``all`` skips traces when the *default* folder is absent (a
    checkout without the shared data still reproduces the rest), but a ``--data`` given
    explicitly must be readable.

    Raises:
        ValueError: One line naming the path, what was expected and what is there.
    """
    wanted = args.experiment == "traces" or (args.experiment == "all"
                                             and args.data != DEFAULT_DATA)
    problem = data_problem(args.data) if wanted else None
    if problem is not None:
        raise ValueError(f"--data {args.data}: expected the RouteLLM folder holding "
                         f"{TRACES_FILE} (and mmlu/), but {problem}")


def default_out(experiment: str, scale: str) -> Path:
    """Where results go without ``--out``: each scale apart, smoke's where git ignores it."""
    if scale == "smoke":
        return SMOKE_OUT / "tuned" if experiment == "tune" else SMOKE_OUT
    if experiment == "tune":
        return TUNED_DIR
    return DEFAULT_OUT / "full" if scale == "full" else DEFAULT_OUT


def check_tune(args: argparse.Namespace) -> None:
    """``tune``'s arguments, checked before ``--out`` is created: its methods, its cluster.

    Raises:
        ValueError: An unknown method or a malformed address (one line).
        ConnectionError: Nothing answers at ``--address`` within seconds (one line).
    """
    if args.methods is not None:  # by name first: before the probe and torch (it took 37 s)
        unknown = [name for name in args.methods if name not in TUNE_METHODS]
        if unknown:
            raise ValueError(f"--methods: unknown method(s) {', '.join(unknown)}; expected "
                             f"some of {', '.join(TUNE_METHODS)}"
                             f"{suggestion(unknown[0], TUNE_METHODS)}")
    probe(args.address)
    if args.methods is not None:  # imports the methods' training code: after the probe
        from experiments.tune.runner import chosen_sweeps

        chosen_sweeps(args.methods)


def _missing(directory: Path) -> list[Path]:
    """``directory`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for path in (directory, *directory.parents):
        if path.exists():
            break
        missing.append(path)
    return missing


def _remove_empty(directories: Sequence[Path]) -> None:
    """Remove the directories this run created (deepest first) if nothing was put there."""
    for path in directories:
        try:
            path.rmdir()
        except OSError:  # not empty (kept results, e.g. a sweep to resume) or gone
            return


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and check the arguments, check ``--out``, run; returns the exit code.

    Errors in the input (a bad ``--data``, an unknown method, a cluster that does not
    answer) are one line each, before ``--out`` is created; a run that fails or is
    interrupted removes the ``--out`` it created if it left nothing in it.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.address is not None and args.experiment == "aggregates":
        parser.error("--address: aggregates reads files and runs nothing on Ray")
    if args.methods is not None and args.experiment != "tune":
        parser.error("--methods: only tune takes it (it chooses the sweeps)")
    if args.tasks != "validation" and args.experiment not in TAKE_TASKS:
        parser.error(f"--tasks: only {', '.join(TAKE_TASKS)} take it (the headline tables); "
                     f"{args.experiment} makes or reads choices on the validation tasks")
    if args.ppo_path != "exact" and args.experiment not in TAKE_PPO_PATH:
        parser.error(f"--ppo-path: only {', '.join(TAKE_PPO_PATH)} take it; "
                     f"{args.experiment} trains on the exact path")
    if args.unit is not None and args.experiment in ("aggregates", "traces", "tune"):
        parser.error(f"--unit: {args.experiment} runs no units through the scheduler")
    try:
        check_data(args)
        if args.experiment == "tune":
            check_tune(args)
        else:
            probe(args.address)
    except (ValueError, ConnectionError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, ValueError) else 1
    if args.out is None:
        args.out = default_out(args.experiment, args.scale)
    created = _missing(Path(args.out).absolute())
    try:
        args.out = check_writable(args.out)
    except ValueError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    log = Progress()
    status = 1
    try:
        with selected_units(args.unit):
            run(args, log)
        status = 0
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the running experiment wrote no report, its finished "
              "units are kept (run the same command again to resume)", file=sys.stderr)
        status = 130
    except (UnitsFailedError, UnitsLeftError) as error:  # each failure's traceback, the
        print(f"{PROG}: error: {error}", file=sys.stderr)  # others finished; --unit's left
        status = 1
    except ValueError as error:  # bad input (e.g. nothing to aggregate): one line, no trace
        print(f"{PROG}: error: {error}", file=sys.stderr)
        status = 2
    except ConnectionError as error:  # a cluster that went away: one line, no trace
        print(f"{PROG}: error: {error}", file=sys.stderr)
        status = 1
    except RuntimeError as error:
        if args.experiment != "tune":  # elsewhere a bug: its traceback is what helps
            raise
        print(f"{PROG}: error: {error}", file=sys.stderr)  # a failed trial: one line
        status = 1
    finally:
        if status:
            _remove_empty(created)
    if status:
        return status
    log(f"{args.experiment}: finished")
    return 0


if __name__ == "__main__":  # spawned workers import this module without running it
    sys.exit(main())
