"""The Ray cluster at ``--address``: checked before Ray is started, then joined.

``ray.init`` on an address nobody answers at does not fail quickly: for
``ray://127.0.0.1:1`` Ray's client retries for about a minute and ends in a 45-line
traceback, and for a GCS address (``HOST:PORT``) it retries for minutes. So the address
is probed first with a plain TCP connection, bounded by :data:`PROBE_SECONDS` (name
resolution included), and an address nobody answers at is one line at once
(:func:`probe`); :func:`connect` then joins it, bounded too. ``tune`` and the scheduler
of every other experiment (:mod:`experiments.shared.scheduler`) join through it.

The forms ``ray.init`` takes: ``auto`` (the cluster started on this machine by ``ray
start``; Ray itself says at once when there is none) and ``local`` (a new one-machine
cluster) are not probed; ``ray://HOST[:PORT]`` (Ray Client, port 10001 by default) and
``HOST:PORT`` (the cluster's GCS) are. Importing this module imports neither Ray nor torch.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

#: How long the probe waits for the cluster to accept a connection, in seconds.
PROBE_SECONDS = 5.0
#: Ray Client's port when a ``ray://`` address names none (``ray start --head``'s default).
CLIENT_PORT = 10001
#: Addresses ``ray.init`` resolves itself, without a host to probe.
NAMED = ("auto", "local")
EXPECTED = "auto, local, HOST:PORT or ray://HOST[:PORT]"
#: How long ``ray.init`` may take to join a cluster at ``--address`` that accepted the
#: probe's connection: a port that is open but not Ray's keeps ``ray.init`` retrying for
#: minutes (a GCS address) or half a minute (``ray://``).
CONNECT_SECONDS = 60.0
#: What every worker process runs with, local or on a cluster: single-threaded BLAS (the
#: parallelism is the workers'; many threads each would oversubscribe the cores).
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
#: The package a cluster's workers import the experiments from (every node needs
#: cost-envs installed; ``experiments`` is not, so it is shipped with the job).
PACKAGE = Path(__file__).resolve().parents[1]


def endpoint(address: str) -> tuple[str, int] | None:
    """The ``(host, port)`` a cluster address names; ``None`` for ``auto`` and ``local``.

    Raises:
        ValueError: One line naming the address and the forms expected.
    """
    if address in NAMED:
        return None
    client = address.startswith("ray://")
    if "://" in address and not client:
        raise ValueError(f"--address {address!r}: expected {EXPECTED}")
    try:
        parts = urlsplit(address if client else f"//{address}")
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number, or out of range
        host = port = None
    if client and port is None and host and not parts.netloc.endswith(":"):
        port = CLIENT_PORT
    if not host or port is None or parts.path not in ("", "/") or parts.query:
        raise ValueError(f"--address {address!r}: expected {EXPECTED}")
    return host, port


def probe(address: str | None, timeout: float = PROBE_SECONDS) -> None:
    """Check that something accepts connections at ``address`` within ``timeout`` seconds.

    ``None`` (a one-machine cluster), ``auto`` and ``local`` pass without a probe.

    Raises:
        ValueError: ``address`` is not one of the forms of :data:`EXPECTED`.
        ConnectionError: One line naming the address and why nothing answered.
    """
    if address is None:
        return
    target = endpoint(address)
    if target is None:
        return
    outcome: list[BaseException | None] = []

    def connect() -> None:
        try:
            socket.create_connection(target, timeout=timeout).close()
        except OSError as error:
            outcome.append(error)
        else:
            outcome.append(None)

    # A thread bounds name resolution too, which create_connection's timeout does not.
    thread = threading.Thread(target=connect, name="ray-address-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    error = outcome[0] if outcome else TimeoutError()
    if error is None:
        return
    if isinstance(error, socket.gaierror):
        reason = f"unknown host {target[0]!r}"
    elif isinstance(error, TimeoutError | socket.timeout):
        reason = f"no answer within {timeout:g} s"
    else:
        reason = (error.strerror or str(error)).lower() if isinstance(error, OSError) else (
            str(error))
    raise ConnectionError(f"--address {address}: no Ray cluster answers at "
                          f"{target[0]}:{target[1]} ({reason}); start one with "
                          "`ray start --head` or check the address")


def single_threaded_workers() -> None:
    """Make the worker processes started from here single-threaded (:data:`WORKER_ENV`).

    Spawned processes and a one-machine Ray cluster read these when they import numpy
    and torch; a value already set is left as it is.
    """
    for variable, value in WORKER_ENV.items():
        os.environ.setdefault(variable, value)


def connect(address: str | None, jobs: int) -> None:
    """``ray.init``: a one-machine cluster of ``jobs`` CPUs, or the cluster at ``address``.

    ``None`` and ``local`` start a one-machine cluster; any other address is probed
    first (:func:`probe`) and joined with this package and :data:`WORKER_ENV` shipped to
    its workers.

    Raises:
        ValueError: ``address`` is not an address ``ray.init`` takes.
        ConnectionError: One line: nothing answers at ``address``, or Ray found no
            cluster there.
    """
    probe(address)
    import ray

    single_threaded_workers()
    if address is None or address == "local":  # its workers import from this checkout
        entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        path = os.pathsep.join(dict.fromkeys(filter(None, [str(PACKAGE.parent), *entries])))
        ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
        return
    try:  # the cluster's workers import this package from the job, not from a checkout
        with deadline(CONNECT_SECONDS) as expired:
            ray.init(address=address, runtime_env={"py_modules": [str(PACKAGE)],
                                                   "env_vars": dict(WORKER_ENV)})
    except KeyboardInterrupt:
        if not expired():
            raise
        ray.shutdown()
        raise ConnectionError(f"--address {address}: accepts connections but did not answer "
                              f"as a Ray cluster within {CONNECT_SECONDS:g} s") from None
    except ConnectionError as error:  # e.g. auto without a cluster: Ray's message, one line
        raise ConnectionError(f"--address {address}: {' '.join(str(error).split())}"
                              ) from None


@contextmanager
def deadline(seconds: float) -> Iterator[Callable[[], bool]]:
    """Interrupt the main thread (``KeyboardInterrupt``) if the block outlasts ``seconds``.

    Yields a function telling whether the deadline, not the user, interrupted. The
    interrupt is a real SIGINT to the main thread, as Ctrl-C is: it wakes a blocking
    call, and Ray's connection loop returns to Python between retries, where it lands.
    """
    lock = threading.Lock()
    state = {"done": False, "expired": False}
    # whatever SIGINT handler an earlier library left (Ray's, a test runner's), inside the
    # block SIGINT is Python's own KeyboardInterrupt, for the deadline and for Ctrl-C
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    if main:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def expire() -> None:
        with lock:
            if not state["done"]:
                state["expired"] = True
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield lambda: state["expired"]
    finally:
        with lock:
            state["done"] = True
        timer.cancel()
        if main and previous is not None:
            signal.signal(signal.SIGINT, previous)
