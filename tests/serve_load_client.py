"""The one concurrent load client of the serve tests (app, load, PostgreSQL).

``clients`` threads share ``requests`` chat requests (worker ``w`` sends requests ``w``,
``w + clients``, ...), each through OpenAI's client; the outcome of each request is
counted: ``"ok"``, the HTTP status of an OpenAI-shaped error (``"402"``), or
``"connection"`` when no server answered.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import local_http
import openai


def prompt(i: int) -> str:
    """Request ``i``'s prompt: a few words more or less, so calls cost a little differently."""
    return f"question {i}: " + "word " * (i % 9)


def run_load(base_url: Callable[[int], str], requests: int, clients: int, *,
             model: str = "small", key: str = "sk-load", timeout: float = 60.0,
             idempotency: str | None = None, reconnect: float = 0.0) -> Counter:
    """Send the load and count its outcomes (the threads joined before it returns).

    Args:
        base_url: The server's URL for a worker (``http://127.0.0.1:PORT``): a test may
            spread its workers over several servers.
        requests: How many requests in all.
        clients: How many concurrent workers.
        model: The model name sent.
        key: The API key sent.
        timeout: Seconds a request may take.
        idempotency: With a prefix, request ``i`` carries ``Idempotency-Key: {prefix}-{i}``.
        reconnect: Seconds to keep trying a request whose server did not answer (killed,
            restarting), with the same idempotency key; 0: a refused connection is the
            outcome ``"connection"`` at once.
    """
    outcomes: Counter = Counter()
    lock = threading.Lock()

    def work(worker: int) -> None:
        client = local_http.openai_client(base_url=f"{base_url(worker)}/v1", api_key=key,
                                          max_retries=0, timeout=timeout)
        for i in range(worker, requests, clients):
            headers = {} if idempotency is None else {"Idempotency-Key": f"{idempotency}-{i}"}
            deadline = time.monotonic() + reconnect
            while True:
                try:
                    client.chat.completions.create(
                        model=model, max_tokens=20, extra_headers=headers,
                        messages=[{"role": "user", "content": prompt(i)}])
                    result = "ok"
                except openai.APIStatusError as err:
                    result = str(err.status_code)
                except openai.APIConnectionError:
                    result = "connection"
                    if time.monotonic() < deadline:
                        time.sleep(0.05)
                        continue
                break
            with lock:
                outcomes[result] += 1

    threads = [threading.Thread(target=work, args=(w,)) for w in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes
