"""What a client's model name selects: a fixed model, a saved router or a trained allocator.

As RouteLLM's server: ``router-<name>-<threshold>`` routes with router ``<name>`` at that
threshold (``router-<name>`` at its saved one; an allocator,
:mod:`agents.serve.allocators`, has no threshold); a route's own name (``cheap``) or a
model's name calls that model. One parser reads the threshold (:func:`split_threshold`):
a name that starts with a router's name and a dash is that router's, and a threshold that
is not a decimal number in the router's range (:func:`threshold_range`) is a 400 naming
``model``; a name that names no router is a 404. The result is the models to try in
order: the chosen one first, then (a request that does not fit its budget is
downgraded) the router's cheaper models, dearest first, then its dearer ones and the
route's ``fallbacks`` (an upstream that fails falls back to another model within the
budget).

A cascade router's plan starts with its weak model and carries the router
(:attr:`Plan.cascade`): once the weak model has answered, :meth:`Plan.escalation` says
whether the cascade escalates to its strong model (:mod:`agents.serve.cascade` makes the
calls). An allocator trained with ``cascade=True`` is served by the same flow: its plan
starts with the model whose answer its second step observes, and
:meth:`Plan.escalation` names the model whose answer the env would take when it is
another one. The plan holds the router it was made with, so a request routed before a
reload finishes on the old router.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from agents.routers import TwoModelRouter
from agents.serve.allocators import AllocatorDecision, LiveAllocator
from agents.serve.config import ROUTER_PREFIX, ServeConfig
from agents.serve.inputs import ApiError
from agents.serve.live import LiveRouter, RouteDecision

#: A threshold's text: a decimal number (no ``nan``, ``inf``, hex or underscores).
_THRESHOLD = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
#: The header of a cascade allocator's answer: its two actions, as bits (``"10,01"``).
ACTIONS_HEADER = "X-Cost-Envs-Actions"


def _bits(action: tuple[int, ...]) -> str:
    return "".join(map(str, action))


def threshold_range(live: LiveRouter) -> tuple[float, float]:
    """The operating points a client may ask of ``live``: ``(low, high)``, both included.

    A two-model router whose score is its predicted probability that the weak model is
    wrong (logistic, cascade, kNN: :meth:`TwoModelRouter.scores_of` not overridden)
    compares it with a threshold in [0, 1]; a two-model router with a score of its own (a
    priced router's accuracy per dollar) takes one from its ``min_threshold`` up; a
    K-model router's ``lam`` is >= 0, as :meth:`LiveRouter.route_many` checks.
    """
    router = live.router
    if not live.saved.two_model:
        return 0.0, math.inf
    if type(router).scores_of is TwoModelRouter.scores_of:
        return 0.0, 1.0
    return float(getattr(router, "min_threshold", -math.inf)), math.inf


def _range_text(low: float, high: float) -> str:
    if math.isinf(low) and math.isinf(high):
        return "a finite number"
    if math.isinf(high):
        return f"a finite number >= {low:g}"
    return f"a number in [{low:g}, {high:g}]"


def split_threshold(rest: str, routers: Mapping[str, LiveRouter | LiveAllocator]
                    ) -> tuple[str, float | None] | None:
    """The router and threshold that a model name ``router-<rest>`` asks for.

    Args:
        rest: The model name after :data:`~agents.serve.config.ROUTER_PREFIX`.
        routers: The loaded routers, by route name.

    Returns:
        ``(name, None)`` when ``rest`` is a router's name (its saved operating point),
        ``(name, threshold)`` for ``<name>-<threshold>`` (the longest router name that
        fits), ``None`` when ``rest`` names no router.

    Raises:
        ApiError: 400 naming ``model`` when ``rest`` is ``<name>-<text>`` for a router
            ``<name>`` and ``<text>`` is not a decimal number in the router's range
            (:func:`threshold_range`: ``nan``, ``inf``, hex, empty, out of range), or
            ``<name>`` is an allocator (it has no threshold).
    """
    if rest in routers:
        return rest, None
    names = [name for name in routers if rest.startswith(f"{name}-")]
    if not names:
        return None
    name = max(names, key=len)
    text, asked, live = rest[len(name) + 1:], f"{ROUTER_PREFIX}{rest}", routers[name]
    if isinstance(live, LiveAllocator):
        raise ApiError(400, f"model: {asked!r}: an allocator has no threshold; expected "
                       f"'{ROUTER_PREFIX}{name}'", param="model")
    low, high = threshold_range(live)
    value = float(text) if _THRESHOLD.fullmatch(text) else math.nan
    if not (math.isfinite(value) and low <= value <= high):
        raise ApiError(400, f"model: {asked!r}: expected '{ROUTER_PREFIX}{name}' or "
                       f"'{ROUTER_PREFIX}{name}-THRESHOLD' with THRESHOLD "
                       f"{_range_text(low, high)}, got threshold {text!r}", param="model")
    return name, value


@dataclass(frozen=True)
class Plan:
    """The models to try for one request, in order, and why.

    Attributes:
        route: The route's name as the ledger records it (``router-NAME``).
        models: The models to try, in order (server names).
        decision: The router's decision (``needs_answer`` for a cascade).
        cascade: A cascade's router or a cascade allocator (the model it calls first is
            ``models[0]``), else ``None``.
        mapping: The router's model names -> the server's (the route's ``models``).
    """

    route: str
    models: tuple[str, ...]
    decision: RouteDecision | AllocatorDecision | None = None
    cascade: LiveRouter | LiveAllocator | None = None
    mapping: Mapping[str, str] = field(default_factory=dict)

    def escalation(self, prompt: str, answer: str,
                   output_tokens: int | None = None) -> str | None:
        """The model to call after the first ``answer``, or ``None`` to keep it.

        A cascade router's decision at the plan's operating point, as the offline scorer
        makes it on a logged weak answer (:meth:`LiveRouter.route`); a cascade
        allocator's second decision (:meth:`LiveAllocator.escalate`; ``output_tokens``:
        the answer's ``usage.completion_tokens``).
        """
        return self.second(prompt, answer, output_tokens)[0]

    def second(self, prompt: str, answer: str, output_tokens: int | None = None
               ) -> tuple[str | None, dict[str, str]]:
        """:meth:`escalation` and the response headers saying what decided it.

        A cascade allocator's headers: :data:`ACTIONS_HEADER` (its two actions).
        """
        if isinstance(self.cascade, LiveAllocator) and isinstance(self.decision,
                                                                  AllocatorDecision):
            second = self.cascade.escalate(prompt, self.decision.action, answer,
                                           output_tokens)
            headers = {ACTIONS_HEADER: f"{_bits(self.decision.action)},{_bits(second.action)}"}
            if second.model == self.decision.model:  # the answer already bought is taken
                return None, headers
            assert second.model is not None  # the first step called someone
            return self.mapping.get(second.model, second.model), headers
        if not isinstance(self.cascade, LiveRouter) or not isinstance(self.decision,
                                                                      RouteDecision):
            raise ValueError(f"{self.route}: not a cascade; expected a cascade's plan")
        chosen = self.cascade.route(prompt, answer, self.decision.point).model
        if chosen == self.cascade.models[0]:
            return None, {}
        return self.mapping.get(chosen, chosen), {}


class Routes:
    """The configured routes, their routers loaded (once, at start).

    Raises:
        ValueError: A router that cannot be loaded, or names a model that is not
            configured (map it with the route's ``models``).
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.routers: dict[str, LiveRouter | LiveAllocator] = {}
        for name, route in config.routes.items():
            if route.path is not None:
                live: LiveRouter | LiveAllocator = LiveRouter.load(route.path)
            elif route.allocator is not None:
                try:
                    live = LiveAllocator.load(route.allocator, route.env_kwargs)
                except ValueError as err:
                    raise ValueError(f"routers: {name}: {err}") from None
            else:
                continue
            for model in live.models:
                if route.models.get(model, model) not in config.models:
                    raise ValueError(
                        f"routers: {name}: the router's model {model!r} is not one of "
                        f"models {list(config.models)}; map it with models: {{{model}: NAME}}")
            self.routers[name] = live

    def names(self) -> list[str]:
        """The model names clients can send."""
        found = list(self.config.models)
        for name, route in self.config.routes.items():
            found.append(name if route.model is not None else f"{ROUTER_PREFIX}{name}")
        return found

    def _by_price(self, names: list[str]) -> list[str]:
        models = self.config.models
        return sorted(names, key=lambda n: (models[n].input_price + models[n].output_price, n))

    def plan(self, name: str, prompt: str) -> Plan:
        """The models to try for model name ``name`` and a prompt.

        Raises:
            ApiError: 404 naming ``model`` when no model or route has that name; 400 for
                a router's name with a bad threshold (:func:`split_threshold`).
        """
        config = self.config
        if name in config.models:
            return Plan(name, (name,))
        route = config.routes.get(name)
        if route is not None and route.model is not None:
            return Plan(name, _unique((route.model, *route.fallbacks)))
        if name.startswith(ROUTER_PREFIX):
            found = split_threshold(name[len(ROUTER_PREFIX):], self.routers)
            if found is not None:
                return self._routed(*found, prompt, name)
        raise ApiError(404, f"model: expected one of {self.names()} (or router-NAME-THRESHOLD), "
                       f"got {name!r}", param="model", code="model_not_found")

    def _routed(self, name: str, threshold: float | None, prompt: str, asked: str) -> Plan:
        route, live = self.config.routes[name], self.routers[name]
        if isinstance(live, LiveAllocator):  # split_threshold gave it no threshold
            return self._allocated(name, live, prompt, asked)
        try:
            decision = live.route(prompt, point=threshold)
        except ValueError as err:  # a threshold out of the router's range
            raise ApiError(400, f"model: {asked!r}: {err}", param="model") from None
        cascade = live if decision.needs_answer else None
        return Plan(f"{ROUTER_PREFIX}{name}", self._order(name, live.models, decision.model),
                    decision, cascade, dict(route.models))

    def _allocated(self, name: str, live: LiveAllocator, prompt: str, asked: str) -> Plan:
        decision = live.route(prompt)
        if decision.model is None:  # the env's "answer nothing": nothing is charged
            raise ApiError(422, f"model: {asked!r}: the allocator answers nothing for this "
                           "prompt (its all-zero action); send it to another route",
                           param="model", code="allocator_declined")
        # a cascade allocator calls the model whose answer it observes first
        return Plan(f"{ROUTER_PREFIX}{name}", self._order(name, live.models, decision.model),
                    decision, live if decision.needs_answer else None,
                    dict(self.config.routes[name].models))

    def _order(self, name: str, models: tuple[str, ...], choice: str) -> tuple[str, ...]:
        """The chosen model, then the cheaper ones (dearest first), the dearer, the fallbacks."""
        route = self.config.routes[name]
        chosen = route.models.get(choice, choice)
        mapped = [route.models.get(m, m) for m in models]
        prices = self.config.models
        price = prices[chosen].input_price + prices[chosen].output_price
        cheaper = [m for m in mapped if m != chosen
                   and prices[m].input_price + prices[m].output_price <= price]
        dearer = [m for m in mapped if m != chosen and m not in cheaper]
        return _unique((chosen, *reversed(self._by_price(cheaper)), *self._by_price(dearer),
                        *route.fallbacks))


def _unique(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))
