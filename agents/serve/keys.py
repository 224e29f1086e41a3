"""API keys in the ledger: created, rotated, revoked and re-limited without a restart.

Keys live in the ledger's ``api_keys`` table, hashed (SHA-256: a key is shown once, when
it is made, and never stored), with their organisation and rate limits; a key's budget is
the ``budgets`` row ``key:NAME``. The keys of ``serve.yaml`` are written there at start
(:class:`~agents.serve.ledger.Ledger`); the admin API (:mod:`agents.serve.app`, the
routes LiteLLM's proxy names ``/key/generate``, ``/key/list``, ``/key/info``,
``/key/update``, ``/key/regenerate``, ``/key/delete``) changes them at run time, and its
word is final: a key changed through it keeps that state over restarts, whatever its
YAML entry says (the server names such keys when it starts).

Every server process reads a key from the ledger when it first sees it and then keeps it
for :data:`CACHE_SECONDS`, so a key made, rotated, revoked or re-limited in one process
holds in every other within that time (at once in the process that changed it).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from agents.serve.config import (
    PERIODS,
    RATE_KEYS,
    BudgetConfig,
    KeyConfig,
    RateLimits,
    hash_key,
    micros,
)
from agents.serve.inputs import ApiError
from agents.serve.ledger import Ledger, write_budget
from cost_envs.config import integer, number, one_of

#: Seconds a server process keeps a key it read before reading it again.
CACHE_SECONDS = 1.0
#: The prefix of the keys the admin API makes.
KEY_PREFIX = "sk-ce-"
_SELECT = ("SELECT k.key_sha256, k.name, k.organisation, k.rpm_limit, k.tpm_limit, "
           "k.max_parallel_requests, k.revoked_at, k.created_at, k.source, b.limit_micros, "
           "b.period FROM api_keys k LEFT JOIN budgets b ON b.name = 'key:' || k.name")


class KeyStore:
    """The API keys of a ledger, read through a short cache.

    Args:
        ledger: The ledger holding them.
        clock: The time (tests); the clock's by default.
    """

    def __init__(self, ledger: Ledger, clock: Callable[[], float] = time.time) -> None:
        self.ledger = ledger
        self.clock = clock
        self._cache: dict[str, tuple[float, KeyConfig | None]] = {}
        self._lock = threading.Lock()

    def lookup(self, digest: str) -> KeyConfig | None:
        """The live key whose SHA-256 is ``digest``, or ``None`` (unknown or revoked)."""
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        with self.ledger.storage.transaction() as cur:
            cur.execute(f"{_SELECT} WHERE k.key_sha256 = ?", (digest,))
            row = cur.fetchone()
        key = None if row is None or row[6] is not None else self._key(row)
        with self._lock:
            if len(self._cache) > 100_000:  # unknown keys tried at random: keep it small
                self._cache.clear()
            self._cache[digest] = (now + CACHE_SECONDS, key)
        return key

    def _key(self, row: Any) -> KeyConfig:
        digest, name, organisation, rpm, tpm, parallel, _, _, _, limit, period = row
        return KeyConfig(name, digest, BudgetConfig(f"key:{name}", limit, period or "total"),
                         organisation, RateLimits(rpm, tpm, parallel))

    def _forget(self) -> None:
        with self._lock:
            self._cache.clear()

    def _write(self, name: str, change: Callable[[Any], None]) -> dict[str, Any]:
        """Key ``name`` as shown after ``change(cursor)``, in one transaction.

        Every change of a key goes through here: the key is read back in the change's
        own transaction, and this process's cache is forgotten once it commits, so the
        process that changed a key never serves a request under its old settings.
        """
        with self.ledger.storage.transaction() as cur:
            change(cur)
            shown = _shown(self._row(cur, name))
        self._forget()
        return shown

    def list(self) -> list[dict[str, Any]]:
        """Every key (live and revoked), without its hash."""
        with self.ledger.storage.transaction() as cur:
            cur.execute(f"{_SELECT} ORDER BY k.name")
            return [_shown(row) for row in cur.fetchall()]

    def info(self, name: str) -> dict[str, Any]:
        """One key by name.

        Raises:
            ApiError: 404 when there is no such key.
        """
        with self.ledger.storage.transaction() as cur:
            return _shown(self._row(cur, name))

    def _row(self, cur: Any, name: str) -> Any:
        cur.execute(f"{_SELECT} WHERE k.name = ?", (name,))
        row = cur.fetchone()
        if row is None:
            raise ApiError(404, f"name: no API key {name!r}", param="name",
                           code="key_not_found")
        return row

    def generate(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Make a key: ``{"name", "organisation"?, "limit"?, "period"?, rate limits?}``.

        Returns:
            The key's settings and, once only, the key itself (``"key"``).

        Raises:
            ApiError: 400 naming a bad field, 409 when the name is taken.
        """
        _only(body, ("name", "organisation", "limit", "period", *RATE_KEYS))
        name = body.get("name")
        if not isinstance(name, str) or not name or not name.replace("_", "").replace(
                "-", "").replace(".", "").isalnum() or len(name) > 64:
            raise ApiError(400, f"name: expected 1 to 64 letters, digits, _ - or ., got "
                           f"{str(name)[:40]!r}", param="name")
        organisation = body.get("organisation")
        if organisation is not None and (not isinstance(organisation, str)
                                         or organisation not in self.ledger.organisations):
            raise ApiError(400, f"organisation: expected one of "
                           f"{sorted(self.ledger.organisations)} (serve.yaml), got "
                           f"{str(organisation)[:40]!r}", param="organisation")
        budget = BudgetConfig(f"key:{name}", _limit(body.get("limit")),
                              _period(body.get("period", "total")))
        rates = RateLimits(*(_rate(body.get(k), k) for k in RATE_KEYS))
        secret = KEY_PREFIX + secrets.token_urlsafe(32)

        def insert(cur: Any) -> None:
            cur.execute("SELECT 1 FROM api_keys WHERE name = ?", (name,))
            if cur.fetchone() is not None:
                raise ApiError(409, f"name: an API key {name!r} exists; expected a new name "
                               "(or /key/regenerate to rotate it)", param="name",
                               code="key_exists")
            cur.execute("INSERT INTO api_keys (key_sha256, name, organisation, rpm_limit, "
                        "tpm_limit, max_parallel_requests, created_at, source) VALUES "
                        "(?, ?, ?, ?, ?, ?, ?, 'api')",
                        (hash_key(secret), name, organisation, rates.rpm_limit,
                         rates.tpm_limit, rates.max_parallel_requests, self.clock()))
            write_budget(cur, budget)

        return {**self._write(name, insert), "key": secret}

    def update(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Change a key's limits: ``{"name", "limit"?, "period"?, rate limits?}`` (null: none).

        Raises:
            ApiError: 400 naming a bad field, 404 when there is no such key.
        """
        _only(body, ("name", "limit", "period", *RATE_KEYS))
        name = _name(body)

        def limit(cur: Any) -> None:
            key = self._key(self._row(cur, name))
            budget = key.budget
            if "limit" in body:
                budget = replace(budget, limit=_limit(body["limit"]))
            if "period" in body:
                budget = replace(budget, period=_period(body["period"]))
            rates = RateLimits(*(_rate(body[k], k) if k in body else getattr(key.rates, k)
                                 for k in RATE_KEYS))
            cur.execute("UPDATE api_keys SET rpm_limit = ?, tpm_limit = ?, "
                        "max_parallel_requests = ?, source = 'api' WHERE name = ?",
                        (rates.rpm_limit, rates.tpm_limit, rates.max_parallel_requests, name))
            write_budget(cur, budget)

        return self._write(name, limit)

    def regenerate(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Rotate a key: a new key for the same name, budget and limits; the old one stops.

        Raises:
            ApiError: 400 naming a bad field, 404 when there is no such key.
        """
        _only(body, ("name",))
        name = _name(body)
        secret = KEY_PREFIX + secrets.token_urlsafe(32)

        def rotate(cur: Any) -> None:
            self._row(cur, name)  # 404 for no such key
            cur.execute("UPDATE api_keys SET key_sha256 = ?, revoked_at = NULL, "
                        "source = 'api' WHERE name = ?", (hash_key(secret), name))

        return {**self._write(name, rotate), "key": secret}

    def delete(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Revoke a key (its row and its spend stay in the ledger).

        Raises:
            ApiError: 400 naming a bad field, 404 when there is no such key.
        """
        _only(body, ("name",))
        name = _name(body)

        def revoke(cur: Any) -> None:
            self._row(cur, name)  # 404 for no such key
            cur.execute("UPDATE api_keys SET revoked_at = ?, source = 'api' WHERE name = ? "
                        "AND revoked_at IS NULL", (self.clock(), name))

        return self._write(name, revoke)


def _shown(row: Any) -> dict[str, Any]:
    _, name, organisation, rpm, tpm, parallel, revoked, created, source, limit, period = row
    return {"name": name, "organisation": organisation,
            "limit": None if limit is None else limit / 1e6, "period": period or "total",
            "rpm_limit": rpm, "tpm_limit": tpm, "max_parallel_requests": parallel,
            "revoked": revoked is not None, "revoked_at": revoked, "created_at": created,
            "source": source or "config"}


def _only(body: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise ApiError(400, f"{unknown[0]}: unknown field; expected some of {list(allowed)}",
                       param=unknown[0])


def _name(body: Mapping[str, Any]) -> str:
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ApiError(400, f"name: expected a key's name, got {str(name)[:40]!r}",
                       param="name")
    return name


def _field(check: Callable[[], Any], name: str) -> Any:
    """The project's validator (:mod:`cost_envs.config`) run on a field: its error a 400."""
    try:
        return check()
    except ValueError as err:
        raise ApiError(400, f"{err} (or null)" if name != "period" else str(err),
                       param=name) from None


def _limit(value: Any) -> int | None:
    if value is None:
        return None
    return micros(_field(lambda: number(value, "limit", minimum=0, maximum=1e9), "limit"))


def _period(value: Any) -> str:
    return str(_field(lambda: one_of(value, "period", PERIODS), "period"))


def _rate(value: Any, name: str) -> int | None:
    if value is None:
        return None
    return int(_field(lambda: integer(value, name, minimum=1, maximum=10**12), name))
