"""The env arguments ``cost-envs train`` and ``cost-envs evaluate`` share.

``--pool FILE``, ``--prices FILE`` and ``--env-kwargs`` (a JSON or YAML mapping, written
inline or as a ``.json``/``.yaml``/``.yml`` file) become the ``gym.make`` keyword
arguments of the env. Later sources override earlier ones, key by key::

    a saved model's env kwargs (evaluate) or a config file's ``env_kwargs`` (train)
    < --env-kwargs < --pool / --prices

Every key is checked against the env's constructor (its entry point's signature), so a
misspelt key is a one-line error naming it and the keys the env takes; the values are
checked by building the env once, whose own errors name the bad value. Relative paths
(a pool or price file) are read from the current directory.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from cost_envs.config import suggestion
from cost_envs.config_files import CONFIG_SUFFIXES, parse_config_text, read_config_file

#: ``gym.make`` arguments accepted beside the env's own.
MAKE_ARGUMENTS = ("max_episode_steps",)


def add_env_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--pool``, ``--prices`` and ``--env-kwargs`` to ``parser``."""
    parser.add_argument("--pool", type=Path, default=None,
                        help="JSON/YAML agent pool file replacing the env's preset pool")
    parser.add_argument("--prices", type=Path, default=None,
                        help="JSON/YAML price table; lists only the models whose prices it "
                             "changes (merged onto the shipped table)")
    parser.add_argument("--env-kwargs", type=env_kwargs_text, default=None, metavar="MAPPING",
                        help="more gym.make arguments: inline JSON or YAML "
                             "('{max_rounds: 2}') or a .json/.yaml file")


def env_kwargs_text(text: str) -> dict[str, Any]:
    """An argparse type: ``text`` as a mapping, read from a file if it names one.

    Raises:
        argparse.ArgumentTypeError: One line: the file or the text cannot be parsed, or
            it is not a mapping with string keys.
    """
    path = Path(text)
    try:
        if path.suffix.lower() in CONFIG_SUFFIXES:
            if not path.exists():  # a FIFO or a directory is there: the reader names it
                raise ValueError(f"{path}: no such file")
            data, source = read_config_file(path), str(path)
        else:
            data, source = parse_config_text(text, "inline", "yaml"), "inline"
    except ValueError as error:
        raise argparse.ArgumentTypeError(" ".join(str(error).split())) from None
    if not isinstance(data, Mapping) or not all(isinstance(key, str) for key in data):
        raise argparse.ArgumentTypeError(
            f"{source}: expected a mapping of argument names to values, got {data!r}")
    return dict(data)


def merged_env_kwargs(args: argparse.Namespace,
                      base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``base`` overridden by ``--env-kwargs``, then by ``--pool`` and ``--prices``."""
    kwargs = {**(base or {}), **(args.env_kwargs or {})}
    for key in ("pool", "prices"):
        value = getattr(args, key)
        if value is not None:
            kwargs[key] = str(value)
    return kwargs


def env_arguments(env_id: str) -> tuple[str, ...] | None:
    """The keyword arguments ``env_id``'s constructor takes (``None``: any, ``**kwargs``)."""
    spec = gym.spec(env_id)
    creator: Any = (load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str)
                    else spec.entry_point)
    params = inspect.signature(creator).parameters.values()
    if any(param.kind is param.VAR_KEYWORD for param in params):
        return None
    return tuple(param.name for param in params
                 if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY))


def check_env_kwargs(env_id: str, kwargs: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` on a key ``env_id`` does not take, or a value it refuses.

    The keys are checked against the signature first (naming every unknown key and the
    valid ones), then the env is built once and closed, so a bad value fails here with
    the env's own one-line message rather than in the middle of a run.
    """
    name = env_id.split("/")[-1]
    valid = env_arguments(env_id)
    if valid is not None:
        allowed = (*valid, *MAKE_ARGUMENTS)
        unknown = sorted(key for key in kwargs if key not in allowed)
        if unknown:
            raise ValueError(f"{name} takes no argument(s) {unknown}; valid: "
                             f"{list(allowed)}{suggestion(unknown[0], allowed)}")
    try:
        env = gym.make(env_id, **kwargs)
    except FileNotFoundError as error:
        raise ValueError(f"{name}: no such file: {error.filename or error}") from None
    except (ValueError, TypeError) as error:  # TypeError: a value of a kind it cannot take
        message = " ".join(str(error).split())
        raise ValueError(message if message.startswith(name) else f"{name}: {message}"
                         ) from None
    env.close()
