"""``cost-envs evaluate``: baselines, planners and a saved model on one env.

The methods come from :data:`EVALUATE_METHODS`; a model is a directory written by
``cost-envs train`` (or an SB3 ``.zip`` with ``--trust-pickle``). Env arguments
(``--pool``, ``--prices``, ``--env-kwargs``) are :mod:`agents.cli.env`'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

import cost_envs
from agents.baselines import BASELINES, FAMILY_BASELINES, ROUTING_BASELINES
from agents.cli.arguments import (
    close_to,
    known_env_id,
    positive_int,
    require_extra,
    resamples_int,
    seed_int,
)
from agents.cli.env import add_env_arguments, check_env_kwargs, merged_env_kwargs
from agents.cli.progress import Progress
from agents.evaluation import compare, evaluate, format_table
from agents.planning import PLANNERS
from agents.rules import BestFixedRule, fitted
from cost_envs.core import MAX_ORACLE_AGENTS
from cost_envs.limits import check_memory, evaluation_bytes

#: Methods of ``evaluate`` by default: the paper's baselines plus the greedy heuristic.
DEFAULT_METHODS = ("random", "capability", "rule", "oracle", "greedy")
#: Summary keys written by ``evaluate --json``.
JSON_KEYS = (
    "success_rate", "cps", "flops_per_success", "avg_quality", "avg_cost",
    "success_rate_ci", "cps_ci", "flops_per_success_ci", "avg_quality_ci", "avg_cost_ci",
    "call_ratio", "budget_exceeded", "episodes",
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
            f"{close_to(unknown[0], list(EVALUATE_METHODS)) if unknown else ''}"
        )
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"duplicate method names in {text!r}")
    return names


def _json_results(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: {key: summary[key] for key in JSON_KEYS} for name, summary in results.items()}


def _add_common(parser: argparse.ArgumentParser, episodes: int = 400) -> None:
    parser.add_argument("--episodes", type=positive_int, default=episodes,
                        help=f"episodes per method (default {episodes})")
    parser.add_argument("--seed", type=seed_int, default=0,
                        help="seed of the fixed task set (default 0)")
    parser.add_argument("--resamples", type=resamples_int, default=1000,
                        help="bootstrap resamples for the 95%% intervals (default 1000)")


#: Env arguments that change what an evaluation measures (the budget, the reward, the
#: success threshold, the time limit): taken from a model's config only with
#: --model-env-kwargs (issue #26: a saved budget of 1e-9 scored success 0, unsaid). The
#: others (the pool, its size, prices, a profile, ...) make the env the model acts in and
#: are taken, and printed.
MEASURING_KWARGS = ("budget", "on_exceed", "reward_weights", "f1_threshold",
                    "max_episode_steps")


def add_evaluate(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``evaluate``."""
    parser.add_argument("--env", type=known_env_id, required=True,
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
    parser.add_argument("--fit-tasks", type=positive_int, default=200,
                        help="training tasks on which best-rule and difficulty-threshold are "
                             "fitted, drawn from a seed range no evaluation uses (default 200)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object keyed by method instead of a table")
    parser.add_argument("--no-progress", action="store_true",
                        help="hide the progress lines (fitting, loading, evaluating each "
                             "method) and, on a terminal, the episode bars, all on stderr")
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


def _load_model(args: argparse.Namespace, say: Progress
                ) -> tuple[str, Any, dict[str, Any]]:
    """The model's row name, the allocator and its env kwargs; exits 1 on a bad model.

    What is on disk is checked before torch is imported (seconds), so a mistyped path is
    answered at once; then whether the agents extra (torch, ...) is installed.
    """
    from agents.learners.checkpoint_paths import UnsafeCheckpointError, check_model_path

    try:
        check_model_path(args.model, trust_pickle=args.trust_pickle)
    except UnsafeCheckpointError as error:
        raise _model_error("refusing to load", args.model, error) from None
    except (ValueError, FileNotFoundError) as error:  # a truncated file too, before torch
        raise _model_error("cannot load", args.model, error) from None
    require_extra("agents", "cost-envs evaluate --model")
    say(f"loading the model {args.model}")  # seconds: torch, peft and the weights
    from agents.learners.checkpoints import load_allocator

    try:
        model = load_allocator(args.model, trust_pickle=args.trust_pickle)
    except UnsafeCheckpointError as error:
        raise _model_error("refusing to load", args.model, error) from None
    except (ValueError, FileNotFoundError) as error:
        raise _model_error("cannot load", args.model, error) from None
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


def _model_error(verb: str, path: Path, error: Exception) -> SystemExit:
    """``cost-envs evaluate: <verb> <path>: <why>`` in one line, the path said once.

    The loaders' messages start with the path themselves (``X: no such model directory``);
    said after ``cannot load X`` it read ``cannot load X: X: no such ...``.
    """
    text = " ".join(str(error).split())
    if text.startswith(f"{path}: "):
        text = text[len(f"{path}: "):]
    elif text.startswith(f"{path} "):  # "X is a Stable-Baselines3 .zip: ..."
        text = "it " + text[len(f"{path} "):]
    return SystemExit(f"cost-envs evaluate: {verb} {path}: {text}")


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


def _is_fitted(name: str) -> bool:
    """Whether method ``name`` is fitted on training tasks before it is scored."""
    return hasattr(EVALUATE_METHODS[name], "fit")


def applicable_methods(methods: Sequence[str], env_id: str, env_kwargs: dict[str, Any],
                        chosen: bool, command: str = "cost-envs evaluate"
                        ) -> tuple[tuple[str, ...], str | None]:
    """``methods`` that run on ``env_id``, and the split fitted methods are scored on.

    Decided from one probe env, before any episode. The oracle and the greedy heuristic
    enumerate every joint action: on a pool of more than MAX_ORACLE_AGENTS agents the
    default methods leave them out with a note, and ``chosen`` ones (``--methods``) exit
    with one line. Family baselines (BoPO's small/large routing, CORL's consult-all, ...)
    refuse an env they do not fit with a ``ValueError`` naming what they need; building
    each on the probe shows that at once. A fitted method (best-rule, ...) on logged
    queries (TraceRouting-v0's ``split``) is fitted on the train split and scored on the
    test split; on ``split='all'`` it would be scored on the queries it was fitted on,
    and exits with one line saying which env argument to pass.

    Returns:
        The methods, and the env's ``split`` when a fitted method is among them (``None``:
        an env without splits, or no fitted method).
    """
    family = [name for name in methods if name not in _UNIVERSAL]
    enumerating = [name for name in methods if name in _ENUMERATING]
    fitted_ = [name for name in methods if _is_fitted(name)]
    if not family and not enumerating and not fitted_:
        return tuple(methods), None
    probe = gym.make(env_id, **env_kwargs)
    try:
        base: Any = probe.unwrapped  # an OrchestrationEnv
        n_agents = base.n_agents
        if enumerating and n_agents > MAX_ORACLE_AGENTS:
            why = (f"they enumerate every joint action and take pools of at most "
                   f"{MAX_ORACLE_AGENTS} agents, this one has {n_agents}")
            if chosen:
                raise SystemExit(f"{command}: {', '.join(enumerating)} cannot run on "
                                 f"{env_id} with this pool: {why} (leave them out of "
                                 "--methods)")
            print(f"{command}: {', '.join(enumerating)} left out: {why}",
                  file=sys.stderr)
            methods = [name for name in methods if name not in _ENUMERATING]
        for name in family:
            try:
                EVALUATE_METHODS[name](probe)
            except ValueError as error:
                raise SystemExit(f"{command}: {name} does not apply to {env_id}: "
                                 f"{error}") from None
        split = getattr(base, "split", None) if fitted_ else None
    finally:
        probe.close()
    if split == "all":
        raise SystemExit(
            f"{command}: {', '.join(fitted_)} {'are' if len(fitted_) > 1 else 'is'} fitted "
            f"on training queries, but {env_id} "
            "with split='all' replays every logged query, the training ones too; pass "
            "--env-kwargs '{split: test}' to fit on the train split and run on the test "
            "split")
    return tuple(methods), split


def method_factory(name: str, cls: Any, fit_tasks: int, say: Progress, env_id: str,
             env_kwargs: dict[str, Any], split: str | None) -> Any:
    """The class itself, or for a fitted baseline a factory fitting it on training tasks.

    Fitting takes seconds to tens of seconds (best-rule on ToolBench: about 20 s), so
    the factory says when it starts and, while it runs, that it still runs
    (:class:`~agents.cli.progress.Progress`). On the test split of logged queries the
    method is fitted on an env of the train split (the same arguments otherwise) and then
    acts on the env it is scored on, as the experiments fit it.
    """
    if not hasattr(cls, "fit"):
        return cls
    fit = fitted(cls, fit_tasks)

    def build(env: gym.Env) -> Any:
        if split != "test":
            with say.running(f"{name}: fitting on {fit_tasks} training tasks"):
                return fit(env)
        with say.running(f"{name}: fitting on {fit_tasks} training queries (split 'train')"):
            return fit(gym.make(env_id, **{**env_kwargs, "split": "train"}))

    return build


def _check_memory(args: argparse.Namespace, methods: Sequence[str]) -> None:
    """Exit with one line if ``--episodes`` of every method cannot fit in memory.

    Every method's episodes are kept until all are summarised, so a billion episodes grew
    by megabytes a second until the memory ran out; now they are refused at once.
    """
    runs = len(methods) + (args.model is not None)
    fit_tasks = args.fit_tasks if any(_is_fitted(name) for name in methods) else 0
    what = f"--episodes {args.episodes}" + (f" for each of {runs} methods" if runs > 1 else "")
    if fit_tasks:
        what += f" and --fit-tasks {fit_tasks}"
    try:
        check_memory(evaluation_bytes(args.episodes, runs, fit_tasks), what,
                     "lower --episodes" + (" or --fit-tasks" if fit_tasks else ""))
    except ValueError as error:
        raise SystemExit(f"cost-envs evaluate: {error}") from None


def run_evaluate(args: argparse.Namespace) -> int:
    """Score the methods and the model on one task set; print a table or JSON."""
    if args.trust_pickle and args.model is None:
        raise SystemExit("cost-envs evaluate: --trust-pickle only applies with --model")
    methods = args.methods if args.methods is not None else (
        () if args.model is not None else DEFAULT_METHODS)
    if args.model_env_kwargs and args.model is None:
        raise SystemExit("cost-envs evaluate: --model-env-kwargs only applies with --model")
    _check_memory(args, methods)  # before the model, the envs and any episode
    with Progress("cost-envs evaluate", enabled=not args.no_progress) as say:
        results = _evaluate_all(args, methods, say)
    if args.json:
        print(json.dumps(_json_results(results), indent=2))
    else:
        print(format_table(results))
    return 0


def _evaluate_all(args: argparse.Namespace, methods: Sequence[str], say: Progress
                  ) -> dict[str, dict[str, Any]]:
    """Every method's and the model's summary, saying on stderr what runs."""
    model_row = _load_model(args, say) if args.model is not None else None
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
    methods, split = applicable_methods(methods, args.env, env_kwargs,
                                         args.methods is not None)
    results: dict[str, dict[str, Any]] = {}
    bars = not args.no_progress  # drawn only on a terminal (agents.progress)

    def log(message: str) -> None:  # "<name>: evaluating on <n> episodes", under a bar
        say(message, bar=bars)

    if methods:
        factories = {name: method_factory(name, EVALUATE_METHODS[name], args.fit_tasks, say,
                                    args.env, env_kwargs, split)
                     for name in methods}
        results.update(compare(factories, args.env,
                               episodes=args.episodes, seed=args.seed, env_kwargs=env_kwargs,
                               n_resamples=args.resamples, log=log, progress=bars))
    if model_row is not None:
        name, model, _ = model_row
        log(f"{name}: evaluating on {args.episodes} episodes")
        result = evaluate(model, args.env, episodes=args.episodes, seed=args.seed,
                          env_kwargs=env_kwargs, progress=bars, desc=name)
        results[name] = result.summary(n_resamples=args.resamples, seed=args.seed)
    say.done()
    return results



