"""One fresh request routed by a saved router, with the offline scorer's features and rule.

A router of :data:`~agents.routers.ROUTERS` reads queries from a
:class:`~cost_envs.traces.TraceDataset`. A live prompt has no outcome yet, so
:class:`LiveRouter` builds a dataset of the prompts alone (no outcomes: correctness,
scores and output tokens are zeros, which no router reads at routing time) and asks the
router what it asks of logged queries: its inputs, its prediction and its decision at
the saved operating point. What a router reads at routing time is the prompt's text,
for a cascade the weak model's answer, and for a priced router the prompt's tokens,
counted once with the counter its training logs were counted with (the saved JSON's
``training.token_counter``; logs with logged token counts fall back to ``"auto"``) and
used for every model: where the providers' tokenizers differ from that counter (logged
counts), the prices are off by their ratio (RouterArena: about 2% for one model, 18% for
the other).

A cascade decides after the weak model has answered: without ``answer`` it says to call
the weak model first (:attr:`RouteDecision.needs_answer`), with it whether to escalate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agents.routers import Router, SavedRouter, load_router
from cost_envs.config import number
from cost_envs.traces import TraceDataset
from cost_envs.traces.readers import APPROX_COUNTER, count_tokens


@dataclass(frozen=True)
class RouteDecision:
    """What a router says about one request.

    Attributes:
        model: The model to call.
        score: A two-model router's score (P(the weak model is wrong); a priced router's
            predicted accuracy gained per extra dollar); ``None`` for a K-model router
            and for a cascade before the weak model answered.
        point: The operating point it was compared with (threshold or ``lam``).
        win: What the router predicts per model: a two-model router's ``(1 - score,
            score)``, a priced or K-model router's predicted correctness of each model.
        expected_costs: Each call's price before it is made (priced routers), else
            ``None``.
        needs_answer: A cascade without the weak answer yet: call ``model`` (the weak
            one) and route again with its answer.
    """

    model: str
    score: float | None
    point: float
    win: dict[str, float]
    expected_costs: dict[str, float] | None = None
    needs_answer: bool = False


def counter_named(name: str) -> str:
    """The ``count_tokens`` counter of logs counted by ``name`` (logged counts: ``"auto"``)."""
    if name == APPROX_COUNTER:
        return "approx"
    return "tiktoken" if name.startswith("tiktoken") else "auto"


def counter_of(saved: SavedRouter) -> str:
    """The :func:`~cost_envs.traces.readers.count_tokens` counter of a router's training logs."""
    return counter_named(str(saved.meta.get("training", {}).get("token_counter", "")))


def live_dataset(models: Sequence[str], prompts: Sequence[str], counter: str | None,
                 answers: Sequence[str] | None = None) -> TraceDataset:
    """Prompts never logged as a dataset (:meth:`TraceDataset.unlogged`).

    Every model's input tokens are the prompt's count by ``counter`` (``None``: zeros,
    for a reader of no token counts); ``answers`` are the first model's (a cascade's weak
    answers).
    """
    tokens, name = (count_tokens(list(prompts), counter) if counter is not None
                    else (None, "none"))
    responses = None
    if answers is not None:  # the weak model's answer, in its column
        responses = [(a,) + (None,) * (len(models) - 1) for a in answers]
    return TraceDataset.unlogged(models, prompts, tokens, responses, token_counter=name,
                                 source="<live>")


class LiveRouter:
    """A saved router routing prompts that were never logged.

    Args:
        saved: A loaded router (:func:`~agents.routers.load_router`).
        token_counter: How prompt tokens are counted for a priced router (default: as
            its training logs were, :func:`counter_of`).
    """

    def __init__(self, saved: SavedRouter, token_counter: str | None = None) -> None:
        self.saved = saved
        self.router = saved.router
        self.models = tuple(saved.models)
        self.token_counter = counter_of(saved) if token_counter is None else token_counter
        #: Whether the router prices calls (reads the prompt's tokens).
        self._priced = (type(self.router).expected_costs_inputs
                        is not Router.expected_costs_inputs)
        if self._priced:
            count_tokens([], self.token_counter)  # a bad counter fails here, not per request

    @classmethod
    def load(cls, path: str | Path, token_counter: str | None = None) -> LiveRouter:
        """:func:`~agents.routers.load_router`, ready to route."""
        return cls(load_router(path), token_counter)

    def _queries(self, prompts: Sequence[str], answers: Sequence[str] | None) -> TraceDataset:
        # only a priced router reads the prompt's tokens; the others are spared the count
        return live_dataset(self.models, prompts, self.token_counter if self._priced else None,
                            answers)

    def route_many(self, prompts: Sequence[str], answers: Sequence[str] | None = None,
                   point: float | None = None) -> list[RouteDecision]:
        """Route several prompts at once (the same decisions as one at a time).

        Args:
            prompts: The requests' prompts (non-empty strings).
            answers: A cascade's weak answers, one per prompt.
            point: Another operating point than the saved one.

        Raises:
            ValueError: On an empty or non-string prompt, or answers of another length.
        """
        prompts = list(prompts)
        if not prompts or not all(isinstance(p, str) and p for p in prompts):
            raise ValueError("prompts: expected non-empty strings")
        if answers is not None and len(answers) != len(prompts):
            raise ValueError(f"answers: expected {len(prompts)}, got {len(answers)}")
        at = self.saved.point if point is None else number(
            point, "point", minimum=0 if not self.saved.two_model else -np.inf)
        if self.router.reads_answers and answers is None:
            weak = self.models[0]
            return [RouteDecision(weak, None, at, {}, needs_answer=True) for _ in prompts]
        data = self._queries(prompts, answers)
        inputs = self.router.inputs(data)
        win = self.router.predict_inputs(inputs)
        costs = self.router.expected_costs_inputs(inputs)
        # Router.decide_inputs's rule, on the prediction and prices already made here
        chosen = (self.router.decide(win, at) if costs is None
                  else self.router.decide(win, at, costs))
        scores = (self.router.scores_of(win, costs) if self.saved.two_model
                  else [None] * len(prompts))
        return [RouteDecision(
            self.models[int(k)], None if s is None else float(s), at,
            dict(zip(self.models, map(float, w), strict=True)),
            None if costs is None else dict(zip(self.models, map(float, c), strict=True)))
            for k, s, w, c in zip(chosen, scores, win,
                                  costs if costs is not None else [None] * len(prompts),
                                  strict=True)]

    def route(self, prompt: str, answer: str | None = None,
              point: float | None = None) -> RouteDecision:
        """Route one prompt: the model to call and why (:class:`RouteDecision`)."""
        return self.route_many([prompt], None if answer is None else [answer], point)[0]
