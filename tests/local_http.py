"""HTTP clients for the test servers on 127.0.0.1, which speak plain http.

httpx and openai load the CA bundle each time a client is made (about 40 ms of CPU), even
for an ``http://`` URL that never uses it; the serve tests make a few hundred clients
(``httpx.get`` makes one per call). ``verify=False`` skips that load and nothing else:
no request here goes over TLS.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai


def openai_client(**options: Any) -> openai.OpenAI:
    """``openai.OpenAI(**options)`` without loading the CA bundle."""
    return openai.OpenAI(http_client=openai.DefaultHttpxClient(verify=False), **options)


def get(url: str, **options: Any) -> httpx.Response:
    """``httpx.get`` without loading the CA bundle."""
    return httpx.get(url, verify=False, **options)


def post(url: str, **options: Any) -> httpx.Response:
    """``httpx.post`` without loading the CA bundle."""
    return httpx.post(url, verify=False, **options)


def request(method: str, url: str, **options: Any) -> httpx.Response:
    """``httpx.request`` without loading the CA bundle."""
    return httpx.request(method, url, verify=False, **options)


def stream(method: str, url: str, **options: Any) -> Any:
    """``httpx.stream`` (a context manager) without loading the CA bundle."""
    return httpx.stream(method, url, verify=False, **options)
