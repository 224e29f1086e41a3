"""Routing live requests (issue #27): a saved router answering one fresh prompt at a time.

:class:`~agents.serve.live.LiveRouter` loads a router saved by ``cost-envs route train``
(or :func:`~agents.routers.save_router`) and routes a prompt that was never
logged: the model to call, the router's score and, for a priced router, what each call
is expected to cost. It reads a prompt exactly as the offline scorer reads a logged one
(the same features, the same decision), which its tests check on the shipped logs.
:class:`~agents.serve.allocators.LiveAllocator` does the same for an allocator trained on
TraceRouting-v0, observing a prompt as the env does (with ``cascade=True``, both steps:
the second observes the first call's answer). Importing this package loads no
torch (loading an allocator does).
"""

from agents.serve.allocators import AllocatorDecision, LiveAllocator
from agents.serve.live import LiveRouter, RouteDecision

__all__ = ["AllocatorDecision", "LiveAllocator", "LiveRouter", "RouteDecision"]
