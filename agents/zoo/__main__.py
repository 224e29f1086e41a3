"""``python -m agents.zoo path|warm-start|train``: rl-zoo3 with the project's methods.

See :mod:`agents.zoo` for the commands in order.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agents.zoo import CONFIGS, GROUP_KEYS, config_path, hyperparameters, register_algos


def _parser() -> argparse.ArgumentParser:
    # no abbreviations (issue #26): a misspelt option is an error, not another option
    parser = argparse.ArgumentParser(prog="python -m agents.zoo", description=__doc__,
                                     allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True)
    path = commands.add_parser("path", allow_abbrev=False,
                               help="print a shipped hyperparameter file's path")
    path.add_argument("algo", choices=list(CONFIGS))
    warm = commands.add_parser(
        "warm-start", allow_abbrev=False,
        help="the supervised stage, saved as a lora_ppo model for rl-zoo3's -i")
    warm.add_argument("--env", required=True, help="a registered cost-envs id")
    warm.add_argument("--out", required=True, type=Path, help="the model file (.zip)")
    warm.add_argument("--seed", type=int, default=0)
    warm.add_argument("--base", choices=("pretrained", "random"), default="pretrained",
                      help="the frozen base (pretrained is shipped for ToolBench and "
                           "FlightPlanner)")
    warm.add_argument("-conf", "--conf", type=Path, default=None,
                      help="the lora_ppo hyperparameter file the RL stage will use "
                           "(default: the shipped one)")
    warm.add_argument("--episodes", type=int, default=None,
                      help="teacher episodes (default: SupervisedConfig's)")
    warm.add_argument("--epochs", type=int, default=None,
                      help="supervised epochs (default: SupervisedConfig's)")
    warm.add_argument("--env-kwargs", type=json.loads, default={},
                      help='gym.make arguments as JSON, e.g. \'{"budget": 0.05}\'')
    commands.add_parser("train", add_help=False, allow_abbrev=False,
                        help="python -m rl_zoo3.train with lora_ppo registered "
                             "(all arguments are rl-zoo3's)")
    return parser


def warm_start(args: argparse.Namespace) -> Path:
    """Run the supervised stage and save it as a ``LoraGuidedPPO`` model; returns the file."""
    import gymnasium as gym

    from agents.learners.lora_ppo import LoraGuidedPPO
    from agents.learners.supervised import SupervisedConfig
    from agents.learners.training import train

    conf = args.conf or config_path("lora_ppo")
    entry = hyperparameters(args.env, conf)  # first: a missing entry fails before training
    stage = {key: value for key, value in (("episodes", args.episodes),
                                           ("epochs", args.epochs)) if value is not None}
    supervised = train(args.env, "lora", 1, seed=args.seed, base=args.base,
                       env_kwargs=args.env_kwargs, supervised=SupervisedConfig(**stage))
    env = gym.make(args.env, **supervised.env_kwargs)
    groups = {key: entry[key] for key in GROUP_KEYS if key in entry}
    model = LoraGuidedPPO.from_supervised(supervised.policy, env, device="cpu", seed=args.seed,
                                          **groups)
    model.save(args.out)
    env.close()
    return args.out if args.out.suffix == ".zip" else args.out.with_name(args.out.name + ".zip")


def main(argv: list[str] | None = None) -> None:
    """Dispatch ``path``, ``warm-start`` or ``train`` (the last to rl-zoo3)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:
        register_algos()
        from rl_zoo3.train import train as zoo_train

        sys.argv = ["rl_zoo3.train", *argv[1:]]
        zoo_train()
        return
    args = _parser().parse_args(argv)
    if args.command == "path":
        print(config_path(args.algo))
    else:
        print(f"saved the warm start to {warm_start(args)}")


if __name__ == "__main__":
    main()
