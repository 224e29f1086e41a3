"""The ledger on a real SQLite file: exact budgets under threads and processes, expiry."""

from __future__ import annotations

import calendar
import multiprocessing
import random
import sqlite3
import threading
from pathlib import Path

import pytest

from agents.serve.config import BudgetConfig, KeyConfig, hash_key
from agents.serve.ledger import (
    BudgetBlockedError,
    BudgetExceededError,
    DuplicateRequestError,
    Ledger,
    period_start,
)
from agents.serve.storage import open_storage

ORG = BudgetConfig("org:acme", 1_000, "total")
ALICE = KeyConfig("alice", hash_key("a"), BudgetConfig("key:alice", 600, "total"), "acme")
BOB = KeyConfig("bob", hash_key("b"), BudgetConfig("key:bob", 700, "day"), "acme")


def ledger_at(path: Path) -> Ledger:
    return Ledger(open_storage(f"sqlite:///{path}"), [ALICE, BOB], {"acme": ORG})


def test_reserve_settle_and_the_budget_named_when_it_does_not_fit(tmp_path: Path) -> None:
    ledger = ledger_at(tmp_path / "l.db")
    ledger.reserve("r1", ALICE, 500)
    with pytest.raises(BudgetExceededError,
                       match=r"budget 'key:alice' exceeded: .* \$0.000100 left"):
        ledger.reserve("r2", ALICE, 101)  # 500 reserved of 600
    ledger.settle("r1", 120, "ok", model="small", prompt_tokens=10, completion_tokens=3)
    ledger.settle("r1", 999, "ok")  # twice: a no-op
    ledger.reserve("r2", ALICE, 480)  # 120 spent + 480 = 600: fits exactly
    with pytest.raises(BudgetExceededError, match="'org:acme'") as err:
        ledger.reserve("r3", BOB, 401)  # org: 120 + 480 + 401 > 1000
    assert err.value.left == 400
    ledger.settle("r2", 0, "upstream_error")
    usage = {u.budget: u for u in ledger.usage()}
    assert (usage["key:alice"].spent, usage["key:alice"].reserved) == (120, 0)
    assert usage["org:acme"].spent == 120 and "key:bob" not in usage  # refused: rolled back
    rows = {r["id"]: r for r in ledger.requests()}
    assert rows["r1"]["cost_micros"] == 120 and rows["r1"]["reserved_micros"] == 500
    assert rows["r2"]["outcome"] == "upstream_error" and ledger.open_reservations() == 0


def test_a_dead_servers_call_is_charged_its_worst_case_until_its_real_cost_is_known(
        tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'l.db'}")
    crashed = Ledger(storage, [ALICE, BOB], {"acme": ORG}, ttl=10, now=1000.0)
    crashed.reserve("crashed", ALICE, 600, now=1000.0)  # its last heartbeat: 1000
    ledger = Ledger(storage, [ALICE, BOB], {"acme": ORG}, ttl=10, now=1005.0)
    with pytest.raises(BudgetExceededError):
        ledger.reserve("next", ALICE, 1, now=1009.0)  # 1000 + 10: the owner may be alive
    ledger.reserve("mine", ALICE, 0, now=5000.0)  # its own reservations never expire
    # "crashed"'s owner went silent: the upstream may have billed the call, so it is
    # charged its reservation (never 0) and alice's budget stays spent
    with pytest.raises(BudgetExceededError, match=r"\$0.000000 left"):
        ledger.reserve("next", ALICE, 1, now=5000.0)
    rows = {r["id"]: r for r in ledger.requests()}
    assert (rows["crashed"]["outcome"], rows["crashed"]["cost_micros"]) == ("unknown", 600)
    crashed.settle("crashed", 50, "ok", now=5001.0)  # the call came back after all
    rows = {r["id"]: r for r in ledger.requests()}
    assert (rows["crashed"]["outcome"], rows["crashed"]["cost_micros"]) == ("late:ok", 50)
    usage = {u.budget: u for u in ledger.usage()}
    assert (usage["key:alice"].spent, usage["org:acme"].spent) == (50, 50)  # replaced
    ledger.reserve("next", ALICE, 550, now=5002.0)  # 50 + 550 = 600: fits exactly


def test_a_written_ahead_cost_settles_a_dead_servers_call_exactly(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'l.db'}")
    crashed = Ledger(storage, [ALICE, BOB], {"acme": ORG}, ttl=10, now=1000.0)
    crashed.reserve("answered", ALICE, 300, now=1000.0)
    crashed.write_ahead("answered", 42, upstream_id="up-1", prompt_tokens=30,
                        completion_tokens=3)
    crashed.reserve("in-flight", BOB, 200, now=1000.0)
    ledger = Ledger(storage, [ALICE, BOB], {"acme": ORG}, ttl=10, now=5000.0)
    assert ledger.release_expired(now=5000.0) == 2
    rows = {r["id"]: r for r in ledger.requests()}
    assert (rows["answered"]["outcome"], rows["answered"]["cost_micros"],
            rows["answered"]["upstream_id"], rows["answered"]["prompt_tokens"]) == (
        "recovered", 42, "up-1", 30)
    assert (rows["in-flight"]["outcome"], rows["in-flight"]["cost_micros"]) == ("unknown", 200)
    usage = {u.budget: u for u in ledger.usage()}
    assert usage["org:acme"].spent == 242 and usage["org:acme"].reserved == 0


def test_a_cost_above_its_reservation_is_charged_flagged_and_blocks_until_lifted(
        tmp_path: Path) -> None:
    ledger = ledger_at(tmp_path / "l.db")
    day = 86400 * 20000 + 3600  # an hour into a UTC day
    ledger.reserve("r1", BOB, 100, now=day)
    ledger.reserve("r2", BOB, 100, now=day)  # in flight when r1's excess is settled
    assert ledger.settle("r1", 160, "ok", now=day) == 60  # the upstream billed above it
    row = next(r for r in ledger.requests() if r["id"] == "r1")
    assert (row["cost_micros"], row["over_reservation_micros"]) == (160, 60)
    with pytest.raises(BudgetBlockedError, match="'key:bob' is blocked: request 'r1'"):
        ledger.reserve("r3", BOB, 1, now=day)  # key:bob and org:acme are both blocked
    with pytest.raises(BudgetBlockedError, match="'org:acme' is blocked"):
        ledger.reserve("r3", ALICE, 1, now=day)
    assert ledger.blocked(now=day) == {"key:bob": "r1", "org:acme": "r1"}
    ledger.settle("r2", 100, "ok", now=day)  # what was in flight settles as billed
    assert ledger.unblock("org:acme", now=day) and not ledger.unblock("org:acme", now=day)
    ledger.reserve("r3", ALICE, 1, now=day)  # the organisation is lifted, alice may call
    with pytest.raises(BudgetBlockedError):
        ledger.reserve("r4", BOB, 1, now=day)  # bob's own budget is still blocked
    ledger.reserve("r4", BOB, 1, now=day + 86400)  # the next day: bob's period reset
    usage = {(u.budget, u.period_start): u.spent for u in ledger.usage()}
    assert usage[("key:bob", day - 3600)] == 260  # every micro-dollar billed is charged
    with pytest.raises(KeyError):
        ledger.unblock("key:nobody")


def test_an_idempotent_answer_is_kept_with_its_settlement(tmp_path: Path) -> None:
    ledger = ledger_at(tmp_path / "l.db")
    ledger.reserve("r1", ALICE, 10, idempotency_key="alice:k")
    ledger.settle("r1", 5, "ok", answer=(200, '{"id": "r1"}', False))
    assert ledger.answer_of("alice:k") == (200, '{"id": "r1"}', False)
    assert ledger.answer_of("bob:k") is None
    ledger.reserve("r2", ALICE, 10)  # no key: nothing is kept
    ledger.settle("r2", 5, "ok", answer=(200, "{}", False))
    with sqlite3.connect(tmp_path / "l.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM answers").fetchone() == (1,)


def test_a_ledger_of_an_earlier_version_gains_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    with sqlite3.connect(path) as conn:  # the tables as the previous release wrote them
        conn.execute("CREATE TABLE budget_usage (budget TEXT NOT NULL, period_start BIGINT NOT "
                     "NULL, spent_micros BIGINT NOT NULL DEFAULT 0, reserved_micros BIGINT NOT "
                     "NULL DEFAULT 0, PRIMARY KEY (budget, period_start))")
        conn.execute("INSERT INTO budget_usage VALUES ('key:alice', 0, 70, 0)")
        conn.execute("CREATE TABLE reservations (id TEXT PRIMARY KEY, key_name TEXT, budgets "
                     "TEXT NOT NULL, amount_micros BIGINT NOT NULL, created_at DOUBLE "
                     "PRECISION NOT NULL, owner TEXT NOT NULL, idempotency_key TEXT UNIQUE)")
    ledger = ledger_at(path)
    ledger.reserve("r1", ALICE, 500)
    ledger.write_ahead("r1", 5)
    with pytest.raises(BudgetExceededError):  # the old spend still counts
        ledger.reserve("r2", ALICE, 31)
    assert ledger.settle("r1", 600, "ok") == 100


def test_an_idempotency_key_is_used_once(tmp_path: Path) -> None:
    ledger = ledger_at(tmp_path / "l.db")
    ledger.reserve("r1", ALICE, 1, idempotency_key="k")
    with pytest.raises(DuplicateRequestError, match="'k' was used before"):
        ledger.reserve("r2", ALICE, 1, idempotency_key="k")
    ledger.settle("r1", 1, "ok")
    with pytest.raises(DuplicateRequestError):
        ledger.reserve("r3", ALICE, 1, idempotency_key="k")


def test_periods_start_on_utc_boundaries() -> None:
    now = calendar.timegm((2026, 11, 27, 20, 45, 10))  # a Friday
    assert period_start("total", now) == 0
    assert period_start("hour", now) == calendar.timegm((2026, 11, 27, 20, 0, 0))
    assert period_start("day", now) == calendar.timegm((2026, 11, 27, 0, 0, 0))
    assert period_start("week", now) == calendar.timegm((2026, 11, 23, 0, 0, 0))  # Monday
    assert period_start("month", now) == calendar.timegm((2026, 11, 1, 0, 0, 0))
    with pytest.raises(ValueError, match="period: expected one of"):
        period_start("year", now)


def test_the_database_is_in_wal_mode(tmp_path: Path) -> None:
    ledger_at(tmp_path / "l.db")
    assert sqlite3.connect(tmp_path / "l.db").execute("PRAGMA journal_mode").fetchone() == ("wal",)


def _hammer(path: str, worker: int, calls: int) -> None:
    """Reserve worst cases and settle random real costs, as a server process would."""
    ledger = ledger_at(Path(path))
    rng = random.Random(worker)
    for i in range(calls):
        key = (ALICE, BOB)[rng.randrange(2)]
        amount = rng.randrange(1, 60)
        try:
            ledger.reserve(f"w{worker}-{i}", key, amount)
        except BudgetExceededError:
            ledger.record(f"w{worker}-{i}", "refused_budget", key_name=key.name)
            continue
        ledger.settle(f"w{worker}-{i}", rng.randrange(0, amount + 1), "ok")


def test_budgets_hold_exactly_under_threads_and_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "l.db")
    ledger = ledger_at(Path(path))
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_hammer, args=(path, w, 150)) for w in range(2)]
    threads = [threading.Thread(target=_hammer, args=(path, w, 150)) for w in range(2, 6)]
    for worker in processes + threads:
        worker.start()
    for worker in processes + threads:
        worker.join(timeout=300)
    assert all(p.exitcode == 0 for p in processes)
    rows = ledger.requests()
    assert len(rows) == 6 * 150 and ledger.open_reservations() == 0  # no row lost or doubled
    usage = {u.budget: u for u in ledger.usage()}
    for budget, keys in (("key:alice", {"alice"}), ("key:bob", {"bob"}),
                         ("org:acme", {"alice", "bob"})):
        spent = sum(r["cost_micros"] for r in rows if r["key_name"] in keys)
        assert usage[budget].spent == spent <= usage[budget].limit
        assert usage[budget].reserved == 0
    refused = sum(r["outcome"] == "refused_budget" for r in rows)
    assert 0 < refused < len(rows)  # the budgets bound: about half were refused
    assert usage["org:acme"].limit - usage["org:acme"].spent < 60  # filled to the last call


def test_a_fallbacks_answer_is_kept_under_the_requests_idempotency_key(
        tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'l.db'}")
    ledger = Ledger(storage, [ALICE, BOB], {"acme": ORG}, ttl=10, now=1000.0)
    ledger.reserve("q", ALICE, 10, idempotency_key="alice:k", now=1000.0)
    ledger.settle("q", 0, "upstream_failed", now=1000.0)  # the first model failed
    ledger.reserve("q.1", ALICE, 10, answer_key="alice:k", model="small", now=1000.0)
    ledger.settle("q.1", 4, "ok", answer=(200, '{"id": "q.1"}', False), now=1000.0)
    assert ledger.answer_of("alice:k") == (200, '{"id": "q.1"}', False)
    # a fallback in flight when its server died: the retry gets a final answer, not a 409
    dead = Ledger(storage, [ALICE, BOB], {"acme": ORG}, ttl=10, now=1000.0)
    dead.reserve("r", BOB, 10, idempotency_key="bob:k", now=1000.0)
    dead.settle("r", 0, "upstream_failed", now=1000.0)
    dead.reserve("r.1", BOB, 10, answer_key="bob:k", model="medium", route="best",
                 now=1000.0)
    ledger.reserve("later", ALICE, 1, now=5000.0)  # dead's reservations expire
    status, body, _ = ledger.answer_of("bob:k")
    assert status == 502 and "outcome_unknown" in body
    row = next(r for r in ledger.requests() if r["id"] == "r.1")
    assert (row["outcome"], row["model"], row["route"]) == ("unknown", "medium", "best")


def test_a_request_left_without_answer_by_a_dead_server_is_abandoned_after_the_ttl(
        tmp_path: Path) -> None:
    ledger = Ledger(open_storage(f"sqlite:///{tmp_path / 'l.db'}"), [ALICE, BOB],
                    {"acme": ORG}, ttl=10, now=1000.0)
    ledger.reserve("q", ALICE, 10, idempotency_key="alice|k", now=1000.0)
    assert not ledger.abandoned("alice|k", now=5000.0)  # a call of it is reserved
    ledger.settle("q", 0, "upstream_failed", now=1001.0)  # then its server died: no answer
    assert not ledger.abandoned("alice|k", now=1005.0)  # it may reserve its next call yet
    assert ledger.abandoned("alice|k", now=1011.0)
    assert not ledger.abandoned("alice|other", now=1011.0)  # no such request
