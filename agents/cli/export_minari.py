"""``cost-envs export-minari``: episodes as a Minari dataset for offline RL.

::

    cost-envs export-minari --env ID --policy NAME [--episodes 100] [--seed 0] [--out DIR]
    cost-envs export-minari --env ID --model DIR [--episodes 100] [--seed 0]
    cost-envs export-minari --env ID --supervised greedy|planner [--episodes 1500] [--seed 0]
    cost-envs export-minari --env TraceRouting-v0 --logged [--data FILE]
        [--dataset-id NAMESPACE/NAME-vN] [--fit-tasks 200] [--pool FILE] [--prices FILE]
        [--env-kwargs MAPPING] [--no-progress]

``--policy`` plays any method ``evaluate`` accepts (a baseline, a planner, the best
fixed rule, fitted first on ``--fit-tasks`` training tasks) on the task set of ``--seed``
(:func:`agents.minari_export.export_rollouts`), and ``--model`` a model directory
written by ``cost-envs train`` (safetensors, never unpickled) on the env arguments it
was trained with, flags over them; ``--supervised`` writes the LoRA
supervised stage's teacher episodes for training seed ``--seed``
(:func:`agents.minari_export.export_supervised`); ``--logged`` writes every logged
(query, model) outcome of a trace file (:func:`cost_envs.traces.minari_export.export_traces`).

The dataset lands in ``--out`` (or ``$MINARI_DATASETS_PATH``; never ``~/.minari``) as
``<env id>/<name>-v0`` unless ``--dataset-id`` says otherwise; load it with
``MINARI_DATASETS_PATH=DIR`` and ``minari.load_dataset(id)``. A bad input is one line on
stderr and status 1 (an unknown env or method is a usage error, status 2), and nothing
is written: the dataset appears whole or not at all.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agents.cli.arguments import known_env_id, positive_int, seed_int
from agents.cli.env import add_env_arguments, check_env_kwargs, merged_env_kwargs
from agents.cli.evaluate import EVALUATE_METHODS, applicable_methods, method_factory
from agents.cli.progress import Progress
from cost_envs.extras import EXTRA_MODULES, install_hint, missing_modules

#: The envs ``--logged`` applies to.
TRACE_ENV = "cost_envs/TraceRouting-v0"
#: Episodes of ``--policy`` without ``--episodes``.
DEFAULT_EPISODES = 100


def _author(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a name, got {text!r}")
    return text


def add_export_minari(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``export-minari``."""
    parser.add_argument("--env", type=known_env_id, required=True, help="environment id")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--policy", choices=list(EVALUATE_METHODS), metavar="NAME",
                        help=f"the method to roll out, one of: {', '.join(EVALUATE_METHODS)}")
    source.add_argument("--model", type=Path, default=None, metavar="DIR",
                        help="a model directory from `cost-envs train`")
    source.add_argument("--supervised", choices=("greedy", "planner"),
                        help="the LoRA supervised stage's teacher episodes")
    source.add_argument("--logged", action="store_true",
                        help=f"every logged (query, model) outcome ({TRACE_ENV} only)")
    parser.add_argument("--episodes", type=positive_int, default=None,
                        help=f"episodes (default {DEFAULT_EPISODES}; --supervised: the "
                             "stage's 1500; not with --logged)")
    parser.add_argument("--seed", type=seed_int, default=0,
                        help="task-set seed (--supervised: the training seed; default 0)")
    parser.add_argument("--out", type=Path, default=None,
                        help="datasets directory (default $MINARI_DATASETS_PATH)")
    parser.add_argument("--dataset-id", default=None, metavar="ID",
                        help="namespaced id, default <env id>/<name>-v0")
    parser.add_argument("--data", type=Path, default=None,
                        help="--logged: the trace file (default: the packaged example)")
    parser.add_argument("--fit-tasks", type=positive_int, default=200,
                        help="training tasks a fitted method (best-rule, ...) is fitted on")
    add_env_arguments(parser)
    parser.add_argument("--author", type=_author, default=None, metavar="NAME",
                        help="who made the dataset, stored as Minari's author (default: "
                             "cost-envs (export-minari))")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _check_combination(args: argparse.Namespace) -> None:
    if args.logged and args.env != TRACE_ENV:
        raise ValueError(f"--logged: expected --env {TRACE_ENV}, got {args.env}")
    if args.logged and args.episodes is not None:
        raise ValueError("--episodes: --logged writes every logged outcome; drop --episodes")
    if args.data is not None and not args.logged:
        raise ValueError("--data: only with --logged (else pass data in --env-kwargs)")


def _load_model(path: Path, env_id: str) -> Any:
    """A saved cost-envs model trained on ``env_id`` (``ValueError`` in one line if not)."""
    from agents.learners.checkpoints import load_allocator

    model = load_allocator(path)  # a model directory only: an SB3 .zip is refused
    if model.env_id != env_id:
        raise ValueError(f"--model: {path} was trained on {model.env_id}, not {env_id}")
    return model


def _check_before_work(args: argparse.Namespace) -> Path:
    """Every argument that needs no env, model or Minari checked; the datasets directory.

    A model's files are checked on disk without importing torch (seconds), so a mistyped
    ``--model`` is answered at once (it took 15 s).
    """
    from agents.learners.checkpoint_paths import check_model_path
    from cost_envs.minari_io import check_dataset_id, datasets_root

    _check_combination(args)
    if args.dataset_id is not None:
        check_dataset_id(args.dataset_id)
    root = datasets_root(args.out)
    if args.model is not None:
        try:
            check_model_path(args.model)  # an SB3 .zip is refused here too: never unpickled
        except (ValueError, FileNotFoundError) as error:
            raise ValueError(f"--model: {error}") from None
    return root


def _policy(args: argparse.Namespace, env_kwargs: dict[str, Any], say: Progress
            ) -> tuple[Any, str]:
    """``--policy``'s method, fitted on training tasks first if it is fitted, and its name.

    A fitted method says when it fits and that it still runs; on logged queries it is
    fitted on the train split (``evaluate``'s rule: :func:`agents.cli.evaluate.method_factory`).
    """
    cls = EVALUATE_METHODS[args.policy]
    if not hasattr(cls, "fit"):
        return cls, args.policy
    _, split = applicable_methods([args.policy], args.env, env_kwargs, chosen=True,
                                   command="cost-envs export-minari")
    return method_factory(args.policy, cls, args.fit_tasks, say, args.env, env_kwargs,
                    split), args.policy


def run_export_minari(args: argparse.Namespace) -> int:
    """Write the dataset; one line on stderr and status 1 on a bad input."""
    if missing_modules(EXTRA_MODULES["minari"]):
        raise SystemExit("cost-envs export-minari: needs the minari extra "
                         f"({install_hint('minari')})")
    try:  # every argument checked before any episode is played
        root = _check_before_work(args)
        with Progress("cost-envs export-minari", enabled=not args.no_progress) as say:
            path = _export(args, say)
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"cost-envs export-minari: {' '.join(str(error).split())}") from None
    dataset_id = path.relative_to(root).as_posix()
    print(f"wrote {dataset_id} to {root}; load it with MINARI_DATASETS_PATH={root} and "
          f"minari.load_dataset({dataset_id!r})")
    return 0


def _export(args: argparse.Namespace, say: Progress) -> Path:
    """Build what ``args`` asks for and write the dataset; its directory."""
    from agents.minari_export import export_rollouts, export_supervised
    from cost_envs.traces.minari_export import export_traces

    model = _load_model(args.model, args.env) if args.model is not None else None
    env_kwargs = merged_env_kwargs(args, None if model is None else model.env_kwargs)
    for key in ("pool", "prices"):  # stored in the dataset: remade from any directory
        if getattr(args, key) is not None:
            env_kwargs[key] = str(getattr(args, key).absolute())
    if env_kwargs:
        check_env_kwargs(args.env, env_kwargs)
    common = {"out": args.out, "dataset_id": args.dataset_id, "env_kwargs": env_kwargs,
              "author": args.author}
    if args.logged:
        return export_traces(args.data, **common)
    if args.supervised is not None:
        from agents.learners.supervised import SupervisedConfig

        config = SupervisedConfig(teacher=args.supervised,
                                  **({} if args.episodes is None
                                     else {"episodes": args.episodes}))
        return export_supervised(args.env, seed=args.seed, config=config,
                                 progress=not args.no_progress, **common)
    if model is not None:
        policy, name = model, model.method
    else:
        policy, name = _policy(args, env_kwargs, say)
    return export_rollouts(args.env, policy, args.episodes or DEFAULT_EPISODES,
                           seed=args.seed, name=name, progress=not args.no_progress,
                           **common)
