"""The ledger: budgets that cannot be passed under concurrency, one row per request.

Money is integer micro-dollars throughout. A call is paid in two steps:

1. :meth:`Ledger.reserve` reserves its worst case, in ONE transaction: for every budget
   that applies (the key's, its organisation's), in name order, it reads the budget's
   spent and reserved money for the current period and refuses (:class:`BudgetExceededError`,
   naming the budget) unless ``spent + reserved + amount <= limit`` and the budget is not
   blocked; then it adds the amount to each budget's reserved money and writes the
   reservation;
2. :meth:`Ledger.settle` moves the real cost (from the upstream's ``usage``) from
   reserved to spent, releases the rest, deletes the reservation and writes the
   request's row, again in one transaction.

Spent money is never hidden. A call billed above its reservation (an upstream that
ignores the completion bound or reports more usage than it could) is charged as billed;
its row carries the excess (``over_reservation_micros``) and every limited budget it
counted against is *blocked* for the rest of its period (:class:`BudgetBlockedError` on
the next reservation) until an operator lifts it (:meth:`Ledger.unblock`). So a budget's
spend passes its limit by at most the excesses of the calls already in flight on it when
the first excess was settled: by nothing when upstreams honour the bound.

A reservation belongs to the server process (the ledger's ``owner``) that made it, and
each owner writes a heartbeat (:meth:`Ledger.heartbeat`; the server every ``ttl / 4``
seconds). A reservation expires when its owner's heartbeat is
older than ``ttl`` seconds: the server was killed mid-call, so the call will never be
settled. :meth:`Ledger.release_expired` (run by :meth:`~Ledger.reserve`, once a second at
most) settles
it conservatively: at the cost the server wrote ahead (:meth:`Ledger.write_ahead`: the
upstream's response id and usage, recorded before the answer is relayed), outcome
``recovered``; without such a record at its reserved worst case, outcome ``unknown``
(the upstream may have answered and billed), never at 0. A live server's reservations
never expire however long its calls last (an expiry by the call's age alone would let a
slow call's late settlement pass the budget: this happened under load). Should a call be
settled after its reservation expired all the same (its server stalled for longer than
``ttl``), its real cost replaces what the expiry charged and its row becomes
``late:...``.
"""

from __future__ import annotations

import calendar
import json
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from agents.serve.config import BudgetConfig, KeyConfig, RateLimits
from agents.serve.schema import (
    ADDED_COLUMNS,
    EXPIRED_ANSWER,
    INDEXES,
    REQUEST_COLUMNS,
    SCHEMA,
)
from agents.serve.storage import Storage


class BudgetExceededError(Exception):
    """A reservation that does not fit a budget (``budget``: its name, as ``key:alice``)."""

    def __init__(self, budget: str, limit: int, spent: int, reserved: int, amount: int) -> None:
        self.budget, self.limit, self.amount = budget, limit, amount
        self.left = max(0, limit - spent - reserved)
        super().__init__(f"budget {budget!r} exceeded: a call of up to ${amount / 1e6:.6f} "
                         f"does not fit the ${self.left / 1e6:.6f} left of ${limit / 1e6:.6f}")


class BudgetBlockedError(BudgetExceededError):
    """A budget blocked by a call billed above its reservation (until lifted or reset)."""

    def __init__(self, budget: str, limit: int, spent: int, reserved: int, amount: int,
                 blocked_by: str) -> None:
        super().__init__(budget, limit, spent, reserved, amount)
        self.blocked_by = blocked_by
        self.args = (f"budget {budget!r} is blocked: request {blocked_by!r} was billed above "
                     "its reservation; an operator lifts it (POST /admin/budgets/unblock) or "
                     "the period's end does",)


class RateLimitedError(Exception):
    """A request past a rate limit of its key or end user (``retry_after``: seconds)."""

    def __init__(self, subject: str, what: str, limit: int, retry_after: int) -> None:
        self.subject, self.what, self.limit, self.retry_after = subject, what, limit, retry_after
        super().__init__(f"rate limit of {subject!r} reached: {limit} {what}; try again in "
                         f"{retry_after} s")


@dataclass(frozen=True)
class RateLimit:
    """The rate limits of one subject: ``key:NAME`` or ``user:KEY/USER``."""

    subject: str
    rates: RateLimits


@dataclass(frozen=True)
class Settled:
    """A call just settled (what :attr:`Ledger.on_settle` is given)."""

    key_name: str | None
    model: str | None
    cost: int
    prompt_tokens: int | None
    completion_tokens: int | None
    excess: int
    outcome: str


class DuplicateRequestError(Exception):
    """An idempotency key that a request already used."""


def period_start(period: str, now: float) -> int:
    """The start (Unix seconds, UTC) of the budget period holding ``now``."""
    if period == "total":
        return 0
    if period == "hour":
        return int(now // 3600 * 3600)
    if period == "day":
        return int(now // 86400 * 86400)
    if period == "week":  # weeks start on Monday; 1970-01-01 was a Thursday
        return int((now + 3 * 86400) // 604800 * 604800 - 3 * 86400)
    if period == "month":
        day = datetime.fromtimestamp(now, tz=timezone.utc)
        return calendar.timegm((day.year, day.month, 1, 0, 0, 0))
    raise ValueError(f"period: expected one of hour, day, week, month, total, got {period!r}")


@dataclass(frozen=True)
class Usage:
    """A budget's money in one period (micro-dollars)."""

    budget: str
    period_start: int
    spent: int
    reserved: int
    limit: int | None


class Ledger:
    """Budgets, reservations and requests in a :class:`~agents.serve.storage.Storage`.

    Args:
        storage: Where they live (:func:`~agents.serve.storage.open_storage`).
        keys: The API keys (their budgets are written to the storage).
        organisations: The organisations' budgets, by organisation name.
        ttl: Seconds after its owner's last heartbeat that a reservation expires.
        owner: This process's name in the ledger (a new random one by default).
        now: The time of the first heartbeat (tests); the clock's by default.
    """

    def __init__(self, storage: Storage, keys: Sequence[KeyConfig] = (),
                 organisations: Mapping[str, BudgetConfig] | None = None,
                 ttl: float = 600.0, owner: str | None = None,
                 now: float | None = None, clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.ttl = ttl
        self.clock = clock
        self.owner = uuid.uuid4().hex if owner is None else owner
        self.keys = {k.key_sha256: k for k in keys}
        self.organisations = dict(organisations or {})
        #: The configured keys whose entries were ignored: changed through the admin API.
        self.overridden: list[str] = []
        #: Called with each call settled by this process, after its commit (metrics).
        self.on_settle: Callable[[Settled], None] | None = None
        self._next_expiry = -math.inf  # when reserve() next looks for expired reservations
        self._written: set[BudgetConfig] = set()  # end users' budgets known to be written
        self._usage_rows: set[tuple[str, int]] = set()  # (budget, period) rows known to exist
        with storage.transaction() as cur:
            if storage.schema_lock:  # other processes may be creating the schema too
                cur.execute(storage.schema_lock)
            for statement in SCHEMA:
                cur.execute(statement)
            for table, columns in ADDED_COLUMNS.items():  # a ledger of an earlier version
                cur.execute(f"SELECT * FROM {table} WHERE 1 = 0")
                present = {d[0] for d in cur.description}
                for column, kind in columns:
                    if column not in present:
                        cur.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            for statement in INDEXES:
                cur.execute(statement)
            now = self.clock() if now is None else now
            budgets = list(self.organisations.values())
            for key in keys:
                if self._write_configured_key(cur, key, now):
                    budgets.append(key.budget)
                else:
                    self.overridden.append(key.name)
            for budget in budgets:
                write_budget(cur, budget)
            self._beat(cur, now)

    @staticmethod
    def _write_configured_key(cur: Any, key: KeyConfig, now: float) -> bool:
        """Write a configured key, unless the admin API changed it; whether it was written.

        The API's word is final: a key created, rotated, revoked or re-limited through it
        (``source = 'api'``) keeps that state whatever the configuration says.
        """
        cur.execute("SELECT source FROM api_keys WHERE name = ?", (key.name,))
        row = cur.fetchone()
        if row is not None and row[0] not in (None, "config"):
            return False
        rates = key.rates
        if row is None:
            cur.execute("DELETE FROM api_keys WHERE key_sha256 = ?", (key.key_sha256,))
            cur.execute("INSERT INTO api_keys (key_sha256, name, organisation, rpm_limit, "
                        "tpm_limit, max_parallel_requests, created_at, source) VALUES "
                        "(?, ?, ?, ?, ?, ?, ?, 'config')",
                        (key.key_sha256, key.name, key.organisation, rates.rpm_limit,
                         rates.tpm_limit, rates.max_parallel_requests, now))
        else:
            cur.execute("UPDATE api_keys SET key_sha256 = ?, organisation = ?, rpm_limit = ?, "
                        "tpm_limit = ?, max_parallel_requests = ?, source = 'config' "
                        "WHERE name = ?",
                        (key.key_sha256, key.organisation, rates.rpm_limit, rates.tpm_limit,
                         rates.max_parallel_requests, key.name))
        return True

    def _beat(self, cur: Any, now: float) -> None:
        cur.execute("INSERT INTO servers (id, heartbeat) VALUES (?, ?) ON CONFLICT (id) DO "
                    "UPDATE SET heartbeat = excluded.heartbeat", (self.owner, now))

    def heartbeat(self, now: float | None = None) -> None:
        """Say this process is alive: its reservations do not expire for ``ttl`` seconds."""
        with self.storage.transaction() as cur:
            self._beat(cur, self.clock() if now is None else now)

    def budgets_of(self, key: KeyConfig,
                   user_budget: BudgetConfig | None = None) -> list[BudgetConfig]:
        """The budgets a key's calls count against, in name order (the lock order)."""
        found = [key.budget]
        if key.organisation is not None:
            found.append(self.organisations[key.organisation])
        if user_budget is not None:
            found.append(user_budget)
        return sorted(found, key=lambda b: b.name)

    def reserve(self, reservation_id: str, key: KeyConfig, amount: int,
                idempotency_key: str | None = None, now: float | None = None,
                user: str | None = None, user_budget: BudgetConfig | None = None,
                limits: Sequence[RateLimit] = (), answer_key: str | None = None,
                model: str | None = None, route: str | None = None) -> None:
        """Reserve ``amount`` micro-dollars on every budget of ``key``, or refuse.

        Args:
            reservation_id: The call's id (its row's).
            key: The API key (its budget, its organisation's).
            amount: The call's worst case, micro-dollars.
            idempotency_key: The request's (scoped) ``Idempotency-Key``, on its first call.
            now: The time (the ledger's clock by default).
            user: The end user the call is for (the request's ``user`` field).
            user_budget: That user's budget, when users have one.
            limits: The rate limits to check, on the first call of a request only (its
                admission): requests and tokens in the current UTC minute, and requests
                being answered (the subject's open reservations).
            answer_key: The request's idempotency key on every one of its calls (a
                fallback's too): the key its answer is kept under, by :meth:`settle` or,
                should the server die, by the expiry. ``idempotency_key`` by default.
            model: The model called, written on the row even when the server dies
                before the call is settled.
            route: The route, likewise.

        Raises:
            RateLimitedError: Past a rate limit (checked first).
            BudgetExceededError: Naming the first budget (in name order) it does not fit
                (:class:`BudgetBlockedError` when that budget is blocked).
            DuplicateRequestError: If ``idempotency_key`` was used before.
        """
        now = self.clock() if now is None else now
        budgets = self.budgets_of(key, user_budget)
        written: list[BudgetConfig] = []
        rows: list[tuple[str, int]] = []
        if now >= self._next_expiry:  # a dead server's calls, once a second at most, each
            self._next_expiry = now + 1.0  # in a transaction of its own (the lock order)
            self.release_expired(now)
        with self.storage.transaction() as cur:
            window = int(now // 60 * 60)
            for limit in limits:
                self._check_rate(cur, limit, key.name, user, window, now)
            if user_budget is not None and user_budget not in self._written:
                cur.execute("SELECT limit_micros, period FROM budgets WHERE name = ?",
                            (user_budget.name,))
                if cur.fetchone() != (user_budget.limit, user_budget.period):
                    write_budget(cur, user_budget)
                written.append(user_budget)
            if idempotency_key is not None:
                cur.execute("SELECT 1 FROM requests WHERE idempotency_key = ? UNION ALL "
                            "SELECT 1 FROM reservations WHERE idempotency_key = ?",
                            (idempotency_key, idempotency_key))
                if cur.fetchone() is not None:
                    raise DuplicateRequestError(
                        f"idempotency key {idempotency_key!r} was used before")
            held = []
            for budget in budgets:
                start = period_start(budget.period, now)
                if (budget.name, start) not in self._usage_rows:  # rows are never deleted
                    cur.execute("INSERT INTO budget_usage (budget, period_start) VALUES (?, ?) "
                                "ON CONFLICT (budget, period_start) DO NOTHING",
                                (budget.name, start))
                    rows.append((budget.name, start))
                cur.execute("SELECT u.spent_micros, u.reserved_micros, b.limit_micros, "
                            "u.blocked_by FROM budget_usage u JOIN budgets b ON b.name = "
                            f"u.budget WHERE u.budget = ? AND u.period_start = ?"
                            f"{self.storage.lock('u')}", (budget.name, start))
                spent, reserved, limit, blocked_by = cur.fetchone()
                if limit is not None and blocked_by is not None:
                    raise BudgetBlockedError(budget.name, limit, spent, reserved, amount,
                                             blocked_by)
                if limit is not None and spent + reserved + amount > limit:
                    raise BudgetExceededError(budget.name, limit, spent, reserved, amount)
                held.append(f"{budget.name}@{start}")
            for entry in held:
                name, period = entry.rsplit("@", 1)
                cur.execute("UPDATE budget_usage SET reserved_micros = reserved_micros + ? "
                            "WHERE budget = ? AND period_start = ?", (amount, name, int(period)))
            tokens_of = ",".join(x.subject for x in limits if x.rates.tpm_limit is not None)
            try:  # another process may have taken the key since the check (PostgreSQL)
                cur.execute("INSERT INTO reservations (id, key_name, budgets, amount_micros, "
                            "created_at, owner, idempotency_key, user_name, rate_subjects, "
                            "answer_key, model, route) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (reservation_id, key.name, ",".join(held), amount, now,
                             self.owner, idempotency_key, user, tokens_of or None,
                             answer_key or idempotency_key, model, route))
            except self.storage.integrity_error:
                raise DuplicateRequestError(f"idempotency key {idempotency_key!r} or request "
                                            f"id {reservation_id!r} was used before") from None
        if len(self._written) > 100_000 or len(self._usage_rows) > 100_000:  # keep it small
            self._written.clear()
            self._usage_rows.clear()
        self._written.update(written)  # committed: this process need not look again
        self._usage_rows.update(rows)

    def _check_rate(self, cur: Any, limit: RateLimit, key_name: str, user: str | None,
                    window: int, now: float) -> None:
        rates = limit.rates
        if rates.max_parallel_requests is not None:
            if limit.subject.startswith("user:"):
                cur.execute("SELECT COUNT(*) FROM reservations WHERE key_name = ? AND "
                            "user_name = ?", (key_name, user))
            else:
                cur.execute("SELECT COUNT(*) FROM reservations WHERE key_name = ?",
                            (key_name,))
            if int(cur.fetchone()[0]) >= rates.max_parallel_requests:
                raise RateLimitedError(limit.subject, "requests at once",
                                       rates.max_parallel_requests, 1)
        if rates.rpm_limit is None and rates.tpm_limit is None:
            return
        # counted in, and checked: a refusal rolls the whole transaction back (one statement,
        # which also locks the row on PostgreSQL; RETURNING: SQLite 3.35+)
        cur.execute("INSERT INTO rate_usage (subject, window_start, requests) VALUES (?, ?, 1) "
                    "ON CONFLICT (subject, window_start) DO UPDATE SET requests = "
                    "rate_usage.requests + 1 RETURNING requests, tokens",
                    (limit.subject, window))
        requests, tokens = cur.fetchone()
        wait = max(1, math.ceil(window + 60 - now))
        if rates.rpm_limit is not None and requests > rates.rpm_limit:
            raise RateLimitedError(limit.subject, "requests per minute", rates.rpm_limit, wait)
        if rates.tpm_limit is not None and tokens >= rates.tpm_limit:
            raise RateLimitedError(limit.subject, "tokens per minute", rates.tpm_limit, wait)

    def write_ahead(self, reservation_id: str, cost: int, *, upstream_id: str | None = None,
                    prompt_tokens: int | None = None,
                    completion_tokens: int | None = None) -> None:
        """Record what the upstream billed a reserved call, before its answer is relayed.

        Should the server die before :meth:`settle`, the expiry charges this cost
        (outcome ``recovered``) instead of the reservation's worst case.
        """
        with self.storage.transaction() as cur:
            cur.execute("UPDATE reservations SET known_cost_micros = ?, upstream_id = ?, "
                        "prompt_tokens = ?, completion_tokens = ? WHERE id = ?",
                        (cost, upstream_id, prompt_tokens, completion_tokens, reservation_id))

    def settle(self, reservation_id: str, cost: int, outcome: str, *, route: str | None = None,
               model: str | None = None, prompt_tokens: int | None = None,
               completion_tokens: int | None = None, latency_ms: float | None = None,
               prompt: str | None = None, response: str | None = None,
               upstream_id: str | None = None, answer: tuple[int, str, bool] | None = None,
               now: float | None = None) -> int:
        """Charge a reserved call its real ``cost`` (0 for a failed call) and write its row.

        A cost above the reservation is charged all the same and blocks the budgets
        (module docstring). ``answer`` (status, JSON body, streamed) is kept for the
        reservation's idempotency key, so that a client's retry is answered from it.
        Settling twice is a no-op; settling after the reservation expired replaces what
        the expiry charged and marks the row ``late``.

        Returns:
            The excess over the reservation (0 when the cost fits it).
        """
        now = self.clock() if now is None else now
        with self.storage.transaction() as cur:
            cur.execute("SELECT budgets, amount_micros, key_name, idempotency_key, created_at, "
                        "user_name, rate_subjects, answer_key FROM reservations r WHERE id = ?"
                        f"{self.storage.lock('r')}", (reservation_id,))
            found = cur.fetchone()
            if found is None:
                cur.execute("SELECT budgets, outcome, cost_micros, reserved_micros, "
                            "idempotency_key FROM requests WHERE id = ?", (reservation_id,))
                row = cur.fetchone()
                if row is None or row[1] not in ("unknown", "recovered"):
                    return 0  # settled already (or never reserved): nothing to do twice
                budgets, _, charged, amount, answer_key = row
                excess = self._charge(cur, budgets, 0, cost - charged, cost - amount,
                                      reservation_id)
                cur.execute("UPDATE requests SET cost_micros = ?, outcome = ?, model = ?, "
                            "prompt_tokens = ?, completion_tokens = ?, latency_ms = ?, "
                            "response = ?, over_reservation_micros = ?, upstream_id = ? "
                            "WHERE id = ?",
                            (cost, f"late:{outcome}", model, prompt_tokens, completion_tokens,
                             latency_ms, response, excess, upstream_id, reservation_id))
            else:
                (budgets, amount, key_name, idempotency_key, created, user, subjects,
                 answer_key) = found
                tokens = (prompt_tokens or 0) + (completion_tokens or 0)
                window = int(now // 60 * 60)
                for subject in (subjects or "").split(",") if tokens else ():
                    if subject:  # the tokens count in the minute they were billed
                        cur.execute("INSERT INTO rate_usage (subject, window_start, tokens) "
                                    "VALUES (?, ?, ?) ON CONFLICT (subject, window_start) DO "
                                    "UPDATE SET tokens = rate_usage.tokens + excluded.tokens",
                                    (subject, window, tokens))
                excess = self._charge(cur, budgets, amount, cost, cost - amount,
                                      reservation_id)
                cur.execute("DELETE FROM reservations WHERE id = ?", (reservation_id,))
                self._insert(cur, (reservation_id, idempotency_key, key_name, budgets, route,
                                   model, prompt_tokens, completion_tokens, cost, amount,
                                   latency_ms, outcome, created, prompt, response, excess,
                                   upstream_id, user))
            if answer is not None and answer_key is not None:
                self._keep_answer(cur, answer_key, answer, now)
            key_name = found[2] if found is not None else None
        if self.on_settle is not None:
            self.on_settle(Settled(key_name, model, cost, prompt_tokens, completion_tokens,
                                   excess, outcome))
        return excess

    def _charge(self, cur: Any, budgets: str, release: int, cost: int, excess: int,
                request_id: str) -> int:
        """Move ``release`` out of reserved and ``cost`` into spent on every budget held.

        An ``excess`` above 0 (billed above the reservation) blocks each limited budget
        held; returns the excess (0 when there is none).
        """
        excess = max(0, excess)
        for name, start in _held(budgets):
            cur.execute("UPDATE budget_usage SET reserved_micros = reserved_micros - ?, "
                        "spent_micros = spent_micros + ? WHERE budget = ? AND "
                        "period_start = ?", (release, cost, name, start))
            if excess:
                cur.execute("UPDATE budget_usage SET blocked_by = ? WHERE budget = ? AND "
                            "period_start = ? AND blocked_by IS NULL AND budget IN (SELECT "
                            "name FROM budgets WHERE limit_micros IS NOT NULL)",
                            (request_id, name, start))
        return excess

    @staticmethod
    def _keep_answer(cur: Any, idempotency_key: str, answer: tuple[int, str, bool],
                     now: float) -> None:
        status, body, stream = answer
        cur.execute("INSERT INTO answers (idempotency_key, status, body, stream, created_at) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING",
                    (idempotency_key, status, body, stream, now))

    def keep_answer(self, idempotency_key: str, status: int, body: str, stream: bool = False,
                    now: float | None = None) -> None:
        """Keep the answer of a request whose calls are settled (an error, say) for retries."""
        with self.storage.transaction() as cur:
            self._keep_answer(cur, idempotency_key, (status, body, stream),
                              self.clock() if now is None else now)

    def abandoned(self, answer_key: str, now: float | None = None) -> bool:
        """Whether the request with this idempotency key will never be answered.

        True when none of its calls is reserved and its first call is older than ``ttl``
        seconds: its server died between two of its steps (a live request reserves its
        next call, or keeps its answer, well within that time).
        """
        now = self.clock() if now is None else now
        with self.storage.transaction() as cur:
            cur.execute("SELECT 1 FROM reservations WHERE answer_key = ? LIMIT 1", (answer_key,))
            if cur.fetchone() is not None:
                return False
            cur.execute("SELECT created_at FROM requests WHERE idempotency_key = ?",
                        (answer_key,))
            row = cur.fetchone()
            return row is not None and float(row[0]) < now - self.ttl

    def answer_of(self, idempotency_key: str) -> tuple[int, str, bool] | None:
        """The kept answer of an idempotency key, or ``None``."""
        with self.storage.transaction() as cur:
            cur.execute("SELECT status, body, stream FROM answers WHERE idempotency_key = ?",
                        (idempotency_key,))
            row = cur.fetchone()
            return None if row is None else (int(row[0]), str(row[1]), bool(row[2]))

    def record(self, request_id: str, outcome: str, *, key_name: str | None = None,
               route: str | None = None, model: str | None = None,
               idempotency_key: str | None = None, prompt: str | None = None,
               user: str | None = None, now: float | None = None) -> None:
        """Write the row of a request that reserved nothing (refused), with no cost."""
        now = self.clock() if now is None else now
        with self.storage.transaction() as cur:
            self._insert(cur, (request_id, idempotency_key, key_name, None, route, model, None,
                               None, 0, 0, None, outcome, now, prompt, None, 0, None, user))

    def release_expired(self, now: float | None = None) -> int:
        """Settle the reservations of servers silent for ``ttl`` seconds; return how many.

        Each in a transaction of its own, which locks its reservation and then its budgets
        in name order, as :meth:`settle` does: two processes settling expired calls never
        wait on each other in a circle (PostgreSQL).
        """
        now = self.clock() if now is None else now
        with self.storage.transaction() as cur:  # which ones: never this process's own
            cur.execute("SELECT r.id FROM reservations r LEFT JOIN servers s ON s.id = r.owner "
                        "WHERE r.owner <> ? AND (s.heartbeat IS NULL OR s.heartbeat < ?)",
                        (self.owner, now - self.ttl))
            expired = [row[0] for row in cur.fetchall()]
        settled = 0
        for ident in expired:
            with self.storage.transaction() as cur:
                settled += self._expire(cur, ident, now)
        return settled

    def _expire(self, cur: Any, ident: str, now: float) -> int:
        """Settle one expired reservation (1), or nothing if another process just did (0)."""
        cur.execute("SELECT r.budgets, r.amount_micros, r.key_name, r.idempotency_key, "
                    "r.created_at, r.known_cost_micros, r.upstream_id, r.prompt_tokens, "
                    "r.completion_tokens, r.user_name, r.answer_key, r.model, r.route FROM "
                    f"reservations r WHERE r.id = ?{self.storage.lock('r')}", (ident,))
        found = cur.fetchone()
        if found is None:
            return 0
        (budgets, amount, key_name, idempotency_key, created, known, upstream_id,
         prompt_tokens, completion_tokens, user, answer_key, model, route) = found
        # what the upstream billed when the server wrote it down, else the worst case
        cost = amount if known is None else int(known)
        excess = self._charge(cur, budgets, amount, cost, cost - amount, ident)
        cur.execute("DELETE FROM reservations WHERE id = ?", (ident,))
        self._insert(cur, (ident, idempotency_key, key_name, budgets, route, model,
                           prompt_tokens, completion_tokens, cost, amount, None,
                           "unknown" if known is None else "recovered", created, None,
                           None, excess, upstream_id, user))
        if answer_key is not None:  # a client's retry gets this, not a 409 forever
            self._keep_answer(cur, answer_key, (502, json.dumps(EXPIRED_ANSWER), False), now)
        return 1

    def unblock(self, budget: str, now: float | None = None) -> bool:
        """Lift the block of ``budget`` in its current period; whether it was blocked."""
        now = self.clock() if now is None else now
        with self.storage.transaction() as cur:
            cur.execute("SELECT period FROM budgets WHERE name = ?", (budget,))
            row = cur.fetchone()
            if row is None:
                raise KeyError(budget)
            cur.execute("UPDATE budget_usage SET blocked_by = NULL WHERE budget = ? AND "
                        "period_start = ? AND blocked_by IS NOT NULL",
                        (budget, period_start(str(row[0]), now)))
            return bool(cur.rowcount)

    def blocked(self, now: float | None = None) -> dict[str, str]:
        """The budgets blocked in their current period: ``{budget: request that blocked it}``."""
        now = self.clock() if now is None else now
        with self.storage.transaction() as cur:
            cur.execute("SELECT u.budget, u.period_start, u.blocked_by, b.period FROM "
                        "budget_usage u JOIN budgets b ON b.name = u.budget WHERE "
                        "u.blocked_by IS NOT NULL")
            return {name: by for name, start, by, period in cur.fetchall()
                    if start == period_start(period, now)}

    @staticmethod
    def _insert(cur: Any, row: Sequence[Any]) -> None:
        cur.execute(f"INSERT INTO requests ({', '.join(REQUEST_COLUMNS)}) VALUES "
                    f"({', '.join('?' * len(REQUEST_COLUMNS))}) ON CONFLICT (id) DO NOTHING",
                    tuple(row))

    def feedback(self, request_id: str, score: float, key_name: str,
                 now: float | None = None) -> bool:
        """Record a client's score of a request it made (again: the new score wins).

        Returns:
            Whether the request is a settled call of that key (else nothing is stored).
        """
        with self.storage.transaction() as cur:
            cur.execute("SELECT key_name, outcome FROM requests WHERE id = ?", (request_id,))
            row = cur.fetchone()
            if row is None or row[0] != key_name or not str(row[1]).endswith("ok"):
                return False
            cur.execute("INSERT INTO feedback (request_id, score, created_at) VALUES (?, ?, ?) "
                        "ON CONFLICT (request_id) DO UPDATE SET score = excluded.score, "
                        "created_at = excluded.created_at",
                        (request_id, score, self.clock() if now is None else now))
            return True

    def scored_calls(self) -> list[dict[str, Any]]:
        """The settled calls with feedback: model, prompt, response, tokens, cost, score."""
        with self.storage.transaction() as cur:
            cur.execute("SELECT r.id, r.model, r.prompt, r.response, r.prompt_tokens, "
                        "r.completion_tokens, r.cost_micros, f.score, f.created_at FROM "
                        "requests r JOIN feedback f ON f.request_id = r.id "
                        "ORDER BY f.created_at, r.id")
            names = ("id", "model", "prompt", "response", "prompt_tokens", "completion_tokens",
                     "cost_micros", "score", "scored_at")
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def usage(self) -> list[Usage]:
        """Every budget's money in every period it was used."""
        with self.storage.transaction() as cur:
            cur.execute("SELECT u.budget, u.period_start, u.spent_micros, u.reserved_micros, "
                        "b.limit_micros FROM budget_usage u JOIN budgets b ON b.name = u.budget "
                        "ORDER BY u.budget, u.period_start")
            return [Usage(*row) for row in cur.fetchall()]

    def current_usage(self, now: float | None = None) -> list[Usage]:
        """Every budget's money in its current period (0 for a budget not used in it)."""
        now = self.clock() if now is None else now
        with self.storage.transaction() as cur:
            cur.execute("SELECT name, limit_micros, period FROM budgets ORDER BY name")
            found = []
            for name, limit, period in cur.fetchall():
                start = period_start(period, now)
                cur.execute("SELECT spent_micros, reserved_micros FROM budget_usage WHERE "
                            "budget = ? AND period_start = ?", (name, start))
                row = cur.fetchone() or (0, 0)
                found.append(Usage(name, start, int(row[0]), int(row[1]), limit))
            return found

    def requests(self) -> list[dict[str, Any]]:
        """Every request's row, oldest first."""
        with self.storage.transaction() as cur:
            cur.execute(f"SELECT {', '.join(REQUEST_COLUMNS)} FROM requests "
                        "ORDER BY created_at, id")
            return [dict(zip(REQUEST_COLUMNS, row, strict=True)) for row in cur.fetchall()]

    def open_reservations(self) -> int:
        """How many reservations are held now."""
        with self.storage.transaction() as cur:
            cur.execute("SELECT COUNT(*) FROM reservations")
            return int(cur.fetchone()[0])


def write_budget(cur: Any, budget: BudgetConfig) -> None:
    """Create or update a budget's row (its limit and period)."""
    cur.execute("INSERT INTO budgets (name, limit_micros, period) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET limit_micros = excluded.limit_micros, "
                "period = excluded.period", (budget.name, budget.limit, budget.period))


def _held(budgets: str) -> list[tuple[str, int]]:
    """``"key:a@0,org:b@1700000000"`` as ``[("key:a", 0), ("org:b", 1700000000)]``."""
    pairs = [entry.rsplit("@", 1) for entry in budgets.split(",") if entry]
    return [(name, int(start)) for name, start in pairs]
