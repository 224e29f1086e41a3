"""The gateway's Prometheus metrics (``GET /metrics``), in a registry of their own.

:class:`ServeMetrics` holds its own :class:`~prometheus_client.CollectorRegistry`, so
several servers in one process (tests) never collide and nothing of the process-global
default registry leaks in. Names follow Prometheus's conventions (``cost_envs_`` prefix,
base units: seconds and dollars, ``_total`` on counters) and LiteLLM's proxy where it has
the same metric (LiteLLM's name after the arrow, without its ``litellm_`` prefix):

* ``cost_envs_requests_total`` {route, model, status_code}: proxy_total_requests_metric;
* ``cost_envs_request_duration_seconds`` {route}, a histogram from 5 ms to 120 s
  (:data:`LATENCY_BUCKETS`): request_total_latency_metric;
* ``cost_envs_spend_dollars_total`` {key, model}: spend_metric;
* ``cost_envs_tokens_total`` {key, model, kind}: input_tokens_metric, output_tokens_metric;
* ``cost_envs_refusals_total`` {reason}: LiteLLM has none (its failed-requests counter
  mixes refusals with faults);
* ``cost_envs_upstream_faults_total`` {model, kind}: deployment_failure_responses;
* ``cost_envs_over_reservation_dollars_total`` {key}: none (money billed above a call's
  reservation, each such call blocking its budgets);
* ``cost_envs_open_reservations``, a gauge read at scrape time: none.

``kind`` of a token is ``prompt`` or ``completion``; ``reason`` of a refusal one of
:data:`REFUSAL_REASONS`; ``kind`` of an upstream fault one of :data:`FAULT_KINDS` (both
are checked: a typo is a ``ValueError``, not a new series). Money is fed as integer
micro-dollars, as the ledger holds it, and exported in dollars.

Label cardinality: every label value must come from a bounded set, since each distinct
combination is a time series kept for ever. ``key`` is the API key's configured name,
``model`` the configured upstream model's name (never the client's requested string:
``router-NAME-THRESHOLD`` carries client-chosen text), ``route`` a configured route name
or a fixed path template (never a raw URL path: a client probing random paths would make
one series each). The end user (the request's ``user`` field, any text a client sends) is
NOT a label: per-user spend is in the ledger's spend report (:mod:`agents.serve.spend`).
A label value of ``None`` is exported as the empty string.

The metrics are this process's: with several server processes on one PostgreSQL ledger,
Prometheus scrapes each and sums (``sum by (key) (cost_envs_spend_dollars_total)``). The
ledger, not this module, is the record of money; the metrics are for dashboards and alerts
and restart from 0 with the process (Prometheus's ``rate``/``increase`` handle resets).

Per-call overhead: the labelled children are cached, one dictionary look-up a call
(``labels()`` takes a lock and converts every value each time); what is left is
prometheus_client's own locked increments, about 2.5 us for :meth:`ServeMetrics.observe_request`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, choose_encoder, generate_latest

#: Latency buckets (seconds) for an LLM gateway: a refusal or cache hit answers in
#: milliseconds, a long completion or a stream in tens of seconds, up to 2 minutes.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0,
                   60.0, 120.0)
#: Why a request was refused before any upstream call (``refusal(reason)``).
REFUSAL_REASONS = ("budget", "blocked", "rate_limit", "invalid_request", "auth")
#: How an upstream call went wrong (``upstream_fault(model, kind)``): ``failed`` (no
#: answer, not billed), ``unknown`` (may have been billed), ``rejected`` (a 4xx from the
#: upstream), ``stream_failed`` (a stream cut or broken mid-way).
FAULT_KINDS = ("failed", "unknown", "rejected", "stream_failed")


def _label(value: object) -> str:
    return "" if value is None else str(value)


class ServeMetrics:
    """The gateway's metrics and their exposition.

    Args:
        open_reservations: Called at every scrape for the ``cost_envs_open_reservations``
            gauge (``ledger.open_reservations``); ``None``: no such gauge. Should it raise
            (the database unreachable), the gauge reads NaN and the scrape still succeeds.

    Example:
        >>> metrics = ServeMetrics(open_reservations=lambda: 2)
        >>> metrics.observe_request("/v1/chat/completions", "small", 200, 0.42)
        >>> metrics.add_spend("alice", "small", 1_500, prompt_tokens=10, completion_tokens=2)
        >>> body, content_type = metrics.exposition()
        >>> b'cost_envs_spend_dollars_total{key="alice",model="small"} 0.0015' in body
        True
        >>> b"cost_envs_open_reservations 2.0" in body
        True
    """

    def __init__(self, open_reservations: Callable[[], int] | None = None) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self._requests = Counter(
            "cost_envs_requests_total", "Requests answered, by route, model and HTTP status.",
            ("route", "model", "status_code"), registry=registry)
        self._latency = Histogram(
            "cost_envs_request_duration_seconds",
            "Seconds from a request's arrival to its answer's end (streams: the last event).",
            ("route",), buckets=LATENCY_BUCKETS, registry=registry)
        self._spend = Counter(
            "cost_envs_spend_dollars_total", "Dollars charged to budgets, by key and model.",
            ("key", "model"), registry=registry)
        self._tokens = Counter(
            "cost_envs_tokens_total", "Tokens billed by upstreams, by key, model and kind "
            "(prompt or completion).", ("key", "model", "kind"), registry=registry)
        self._refusals = Counter(
            "cost_envs_refusals_total", "Requests refused before any upstream call, by reason.",
            ("reason",), registry=registry)
        self._faults = Counter(
            "cost_envs_upstream_faults_total", "Upstream calls that failed, by model and kind "
            "(failed, unknown, rejected, stream_failed).", ("model", "kind"), registry=registry)
        self._over = Counter(
            "cost_envs_over_reservation_dollars_total", "Dollars billed above calls' "
            "reservations (each blocks the budgets it counted against), by key.", ("key",),
            registry=registry)
        for reason in REFUSAL_REASONS:  # known label values start at 0, not absent
            self._refusals.labels(reason)
        # the labelled children, cached by the labels as given (one look-up a call)
        self._request_children: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        self._spend_children: dict[tuple[Any, ...], tuple[Any, Any, Any]] = {}
        self._children: dict[tuple[Any, ...], Any] = {}
        if open_reservations is not None:
            gauge = Gauge("cost_envs_open_reservations", "Reservations held now (calls in "
                          "flight, and those of a dead server until they expire).",
                          registry=registry)
            gauge.set_function(lambda: _read(open_reservations))

    def _child(self, metric: Any, *labels: object) -> Any:
        """The metric's child for ``labels``, cached by (metric, labels) as given."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children.setdefault(key, metric.labels(*map(_label, labels)))
        return child

    def observe_request(self, route: str | None, model: str | None, status: int,
                        seconds: float) -> None:
        """Count an answered request and observe its latency.

        Args:
            route: The configured route name or path template (bounded; see the module).
            model: The configured upstream model that answered (``None``: none did).
            status: The HTTP status sent to the client.
            seconds: From arrival to the answer's end.
        """
        found = self._request_children.get((route, model, status))
        if found is None:
            found = self._request_children.setdefault(
                (route, model, status),
                (self._requests.labels(_label(route), _label(model), _label(status)),
                 self._latency.labels(_label(route))))
        found[0].inc()
        found[1].observe(seconds)

    def add_spend(self, key: str, model: str | None, micros: int, prompt_tokens: int | None = 0,
                  completion_tokens: int | None = 0) -> None:
        """Count a settled call's charge (micro-dollars, exported as dollars) and tokens.

        ``None`` tokens (an upstream that reported no usage) count nothing.

        Raises:
            ValueError: On a negative amount (counters only go up).
        """
        found = self._spend_children.get((key, model))
        if found is None:
            labels = (_label(key), _label(model))
            found = self._spend_children.setdefault(
                (key, model), (self._spend.labels(*labels),
                               self._tokens.labels(*labels, "prompt"),
                               self._tokens.labels(*labels, "completion")))
        if micros:
            found[0].inc(micros / 1e6)
        if prompt_tokens:
            found[1].inc(prompt_tokens)
        if completion_tokens:
            found[2].inc(completion_tokens)

    def refusal(self, reason: str) -> None:
        """Count a request refused before any upstream call (``reason``: :data:`REFUSAL_REASONS`).

        Raises:
            ValueError: On a reason not in :data:`REFUSAL_REASONS`.
        """
        if reason not in REFUSAL_REASONS:
            raise ValueError(f"refusal: reason: expected one of {', '.join(REFUSAL_REASONS)}, "
                             f"got {reason!r}")
        self._child(self._refusals, reason).inc()

    def upstream_fault(self, model: str | None, kind: str) -> None:
        """Count a failed upstream call (``kind``: :data:`FAULT_KINDS`).

        Raises:
            ValueError: On a kind not in :data:`FAULT_KINDS`.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"upstream_fault: kind: expected one of {', '.join(FAULT_KINDS)}, "
                             f"got {kind!r}")
        self._child(self._faults, model, kind).inc()

    def over_reservation(self, key: str, micros: int) -> None:
        """Count money billed above a call's reservation (``Ledger.settle``'s return value).

        Raises:
            ValueError: On a negative amount.
        """
        if micros:
            self._child(self._over, key).inc(micros / 1e6)

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """The scrape's body and its ``Content-Type``.

        Args:
            accept: The scraper's ``Accept`` header: OpenMetrics when it asks for it,
                Prometheus's text format otherwise (and when ``None``).
        """
        if accept is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


def _read(open_reservations: Callable[[], int]) -> float:
    """The gauge's value: the callable's, or NaN when it fails (the scrape goes on)."""
    try:
        return float(open_reservations())
    except Exception:  # a metric must not fail the scrape: NaN says "unknown"
        return math.nan
