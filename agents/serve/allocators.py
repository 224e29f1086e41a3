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

With ``cascade=True`` the env's episodes have two steps: the first action calls a subset,
the second observation adds ``turn`` 1, the models called and
:func:`~cost_envs.envs.trace_routing.answer_features` of the cheapest called model's
answer, and the second action may call more; the answer is the strongest called model's
over both steps. Live (:meth:`LiveAllocator.route` then :meth:`LiveAllocator.escalate`):
the first model called is the cheapest of the first subset, the answer is observed with
the env's function, and the second decision names the model whose answer is taken,
called if it was not yet (:mod:`agents.serve.cascade` makes the calls). The env picks the
cheapest by the query's logged cost, known only after the calls; live, it is the
cheapest by the env's mean call cost (:attr:`TraceRoutingEnv.pool`), which is the same
model on every query of the shipped logs. The answer's output tokens are counted as the
logs' were: with the logs' counter (RouteLLM CSVs: the approximation), or, for logs with
logged counts, the upstream's ``usage.completion_tokens``.

Other envs have no live counterpart (:data:`NOT_LIVE` says why, per env).
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
from cost_envs.envs.trace_routing import TraceRoutingEnv, answer_features, first_observations
from cost_envs.traces.readers import count_tokens

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
        ValueError: Another env than TraceRouting-v0.
    """
    del env_kwargs  # every TraceRouting-v0 setting is served, the cascade too
    if env_id != SERVABLE:
        why = NOT_LIVE.get(env_id, "it is not an env of logged prompts")
        raise ValueError(f"allocator: an allocator of {env_id} has no live counterpart "
                         f"({why}); expected one trained on {SERVABLE}")


@dataclass(frozen=True)
class AllocatorDecision:
    """What a trained allocator does with one prompt.

    Attributes:
        model: The model whose answer the env would take (the strongest called), or
            ``None`` for the all-zero first action (answer nothing). A cascade's first
            decision (``needs_answer``): the model whose answer it observes (the
            cheapest called), to call first.
        action: The ``MultiBinary`` action, one bit per model.
        calls: The models the action calls.
        needs_answer: A cascade's first decision: call ``model`` and escalate with its
            answer (:meth:`LiveAllocator.escalate`).
        first_action: A cascade's second decision: the first action it followed.
    """

    model: str | None
    action: tuple[int, ...]
    calls: tuple[str, ...]
    needs_answer: bool = False
    first_action: tuple[int, ...] | None = None


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
        #: Two steps, the second reading the first answer (``cascade=True``).
        self.cascade = env.cascade
        #: The logs counted tokens with a counter (not logged counts): answers are counted too.
        self.counts_answers = self.token_counter != "auto"
        self._mean_costs = env.pool.costs.tolist()

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

    def _actions(self, observations: np.ndarray) -> np.ndarray:
        """The allocator's deterministic actions (as the env's evaluation takes), ``(n, m)``."""
        actions, _ = self.allocator.predict(observations, deterministic=True)
        return np.asarray(actions, dtype=np.int64).reshape(len(observations), -1)

    def route_many(self, prompts: Sequence[str]) -> list[AllocatorDecision]:
        """Route several prompts: the first (for a cascade, the first step's) decisions."""
        out = []
        for action in self._actions(self.observations(prompts)):
            called = [j for j, bit in enumerate(action) if bit]
            if not called:
                model = None
            elif self.cascade:  # its answer is observed: the cheapest called
                model = self.models[self.env.observed_model(called, self._mean_costs)]
            else:
                model = self.models[self.env.answerer(called)]
            out.append(AllocatorDecision(model, tuple(int(b) for b in action),
                                         tuple(self.models[j] for j in called),
                                         needs_answer=self.cascade and bool(called)))
        return out

    def route(self, prompt: str) -> AllocatorDecision:
        """Route one prompt (:class:`AllocatorDecision`)."""
        return self.route_many([prompt])[0]

    def answer_tokens(self, answers: Sequence[str],
                      output_tokens: Sequence[int | None] | None = None) -> np.ndarray:
        """The answers' output tokens as the env's logs counted them (module docstring).

        Logs counted with a counter: the same counter on the texts. Logs with logged
        counts: ``output_tokens`` (the upstream's ``usage.completion_tokens``) where
        given, else the texts counted (tiktoken when installed).
        """
        if self.counts_answers or output_tokens is None:
            return count_tokens(list(answers), self.token_counter)[0]
        if len(output_tokens) != len(answers):
            raise ValueError(f"output_tokens: expected {len(answers)}, got "
                             f"{len(output_tokens)}")
        missing = [a for a, t in zip(answers, output_tokens, strict=True) if t is None]
        counted = iter(count_tokens(missing, self.token_counter)[0].tolist())
        return np.array([next(counted) if t is None else t for t in output_tokens],
                        dtype=np.int64)

    def second_observations(self, prompts: Sequence[str], first_actions: Sequence[Sequence[int]],
                            answers: Sequence[str],
                            output_tokens: Sequence[int | None] | None = None) -> np.ndarray:
        """The cascade env's second observation of each prompt, ``(n, obs_dim)`` float32.

        Args:
            prompts: The prompts.
            first_actions: The first actions (non-zero: the all-zero one ends the episode).
            answers: The answer of the model each first action observes
                (:attr:`AllocatorDecision.model` of :meth:`route`).
            output_tokens: The answers' output tokens from the upstream (used for logs
                with logged counts, :meth:`answer_tokens`).

        Raises:
            ValueError: Not a cascade, or actions or answers that do not fit.
        """
        if not self.cascade:
            raise ValueError(f"escalate: the allocator's env has cascade=False (one step); "
                             f"expected one trained on {SERVABLE} with cascade=True")
        rows = self.observations(prompts)
        firsts = np.asarray(first_actions, dtype=np.int64)
        m = len(self.models)
        if (firsts.shape != (len(rows), m) or not np.isin(firsts, (0, 1)).all()
                or not firsts.any(axis=1).all()):
            raise ValueError(f"first_actions: expected {len(rows)} non-zero 0/1 actions of "
                             f"{m} bits, got {firsts.tolist()}")
        if len(answers) != len(rows) or not all(isinstance(a, str) for a in answers):
            raise ValueError(f"answers: expected {len(rows)} strings, got {len(answers)}")
        layout = self.env.observation_layout
        rows[:, layout["turn"]] = 1.0
        rows[:, layout["called"]] = firsts
        rows[:, layout["answer_features"].start: layout["answer_has_text"].stop] = (
            answer_features(list(answers), self.answer_tokens(answers, output_tokens)))
        return rows

    def escalate_many(self, prompts: Sequence[str], first_actions: Sequence[Sequence[int]],
                      answers: Sequence[str],
                      output_tokens: Sequence[int | None] | None = None
                      ) -> list[AllocatorDecision]:
        """A cascade's second decisions, given the observed answers (:meth:`second_observations`).

        Each decision's ``model`` is the one whose answer the env takes: the strongest
        called over both steps (:meth:`TraceRoutingEnv.answerer`).
        """
        rows = self.second_observations(prompts, first_actions, answers, output_tokens)
        out = []
        for first, action in zip(np.asarray(first_actions, dtype=np.int64),
                                 self._actions(rows), strict=True):
            called = [j for j, bit in enumerate(action) if bit]
            both = [j for j in range(len(self.models)) if first[j] or action[j]]
            out.append(AllocatorDecision(self.models[self.env.answerer(both)],
                                         tuple(int(b) for b in action),
                                         tuple(self.models[j] for j in called),
                                         first_action=tuple(int(b) for b in first)))
        return out

    def escalate(self, prompt: str, first_action: Sequence[int], answer: str,
                 output_tokens: int | None = None) -> AllocatorDecision:
        """A cascade's second decision on one prompt (:meth:`escalate_many`)."""
        return self.escalate_many([prompt], [first_action], [answer], [output_tokens])[0]
