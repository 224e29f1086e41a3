"""The chaos run's scenario (models, routes, keys) and its check (tests/serve_chaos.py).

:func:`check` compares what the ledger charged each key (its rows' ``cost_micros`` and its
``budget_usage``) with what the stand-in upstream billed it (``GET /stats``, tokens per
model and ``user``), each budget's spend with its limit and documented bound, and the
clients' answers with the rows; :class:`Report` prints the table and the summary.
tests/serve_chaos.py says what each check is for.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

#: How many times the tokens the lying models bill (``lie``) or produce (``overrun``).
LIE_FACTOR, OVERRUN_FACTOR = 6, 4
#: model -> (fault, (input price, output price) in dollars per 1M tokens, timeout).
MODELS: dict[str, tuple[str | None, tuple[str, str], float]] = {
    "f_timeout": ("timeout", ("1.1", "4.4"), 1.0),
    "f_429": ("429", ("0.15", "0.6"), 30.0),
    "f_500": ("500", ("0.4", "1.6"), 30.0),
    "f_reset": ("reset", ("0.25", "1.0"), 30.0),
    "f_bad_json": ("bad_json", ("2.5", "10"), 30.0),
    "f_cut": ("cut", ("0.3", "1.2"), 30.0),
    "f_no_usage": ("no_usage", ("0.8", "3.2"), 30.0),
    "f_lie": ("lie", ("1.25", "5"), 30.0),
    "f_overrun": ("overrun", ("0.5", "2"), 30.0),
    "dead": (None, ("1", "1"), 5.0),
}
#: The lying models and how many times an honest bill they may bill.
LIARS = {"f_lie": LIE_FACTOR, "f_overrun": OVERRUN_FACTOR}
#: The routes clients name: a fixed model, then its fallbacks.
ROUTES = {
    "r-timeout": ["f_timeout", "f_no_usage"],
    "r-429": ["f_429", "f_500", "f_cut"],
    "r-500": ["f_500", "f_reset"],
    "r-reset": ["f_reset", "f_bad_json"],
    "r-badjson": ["f_bad_json", "f_429"],
    "r-cut": ["f_cut", "f_no_usage"],
    "r-nousage": ["f_no_usage", "f_timeout"],
    "r-dead": ["dead", "f_500", "f_cut"],
    "r-lie": ["f_lie", "f_cut"],
    "r-overrun": ["f_overrun", "f_reset"],
}


@dataclass(frozen=True)
class Key:
    """An API key of the run: its organisation, limit (a share of its planned worst cases)."""

    name: str
    organisation: str | None
    #: The limit as a share of the worst cases of the key's planned requests (None: none).
    share: float | None
    #: Its share of the requests.
    weight: float
    liar: bool = False

    @property
    def secret(self) -> str:
        return f"sk-chaos-{self.name}"


KEYS = (
    Key("alpha", "lab", None, 0.18),
    Key("beta", "lab", 0.25, 0.14),
    Key("gamma", "lab", 0.08, 0.10),
    Key("delta", "lab", 0.04, 0.08),
    Key("omega", None, None, 0.14),
    Key("liar1", "wild", 0.12, 0.12, liar=True),
    Key("liar2", "wild", None, 0.10, liar=True),
    Key("liar3", None, 0.08, 0.14, liar=True),
)
LIAR_KEYS = {k.name for k in KEYS if k.liar}
#: The outcomes the run must have produced rows of.
OUTCOMES = ("ok", "upstream_unknown", "upstream_failed", "upstream_stream_failed",
            "ok_no_usage", "unknown")
#: Outcomes charged without the upstream's usage read (a liar may have billed more).
UNREAD = ("unknown", "upstream_unknown", "upstream_stream_failed", "stream_incomplete",
          "server_error", "ok_no_usage")


@dataclass
class Attempt:
    """One planned request's final answer, as its client saw it."""

    index: int
    key: str
    first: float  # time.time() of its first send
    started: float  # time.time() of its last send
    ended: float
    result: str  # "200", "402", "502", "stream_error", "409", "connection", ...
    ids: tuple[str, ...] = ()
    replayed: bool = False
    message: str = ""
    tries: int = 1


@dataclass
class Run:
    """What the load did (shared by the client, killer and operator threads)."""

    attempts: list[Attempt] = field(default_factory=list)
    #: Every 200's response ids by request (each retry of an idempotent request included).
    answers: dict[int, list[tuple[str, bool]]] = field(default_factory=dict)
    #: (started, ended, budget) of each unblock the operator sent.
    unblocks: list[tuple[float, float, str]] = field(default_factory=list)
    kills: list[tuple[float, int]] = field(default_factory=list)
    #: What went wrong in the killer (a server that did not start again).
    errors: list[str] = field(default_factory=list)
    done: int = 0
    #: The next kill's point (requests done): clients start no request past it until the
    #: kill is made, so every kill happens with calls in flight, however fast the load.
    hold_at: float | None = None
    #: Requests sent and not yet answered (the killer waits for none of them to finish).
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    finished: threading.Event = field(default_factory=threading.Event)


@dataclass
class Line:
    """One budget's row of the table (micro-dollars)."""

    name: str
    limit: int | None
    billed: int = 0  # ceil(sum of tokens x prices): the least a per-call rounded bill is
    rounding: int = 0  # how much more a per-call rounded bill may be (its calls)
    unseen: int = 0  # the liars' allowance: (factor - 1) x reserved of unread lying calls
    charged: int = 0  # sum of its rows' cost_micros
    spent: int = 0  # budget_usage.spent_micros
    excess: int = 0  # sum of its rows' over_reservation_micros
    rows: int = 0
    refused: int = 0  # client 402s
    verdict: str = "ok"

    @property
    def short(self) -> int:
        """How much less than the least possible bill was charged (used of ``unseen``)."""
        return max(0, self.billed - self.charged)


@dataclass
class Report:
    """A chaos run's findings: the table, the counts, and what failed."""

    storage: str
    seed: int
    digest: str
    seconds: float
    keys: list[Line]
    organisations: list[Line]
    outcomes: Counter[str]
    results: Counter[str]
    kills: int
    blocks_judged: int
    blocked_refusals: int
    failures: list[str]
    notes: list[str]
    #: 402s by the budget their message names first and why (exceeded, blocked).
    refusals: Counter[tuple[str, str]]
    median_request: float
    slowest_request: float
    #: Answers replayed to an idempotent retry, by status.
    replayed: Counter[str] = field(default_factory=Counter)
    #: Kills by server (0, or 0 and 1 with PostgreSQL).
    killed: Counter[int] = field(default_factory=Counter)

    def table(self) -> str:
        head = (f"{'budget':<11}{'limit':>9}{'billed':>9}{'+round':>7}{'unseen':>8}"
                f"{'short':>7}{'charged':>9}{'spent':>9}{'excess':>8}{'bound':>9}{'rows':>6}"
                f"{'402s':>6}  verdict")
        lines = [head, "-" * len(head)]
        for line in [*self.keys, *self.organisations]:
            limit = "-" if line.limit is None else str(line.limit)
            bound = "-" if line.limit is None else str(line.limit + line.excess)
            lines.append(f"{line.name:<11}{limit:>9}{line.billed:>9}{line.rounding:>7}"
                         f"{line.unseen:>8}{line.short:>7}{line.charged:>9}{line.spent:>9}"
                         f"{line.excess:>8}{bound:>9}{line.rows:>6}{line.refused:>6}  "
                         f"{line.verdict}")
        return "\n".join(lines)

    def summary(self) -> str:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        results = ", ".join(f"{k} {v}" for k, v in sorted(self.results.items()))
        text = [f"chaos run: storage {self.storage}, seed {self.seed} (plan {self.digest}), "
                f"{self.seconds:.1f} s, {self.kills} kills (" + ", ".join(
                    f"server {k}: {n}" for k, n in sorted(self.killed.items())) + ")",
                f"ledger rows by outcome: {outcomes}",
                f"replayed answers (Idempotency-Key): {self.replayed}",
                f"client answers: {results} (median {self.median_request:.2f} s, slowest "
                f"{self.slowest_request:.1f} s)",
                "402s by budget: " + ", ".join(f"{b} {how} {n}" for (b, how), n
                                               in sorted(self.refusals.items())),
                f"blocks judged: {self.blocks_judged} (refusals of a blocked budget seen by "
                f"clients: {self.blocked_refusals})"]
        text += [f"note: {n}" for n in self.notes]
        if self.failures:
            text.append("(+round: up to 1 micro-dollar per call a per-call rounded bill may add "
                        "to billed; unseen: what lying calls whose answers the server never "
                        "read may have billed above their charge)")
        text += [f"FAILED: {f}" for f in self.failures] or ["all checks passed"]
        return "\n".join(text)


def _prices(model: str) -> tuple[Decimal, Decimal]:
    price_in, price_out = MODELS[model][1]
    return Decimal(price_in), Decimal(price_out)


def read_ledger(url: str) -> dict[str, Any]:
    from agents.serve.storage import open_storage

    storage = open_storage(url)
    try:
        with storage.transaction() as cur:
            cur.execute("SELECT id, idempotency_key, key_name, budgets, route, model, "
                        "prompt_tokens, completion_tokens, cost_micros, reserved_micros, outcome, "
                        "created_at, over_reservation_micros, user_name FROM requests")
            names = ("id", "idempotency_key", "key_name", "budgets", "route", "model",
                     "prompt_tokens",
                     "completion_tokens", "cost_micros", "reserved_micros", "outcome",
                     "created_at", "over_reservation_micros", "user_name")
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
            cur.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM requests")
            count, distinct = cur.fetchone()
            cur.execute("SELECT budget, period_start, spent_micros, reserved_micros FROM "
                        "budget_usage")
            usage = [tuple(r) for r in cur.fetchall()]
            cur.execute("SELECT COUNT(*) FROM reservations")
            open_reservations = int(cur.fetchone()[0])
            cur.execute("SELECT idempotency_key FROM answers")
            kept = {r[0] for r in cur.fetchall()}
    finally:
        storage.close()
    return {"rows": rows, "count": int(count), "distinct": int(distinct), "usage": usage,
            "open": open_reservations, "kept": kept}


def attempt_models(rows: list[dict[str, Any]], plan: Sequence[Any]) -> dict[str, str | None]:
    """The model each row's call went to, ``None`` when nothing says.

    A reservation settled by the expiry (``unknown``, ``recovered``) keeps no model nor
    route; its id (``chatcmpl-X.N``: the request's ``N``-th attempt) and its request's other
    rows (their route, or the request's idempotency key, which names the planned request)
    give the route, and the route's ``N``-th model.
    """
    routes: dict[str, str] = {}
    for row in rows:
        prefix = str(row["id"]).partition(".")[0]
        if row.get("route") in ROUTES:
            routes[prefix] = row["route"]
        elif row["idempotency_key"] and prefix not in routes:
            value = str(row["idempotency_key"]).split("|", 1)[-1]
            index = value.rsplit("-", 1)[-1]
            if value.startswith("chaos-") and index.isdigit() and int(index) < len(plan):
                routes[prefix] = plan[int(index)].route
    found: dict[str, str | None] = {}
    for row in rows:
        prefix, _, attempt = str(row["id"]).partition(".")
        chain = ROUTES.get(routes.get(prefix, ""), [])
        n = int(attempt) if attempt.isdigit() else 0
        found[row["id"]] = row["model"] or (chain[n] if n < len(chain) else None)
    return found


def _unseen(row: dict[str, Any], model: str | None) -> int:
    """What a lying model may have billed above a row's charge, its answer unread."""
    if row["outcome"] not in UNREAD:
        return 0
    if model is None:  # no telling: maybe a liar
        factor = max(LIARS.values()) if row["key_name"] in LIAR_KEYS else 1
    else:
        factor = LIARS.get(model, 1)
    return (factor - 1) * int(row["reserved_micros"])


def check(storage: str, seed: int, digest: str, seconds: float, plan: Sequence[Any],
          key_limits: dict[str, int | None], org_limits: dict[str, int], ledger: dict[str, Any],
          stats: dict[str, Any], run: Run, kills: int, strict: bool = False) -> Report:
    """Compare the ledger with the upstream's bill and the clients' answers."""
    failures: list[str] = []
    notes: list[str] = []
    rows = ledger["rows"]
    by_id = {r["id"]: r for r in rows}
    # --- doubled requests, open reservations
    if ledger["count"] != ledger["distinct"]:
        failures.append(f"a request id appears twice: {ledger['count']} rows, "
                        f"{ledger['distinct']} ids")
    if ledger["open"]:
        failures.append(f"{ledger['open']} reservations left open")
    spent: dict[str, int] = defaultdict(int)
    for budget, _, spent_micros, reserved in ledger["usage"]:
        spent[budget] += int(spent_micros)
        if reserved:
            failures.append(f"{budget}: {reserved} micro-dollars still reserved")
    # --- per key: billed, charged, bound
    billed_exact: dict[str, Decimal] = defaultdict(Decimal)
    calls: Counter[str] = Counter()
    for model, users in stats["billed"].items():
        price_in, price_out = _prices(model)
        for user, (prompt, completion, n) in users.items():
            billed_exact[user] += price_in * prompt + price_out * completion
            calls[user] += n
    strangers = set(billed_exact) - {k.name for k in KEYS}
    if strangers:
        failures.append(f"the upstream billed users that are no key: {sorted(strangers)}")
    refused: Counter[str] = Counter(a.key for a in run.attempts if a.result == "402")
    models = attempt_models(rows, plan)
    unresolved = sum(1 for r in rows if r["outcome"] != "refused_budget" and
                     models[r["id"]] is None)
    if unresolved:
        notes.append(f"{unresolved} rows name no model (expired reservations keep none) and "
                     "no row of their request names its route")
    lines = []
    for key in KEYS:
        mine = [r for r in rows if r["key_name"] == key.name]
        line = Line(f"key:{key.name}", key_limits[key.name])
        line.billed = int(billed_exact[key.name].to_integral_value(ROUND_CEILING))
        line.rounding = calls[key.name]
        line.charged = sum(int(r["cost_micros"]) for r in mine)
        line.spent = spent.get(f"key:{key.name}", 0)
        line.excess = sum(int(r["over_reservation_micros"]) for r in mine)
        line.rows = len(mine)
        line.refused = refused[key.name]
        line.unseen = sum(_unseen(r, models[r["id"]]) for r in mine)
        lines.append(line)
    org_lines = []
    for org, limit in org_limits.items():
        members = [k for k in lines if next(
            x for x in KEYS if f"key:{x.name}" == k.name).organisation == org]
        line = Line(f"org:{org}", limit)
        for member in members:
            line.billed += member.billed
            line.rounding += member.rounding
            line.unseen += member.unseen
            line.charged += member.charged
            line.excess += member.excess
            line.rows += member.rows
            line.refused += member.refused
        line.spent = spent.get(f"org:{org}", 0)
        org_lines.append(line)
    for line in [*lines, *org_lines]:
        problems = []
        if line.charged + line.unseen < line.billed:
            problems.append(f"charged {line.charged} < billed {line.billed} (unseen allowance "
                            f"{line.unseen})")
        if line.spent != line.charged:
            problems.append(f"spent {line.spent} != its rows' cost {line.charged}")
        if line.limit is not None and line.spent > line.limit + line.excess:
            problems.append(f"spent {line.spent} > limit {line.limit} + excesses {line.excess}")
        if problems:
            line.verdict = "FAIL: " + "; ".join(problems)
            failures += [f"{line.name}: {p}" for p in problems]
        elif line.short:
            line.verdict = f"ok (short {line.short}: unread lying calls)"
        elif line.limit is not None and line.spent > line.limit:
            line.verdict = f"ok (over the limit by {line.spent - line.limit}, within bound)"
        if line.short:
            notes.append(f"{line.name}: charged {line.short} micro-dollars less than the "
                         "upstream billed, all of it lying calls the server never read the "
                         "answer of (killed or timed out mid-call): no ledger can charge it")
    # --- no usage recorded that the upstream did not bill (a call settled twice would be)
    tokens: dict[tuple[str | None, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in rows:
        if row["prompt_tokens"] is not None and row["key_name"] is not None:
            for model in (row["model"], None):  # per model, and all models together
                found = tokens[(model, row["key_name"])]
                found[0] += int(row["prompt_tokens"])
                found[1] += int(row["completion_tokens"] or 0)
                found[2] += 1
    for (model, user), (prompt, completion, n) in tokens.items():
        bills = [b for m, users in stats["billed"].items() for u, b in users.items()
                 if u == user and model in (None, m)]
        billed = [sum(b[i] for b in bills) for i in range(3)]
        if prompt > billed[0] or completion > billed[1] or n > billed[2]:
            failures.append(f"{user} on {model or 'all models'}: the ledger's rows carry "
                            f"usage ({prompt}, {completion}, {n} calls) above the upstream's "
                            f"bill ({billed[0]}, {billed[1]}, {billed[2]} calls)")
    # --- the clients' answers against the rows
    results = Counter(a.result for a in run.attempts)
    for index, answers in run.answers.items():
        ids = {i for i, _ in answers}
        if plan[index].idempotency is not None and len(ids) > 1:
            failures.append(f"request {index} (idempotent) answered with two ids: {ids}")
        for ident, _ in answers:
            row = by_id.get(ident)
            if row is None or row["outcome"] not in ("ok", "ok_no_usage"):
                failures.append(f"request {index}: its answer {ident} has no ok row "
                                f"({None if row is None else row['outcome']})")
    if len(run.attempts) != len(plan):
        failures.append(f"{len(run.attempts)} requests finished of {len(plan)}")
    unexpected = {r: n for r, n in results.items()
                  if r not in ("200", "402", "502", "stream_error", "409")}
    if unexpected:
        examples = sorted({f"{a.result}: {a.message[:160]}" for a in run.attempts
                           if a.result in unexpected})
        notes.append(f"client answers other than 200, 402, 409, 502 and a stream's error "
                     f"event: {unexpected}; e.g. " + "; ".join(examples[:3]))
    stuck = [f"{a.key}:{plan[a.index].idempotency}" for a in run.attempts if a.result == "409"]
    if stuck:
        # the first attempt's row holds the key; a fallback attempt (reserved without it)
        # was in flight at a kill and its expiry kept no answer for the key
        rowed = [k for k in stuck if any(r["idempotency_key"] == k for r in rows)]
        text = (f"{len(stuck)} idempotent requests answered 409 (in progress) to the end: "
                f"{stuck[:4]}; {len(rowed)} have a settled "
                f"row holding the key and {sum(k in ledger['kept'] for k in stuck)} a kept "
                "answer (a server bug: a retry can never be answered)")
        (failures if strict else notes).append(text)
    # --- blocked budgets refused until lifted
    blocks, blocked_refusals, violations = 0, 0, []
    limited = {f"key:{k}" for k, v in key_limits.items() if v is not None} | {
        f"org:{o}" for o in org_limits}
    for attempt in run.attempts:
        if attempt.replayed:  # settled in an earlier try: when it blocked is not known
            continue
        for ident in attempt.ids:
            row = by_id.get(ident)
            if row is None or not row["over_reservation_micros"]:
                continue
            for entry in str(row["budgets"]).split(","):
                budget = entry.rsplit("@", 1)[0]
                if budget not in limited:
                    continue
                # an unblock sent while this call was answered may have lifted it already
                if any(b == budget and s < attempt.ended and e > attempt.first
                       for s, e, b in run.unblocks):
                    continue
                until = min([s for s, _, b in run.unblocks if b == budget and s >= attempt.ended]
                            or [math.inf])
                blocks += 1
                members = {f"key:{k.name}" for k in KEYS
                           if budget in (f"key:{k.name}", f"org:{k.organisation}")}
                for other in rows:
                    if (f"key:{other['key_name']}" in members
                            and other["outcome"] != "refused_budget"
                            and attempt.ended < float(other["created_at"]) < until):
                        violations.append(f"{other['id']} reserved on {budget} at "
                                          f"{other['created_at']:.3f}, blocked since "
                                          f"{attempt.ended:.3f} (by {ident})")
                blocked_refusals += sum(
                    1 for a in run.attempts if a.result == "402"
                    and f"'{budget}' is blocked" in a.message
                    and attempt.ended < a.started < until)
    if violations:
        failures.append(f"{len(violations)} reservations on a blocked budget: "
                        + "; ".join(violations[:3]))
    # --- the run exercised what it is for
    refusals: Counter[tuple[str, str]] = Counter()
    for attempt in run.attempts:
        if attempt.result == "402":
            named = re.search(r"budget '([^']+)' (exceeded|is blocked)", attempt.message)
            refusals[(named.group(1), named.group(2).split()[-1]) if named
                     else ("request", "exceeded")] += 1
    outcomes = Counter(r["outcome"] for r in rows)
    failures += run.errors
    if len(run.kills) < kills:
        failures.append(f"{len(run.kills)} kills of the {kills} asked")
    missing = [o for o in OUTCOMES if not outcomes[o]]
    if missing:
        failures.append(f"no row of the outcomes {missing}")
    if not any(r["over_reservation_micros"] for r in rows):
        failures.append("no row billed above its reservation")
    if not results["402"]:
        failures.append("no request refused (402)")
    if not any(b.startswith("key:") and how == "exceeded" for b, how in refusals):
        failures.append("no key's limit was reached (no 402 naming a key's budget exceeded)")
    if not blocked_refusals:
        failures.append("no client saw a blocked budget refuse it")
    durations = sorted(a.ended - a.first for a in run.attempts) or [0.0]
    return Report(storage, seed, digest, seconds, lines, org_lines, outcomes, results,
                  len(run.kills), blocks, blocked_refusals, failures, notes, refusals,
                  durations[len(durations) // 2], durations[-1],
                  Counter(a.result for a in run.attempts if a.replayed),
                  Counter(target for _, target in run.kills))
