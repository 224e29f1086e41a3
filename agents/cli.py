"""The ``cost-envs`` command.

Subcommands::

    cost-envs list                       registered environment ids, one per line
    cost-envs evaluate --env ID [--methods random,rule,...] [--model DIR [--trust-pickle]]
                       [--episodes N] [--seed S] [--fit-tasks N] [--json]
                       [--pool FILE] [--prices FILE] [--env-kwargs MAPPING]
    cost-envs train --env ID --method ppo|lora|lora-ppo --out DIR [--config FILE]
                    [--timesteps N] [--seed S] [--n-envs N] [--base pretrained|random]
                    [--pool FILE] [--prices FILE] [--env-kwargs MAPPING] [--tensorboard DIR]
    cost-envs pretrain --env ID --out PATH [--seed S]
    cost-envs route train --data FILE... --weak M --strong M --save PATH [...]
    cost-envs route score --router PATH --data FILE... [...]
    cost-envs export-minari --env ID --policy NAME|--supervised T|--logged [--out DIR] [...]

``route`` (train a router on your logged outcomes, save it, score it) lives in
:mod:`agents.cli_route`; ``export-minari`` (offline-RL datasets) in
:mod:`agents.cli_minari`; the env arguments ``train`` and ``evaluate`` share (``--pool``,
``--prices``, ``--env-kwargs``) in :mod:`agents.cli_env`; ``train --config`` (SB3
hyperparameters and training settings in a JSON/YAML file; flags override it) in
:mod:`agents.cli_config`.

The paper's experiments are not a subcommand: they live in ``experiments/`` beside the
installed packages and run with ``python -m experiments all`` (``make reproduce``).

Each subcommand is one :class:`Command` (a name, a function adding its arguments and a
function running it) in :data:`COMMANDS`; adding a subcommand is adding an entry.

Errors end the command with one line on stderr and no traceback:

========================================================  ===========
what                                                      exit status
========================================================  ===========
a usage error (unknown env id or method, a bad number),   2
  naming the valid choices, as argparse does
a bad input file or output path (``--model``, ``--out``;  1
  ``route``'s logs, saved router and ``--save``), a bad
  key or value of ``--config`` or of the env arguments
  (unreadable ``--env-kwargs`` text is a usage error)
a model ``route`` does not find in the logs               2
an operating-system error (a full disk, no permission)    1
stdout closed early (``cost-envs list | head -1``)        141
Ctrl-C                                                    130
========================================================  ===========

``--out`` of ``train`` and ``pretrain`` is checked writable before any work starts.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

import cost_envs
from agents.baselines import BASELINES, FAMILY_BASELINES, ROUTING_BASELINES
from agents.cli_config import read_train_config
from agents.cli_env import add_env_arguments, check_env_kwargs, merged_env_kwargs
from agents.cli_minari import add_export_minari, run_export_minari
from agents.cli_route import add_route, run_route
from agents.evaluation import compare, evaluate, format_table
from agents.lora import BASES, METHODS
from agents.planning import PLANNERS
from agents.rules import BestFixedRule, fitted
from cost_envs.core import MAX_ORACLE_AGENTS
from cost_envs.extras import EXTRA_MODULES, install_hint, missing_modules

#: Methods of ``evaluate`` by default: the paper's baselines plus the greedy heuristic.
DEFAULT_METHODS = ("random", "capability", "rule", "oracle", "greedy")
#: Summary keys written by ``evaluate --json``.
JSON_KEYS = (
    "success_rate", "cps", "flops_per_success", "avg_quality", "avg_cost",
    "success_rate_ci", "cps_ci", "flops_per_success_ci", "avg_quality_ci", "avg_cost_ci",
    "call_ratio", "budget_exceeded", "episodes",
)


# ------------------------------------------------------------------ argument types
def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse type for integers >= ``minimum``; ``what`` names them in errors."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_seed = _int_at_least(0, "an integer >= 0")


def _env_id(text: str) -> str:
    """A registered id, also accepted without its namespace (``FlightPlanner-v0``)."""
    by_name = {env_id.split("/")[-1]: env_id for env_id in cost_envs.ENV_IDS}
    if text in cost_envs.ENV_IDS:
        return text
    if text in by_name:
        return by_name[text]
    raise argparse.ArgumentTypeError(
        f"unknown environment {text!r}; valid ids: {', '.join(cost_envs.ENV_IDS)}"
    )


#: Every method ``evaluate --methods`` accepts: the paper's baselines, BoPO's small/large
#: routing baselines, the family baselines, the planners of :mod:`agents.planning` (these
#: two refuse envs they do not fit) and the best fixed rule. Those with a ``fit``
#: classmethod are fitted on ``--fit-tasks`` training tasks before they are scored.
EVALUATE_METHODS = {**BASELINES, **ROUTING_BASELINES, **FAMILY_BASELINES, **PLANNERS,
                    BestFixedRule.name: BestFixedRule}
#: Methods that apply to every env, so the CLI need not build them on a probe first.
_UNIVERSAL = {*BASELINES, BestFixedRule.name}


def _methods(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in EVALUATE_METHODS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {', '.join(map(repr, unknown)) or 'none given'}; "
            f"valid methods: {', '.join(EVALUATE_METHODS)}"
        )
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"duplicate method names in {text!r}")
    return names


# ---------------------------------------------------------------------- helpers
def _json_results(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: {key: summary[key] for key in JSON_KEYS} for name, summary in results.items()}


def _add_common(parser: argparse.ArgumentParser, episodes: int = 400) -> None:
    parser.add_argument("--episodes", type=_positive_int, default=episodes,
                        help=f"episodes per method (default {episodes})")
    parser.add_argument("--seed", type=_seed, default=0,
                        help="seed of the fixed task set (default 0)")
    parser.add_argument("--resamples", type=_positive_int, default=1000,
                        help="bootstrap resamples for the 95%% intervals (default 1000)")


# --------------------------------------------------------------------- commands
def _add_list(parser: argparse.ArgumentParser) -> None:
    del parser  # no arguments


def _run_list(args: argparse.Namespace) -> int:
    del args
    for env_id in cost_envs.ENV_IDS:
        print(env_id)
    return 0


#: Env arguments that change what an evaluation measures (the budget, the reward, the
#: success threshold, the time limit): taken from a model's config only with
#: --model-env-kwargs (issue #26: a saved budget of 1e-9 scored success 0, unsaid). The
#: others (the pool, its size, prices, a profile, ...) make the env the model acts in and
#: are taken, and printed.
MEASURING_KWARGS = ("budget", "on_exceed", "reward_weights", "f1_threshold",
                    "max_episode_steps")


def _add_evaluate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", type=_env_id, required=True,
                        help=f"environment id, one of: {', '.join(cost_envs.ENV_IDS)}")
    parser.add_argument("--methods", type=_methods, default=None,
                        help=f"comma-separated baselines from: {', '.join(EVALUATE_METHODS)} "
                             f"(default {','.join(DEFAULT_METHODS)}; none with --model)")
    parser.add_argument("--model", type=Path, default=None,
                        help="a saved model: a directory from `cost-envs train`, or an SB3 "
                             ".zip with --trust-pickle")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="allow loading an SB3 .zip, which unpickles code from the file; "
                             "only for files you trust")
    parser.add_argument("--model-env-kwargs", action="store_true",
                        help="evaluate under the model's own env arguments that change what "
                             f"is measured ({', '.join(MEASURING_KWARGS)}); without it such "
                             "an argument in the model's config.json is refused")
    _add_common(parser)
    parser.add_argument("--fit-tasks", type=_positive_int, default=200,
                        help="training tasks on which best-rule and difficulty-threshold are "
                             "fitted, drawn from a seed range no evaluation uses (default 200)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object keyed by method instead of a table")
    add_env_arguments(parser)


def _model_env_kwargs(args: argparse.Namespace, model_kwargs: dict[str, Any]) -> None:
    """Say which env arguments come from the model; refuse measuring ones unless asked."""
    if not model_kwargs:
        return
    overridden = set(args.env_kwargs or {}) | {key for key in ("pool", "prices")
                                               if getattr(args, key) is not None}
    taken = {key: value for key, value in model_kwargs.items() if key not in overridden}
    measuring = [key for key in taken if key in MEASURING_KWARGS]
    if measuring and not args.model_env_kwargs:
        shown = ", ".join(f"{key}={taken[key]!r}" for key in measuring)
        raise SystemExit(f"cost-envs evaluate: {args.model} was trained with env arguments "
                         f"that change what is measured ({shown}); pass --model-env-kwargs "
                         "to evaluate under them, or set them with --env-kwargs")
    if taken:
        shown = ", ".join(f"{key}=<{len(value)} keys>" if isinstance(value, dict)
                          else f"{key}={value!r}" for key, value in taken.items())
        print(f"cost-envs evaluate: env arguments from {args.model}: {shown}",
              file=sys.stderr)


def _load_model(args: argparse.Namespace) -> tuple[str, Any, dict[str, Any]]:
    """The model's row name, the allocator and its env kwargs; exits 2 on a bad model."""
    from agents.lora.checkpoints import UnsafeCheckpointError, load_allocator

    try:
        model = load_allocator(args.model, trust_pickle=args.trust_pickle)
    except UnsafeCheckpointError as error:
        raise SystemExit(f"cost-envs evaluate: refusing to load {args.model}: {error}") from None
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"cost-envs evaluate: cannot load {args.model}: {error}") from None
    env_id = getattr(model, "env_id", None)
    if env_id is not None and env_id != args.env:
        raise SystemExit(f"cost-envs evaluate: {args.model} was trained on {env_id}, "
                         f"not {args.env}")
    if env_id is None:  # an SB3 .zip records its spaces, not its env
        import gymnasium as gym

        env = gym.make(args.env)
        spaces = (env.observation_space, env.action_space)
        env.close()
        if (model.observation_space, model.action_space) != spaces:
            raise SystemExit(
                f"cost-envs evaluate: {args.model} acts on {model.observation_space} -> "
                f"{model.action_space}, but {args.env} has {spaces[0]} -> {spaces[1]}")
    return getattr(model, "method", "model"), model, dict(getattr(model, "env_kwargs", {}))


def _check_model_fits(model: Any, env_id: str, env_kwargs: dict[str, Any], model_path: Path
                      ) -> None:
    """Exit with one line if env arguments give the model an env of other spaces."""
    policy = getattr(model, "policy", model)
    spaces = (getattr(policy, "observation_space", None), getattr(policy, "action_space", None))
    env = gym.make(env_id, **env_kwargs)
    mine = (env.observation_space, env.action_space)
    env.close()
    if None not in spaces and spaces != mine:
        raise SystemExit(f"cost-envs evaluate: {model_path} acts on {spaces[0]} -> {spaces[1]}, "
                         f"but {env_id} with these env arguments has {mine[0]} -> {mine[1]}")


#: Methods that enumerate every joint action, so take pools of at most MAX_ORACLE_AGENTS.
_ENUMERATING = ("oracle", "greedy")


def _applicable_methods(methods: Sequence[str], env_id: str, env_kwargs: dict[str, Any],
                        chosen: bool) -> tuple[str, ...]:
    """``methods`` that run on ``env_id``, from one probe env (before any episode).

    The oracle and the greedy heuristic enumerate every joint action: on a pool of more
    than MAX_ORACLE_AGENTS agents the default methods leave them out with a note, and
    ``chosen`` ones (``--methods``) exit with one line. Family baselines (BoPO's
    small/large routing, CORL's consult-all, ...) refuse an env they do not fit with a
    ``ValueError`` naming what they need; building each on the probe shows that at once.
    """
    family = [name for name in methods if name not in _UNIVERSAL]
    enumerating = [name for name in methods if name in _ENUMERATING]
    if not family and not enumerating:
        return tuple(methods)
    probe = gym.make(env_id, **env_kwargs)
    try:
        n_agents = probe.unwrapped.n_agents
        if enumerating and n_agents > MAX_ORACLE_AGENTS:
            why = (f"they enumerate every joint action and take pools of at most "
                   f"{MAX_ORACLE_AGENTS} agents, this one has {n_agents}")
            if chosen:
                raise SystemExit(f"cost-envs evaluate: {', '.join(enumerating)} cannot run on "
                                 f"{env_id} with this pool: {why} (leave them out of "
                                 "--methods)")
            print(f"cost-envs evaluate: {', '.join(enumerating)} left out: {why}",
                  file=sys.stderr)
            methods = [name for name in methods if name not in _ENUMERATING]
        for name in family:
            try:
                EVALUATE_METHODS[name](probe)
            except ValueError as error:
                raise SystemExit(f"cost-envs evaluate: {name} does not apply to {env_id}: "
                                 f"{error}") from None
    finally:
        probe.close()
    return tuple(methods)


def _factory(cls: Any, fit_tasks: int) -> Any:
    """The class itself, or for a fitted baseline a factory fitting it on training tasks."""
    return fitted(cls, fit_tasks) if hasattr(cls, "fit") else cls


def _run_evaluate(args: argparse.Namespace) -> int:
    if args.trust_pickle and args.model is None:
        raise SystemExit("cost-envs evaluate: --trust-pickle only applies with --model")
    methods = args.methods if args.methods is not None else (
        () if args.model is not None else DEFAULT_METHODS)
    if args.model_env_kwargs and args.model is None:
        raise SystemExit("cost-envs evaluate: --model-env-kwargs only applies with --model")
    model_row = _load_model(args) if args.model is not None else None
    if model_row is not None:
        _model_env_kwargs(args, model_row[2])
    env_kwargs = merged_env_kwargs(args, model_row[2] if model_row is not None else None)
    if env_kwargs != (model_row[2] if model_row is not None else {}):
        try:
            check_env_kwargs(args.env, env_kwargs)
        except ValueError as error:
            raise SystemExit(f"cost-envs evaluate: {error}") from None
        if model_row is not None:
            _check_model_fits(model_row[1], args.env, env_kwargs, args.model)
    # after the env arguments are known to be good
    methods = _applicable_methods(methods, args.env, env_kwargs, args.methods is not None)
    results: dict[str, dict[str, Any]] = {}
    if methods:
        factories = {name: _factory(EVALUATE_METHODS[name], args.fit_tasks) for name in methods}
        results.update(compare(factories, args.env,
                               episodes=args.episodes, seed=args.seed, env_kwargs=env_kwargs,
                               n_resamples=args.resamples))
    if model_row is not None:
        name, model, _ = model_row
        result = evaluate(model, args.env, episodes=args.episodes, seed=args.seed,
                          env_kwargs=env_kwargs)
        results[name] = result.summary(n_resamples=args.resamples, seed=args.seed)
    if args.json:
        print(json.dumps(_json_results(results), indent=2))
    else:
        print(format_table(results))
    return 0


def _add_train(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", type=_env_id, required=True,
                        help=f"environment id, one of: {', '.join(cost_envs.ENV_IDS)}")
    parser.add_argument("--method", choices=METHODS, required=True,
                        help="ppo: PPO from scratch; lora: supervised LoRA allocator; "
                             "lora-ppo: LoRA-guided PPO warm-started from lora")
    parser.add_argument("--config", type=Path, default=None,
                        help="JSON/YAML file of SB3 hyperparameters (learning_rate, n_steps, "
                             "...), timesteps, seed, n_envs, base, action_distribution, "
                             "env_kwargs and supervised; "
                             "the flags override it")
    parser.add_argument("--timesteps", type=_positive_int, default=None,
                        help="RL environment steps (ppo, lora-ppo; default 20000)")
    parser.add_argument("--seed", type=_seed, default=None, help="training seed (default 0)")
    parser.add_argument("--n-envs", type=_positive_int, default=None,
                        help="sub-envs of the batched env the RL stage steps at once (ppo, "
                             "lora-ppo; default 1); n_steps counts steps per sub-env")
    parser.add_argument("--out", type=Path, required=True,
                        help="model directory to write (model.safetensors + config.json)")
    parser.add_argument("--base", choices=BASES, default=None,
                        help="frozen base of the LoRA encoder (default pretrained)")
    add_env_arguments(parser)
    parser.add_argument("--tensorboard", type=Path, default=None,
                        help="TensorBoard log directory (needs the tensorboard package)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _run_train(args: argparse.Namespace) -> int:
    from agents.lora.checkpoints import check_writable, save_allocator
    from agents.lora.training import configure_torch_threads, train

    if args.tensorboard is not None and missing_modules(EXTRA_MODULES["tensorboard"]):
        raise SystemExit("cost-envs train: --tensorboard needs the tensorboard package "
                         f"({install_hint('tensorboard')})")
    try:  # the file, then the flags over it; all checked before any work
        settings = read_train_config(args.config, args.method)
        env_kwargs = merged_env_kwargs(args, settings.env_kwargs)
        check_env_kwargs(args.env, env_kwargs)
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"cost-envs train: {error}") from None
    base = args.base if args.base is not None else settings.base
    if args.method == "ppo" and base != "pretrained":
        raise SystemExit("cost-envs train: --base applies to the LoRA methods; ppo trains "
                         "its whole encoder from scratch")
    try:  # before training, so a bad --out does not throw the trained model away
        check_writable(args.out)
    except ValueError as error:
        raise SystemExit(f"cost-envs train: --out: {error}") from None
    extra = {} if settings.supervised is None else {"supervised": settings.supervised}
    try:
        configure_torch_threads()
        trained = train(args.env, args.method,
                        args.timesteps if args.timesteps is not None else settings.timesteps,
                        seed=args.seed if args.seed is not None else settings.seed, base=base,
                        n_envs=args.n_envs if args.n_envs is not None else settings.n_envs,
                        action_distribution=settings.action_distribution, env_kwargs=env_kwargs,
                        tensorboard_log=args.tensorboard,
                        progress_bar=not args.no_progress, ppo=settings.ppo, **extra)
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"cost-envs train: {error}") from None
    try:
        path = save_allocator(trained, args.out)
    except (OSError, ValueError) as error:
        raise SystemExit(f"cost-envs train: could not save to {args.out}: {error}") from None
    if trained.history:
        last = trained.history[-1]
        print(f"last training rollout (up to 100 episodes): success "
              f"{last['rollout/success_rate']:.3f}, CPS {last['cost/cps']:.4g}")
    print(f"saved {args.method} model to {path}")
    return 0


def _add_pretrain(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", type=_env_id, required=True,
                        help="environment family to pretrain the frozen base on")
    parser.add_argument("--out", type=Path, required=True,
                        help="output path; writes PATH.safetensors and PATH.json")
    parser.add_argument("--seed", type=_seed, default=0, help="seed (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def _run_pretrain(args: argparse.Namespace) -> int:
    from agents.lora.pretrain import check_base_writable, pretrain_base, save_base
    from agents.lora.training import configure_torch_threads

    try:  # before pretraining, so a bad --out fails at once
        check_base_writable(args.out)
    except ValueError as error:
        raise SystemExit(f"cost-envs pretrain: --out: {error}") from None
    configure_torch_threads()
    try:
        state, config = pretrain_base(args.env, seed=args.seed, progress=not args.no_progress)
    except ValueError as error:
        raise SystemExit(f"cost-envs pretrain: {error}") from None
    try:
        path = save_base(state, config, args.out)
    except (OSError, ValueError) as error:
        raise SystemExit(f"cost-envs pretrain: could not save to {args.out}: {error}") from None
    print(f"base loss {config['first_loss']:.3f} -> {config['final_loss']:.3f}; wrote {path}")
    return 0


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, help, argument builder and runner (returns the exit code)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: tuple[Command, ...] = (
    Command("list", "print the registered environment ids", _add_list, _run_list),
    Command("evaluate", "evaluate baselines on one environment", _add_evaluate, _run_evaluate),
    Command("train", "train a learned allocator and save it", _add_train, _run_train),
    Command("pretrain", "pretrain a frozen base encoder", _add_pretrain, _run_pretrain),
    Command("route", "train, save and score a weak/strong router on logged outcomes",
            add_route, run_route),
    Command("export-minari", "write episodes as a Minari dataset for offline RL",
            add_export_minari, run_export_minari),
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that a failed write of help or usage is not swallowed.

    argparse ignores ``OSError`` when printing, so ``--help`` into a full disk exited 0 with
    nothing written; here the error reaches :func:`main`, which reports it in one line.
    """

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:
            (file or sys.stderr).write(message)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser with one subparser per command."""
    parser = _Parser(
        prog="cost-envs", description="Cost-aware orchestration environments and allocators."
    )
    parser.add_argument("--version", action="version", version=cost_envs.__version__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(child)
        child.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (module docstring's table).

    Usage errors raise ``SystemExit(2)`` with a message on stderr, as argparse does; a
    bad input or output raises ``SystemExit`` with a one-line message. A closed stdout,
    an operating-system error and Ctrl-C are turned into one line on stderr and a status.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.
    """
    try:
        try:
            args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
            status = args.run(args)
        except SystemExit:
            sys.stdout.flush()  # --help prints too: its output must land or fail loudly
            raise
        sys.stdout.flush()  # a closed pipe or full disk shows here, not at interpreter exit
        return status
    except KeyboardInterrupt:
        _drop_stdout()
        print("cost-envs: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): nothing more can be shown; 141 is what a
        # shell reports for a command ended by SIGPIPE, which Python ignores.
        _drop_stdout()
        print("cost-envs: output closed before all of it was written (broken pipe)",
              file=sys.stderr)
        return 141
    except OSError as error:
        _drop_stdout()
        where = f" ({error.filename})" if error.filename else ""
        reason = error.strerror or errno.errorcode.get(error.errno or 0) or str(error)
        print(f"cost-envs: {' '.join(reason.split())}{where}", file=sys.stderr)
        return 1


def _drop_stdout() -> None:
    """Flush what stdout holds, or drop it if stdout itself failed.

    A failed flush keeps its buffer, which Python would try (and fail) to write again at
    exit, printing a second error; pointing the descriptor at ``os.devnull`` prevents that.
    """
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # no real descriptor (captured output): nothing to do
            pass


if __name__ == "__main__":
    sys.exit(main())
