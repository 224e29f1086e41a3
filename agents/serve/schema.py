"""The ledger's tables, as SQL that SQLite (3.35+) and PostgreSQL both read.

:class:`~agents.serve.ledger.Ledger` creates them when it opens a storage, adds the
columns of :data:`ADDED_COLUMNS` to a ledger an earlier version wrote, then makes
:data:`INDEXES`. Money is integer micro-dollars (``BIGINT``).
"""

from __future__ import annotations

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS api_keys (
        key_sha256 TEXT PRIMARY KEY, name TEXT UNIQUE NOT NULL, organisation TEXT,
        rpm_limit BIGINT, tpm_limit BIGINT, max_parallel_requests BIGINT,
        revoked_at DOUBLE PRECISION, created_at DOUBLE PRECISION, source TEXT)""",
    """CREATE TABLE IF NOT EXISTS budgets (
        name TEXT PRIMARY KEY, limit_micros BIGINT, period TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS budget_usage (
        budget TEXT NOT NULL, period_start BIGINT NOT NULL,
        spent_micros BIGINT NOT NULL DEFAULT 0, reserved_micros BIGINT NOT NULL DEFAULT 0,
        blocked_by TEXT, PRIMARY KEY (budget, period_start))""",
    """CREATE TABLE IF NOT EXISTS reservations (
        id TEXT PRIMARY KEY, key_name TEXT, budgets TEXT NOT NULL,
        amount_micros BIGINT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        owner TEXT NOT NULL, idempotency_key TEXT UNIQUE, upstream_id TEXT,
        known_cost_micros BIGINT, prompt_tokens INTEGER, completion_tokens INTEGER,
        user_name TEXT, rate_subjects TEXT, answer_key TEXT, model TEXT, route TEXT)""",
    "CREATE INDEX IF NOT EXISTS reservations_owner ON reservations (owner)",
    """CREATE TABLE IF NOT EXISTS rate_usage (
        subject TEXT NOT NULL, window_start BIGINT NOT NULL,
        requests BIGINT NOT NULL DEFAULT 0, tokens BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (subject, window_start))""",
    """CREATE TABLE IF NOT EXISTS feedback (
        request_id TEXT PRIMARY KEY, score DOUBLE PRECISION NOT NULL,
        created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS servers (
        id TEXT PRIMARY KEY, heartbeat DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS requests (
        id TEXT PRIMARY KEY, idempotency_key TEXT UNIQUE, key_name TEXT, budgets TEXT,
        route TEXT, model TEXT, prompt_tokens INTEGER, completion_tokens INTEGER,
        cost_micros BIGINT NOT NULL DEFAULT 0, reserved_micros BIGINT NOT NULL DEFAULT 0,
        latency_ms DOUBLE PRECISION, outcome TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, prompt TEXT, response TEXT,
        over_reservation_micros BIGINT NOT NULL DEFAULT 0, upstream_id TEXT,
        user_name TEXT)""",
    """CREATE TABLE IF NOT EXISTS answers (
        idempotency_key TEXT PRIMARY KEY, status INTEGER NOT NULL, body TEXT NOT NULL,
        stream BOOLEAN NOT NULL, created_at DOUBLE PRECISION NOT NULL)""",
)

#: The answer kept for a client retrying a call whose server died before it was settled.
EXPIRED_ANSWER = {"error": {
    "message": "the server stopped before this request was answered; it was charged its "
               "reserved worst case (the upstream may have billed it)",
    "type": "upstream_error", "param": None, "code": "outcome_unknown"}}

#: Indexes on columns later versions added (made once the columns are there).
INDEXES = ("CREATE INDEX IF NOT EXISTS reservations_key ON reservations (key_name, user_name)",)

#: Columns later versions added to a table: a ledger written before gets them on opening.
ADDED_COLUMNS = {
    "api_keys": (("rpm_limit", "BIGINT"), ("tpm_limit", "BIGINT"),
                 ("max_parallel_requests", "BIGINT"), ("revoked_at", "DOUBLE PRECISION"),
                 ("created_at", "DOUBLE PRECISION"), ("source", "TEXT")),
    "budget_usage": (("blocked_by", "TEXT"),),
    "reservations": (("upstream_id", "TEXT"), ("known_cost_micros", "BIGINT"),
                     ("prompt_tokens", "INTEGER"), ("completion_tokens", "INTEGER"),
                     ("user_name", "TEXT"), ("rate_subjects", "TEXT"), ("answer_key", "TEXT"),
                     ("model", "TEXT"), ("route", "TEXT")),
    "requests": (("over_reservation_micros", "BIGINT NOT NULL DEFAULT 0"),
                 ("upstream_id", "TEXT"), ("user_name", "TEXT")),
}

#: The columns of a request's row, in :meth:`Ledger.requests`'s order.
REQUEST_COLUMNS = ("id", "idempotency_key", "key_name", "budgets", "route", "model",
                   "prompt_tokens", "completion_tokens", "cost_micros", "reserved_micros",
                   "latency_ms", "outcome", "created_at", "prompt", "response",
                   "over_reservation_micros", "upstream_id", "user_name")
