"""Spend reports on a real ledger (SQLite, and PostgreSQL when its server is installed).

The ledger is filled through its own API (reserve/settle/record, a dead server's call
expired), at times either side of UTC midnights, then every report is checked number by
number.
"""

from __future__ import annotations

import calendar
import csv
import io
import math
from pathlib import Path

import pytest
from test_serve_postgres import _fresh, postgres_url  # noqa: F401  (the server's fixture)

from agents.serve.config import BudgetConfig, KeyConfig, hash_key
from agents.serve.ledger import Ledger
from agents.serve.spend import COLUMNS, GROUP_FIELDS, parse_group_by, spend_report, to_csv
from agents.serve.storage import Storage, open_storage

ORG = BudgetConfig("org:acme", None, "total")
ALICE = KeyConfig("alice", hash_key("a"), BudgetConfig("key:alice", None, "day"), "acme")
BOB = KeyConfig("bob", hash_key("b"), BudgetConfig("key:bob", 5_000, "total"))
CAROL = KeyConfig("carol", hash_key("c"), BudgetConfig("key:carol", None, "total"))
D8 = calendar.timegm((2024, 3, 8, 0, 0, 0))  # 2024-03-08 00:00:00 UTC
D9, D10 = D8 + 86400, D8 + 2 * 86400


def filled(storage: Storage) -> Ledger:
    """A ledger with every kind of row (see the table in each test's expectations).

    ======= ===== ==== ===== =============== ======== ==== ========= ====
    row     key   user model created (UTC)   reserved cost tokens    over
    ======= ===== ==== ===== =============== ======== ==== ========= ====
    a1      alice u1   small 03-09 00:00:00  500      120  10 / 3    0
    a2      alice u2   small 03-09 23:59:59.999 400   0    none      0   (upstream failed)
    a3      alice u1   large 03-10 00:00:00  300      350  20 / 30   50
    ar      alice u1   small 03-09 12:00     0        0    none      0   (refused)
    b1      bob   -    small 03-08 23:59:59.5 1000    700  100 / 50  0
    b2      bob   u3   -     03-09 01:00     250      250  none      0   (dead server)
    b3      bob   u3   in flight at 03-10 00:00:10: not in any report
    ======= ===== ==== ===== =============== ======== ==== ========= ====
    """
    keys, orgs = [ALICE, BOB, CAROL], {"acme": ORG}
    dead = Ledger(storage, keys, orgs, ttl=10, owner="dead", now=D9 + 3600)
    dead.reserve("b2", BOB, 250, now=D9 + 3600, user="u3")
    ledger = Ledger(storage, keys, orgs, ttl=10, owner="live", now=D8)
    ledger.reserve("b1", BOB, 1000, now=D9 - 0.5)
    ledger.settle("b1", 700, "ok", route="cheap", model="small", prompt_tokens=100,
                  completion_tokens=50)
    ledger.reserve("a1", ALICE, 500, now=D9, user="u1")
    ledger.settle("a1", 120, "ok", route="cheap", model="small", prompt_tokens=10,
                  completion_tokens=3)
    ledger.record("ar", "refused_budget", key_name="alice", route="cheap", model="small",
                  user="u1", now=D9 + 43200)
    ledger.reserve("a2", ALICE, 400, now=D10 - 0.001, user="u2")  # expires b2 (its server
    # has been silent since 03-09 01:00): charged its worst case, outcome unknown, no model
    ledger.settle("a2", 0, "upstream_failed", route="cheap", model="small")
    ledger.reserve("a3", ALICE, 300, now=D10, user="u1")
    assert ledger.settle("a3", 350, "ok", route="mf", model="large", prompt_tokens=20,
                         completion_tokens=30) == 50
    ledger.reserve("b3", BOB, 100, now=D10 + 10, user="u3")
    assert ledger.open_reservations() == 1
    assert {r["id"]: r["outcome"] for r in ledger.requests()}["b2"] == "unknown"
    return ledger


def at(path: Path) -> Ledger:
    return filled(open_storage(f"sqlite:///{path}"))


def money(requests: int, refused: int, cost: int, prompt: int, completion: int,
          over: int = 0) -> dict[str, object]:
    return {"requests": requests, "refused": refused, "cost_micros": cost, "spend": cost / 1e6,
            "prompt_tokens": prompt, "completion_tokens": completion,
            "over_reservation_micros": over}


#: What each grouping reports for :func:`filled`'s ledger, rows in order.
EXPECTED: dict[str, list[dict[str, object]]] = {
    "": [money(5, 1, 1420, 130, 83, 50)],
    "key": [{"key": "alice", **money(3, 1, 470, 30, 33, 50)},
            {"key": "bob", **money(2, 0, 950, 100, 50)}],
    "user": [{"user": None, **money(1, 0, 700, 100, 50)},
             {"user": "u1", **money(2, 1, 470, 30, 33, 50)},
             {"user": "u2", **money(1, 0, 0, 0, 0)},
             {"user": "u3", **money(1, 0, 250, 0, 0)}],
    "model": [{"model": None, **money(1, 0, 250, 0, 0)},
              {"model": "large", **money(1, 0, 350, 20, 30, 50)},
              {"model": "small", **money(3, 1, 820, 110, 53)}],
    "day": [{"day": "2024-03-08", **money(1, 0, 700, 100, 50)},
            {"day": "2024-03-09", **money(3, 1, 370, 10, 3)},
            {"day": "2024-03-10", **money(1, 0, 350, 20, 30, 50)}],
    "key,day": [{"key": "alice", "day": "2024-03-09", **money(2, 1, 120, 10, 3)},
                {"key": "alice", "day": "2024-03-10", **money(1, 0, 350, 20, 30, 50)},
                {"key": "bob", "day": "2024-03-08", **money(1, 0, 700, 100, 50)},
                {"key": "bob", "day": "2024-03-09", **money(1, 0, 250, 0, 0)}],
    "day,key": [{"day": "2024-03-08", "key": "bob", **money(1, 0, 700, 100, 50)},
                {"day": "2024-03-09", "key": "alice", **money(2, 1, 120, 10, 3)},
                {"day": "2024-03-09", "key": "bob", **money(1, 0, 250, 0, 0)},
                {"day": "2024-03-10", "key": "alice", **money(1, 0, 350, 20, 30, 50)}],
    "key,user,model,day": [
        {"key": "alice", "user": "u1", "model": "large", "day": "2024-03-10",
         **money(1, 0, 350, 20, 30, 50)},
        {"key": "alice", "user": "u1", "model": "small", "day": "2024-03-09",
         **money(1, 1, 120, 10, 3)},
        {"key": "alice", "user": "u2", "model": "small", "day": "2024-03-09",
         **money(1, 0, 0, 0, 0)},
        {"key": "bob", "user": None, "model": "small", "day": "2024-03-08",
         **money(1, 0, 700, 100, 50)},
        {"key": "bob", "user": "u3", "model": None, "day": "2024-03-09",
         **money(1, 0, 250, 0, 0)}],
}


@pytest.mark.parametrize("group_by", list(EXPECTED))
def test_every_grouping_sums_each_group_exactly(tmp_path: Path, group_by: str) -> None:
    rows = spend_report(at(tmp_path / "l.db"), group_by.split(",") if group_by else [])
    assert rows == EXPECTED[group_by]
    assert [list(r)[:len(parse_group_by(group_by))] for r in rows] == \
        [list(parse_group_by(group_by))] * len(rows)  # group fields first, in the order given


def test_days_are_utc_dates_cut_exactly_at_midnight(tmp_path: Path) -> None:
    ledger = at(tmp_path / "l.db")
    for ident, now in (("m1", D9 - 1e-6), ("m2", D9 + 86400 - 1e-3), ("m3", D8 - 86400 * 365)):
        ledger.record(ident, "refused_budget", key_name="carol", now=now)
    days = {r["day"]: r["refused"] for r in spend_report(ledger, ["day"], key="carol")}
    assert days == {"2023-03-09": 1, "2024-03-08": 1, "2024-03-09": 1}


def test_start_is_inclusive_end_exclusive_and_key_filters_one_key(tmp_path: Path) -> None:
    ledger = at(tmp_path / "l.db")
    assert spend_report(ledger, [], start=D9, end=D10) == [money(3, 1, 370, 10, 3)]
    assert spend_report(ledger, ["key"], start=D10) == [
        {"key": "alice", **money(1, 0, 350, 20, 30, 50)}]
    assert spend_report(ledger, ["key"], end=D9) == [{"key": "bob", **money(1, 0, 700, 100, 50)}]
    assert spend_report(ledger, ["day"], start=D9, end=D9) == []  # an empty window
    assert spend_report(ledger, ["user"], key="alice") == [
        {"user": "u1", **money(2, 1, 470, 30, 33, 50)}, {"user": "u2", **money(1, 0, 0, 0, 0)}]
    assert spend_report(ledger, "model", key="alice", start=D9 + 1, end=D10) == [
        {"model": "small", **money(1, 1, 0, 0, 0)}]
    assert spend_report(ledger, ["key"], key="carol") == []  # a key that spent nothing
    assert spend_report(ledger, [], key="nobody") == []


def test_an_empty_ledger_reports_no_rows(tmp_path: Path) -> None:
    ledger = Ledger(open_storage(f"sqlite:///{tmp_path / 'l.db'}"), [ALICE], {"acme": ORG})
    for group_by in ([], ["key"], ["day", "user"]):
        assert spend_report(ledger, group_by) == []


def test_group_by_and_the_window_are_checked(tmp_path: Path) -> None:
    ledger = at(tmp_path / "l.db")
    with pytest.raises(ValueError, match=r"^group_by: expected fields of key, user, model, "
                                         r"day, got 'team'$"):
        spend_report(ledger, ["key", "team"])
    with pytest.raises(ValueError, match="got 'k'"):
        spend_report(ledger, "k,model")
    with pytest.raises(ValueError, match=r"'key' is given twice"):
        spend_report(ledger, ["key", "model", "key"])
    with pytest.raises(ValueError, match=r"^start: expected at most end \(100\), got 200$"):
        spend_report(ledger, ["key"], start=200, end=100)
    with pytest.raises(ValueError, match="end: expected Unix seconds"):
        spend_report(ledger, ["key"], end=math.nan)
    assert parse_group_by(" key , model,") == ("key", "model") == parse_group_by(["key", "model"])
    assert parse_group_by("") == () and tuple(GROUP_FIELDS) == ("key", "user", "model", "day")


def test_csv_has_a_fixed_header_and_exact_dollars(tmp_path: Path) -> None:
    ledger = at(tmp_path / "l.db")
    text = to_csv(spend_report(ledger, ["key", "model"]))
    assert text.splitlines()[0] == ("key,model,requests,refused,cost_micros,spend,prompt_tokens,"
                                    "completion_tokens,over_reservation_micros")
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert [(r["key"], r["model"], r["requests"], r["refused"], r["cost_micros"], r["spend"],
             r["over_reservation_micros"]) for r in parsed] == [
        ("alice", "large", "1", "0", "350", "0.000350", "50"),
        ("alice", "small", "2", "1", "120", "0.000120", "0"),
        ("bob", "", "1", "0", "250", "0.000250", "0"),  # None: an empty cell
        ("bob", "small", "1", "0", "700", "0.000700", "0")]
    # a report with no rows still says its columns; one with no grouping is one total line
    assert to_csv([], group_by="day,key") == ",".join(["day", "key", *COLUMNS]) + "\r\n"
    total = list(csv.reader(io.StringIO(to_csv(spend_report(ledger, [])))))
    assert total == [list(COLUMNS), ["5", "1", "1420", "0.001420", "130", "83", "50"]]
    assert to_csv([{"key": "k", **money(1, 0, 12_345_678, 0, 0)}]).splitlines()[1] == \
        "k,1,0,12345678,12.345678,0,0,0"


def test_csv_quotes_what_end_users_send(tmp_path: Path) -> None:
    ledger = Ledger(open_storage(f"sqlite:///{tmp_path / 'l.db'}"), [CAROL])
    odd = 'a "user", with\nlines'
    ledger.reserve("c1", CAROL, 10, now=D9, user=odd)
    ledger.settle("c1", 7, "ok", model="small", prompt_tokens=1, completion_tokens=1)
    rows = list(csv.DictReader(io.StringIO(to_csv(spend_report(ledger, ["user", "day"])))))
    assert [(r["user"], r["day"], r["cost_micros"]) for r in rows] == [(odd, "2024-03-09", "7")]


def test_postgres_reports_what_sqlite_reports(tmp_path: Path,
                                              request: pytest.FixtureRequest) -> None:
    url = _fresh(request.getfixturevalue("postgres_url"), "spend_report")
    on_postgres, on_sqlite = filled(open_storage(url)), at(tmp_path / "l.db")
    try:
        for group_by in [*EXPECTED, "user,model", "model,day"]:
            rows = spend_report(on_postgres, group_by)
            assert rows == spend_report(on_sqlite, group_by), group_by
            if group_by in EXPECTED:
                assert rows == EXPECTED[group_by]
        assert spend_report(on_postgres, ["key"], start=D9, end=D10, key="alice") == \
            [{"key": "alice", **money(2, 1, 120, 10, 3)}]
        on_postgres.record("edge", "refused_budget", key_name="carol", now=D9 - 0.4)
        assert spend_report(on_postgres, ["day"], key="carol") == [
            {"day": "2024-03-08", **money(0, 1, 0, 0, 0)}]  # 23:59:59.6 is not rounded up
    finally:
        on_postgres.storage.close()
