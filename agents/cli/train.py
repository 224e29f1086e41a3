"""``cost-envs train`` and ``cost-envs pretrain``: a learned allocator, a frozen base.

``train`` reads its settings from ``--config`` (:mod:`agents.cli.config`) with the flags
over them, checks the env arguments and ``--out`` before any work, trains and saves a
model directory (safetensors + config.json). ``pretrain`` writes a frozen base encoder.
Both import torch only when they run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cost_envs
from agents.cli.arguments import known_env_id, positive_int, seed_int
from agents.cli.config import read_train_config
from agents.cli.env import add_env_arguments, check_env_kwargs, merged_env_kwargs
from agents.cli.progress import Progress
from agents.learners import BASES, FROM_SCRATCH, METHODS, PPO_SETTINGS
from cost_envs.extras import EXTRA_MODULES, install_hint, missing_modules
from cost_envs.limits import check_training_memory


def add_train(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``train``."""
    parser.add_argument("--env", type=known_env_id, required=True,
                        help=f"environment id, one of: {', '.join(cost_envs.ENV_IDS)}")
    parser.add_argument("--method", choices=METHODS, required=True,
                        help="ppo: PPO from scratch; lora: supervised LoRA allocator; "
                             "lora-ppo: LoRA-guided PPO warm-started from lora; ppo-sil: "
                             "PPO with self-imitation of its best episodes; ppo-grpo: PPO "
                             "on group-relative advantages (--n-envs a multiple of 8); bdq: "
                             "a branching dueling Q-network (off-policy; --config takes its "
                             "own hyperparameters, not PPO's); dyna: bdq also learning from "
                             "a learned model's imagined steps (--config: bdq's and the "
                             "model's); sac-bits: discrete soft actor-critic per bit "
                             "(off-policy; --config takes its own hyperparameters)")
    parser.add_argument("--config", type=Path, default=None,
                        help="JSON/YAML file of SB3 hyperparameters (learning_rate, n_steps, "
                             "...), timesteps, seed, n_envs, base, action_distribution, "
                             "env_kwargs and supervised, or an rl-zoo3 file keyed by env id "
                             "(--env's entry is read); the flags override it")
    parser.add_argument("--timesteps", type=positive_int, default=None,
                        help="RL environment steps (ppo, lora-ppo; default 20000)")
    parser.add_argument("--seed", type=seed_int, default=None, help="training seed (default 0)")
    parser.add_argument("--n-envs", type=positive_int, default=None,
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


def run_train(args: argparse.Namespace) -> int:
    """Train a learned allocator and save it; every input is checked before training.

    torch and SB3 (seconds to import) are imported after the arguments, the config file's
    syntax, the env arguments and ``--out`` are checked, so those errors come at once.
    (A config file's keys are checked against SB3's signature, which imports SB3.)
    """
    from agents.learners.checkpoint_paths import check_writable

    if args.tensorboard is not None:
        if missing_modules(EXTRA_MODULES["tensorboard"]):
            raise SystemExit("cost-envs train: --tensorboard needs the tensorboard package "
                             f"({install_hint('tensorboard')})")
        try:  # SB3 makes <dir>/<method>_<n>/ only once training starts
            _check_log_directory(args.tensorboard)
        except ValueError as error:
            raise SystemExit(f"cost-envs train: --tensorboard: {error}") from None
    try:
        settings = read_train_config(args.config, args.method, args.env)
    except FileNotFoundError as error:
        raise SystemExit(f"cost-envs train: --config: {error.filename or args.config}: "
                         f"{error.strerror or 'No such file or directory'}") from None
    except ValueError as error:  # the file's own messages start with its path
        raise SystemExit(f"cost-envs train: {error}") from None
    try:  # the file, then the flags over it; all checked before any work
        env_kwargs = merged_env_kwargs(args, settings.env_kwargs)
        check_env_kwargs(args.env, env_kwargs)
        if args.method != "lora":  # --n-envs x n_steps sized before torch and the env
            check_training_memory(args.env, args.n_envs or settings.n_envs,
                                  settings.ppo.get("n_steps", PPO_SETTINGS["n_steps"]),
                                  env_kwargs)
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"cost-envs train: {error}") from None
    base = args.base if args.base is not None else settings.base
    if args.method in FROM_SCRATCH and base != "pretrained":
        raise SystemExit(f"cost-envs train: --base applies to the LoRA methods; "
                         f"{args.method} trains its whole encoder from scratch")
    try:  # before training, so a bad --out does not throw the trained model away
        check_writable(args.out)
    except ValueError as error:
        raise SystemExit(f"cost-envs train: --out: {error}") from None
    from agents.learners.checkpoints import save_allocator
    from agents.learners.training import configure_torch_threads, train

    extra = {} if settings.supervised is None else {"supervised": settings.supervised}
    timesteps = args.timesteps if args.timesteps is not None else settings.timesteps
    steps = "" if args.method == "lora" else f" for {timesteps} steps"
    try:
        configure_torch_threads()
        # SB3's bar shows on a terminal; elsewhere (a log) the line repeats every 10 s
        with Progress("cost-envs train", enabled=not args.no_progress) as say:
            say(f"training {args.method} on {args.env}{steps}", bar=True)
            trained = train(args.env, args.method, timesteps,
                            seed=args.seed if args.seed is not None else settings.seed,
                            base=base,
                            n_envs=args.n_envs if args.n_envs is not None else settings.n_envs,
                            action_distribution=settings.action_distribution,
                            env_kwargs=env_kwargs, tensorboard_log=args.tensorboard,
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


def _check_log_directory(path: Path) -> None:
    """Raise ``ValueError`` unless ``path`` is, or can be made, a directory to write in."""
    from agents.files import check_creatable, is_directory_or_absent

    if not is_directory_or_absent(path):
        raise ValueError(f"{path} exists and is not a directory")
    check_creatable(path / "run")  # its nearest existing ancestor must be writable


def add_pretrain(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``pretrain``."""
    parser.add_argument("--env", type=known_env_id, required=True,
                        help="environment family to pretrain the frozen base on")
    parser.add_argument("--out", type=Path, required=True,
                        help="output path; writes PATH.safetensors and PATH.json")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run_pretrain(args: argparse.Namespace) -> int:
    """Pretrain a frozen base encoder and write it; ``--out`` is checked first."""
    from agents.learners.checkpoint_paths import check_base_writable

    try:  # before pretraining (and importing torch), so a bad --out fails at once
        check_base_writable(args.out)
    except ValueError as error:
        raise SystemExit(f"cost-envs pretrain: --out: {error}") from None
    from agents.learners.pretrain import pretrain_base, save_base
    from agents.learners.training import configure_torch_threads

    configure_torch_threads()
    try:
        with Progress("cost-envs pretrain", enabled=not args.no_progress) as say:
            say(f"pretraining the base on {args.env}", bar=True)
            state, config = pretrain_base(args.env, seed=args.seed,
                                          progress=not args.no_progress)
    except ValueError as error:
        raise SystemExit(f"cost-envs pretrain: {error}") from None
    try:
        path = save_base(state, config, args.out)
    except (OSError, ValueError) as error:
        raise SystemExit(f"cost-envs pretrain: could not save to {args.out}: {error}") from None
    print(f"base loss {config['first_loss']:.3f} -> {config['final_loss']:.3f}; wrote {path}")
    return 0
