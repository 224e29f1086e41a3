"""The routing literature's random router, acting in TraceRouting-v0.

The env-generic ``random`` baseline (:class:`agents.baselines.RandomAllocator`) calls
each model with probability 1/2, independently: with two models a quarter of
TraceRouting-v0's episodes call nobody (and fail at no cost) and another quarter pay for
both. That is not the random router RouteLLM and RouterBench compare with, which sends
each query to exactly one model at random. :class:`RandomRouter` is that router, as a
policy scored through the env (``evaluate``/``compare`` or ``cost-envs evaluate
--methods random-router``); its expectation over all queries is
:func:`agents.routers.evaluation.random_shares`' exact score.

It is registered in :data:`agents.baselines.FAMILY_BASELINES` (baselines of one env
family: it refuses every other env in one line); it lives here, beside the env's other
routers, and subclasses :class:`~agents.allocator.Allocator` directly so that
:mod:`agents.baselines` can import it without a cycle.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from agents.allocator import Allocator
from cost_envs.config import probability
from cost_envs.envs.trace_routing import TraceRoutingEnv


class RandomRouter(Allocator):
    """One model per query, drawn at random: uniformly, or at a strong-call share.

    At a query's first step it calls exactly one model, drawn uniformly over the env's
    models, or with two models the strongest (``env.strongest``, the more accurate on
    the training split) with probability ``share``; in the cascade's second step
    (``cascade=True``) it accepts the answer it has. Its draws come from its own
    generator, never the env's, so every method still meets the same queries.

    Args:
        env: A TraceRouting-v0 env (possibly wrapped).
        share: Probability of the strongest model (two models only); ``None``: uniform.
        seed: Seed of the router's own generator.

    Raises:
        ValueError: On another env, a share outside [0, 1], or a share with more than
            two models.
    """

    #: Name in :data:`agents.baselines.FAMILY_BASELINES` and the CLI.
    name = "random-router"

    def __init__(self, env: gym.Env, share: float | None = None, seed: int | None = 0) -> None:
        base = env.unwrapped
        if not isinstance(base, TraceRoutingEnv):
            raise ValueError(f"RandomRouter: expected cost_envs/TraceRouting-v0, got "
                             f"{getattr(base, 'env_name', type(base).__name__)}")
        self.env = base
        self.n_agents = base.n_agents
        self.p = np.full(self.n_agents, 1.0 / self.n_agents)
        if share is not None:
            if self.n_agents != 2:
                raise ValueError(f"RandomRouter: share applies to two models, the env has "
                                 f"{self.n_agents}; leave it None (uniform)")
            self.p[:] = 1.0 - probability(share, "share", where="RandomRouter")
            self.p[base.strongest] = share
        layout = base.observation_layout
        self._open = layout["task_embedding"].start
        self._turn = layout["turn"].start if "turn" in layout else None
        self.rng = np.random.default_rng(seed)

    def act(self, observation: np.ndarray) -> np.ndarray:
        """One model drawn at the first step of an open query; nothing otherwise."""
        action = np.zeros(self.n_agents, dtype=np.int8)
        if observation[self._open] > 0 and (self._turn is None
                                            or observation[self._turn] < 0.5):
            action[self.rng.choice(self.n_agents, p=self.p)] = 1
        return action
