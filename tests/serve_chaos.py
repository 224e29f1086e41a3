"""A chaos run of ``cost-envs serve`` (issue #35, point 7): money holds through faults and kills.

::

    python tests/serve_chaos.py --storage sqlite --requests 800 --clients 64 --kills 5 --seed 0
    python tests/serve_chaos.py --storage postgresql      # a temporary PostgreSQL server
    python tests/serve_chaos.py --storage postgresql --postgres-url postgresql://u@h:5432/db

What runs, all as real processes on 127.0.0.1:

* the stand-in upstream (:mod:`agents.serve.standin`) with one model per fault, each
  injected at a seeded rate: ``f_timeout`` (its server-side ``timeout`` is 1 s),
  ``f_429`` (with ``Retry-After``), ``f_500``, ``f_reset``, ``f_bad_json``, ``f_cut``,
  ``f_no_usage``, and two liars: ``f_lie`` (its usage, and its bill, ``LIE_FACTOR`` times
  the tokens) and ``f_overrun`` (``max_tokens`` ignored, ``OVERRUN_FACTOR`` times as many);
  ``dead`` is a model on a port nobody listens on (a refused connection);
* ``cost-envs serve`` on SQLite (one process) or PostgreSQL (two processes sharing the
  ledger), with routes that chain the faulty models (a fault falls back to the next),
  ``server.reservation_ttl`` = :data:`TTL` seconds, ``retries`` 1, an admin key;
* API keys (:data:`KEYS`) with limits, some small enough to be reached during the run,
  under organisation budgets (``lab`` over four honest keys, ``wild`` over two liars);
  the liars' routes call the lying models, the honest keys' never do;
* ``--clients`` threads of OpenAI's official client (``max_retries=0``) sending
  ``--requests`` requests planned from ``--seed`` (what is sent is the same for a seed; the
  timing is not): streamed or not (with or without ``include_usage``), some with large
  tool definitions, some with an ``Idempotency-Key``, each with ``user=<key name>`` so
  that the stand-in's per-user bill is each key's bill. A request whose server vanished
  is sent again until one answers (with PostgreSQL, to the other server); an idempotent
  one, with its key, so that a ``409`` (still in flight on a killed server) is retried
  until the expiry answers it;
* a killer: ``--kills`` SIGKILLs at seeded points of the load (after a seeded share of the
  requests finished, plus a seeded fraction of a second), each server restarted on the
  same ledger and port after a seeded pause (with PostgreSQL the two servers in turn);
* an operator who lifts a budget blocked by an over-reservation
  (``POST /admin/budgets/unblock``) :data:`HOLD` seconds after seeing it blocked.

At the end the servers stop, the script waits past the TTL, settles what killed servers
left reserved (``Ledger.release_expired``), reads the ledger with SQL and the stand-in's
``GET /stats``, prints a table per key and per organisation, and fails (exit status 1,
:attr:`Report.failures`; the checks are tests/serve_chaos_check.py's) when:

* a key is charged less than the upstream billed it. The stand-in sums tokens per model
  and user, so its bill is known exactly before rounding: ``ceil(sum(tokens x price))``
  is the least a per-call rounded bill can be, and the ledger (which rounds each call up,
  as ``ModelConfig.cost_micros``) must charge at least that; a per-call rounded bill may
  be up to one micro-dollar per call more (the ``+round`` column), the slack allowed.
  One more allowance, for the lying models' calls only (``unseen``): a lying call whose
  answer the server never read (the server was SIGKILLed mid-call, its read timed out) is
  charged its reservation, the most an honest upstream can bill, while the liar billed up
  to its factor times its honest bill; ``(factor - 1) x reserved`` of each such row is
  allowed (its model found from its request's other rows when the expiry kept none; a
  liar key's row whose model nothing names is allowed the larger factor), and the part
  used is printed (``short``): no ledger can charge what it never read. Honest keys,
  whose routes never reach a liar, have no allowance;
* a budget spent over its limit by more than the documented bound: the excesses of the
  calls in flight when the first excess settled, bounded by the sum of every row's
  ``over_reservation_micros`` of the budget;
* a request charged twice: a row id twice, a budget's ``spent_micros`` other than the sum
  of its rows' ``cost_micros``, an idempotent request answered 200 with two ids, an
  answered id with no ``ok`` row, rows carrying more tokens or calls of a key (per model)
  than the upstream billed it;
* a reservation left open (``reservations`` or a budget's ``reserved_micros``);
* a reservation made on a budget after a client saw it blocked, before the operator lifted it;
* the run did not exercise what it is for: fewer kills than asked, no row of one of the
  outcomes ``ok``, ``upstream_unknown``, ``upstream_failed``, ``upstream_stream_failed``,
  ``ok_no_usage``, ``unknown``, no ``over_reservation_micros`` > 0, no ``402``, no key's
  limit reached, no refusal of a blocked budget seen by a client.

With ``--strict`` (the tests' setting) it also fails on idempotent requests still answered
``409`` :data:`PATIENCE_409` seconds after their first ``409``: a retry that can never be
answered. This run found that bug (a fallback attempt, reserved without the idempotency
key, was in flight at a kill; the expiry kept no answer for the key): every call of a
request now carries its ``answer_key``. It notes client answers other than 200, 402,
409, 502 and a stream's error event.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

import local_http  # noqa: E402
from postgres_server import (  # noqa: E402
    PostgresUnavailableError,
    fresh_database,
    temporary_postgres,
)
from serve_chaos_check import (  # noqa: E402
    KEYS,
    LIARS,
    MODELS,
    ROUTES,
    Attempt,
    Report,
    Run,
    check,
    read_ledger,
)

from agents.serve.config import hash_key  # noqa: E402
from agents.serve.processes import wait_until_up  # noqa: E402
from agents.serve.standin import free_port  # noqa: E402


def _transport_errors() -> tuple[type[Exception], ...]:
    """A connection lost mid-answer: OpenAI's error, or the raw one of the HTTP client it uses.

    OpenAI's client raises the HTTP library's own exception when the connection breaks
    while it reads a stream or an error's body (``httpx``, or ``httpx2`` in later versions).
    """
    import importlib

    found: list[type[Exception]] = [openai.APIConnectionError, httpx.TransportError]
    with contextlib.suppress(ImportError, AttributeError):
        found.append(importlib.import_module("httpx2").TransportError)
    return tuple(found)


TRANSPORT_ERRORS = _transport_errors()

#: Seconds after a killed server's last heartbeat that its reservations are settled.
TTL = 2.0
#: Seconds a budget blocked by an over-reservation stays blocked before the operator lifts it.
HOLD = 2.0
#: Seconds a request keeps being sent again while no server answers it.
PATIENCE = 120.0
#: Seconds an idempotent request is sent again while it is answered 409 (in flight).
PATIENCE_409 = 5 * TTL + 5.0
ADMIN_KEY = "sk-chaos-admin"
#: Seeded rate ranges of each fault.
RATES = {"timeout": (0.1, 0.2), "429": (0.3, 0.6), "500": (0.3, 0.6), "reset": (0.2, 0.5),
         "bad_json": (0.2, 0.5), "cut": (0.35, 0.6), "no_usage": (0.3, 0.6),
         "lie": (0.25, 0.5), "overrun": (0.25, 0.5)}
HONEST_ROUTES = [r for r in ROUTES if r not in ("r-lie", "r-overrun")]
#: Organisation limits as a share of their keys' planned worst cases.
ORGANISATIONS = {"lab": 0.18, "wild": 0.5}
#: Large tool definitions (about 2,400 tokens in all), as tests/test_serve_money.py's.
TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": "looks things up " * 40,
    "parameters": {"type": "object", "properties": {
        f"arg_{j}": {"type": "string", "description": "an argument " * 10} for j in range(8)}}}}
    for i in range(6)]
WORDS = ("budget", "ledger", "token", "router", "stream", "model", "answer", "cost", "reserve",
         "settle", "upstream", "client", "crash", "restart", "money", "limit", "bound",
         "fault", "chaos", "seed")


@dataclass(frozen=True)
class Planned:
    """One request of the plan: everything sent, fixed by the seed."""

    index: int
    key: str
    route: str
    prompt: str
    stream: bool
    include_usage: bool
    tools: bool
    max_tokens: int | None
    completion_field: bool  # max_completion_tokens instead of max_tokens
    idempotency: str | None

    def kwargs(self) -> dict[str, Any]:
        """The ``chat.completions.create`` arguments."""
        found: dict[str, Any] = {"model": self.route, "user": self.key,
                                 "messages": [{"role": "system", "content": "be brief"},
                                              {"role": "user", "content": self.prompt}]}
        if self.max_tokens is not None:
            found["max_completion_tokens" if self.completion_field else "max_tokens"] = (
                self.max_tokens)
        if self.tools:
            found["tools"] = TOOLS
        if self.stream:
            found["stream"] = True
            if self.include_usage:
                found["stream_options"] = {"include_usage": True}
        return found

    def worst_guess(self) -> int:
        """A rough worst case in micro-dollars (bytes as tokens): only to size the limits."""
        model = ROUTES[self.route][0]
        price_in, price_out = (Decimal(p) for p in MODELS[model][1])
        size = len(json.dumps(self.kwargs()["messages"])) + 24
        size += len(json.dumps(TOOLS)) + 16 * len(TOOLS) + 32 if self.tools else 0
        return math.ceil(price_in * size + price_out * (self.max_tokens or 64))


def make_plan(requests: int, seed: int) -> list[Planned]:
    """The requests a seed sends, in order (worker ``w`` of ``c`` sends ``w``, ``w + c``, ...)."""
    rng = random.Random(seed)
    names = [k.name for k in KEYS]
    weights = [k.weight for k in KEYS]
    liars = {k.name for k in KEYS if k.liar}
    plan = []
    for i in range(requests):
        key = rng.choices(names, weights)[0]
        if key in liars and rng.random() < 0.6:
            route = rng.choice(["r-lie", "r-overrun"])
        else:
            route = rng.choice(HONEST_ROUTES)
        stream = rng.random() < 0.4
        prompt = f"request {i}: " + " ".join(rng.choice(WORDS)
                                             for _ in range(rng.randint(2, 40)))
        plan.append(Planned(
            i, key, route, prompt, stream, stream and rng.random() < 0.5, rng.random() < 0.1,
            None if rng.random() < 0.15 else rng.randint(8, 48), rng.random() < 0.2,
            f"chaos-{seed}-{i}" if rng.random() < 0.5 else None))
    return plan


def plan_digest(plan: list[Planned]) -> str:
    """The SHA-256 of what the plan sends (the same for the same seed and size)."""
    text = json.dumps([[p.idempotency, p.kwargs()] for p in plan], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def limits(plan: list[Planned]) -> tuple[dict[str, int | None], dict[str, int]]:
    """Each key's and organisation's limit, micro-dollars, from the plan's worst cases."""
    planned: Counter[str] = Counter()
    for request in plan:
        planned[request.key] += request.worst_guess()
    keys = {k.name: None if k.share is None else max(1, int(k.share * planned[k.name]))
            for k in KEYS}
    orgs = {org: max(1, int(share * sum(planned[k.name] for k in KEYS
                                         if k.organisation == org)))
            for org, share in ORGANISATIONS.items()}
    return keys, orgs


def make_config(storage: str, upstream: str, dead_port: int,
                key_limits: dict[str, int | None], org_limits: dict[str, int]) -> dict[str, Any]:
    """The server's configuration (a YAML mapping)."""
    models = []
    for name, (_, (price_in, price_out), timeout) in MODELS.items():
        base = f"http://127.0.0.1:{dead_port}/v1" if name == "dead" else f"{upstream}/v1"
        models.append({"name": name, "base_url": base, "input_price": float(price_in),
                       "output_price": float(price_out), "context": 32_000,
                       "max_output_tokens": 64, "timeout": timeout})
    keys = []
    for key in KEYS:
        entry: dict[str, Any] = {"name": key.name, "key_sha256": hash_key(key.secret)}
        if key.organisation is not None:
            entry["organisation"] = key.organisation
        if key_limits[key.name] is not None:
            entry["limit"] = key_limits[key.name] / 1e6
        keys.append(entry)
    return {
        "storage": storage,
        "models": models,
        "routers": [{"name": name, "model": chain[0], "fallbacks": chain[1:]}
                    for name, chain in ROUTES.items()],
        "budgets": {"request": {"default": 1.0, "max": 1.0},
                    "organisations": [{"name": org, "limit": limit / 1e6}
                                      for org, limit in org_limits.items()],
                    "keys": keys},
        "server": {"retries": 1, "backoff": 0.02, "reservation_ttl": TTL,
                   "admin_key_sha256": hash_key(ADMIN_KEY)},
    }


# ---------------------------------------------------------------------------- processes


class Process:
    """``python ARGS`` on a port, started, SIGKILLed and started again (its log kept)."""

    def __init__(self, args: list[str], health: str, log: Path) -> None:
        self.args, self.health, self.log = args, health, log
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 240.0) -> None:
        with self.log.open("ab") as log:
            log.write(f"--- start {self.starts} at {time.time():.3f}\n".encode())
        handle = self.log.open("ab")
        self.popen = subprocess.Popen([sys.executable, *self.args], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=handle)
        handle.close()
        self.starts += 1
        try:
            wait_until_up(self.health, self.popen, timeout)
        except RuntimeError as err:
            raise RuntimeError(f"{err}\n{self.tail()}") from None

    def kill(self) -> None:
        """SIGKILL: no settlement, no cleanup."""
        assert self.popen is not None
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# ------------------------------------------------------------------------------- clients


def _send(client: openai.OpenAI, request: Planned) -> tuple[tuple[str, ...], bool]:
    """Send one request; its response ids (a stream's chunks') and whether it was replayed."""
    headers = {} if request.idempotency is None else {"Idempotency-Key": request.idempotency}
    raw = client.chat.completions.with_raw_response.create(**request.kwargs(),
                                                            extra_headers=headers)
    replayed = raw.headers.get("x-cost-envs-replayed") == "true"
    if not request.stream:
        return (raw.parse().id,), replayed
    ids = {chunk.id for chunk in raw.parse()}
    return tuple(sorted(ids)), replayed


def client_worker(worker: int, clients: int, plan: list[Planned], urls: list[str],
                  run: Run) -> None:
    """Send this worker's share of the plan, each request until a server answers it."""
    secrets = {k.name: k.secret for k in KEYS}
    made: dict[tuple[int, str], openai.OpenAI] = {}
    server = worker % len(urls)
    for request in plan[worker::clients]:
        while run.hold_at is not None and run.done >= run.hold_at:  # a kill is due first
            time.sleep(0.005)
        with run.lock:
            run.in_flight += 1
        tries, deadline, first_409 = 0, time.monotonic() + PATIENCE, None
        first = time.time()
        while True:
            server_key = (server, request.key)
            if server_key not in made:
                made[server_key] = local_http.openai_client(base_url=f"{urls[server]}/v1",
                                                 api_key=secrets[request.key], max_retries=0,
                                                 timeout=90.0)
            client = made[server_key]
            started, ids, replayed, message = time.time(), (), False, ""
            tries += 1
            try:
                ids, replayed = _send(client, request)
                result = "200"
            except openai.APIStatusError as err:
                result, message = str(err.status_code), err.message[:300]
                replayed = err.response.headers.get("x-cost-envs-replayed") == "true"
                if err.status_code == 409 and request.idempotency is not None:
                    first_409 = first_409 or time.monotonic()
                    if time.monotonic() - first_409 < PATIENCE_409:
                        time.sleep(0.2)
                        continue
            except TRANSPORT_ERRORS as err:
                # the server was killed (before or during the answer): send it again, to the
                # other server when there are two
                result, message = "connection", str(err)[:300]
                if time.monotonic() < deadline:
                    server = (server + 1) % len(urls)
                    time.sleep(0.1)
                    continue
            except openai.APIError as err:  # a stream's error event
                result, message = "stream_error", str(err)[:300]
            except Exception as err:  # anything else: counted and reported, not retried
                result, message = f"client {type(err).__name__}", str(err)[:300]
            ended = time.time()
            with run.lock:
                if result == "200":
                    run.answers.setdefault(request.index, []).append(
                        (ids[0] if len(ids) == 1 else ",".join(ids), replayed))
                run.attempts.append(Attempt(request.index, request.key, first, started, ended,
                                            result, ids, replayed, message, tries))
                run.done += 1
                run.in_flight -= 1
            break


#: The fewest requests in flight the killer waits for at a kill point (of 64 clients).
IN_FLIGHT_AT_KILL = 8


def killer(servers: list[Process], kills: int, requests: int, seed: int, run: Run) -> None:
    """SIGKILL the servers at seeded points of the load, each restarted on the same ledger.

    The clients hold at the next kill's point (:attr:`Run.hold_at`) until it is made, also
    while a killed server restarts: every kill happens, however fast the load runs.
    """
    rng = random.Random(seed * 7919 + 1)
    points = sorted(rng.uniform(0.06, 0.8) * requests for _ in range(kills))
    run.hold_at = points[0] if points else None
    try:
        for k, point in enumerate(points):
            while run.done < point and not run.finished.is_set():
                time.sleep(0.01)
            if run.finished.is_set():
                return
            # anywhere in the calls in flight, but while enough still are: the clients
            # hold, so the load drains during the pause, and a kill with nothing in flight
            # leaves no reservation to expire (a run on a loaded machine once had none)
            pause_until = time.monotonic() + rng.uniform(0.0, 0.3)
            while time.monotonic() < pause_until and run.in_flight > IN_FLIGHT_AT_KILL:
                time.sleep(0.002)
            target = k % len(servers)
            servers[target].kill()
            with run.lock:
                run.kills.append((time.time(), target))
            run.hold_at = points[k + 1] if k + 1 < len(points) else None
            time.sleep(rng.uniform(0.2, 1.5))
            try:
                servers[target].start()
            except RuntimeError as err:
                run.errors.append(f"server {target} did not start again: {err}")
                return
    finally:  # whatever happens here, the clients are not held for good
        run.hold_at = None


def operator(urls: list[str], run: Run) -> None:
    """Lift each blocked budget :data:`HOLD` seconds after seeing it blocked."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    seen: dict[str, float] = {}
    while not run.finished.is_set():
        time.sleep(0.25)
        for url in urls:
            try:
                listed = local_http.get(f"{url}/admin/budgets", headers=admin, timeout=10).json()
            except (httpx.HTTPError, ValueError):
                continue
            blocked = {b["budget"] for b in listed.get("data", []) if b.get("blocked_by")}
            for budget in list(seen):
                if budget not in blocked:
                    del seen[budget]
            for budget in blocked:
                seen.setdefault(budget, time.monotonic())
                if time.monotonic() - seen[budget] < HOLD:
                    continue
                sent = time.time()
                # lifted or not (a server killed meanwhile), it is recorded as sent
                with contextlib.suppress(httpx.HTTPError):
                    local_http.post(f"{url}/admin/budgets/unblock", json={"budget": budget},
                               headers=admin, timeout=10)
                with run.lock:
                    run.unblocks.append((sent, time.time(), budget))
                seen.pop(budget, None)
            break


# -------------------------------------------------------------------------------- the run


def settle_leftovers(url: str) -> int:
    """Settle what killed servers left reserved (their heartbeats are past the TTL)."""
    from agents.serve.ledger import Ledger
    from agents.serve.storage import open_storage

    storage = open_storage(url)
    try:
        return Ledger(storage, [], ttl=TTL).release_expired()
    finally:
        storage.close()


def run_chaos(storage: str = "sqlite", requests: int = 800, clients: int = 64, kills: int = 5,
              seed: int = 0, postgres_url: str | None = None, workdir: Path | None = None,
              log: Any = None, strict: bool = False) -> Report:
    """Run the chaos load and check the ledger (see the module docstring).

    Args:
        storage: ``"sqlite"`` (one server) or ``"postgresql"`` (two servers).
        requests: How many requests the clients send.
        clients: How many concurrent clients.
        kills: How many SIGKILLs.
        seed: What is sent, the fault rates and the kill points.
        postgres_url: A PostgreSQL server to use (a fresh database is made on it); none: a
            temporary one is started (:class:`PostgresUnavailableError` when it cannot be).
        workdir: Where the configuration, ledger and logs go (a temporary folder if none).
        log: A callable taking a line of progress (none: quiet).
        strict: Fail on an idempotent request answered 409 for good (a server bug this run
            found, now fixed; a note otherwise).

    Raises:
        PostgresUnavailableError: PostgreSQL asked for and not available.
    """
    say = log or (lambda line: None)
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="cost-envs-chaos-")))
        workdir.mkdir(parents=True, exist_ok=True)
        if storage == "sqlite":
            url, n_servers = f"sqlite:///{workdir / 'ledger.db'}", 1
        elif storage == "postgresql":
            if postgres_url is None:
                postgres_url = stack.enter_context(temporary_postgres(max_connections=50))
            url, n_servers = fresh_database(postgres_url, f"chaos_{seed}"), 2
        else:
            raise ValueError(f"storage: expected sqlite or postgresql, got {storage!r}")
        plan = make_plan(requests, seed)
        key_limits, org_limits = limits(plan)
        up_port, dead_port = free_port(), free_port()
        upstream = f"http://127.0.0.1:{up_port}"
        config = workdir / "serve.yaml"
        config.write_text(yaml.safe_dump(make_config(url, upstream, dead_port, key_limits,
                                                     org_limits)))
        stand_in = Process(["-m", "agents.serve.standin", "--port", str(up_port),
                            "--models", ",".join(m for m in MODELS if m != "dead"),
                            "--latency", "0.02", "--seed", str(seed)],
                           f"{upstream}/v1/models", workdir / "standin.log")
        ports = [free_port() for _ in range(n_servers)]
        servers = [Process(["-m", "agents.cli", "serve", "--config", str(config), "--port",
                            str(port)], f"http://127.0.0.1:{port}/health",
                           workdir / f"server{i}.log") for i, port in enumerate(ports)]
        stack.callback(stand_in.stop)
        for server in servers:
            stack.callback(server.stop)
        stand_in.start()
        rng = random.Random(seed * 31 + 7)
        for model, (fault, _, _) in MODELS.items():
            if fault is None:
                continue
            low, high = RATES[fault]
            body: dict[str, Any] = {"model": model, "fault": fault,
                                    "rate": round(rng.uniform(low, high), 3)}
            if fault == "429":
                body["retry_after"] = 0.05
            if fault in ("lie", "overrun"):
                body["factor"] = LIARS[model]
            answer = local_http.post(f"{upstream}/control", json=body, timeout=10)
            answer.raise_for_status()
        for server in servers:
            server.start()
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        say(f"{storage}: {requests} requests from {clients} clients, {kills} kills, seed "
            f"{seed} (plan {plan_digest(plan)}); ledger {url}")
        run = Run()
        started = time.monotonic()
        threads = [threading.Thread(target=client_worker, args=(w, clients, plan, urls, run))
                   for w in range(clients)]
        helpers = [threading.Thread(target=killer, args=(servers, kills, requests, seed, run)),
                   threading.Thread(target=operator, args=(urls, run))]
        for thread in [*threads, *helpers]:
            thread.start()
        for thread in threads:
            thread.join()
        run.finished.set()
        for thread in helpers:
            thread.join()
        load_seconds = time.monotonic() - started
        say(f"load done in {load_seconds:.1f} s; {len(run.kills)} kills")
        for server in servers:
            server.stop()
        time.sleep(TTL + 0.5)  # every server silent for longer than the TTL
        left = settle_leftovers(url)
        say(f"settled {left} reservations left by killed servers")
        stats = local_http.get(f"{upstream}/stats", timeout=10).json()
        ledger = read_ledger(url)
        report = check(storage, seed, plan_digest(plan), time.monotonic() - started, plan,
                       key_limits, org_limits, ledger, stats, run, kills, strict)
        if report.failures:
            for process in [*servers, stand_in]:
                say(f"--- {process.log.name}:\n{process.tail(15)}")
        return report


def main(argv: list[str] | None = None) -> int:
    """Run it from the command line; exit status 1 when a check failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--storage", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--postgres-url", default=None,
                        help="a PostgreSQL server to use (default: start a temporary one)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the configuration, ledger and logs here")
    parser.add_argument("--strict", action="store_true",
                        help="fail on an idempotent request answered 409 for good")
    args = parser.parse_args(argv)
    try:
        report = run_chaos(args.storage, args.requests, args.clients, args.kills, args.seed,
                           args.postgres_url, args.workdir, log=lambda s: print(s, flush=True),
                           strict=args.strict)
    except PostgresUnavailableError as err:
        print(f"cannot run on PostgreSQL: {err}", file=sys.stderr)
        return 2
    print(report.table())
    print(report.summary())
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
