"""What ``cost-envs serve`` adds to a call's latency, and its requests per second (#27, #35).

Usage: ``python benchmarks/serve_latency.py [--requests N] [--output FILE.md]``

Starts the stand-in upstream (``python -m agents.serve.standin``, answering at once) and
``cost-envs serve`` on SQLite in a temporary folder, with two routes: a fixed model
(``cheap``) and the logistic router trained on the packaged example logs (``router-demo``,
its saved threshold), and everything a gateway checks on: the key has rate limits
(requests and tokens a minute, requests at once; high enough never to refuse, so each
request pays for their check), every request carries an end user (``user``) with its
own budget and rate limit, and the Prometheus metrics count every request. Then, in one
run, the same chat requests (a few words, 16 output tokens) go straight to the upstream
and through the server:

* from 1 client, **paired**: each request is sent straight to the upstream and then
  through the server, one after the other, so the machine's load moves both alike; the
  added p50 is the median of the pairs' differences (with the p50 and p99 of each side);
* from 64 concurrent clients (one keep-alive connection each): the p50 and p99 of each
  side, their differences, and the requests per second through the server.

Every request through the server is authenticated, rate-checked, routed, reserved,
called, settled and written to the ledger. The machine is named in the output; a loaded
machine moves every figure (compare the columns of one run, not runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.routers import make_router, save_router  # noqa: E402
from agents.serve.config import hash_key  # noqa: E402
from agents.serve.processes import launched  # noqa: E402
from agents.serve.standin import free_port  # noqa: E402
from cost_envs.traces import example_traces  # noqa: E402
from experiments.shared.common import machine  # noqa: E402

KEY = "sk-bench"
BODY = {"max_tokens": 16, "messages": [{"role": "user", "content": "What is 17 times 23?"}],
        "user": "bench-user"}
#: Rate limits checked on every request and never reached.
LIMITS = {"rpm_limit": 10**9, "tpm_limit": 10**12, "max_parallel_requests": 10**6}


def write_config(folder: Path, upstream: str) -> Path:
    """A serve.yaml with a fixed route and a router route, and the router it names."""
    router = make_router("logistic", "gpt-4.1-nano", "gpt-4.1").fit(example_traces())
    save_router(folder / "demo", router, 0.5)
    models = [{"name": name, "base_url": f"{upstream}/v1", "input_price": price,
               "output_price": 4 * price, "context": 32768, "max_output_tokens": 64,
               "timeout": 60} for name, price in (("small", 0.1), ("large", 2.0))]
    config = {"storage": "sqlite:///ledger.db", "models": models,
              "routers": [{"name": "cheap", "model": "small"},
                          {"name": "demo", "path": "demo",
                           "models": {"gpt-4.1-nano": "small", "gpt-4.1": "large"}}],
              "budgets": {"request": {"default": 0.05, "max": 1.0},
                          "keys": [{"name": "bench", "key_sha256": hash_key(KEY),
                                    "limit": 1000.0, **LIMITS}],
                          "users": {"limit": 1000.0, "period": "day", **LIMITS}},
              "server": {"retries": 0}}
    path = folder / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def measure(url: str, model: str, requests: int, clients: int) -> tuple[list[float], float]:
    """Seconds of each request (from ``clients`` threads), and the wall time of them all."""
    times: list[float] = []
    lock = threading.Lock()
    failures: list[str] = []

    def work(worker: int) -> None:
        with httpx.Client(base_url=url, timeout=120,
                          headers={"Authorization": f"Bearer {KEY}"}) as client:
            for _ in range(worker, requests, clients):
                start = time.perf_counter()
                answer = client.post("/v1/chat/completions", json={**BODY, "model": model})
                took = time.perf_counter() - start
                with lock:
                    times.append(took)
                    if answer.status_code != 200:
                        failures.append(f"{answer.status_code} {answer.text[:200]}")

    threads = [threading.Thread(target=work, args=(w,)) for w in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} of {requests} requests failed: {failures[0]}")
    return times, time.perf_counter() - start


def paired(upstream: str, server: str, route: str,
           requests: int) -> tuple[list[float], list[float]]:
    """Seconds of each request straight to the upstream and through the server, in pairs."""
    direct, served = [], []
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=upstream, timeout=120, headers=headers) as straight, \
            httpx.Client(base_url=server, timeout=120, headers=headers) as through:
        for _ in range(requests):
            for client, model, times in ((straight, "small", direct),
                                         (through, route, served)):
                start = time.perf_counter()
                answer = client.post("/v1/chat/completions", json={**BODY, "model": model})
                times.append(time.perf_counter() - start)
                if answer.status_code != 200:
                    raise RuntimeError(f"{answer.status_code} {answer.text[:200]}")
    return direct, served


def percentile(values: list[float], share: float) -> float:
    """The ``share`` quantile of ``values`` in milliseconds."""
    return 1000 * statistics.quantiles(values, n=100, method="inclusive")[round(share * 100) - 1]


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print (or write) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--requests", type=int, default=640,
                        help="requests per measurement (default 640), >= 64")
    parser.add_argument("--output", type=Path, help="write the table here (Markdown)")
    args = parser.parse_args(argv)
    if args.requests < 64:
        parser.error(f"--requests: expected an integer >= 64, got {args.requests}")
    with tempfile.TemporaryDirectory(prefix="cost-envs-serve-bench-") as tmp:
        up_port, port = free_port(), free_port()
        upstream = f"http://127.0.0.1:{up_port}"
        config = write_config(Path(tmp), upstream)
        with launched(["-m", "agents.serve.standin", "--port", str(up_port)],
                      f"{upstream}/v1/models"), \
             launched(["-m", "agents.cli", "serve", "--config", str(config), "--port",
                       str(port)], f"http://127.0.0.1:{port}/health"):
            server = f"http://127.0.0.1:{port}"
            measure(server, "cheap", 64, 8)  # warm both processes up
            rows = []
            for route in ("cheap", "router-demo"):
                start = time.perf_counter()
                direct, served = paired(upstream, server, route, args.requests)
                rows.append((1, route, direct, served,
                             args.requests / (time.perf_counter() - start) * 2))
            direct, _ = measure(upstream, "small", args.requests, 64)
            for route in ("cheap", "router-demo"):
                served, wall = measure(server, route, args.requests, 64)
                rows.append((64, route, direct, served, args.requests / wall))
    lines = ["# What `cost-envs serve` adds to a call (issues #27, #35)", "",
             f"`python benchmarks/serve_latency.py --requests {args.requests}` on {machine()}: "
             "the stand-in upstream answering at once, the server on SQLite with rate limits "
             "per key and per end user checked on every request, end users' budgets and "
             "Prometheus metrics on; latency in ms of the same requests straight to the "
             "upstream and through the server, and what the server adds. At 1 client the "
             "requests are paired (straight, then through the server) and the added p50 is "
             "the median of the pairs' differences; at 64 clients it is the difference of "
             "the percentiles. One run: compare its columns, not runs.", "",
             "| clients | route | upstream p50 | p99 | through the server p50 | p99 | "
             "added p50 | added p99 | requests/s through the server |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for clients, route, direct, served, rate in rows:
        d50, d99 = percentile(direct, 0.5), percentile(direct, 0.99)
        s50, s99 = percentile(served, 0.5), percentile(served, 0.99)
        added = (1000 * statistics.median(s - d for s, d in zip(served, direct, strict=True))
                 if clients == 1 else s50 - d50)
        lines.append(f"| {clients} | {route} | {d50:.1f} | {d99:.1f} | {s50:.1f} | {s99:.1f} "
                     f"| {added:.1f} | {s99 - d99:.1f} | {rate:.0f} |")
    text = "\n".join(lines) + "\n"
    if args.output:
        args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
