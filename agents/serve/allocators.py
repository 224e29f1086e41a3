"""A trained allocator routing live prompts: TraceRouting-v0's observation of a fresh prompt.

An allocator trained on ``cost_envs/TraceRouting-v0`` (``cost-envs train --env
cost_envs/TraceRouting-v0``, saved as a model directory) observes a query by its prompt
alone: :func:`~cost_envs.envs.trace_routing.first_observations` (hashed n-grams or MiniLM
embeddings of the prompt, its log-scaled length in tokens, and the "unanswered" flag).
:class:`LiveAllocator` builds that observation for a live prompt with that same function
and the env's settings (features, ``n_features``, the observation's size), so the
allocator decides on a live prompt as it does on the same prompt in the env. The prompt's
length is counted with the counter the env's logs were counted with (logs with logged
counts: ``count_tokens``'s ``"auto"``; the env observes the mean of the logged counts
over the models, which differ by provider, so there the lengths are approximate).

The action calls a subset of the models; the env takes the answer of the strongest
called model (training-split accuracy, :meth:`TraceRoutingEnv.answerer`), so the server
calls that one model only (the others' answers would be paid and thrown away). The
all-zero action answers nothing (in the env the episode fails at no cost): the server
refuses the request with 422, charging nothing. The observation has no budget term: a
budget the env was trained under (``gym.make(..., budget=...)``) is not applied; the
request's, key's and organisation's budgets are (a call that does not fit is downgraded
as a router's is).

Other envs have no live counterpart (:data:`NOT_LIVE` says why, per env), and
``cascade=True`` (two steps, the second reading the first call's answer) is not served.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agents.serve.live import counter_named, live_dataset
from cost_envs.envs.trace_routing import TraceRoutingEnv, first_observations

#: The env whose allocators are served: its episodes are prompts sent to models.
SERVABLE = "cost_envs/TraceRouting-v0"
#: Why another env's allocator cannot route live requests.
NOT_LIVE = {
    "cost_envs/FlightPlanner-v0": "its episodes book simulated flight itineraries",
    "cost_envs/FlightPlanner-v1": "its episodes book simulated flight itineraries",
    "cost_envs/ToolBench-v0": "its episodes are simulated multi-stage tool-use tasks",
    "cost_envs/ExpertRouting-v0": "its questions and experts' answers are simulated "
                                  "(difficulty draws), not prompts",
    "cost_envs/ExpertRouting-v1": "its questions and experts' answers are simulated "
                                  "(difficulty draws), not prompts",
    "cost_envs/AgenticRouting-v0": "its episodes are simulated steps of long agent tasks",
}


def check_servable(env_id: str, env_kwargs: Mapping[str, Any]) -> None:
    """Refuse, in one line naming the env and why, an allocator that cannot route live requests.

    Raises:
        ValueError: Another env than TraceRouting-v0, or its two-step cascade.
    """
    if env_id != SERVABLE:
        why = NOT_LIVE.get(env_id, "it is not an env of logged prompts")
        raise ValueError(f"allocator: an allocator of {env_id} has no live counterpart "
                         f"({why}); expected one trained on {SERVABLE}")
    if env_kwargs.get("cascade"):
        raise ValueError(f"allocator: {SERVABLE} with cascade=True (two steps, the second "
                         "reading the first answer) is not served; expected cascade=False")


@dataclass(frozen=True)
class AllocatorDecision:
    """What a trained allocator does with one prompt.

    Attributes:
        model: The model whose answer the env would take (the strongest called), or
            ``None`` for the all-zero action (answer nothing).
        action: The ``MultiBinary`` action, one bit per model.
        calls: The models the action calls.
    """

    model: str | None
    action: tuple[int, ...]
    calls: tuple[str, ...]


class LiveAllocator:
    """A trained TraceRouting-v0 allocator routing prompts that were never logged.

    Args:
        allocator: Anything with SB3's ``predict`` (a loaded
            :class:`~agents.learners.training.TrainedAllocator`).
        env_id: The env it was trained on (only TraceRouting-v0 is served).
        env_kwargs: The env's ``gym.make`` arguments it was trained with.

    Raises:
        ValueError: An env without a live counterpart (:func:`check_servable`), or env
            arguments the env refuses.
    """

    def __init__(self, allocator: Any, env_id: str, env_kwargs: Mapping[str, Any]) -> None:
        check_servable(env_id, env_kwargs)
        env = gym.make(env_id, **env_kwargs).unwrapped
        assert isinstance(env, TraceRoutingEnv)
        self.allocator = allocator
        self.env = env
        self.models = tuple(env.dataset.models)
        self.size = int(env.observation_space.shape[0])
        self.token_counter = counter_named(env.full_dataset.token_counter)

    @classmethod
    def load(cls, path: str | Path, env_kwargs: Mapping[str, Any] | None = None
             ) -> LiveAllocator:
        """Load a model directory of ``cost-envs train`` (imports torch).

        Args:
            path: The model directory.
            env_kwargs: The env's arguments, when not those saved with it (a data file
                that moved); the network is built for this env.
        """
        saved_config = Path(path) / "config.json"
        if saved_config.is_file():  # refuse an env without a live counterpart before torch
            try:
                meta = json.loads(saved_config.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                meta = None  # load_allocator names what is wrong with it
            if isinstance(meta, dict) and isinstance(meta.get("env_id"), str):
                kwargs = meta.get("env_kwargs") if env_kwargs is None else env_kwargs
                check_servable(meta["env_id"], kwargs if isinstance(kwargs, Mapping) else {})
        from agents.learners.checkpoints import load_allocator

        saved = load_allocator(path, env_kwargs=env_kwargs)
        return cls(saved, saved.env_id, saved.env_kwargs)

    def observations(self, prompts: Sequence[str]) -> np.ndarray:
        """The env's first observation of each prompt, ``(n, obs_dim)`` float32."""
        prompts = list(prompts)
        if not prompts or not all(isinstance(p, str) and p for p in prompts):
            raise ValueError("prompts: expected non-empty strings")
        data = live_dataset(self.models, prompts, self.token_counter)
        return first_observations(data, self.env.features, self.env.n_features, self.size)

    def route_many(self, prompts: Sequence[str]) -> list[AllocatorDecision]:
        """Route several prompts (deterministic actions, as the env's evaluation takes)."""
        actions, _ = self.allocator.predict(self.observations(prompts), deterministic=True)
        out = []
        for action in np.asarray(actions, dtype=np.int64).reshape(len(prompts), -1):
            called = [j for j, bit in enumerate(action) if bit]
            model = self.models[self.env.answerer(called)] if called else None
            out.append(AllocatorDecision(model, tuple(int(b) for b in action),
                                         tuple(self.models[j] for j in called)))
        return out

    def route(self, prompt: str) -> AllocatorDecision:
        """Route one prompt (:class:`AllocatorDecision`)."""
        return self.route_many([prompt])[0]
