"""Routers acting in TraceRouting-v0: :class:`RouterPolicy` and the cascade's replay.

:class:`RouterPolicy` is a router trained on the env's own first-step observations (the
SB3 ``predict`` signature); :func:`cascade_observations` replays the env's cascade step
for every query (what a policy sees when it decides to escalate).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from agents.allocator import Allocator
from agents.routers.solvers import LogisticRegression
from cost_envs.envs.trace_routing import TraceRoutingEnv, TraceTask


def _trace_env(env: gym.Env, who: str) -> TraceRoutingEnv:
    """``env.unwrapped``, if it is a TraceRouting env."""
    base = env.unwrapped
    if not isinstance(base, TraceRoutingEnv):
        raise ValueError(f"{who}: expected a TraceRouting env, got {type(base).__name__}")
    return base


class RouterPolicy(Allocator):
    """A router acting in TraceRouting-v0: the strong model when its score >= threshold.

    Trained by :meth:`fit` on the env's own first-step observations
    (``query_features`` and ``prompt_length``) to predict that the weak model fails; in
    the cascade's second step it accepts the answer it has. SB3 ``predict`` signature.

    Args:
        env: A TraceRouting-v0 env (possibly wrapped).
        weak: Name of the weak model (default: the cheapest).
        strong: Name of the strong model (default: the most accurate on training).
        threshold: Score at or above which the strong model is called.
        l2: Logistic regression penalty.
    """

    name = "learned"

    def __init__(self, env: gym.Env, weak: str | None = None, strong: str | None = None,
                 threshold: float = 0.5, l2: float = 1.0) -> None:
        base = _trace_env(env, "RouterPolicy")
        self.env = base
        names = base.pool.names
        self.weak = names.index(weak) if weak is not None else base.cheapest
        self.strong = names.index(strong) if strong is not None else base.strongest
        self.threshold = float(threshold)
        layout = base.observation_layout
        self._columns = np.r_[layout["query_features"], layout["prompt_length"]]
        self._task = layout["task_embedding"].start
        self._turn = layout["turn"].start if "turn" in layout else None
        self.model = LogisticRegression(l2)

    def fit(self, env: gym.Env | None = None) -> RouterPolicy:
        """Fit on the first-step observations of ``env``'s queries (default: its own env).

        Pass the training-split env and act on the test-split one.
        """
        base = self.env if env is None else _trace_env(env, "RouterPolicy.fit")
        x = base.initial_observations()[:, self._columns]
        y = ~base.dataset.correct[:, self.weak]
        self.model.fit(x, y)
        return self

    def scores(self, observations: np.ndarray) -> np.ndarray:
        """Scores of first-step observations ``(n, d)``."""
        return self.model.predict_proba(np.asarray(observations)[:, self._columns])

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The action for one observation."""
        action = np.zeros(self.env.n_agents, dtype=np.int8)
        if observation[self._task] <= 0 or (
                self._turn is not None and observation[self._turn] >= 0.5):
            return action  # answered, or the cascade's second step: accept
        score = self.scores(observation[None, :])[0]
        action[self.strong if score >= self.threshold else self.weak] = 1
        return action


def cascade_observations(env: gym.Env) -> np.ndarray:
    """The cascade's second-step observation of every query of a cascade env, ``(n, d)``.

    Each query is replayed (``reset(options={"task": ...})``) with only the cheapest
    model called first: exactly what a policy sees when it decides to escalate.
    """
    base = env.unwrapped
    if not (isinstance(base, TraceRoutingEnv) and base.cascade):
        raise ValueError("cascade_observations: expected TraceRouting-v0 with cascade=True")
    data = base.dataset
    action = np.zeros(base.n_agents, dtype=np.int8)
    action[base.cheapest] = 1
    rows = []
    for q in range(data.n_queries):
        env.reset(options={"task": TraceTask(q, data.query_ids[q], base.n_agents,
                                             data.fingerprint)})
        obs, *_ = env.step(action)
        rows.append(obs)
    return np.array(rows)
