"""Finding a wrapper in an env's wrapper chain."""

from __future__ import annotations

from typing import TypeVar

import gymnasium as gym

W = TypeVar("W", bound=gym.Wrapper)


def find_wrapper(env: gym.Env, kind: type[W]) -> W | None:
    """The outermost wrapper of type ``kind`` in ``env``'s chain (``env`` included), if any."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, kind):
            return env
        env = env.env
    return None
