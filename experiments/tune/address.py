"""``python -m experiments tune --address``: the cluster checked before Ray is started.

``ray.init`` on an address nobody answers at does not fail quickly: for
``ray://127.0.0.1:1`` Ray's client retries for about a minute and ends in a 45-line
traceback, and for a GCS address (``HOST:PORT``) it retries for minutes. So the address
is probed first with a plain TCP connection, bounded by :data:`PROBE_SECONDS` (name
resolution included), and an address nobody answers at is one line at once.

The forms ``ray.init`` takes: ``auto`` (the cluster started on this machine by ``ray
start``; Ray itself says at once when there is none) and ``local`` (a new one-machine
cluster) are not probed; ``ray://HOST[:PORT]`` (Ray Client, port 10001 by default) and
``HOST:PORT`` (the cluster's GCS) are. Importing this module imports neither Ray nor torch.
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit

#: How long the probe waits for the cluster to accept a connection, in seconds.
PROBE_SECONDS = 5.0
#: Ray Client's port when a ``ray://`` address names none (``ray start --head``'s default).
CLIENT_PORT = 10001
#: Addresses ``ray.init`` resolves itself, without a host to probe.
NAMED = ("auto", "local")
EXPECTED = "auto, local, HOST:PORT or ray://HOST[:PORT]"


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
