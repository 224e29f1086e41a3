"""The gateway's Prometheus metrics: what each method counts, read back from the exposition."""

from __future__ import annotations

import doctest
import math
import threading
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import agents.serve.metrics as metrics_module
from agents.serve.config import BudgetConfig, KeyConfig, hash_key
from agents.serve.ledger import Ledger
from agents.serve.metrics import FAULT_KINDS, LATENCY_BUCKETS, REFUSAL_REASONS, ServeMetrics
from agents.serve.storage import open_storage

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(metrics: ServeMetrics) -> Samples:
    """Every sample of the exposition (``_created`` ones left out): {(name, labels): value}."""
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain; version=")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples if not s.name.endswith("_created")}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_requests_are_counted_by_route_model_and_status_and_timed_by_route() -> None:
    metrics = ServeMetrics()
    metrics.observe_request("chat", "small", 200, 0.003)
    metrics.observe_request("chat", "small", 200, 0.7)
    metrics.observe_request("chat", "large", 502, 130.0)  # past the last bucket
    metrics.observe_request("embeddings", None, 400, 0.02)
    got = scrape(metrics)
    requests = {k[1]: v for k, v in got.items() if k[0] == "cost_envs_requests_total"}
    assert requests == {
        (("model", "small"), ("route", "chat"), ("status_code", "200")): 2.0,
        (("model", "large"), ("route", "chat"), ("status_code", "502")): 1.0,
        (("model", ""), ("route", "embeddings"), ("status_code", "400")): 1.0}
    name = "cost_envs_request_duration_seconds"
    assert value(got, f"{name}_count", route="chat") == 3.0
    assert value(got, f"{name}_sum", route="chat") == pytest.approx(130.703)
    assert value(got, f"{name}_bucket", route="chat", le="0.005") == 1.0
    assert value(got, f"{name}_bucket", route="chat", le="1.0") == 2.0
    assert value(got, f"{name}_bucket", route="chat", le="120.0") == 2.0
    assert value(got, f"{name}_bucket", route="chat", le="+Inf") == 3.0
    assert value(got, f"{name}_bucket", route="embeddings", le="0.025") == 1.0
    buckets = sorted(float(dict(k[1])["le"]) for k in got
                     if k[0] == f"{name}_bucket" and dict(k[1])["route"] == "chat")
    assert buckets == [*LATENCY_BUCKETS, math.inf]
    assert LATENCY_BUCKETS[0] == 0.005 and LATENCY_BUCKETS[-1] == 120.0


def test_spend_is_fed_in_micro_dollars_and_exported_in_dollars_with_tokens() -> None:
    metrics = ServeMetrics()
    metrics.add_spend("alice", "small", 1_500, 10, 2)
    metrics.add_spend("alice", "small", 2_500_000, 1000, 400)
    metrics.add_spend("bob", "large", 7, None, None)  # usage unknown: no tokens counted
    metrics.add_spend("bob", "large", 0, 5, 0)  # a failed call: nothing charged
    got = scrape(metrics)
    assert value(got, "cost_envs_spend_dollars_total", key="alice", model="small") == \
        pytest.approx(2.5015)
    assert value(got, "cost_envs_spend_dollars_total", key="bob", model="large") == \
        pytest.approx(7e-6)
    tokens = {k[1]: v for k, v in got.items() if k[0] == "cost_envs_tokens_total"}
    assert tokens == {
        (("key", "alice"), ("kind", "prompt"), ("model", "small")): 1010.0,
        (("key", "alice"), ("kind", "completion"), ("model", "small")): 402.0,
        (("key", "bob"), ("kind", "prompt"), ("model", "large")): 5.0,
        (("key", "bob"), ("kind", "completion"), ("model", "large")): 0.0}
    with pytest.raises(ValueError, match="non-negative"):
        metrics.add_spend("alice", "small", -1)


def test_refusals_faults_and_over_reservations_with_their_bounded_labels() -> None:
    metrics = ServeMetrics()
    assert {value(scrape(metrics), "cost_envs_refusals_total", reason=r)
            for r in REFUSAL_REASONS} == {0.0}  # every reason is there from the start
    for reason in ("budget", "budget", "auth", "rate_limit"):
        metrics.refusal(reason)
    metrics.upstream_fault("small", "failed")
    metrics.upstream_fault("small", "failed")
    metrics.upstream_fault("large", "stream_failed")
    metrics.over_reservation("alice", 50)
    metrics.over_reservation("alice", 1_000_000)
    metrics.over_reservation("bob", 0)
    got = scrape(metrics)
    assert {r: value(got, "cost_envs_refusals_total", reason=r) for r in REFUSAL_REASONS} == \
        {"budget": 2.0, "blocked": 0.0, "rate_limit": 1.0, "invalid_request": 0.0, "auth": 1.0}
    faults = {k[1]: v for k, v in got.items() if k[0] == "cost_envs_upstream_faults_total"}
    assert faults == {(("kind", "failed"), ("model", "small")): 2.0,
                      (("kind", "stream_failed"), ("model", "large")): 1.0}
    assert value(got, "cost_envs_over_reservation_dollars_total", key="alice") == \
        pytest.approx(1.00005)
    assert ("cost_envs_over_reservation_dollars_total", (("key", "bob"),)) not in got
    with pytest.raises(ValueError, match=r"reason: expected one of budget, .*, got 'user'"):
        metrics.refusal("user")
    with pytest.raises(ValueError, match=r"kind: expected one of failed, unknown, rejected, "
                                         r"stream_failed, got 'timeout'"):
        metrics.upstream_fault("small", "timeout")
    assert FAULT_KINDS == ("failed", "unknown", "rejected", "stream_failed")


def test_open_reservations_are_read_from_the_ledger_at_scrape_time(tmp_path: Path) -> None:
    alice = KeyConfig("alice", hash_key("a"), BudgetConfig("key:alice", None, "total"))
    ledger = Ledger(open_storage(f"sqlite:///{tmp_path / 'l.db'}"), [alice])
    metrics = ServeMetrics(open_reservations=ledger.open_reservations)
    assert value(scrape(metrics), "cost_envs_open_reservations") == 0.0
    ledger.reserve("r1", alice, 100)
    ledger.reserve("r2", alice, 100)
    assert value(scrape(metrics), "cost_envs_open_reservations") == 2.0
    ledger.settle("r1", 40, "ok")
    assert value(scrape(metrics), "cost_envs_open_reservations") == 1.0
    # no callable: no gauge
    assert not any(k[0] == "cost_envs_open_reservations" for k in scrape(ServeMetrics()))


def test_a_failing_gauge_reads_nan_and_the_scrape_still_succeeds() -> None:
    def broken() -> int:
        raise ConnectionError("database gone")

    metrics = ServeMetrics(open_reservations=broken)
    metrics.refusal("auth")
    got = scrape(metrics)
    assert math.isnan(value(got, "cost_envs_open_reservations"))
    assert value(got, "cost_envs_refusals_total", reason="auth") == 1.0


def test_each_instance_has_its_own_registry() -> None:
    first, second = ServeMetrics(lambda: 1), ServeMetrics(lambda: 2)  # no duplicate names
    first.observe_request("chat", "small", 200, 0.1)
    assert value(scrape(first), "cost_envs_requests_total", route="chat", model="small",
                 status_code="200") == 1.0
    assert not any(k[0] == "cost_envs_requests_total" for k in scrape(second))
    assert value(scrape(second), "cost_envs_open_reservations") == 2.0


def test_exposition_speaks_openmetrics_when_asked() -> None:
    metrics = ServeMetrics()
    metrics.add_spend("alice", "small", 1_000_000)
    body, content_type = metrics.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    assert b'cost_envs_spend_dollars_total{key="alice",model="small"} 1.0' in body
    plain, plain_type = metrics.exposition("text/plain")
    assert plain_type.startswith("text/plain") and b"# EOF" not in plain


def test_counts_are_exact_under_threads() -> None:
    metrics = ServeMetrics()

    def work() -> None:
        for _ in range(2000):
            metrics.observe_request("chat", "small", 200, 0.01)
            metrics.add_spend("alice", "small", 1, 1, 1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    got = scrape(metrics)
    assert value(got, "cost_envs_requests_total", route="chat", model="small",
                 status_code="200") == 16000.0
    assert value(got, "cost_envs_tokens_total", key="alice", model="small",
                 kind="prompt") == 16000.0
    assert value(got, "cost_envs_spend_dollars_total", key="alice", model="small") == \
        pytest.approx(0.016)


def test_the_docstring_example_runs() -> None:
    result = doctest.testmod(metrics_module)
    assert result.attempted > 0 and result.failed == 0
