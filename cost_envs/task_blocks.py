"""TaskBlock: a block of drawn tasks that builds each task when the env reaches it.

A single env draws its tasks a block at a time (``OrchestrationEnv.task_block``, vectorised
over the block) and used to queue them as a list of Python objects: per task its dataclass,
and tables of nested lists for the step's hot path, some 10 to 35 objects the garbage
collector tracks. Over 1,024 envs in ``SyncVectorEnv`` or ``DummyVecEnv`` that is over a
million tracked objects alive, promoted to the oldest generation as blocks are drawn, and
full collections traversing them all again and again while freeing nothing (issue #26: half
the steps per second). A ``TaskBlock`` queues the block's arrays only (numpy arrays are
not tracked) and builds task ``b``, with its tables, on ``block[b]``: an env then keeps only
its current task's objects alive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, overload


class TaskBlock(Sequence[tuple[Any, Any]]):
    """``n`` tasks, task ``b`` (and its tables) built by ``build(b)`` when indexed.

    Args:
        n: Number of tasks in the block.
        build: ``b -> (task, tables)``, a pure function of the block's arrays (indexing
            the same ``b`` twice gives equal, fresh objects).
    """

    __slots__ = ("_build", "_n")

    def __init__(self, n: int, build: Callable[[int], tuple[Any, Any]]) -> None:
        self._n = n
        self._build = build

    def __len__(self) -> int:
        return self._n

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle and copy the built tasks, as a list (the builder is a closure)
        return list, (list(self),)

    @overload
    def __getitem__(self, b: int) -> tuple[Any, Any]: ...

    @overload
    def __getitem__(self, b: slice) -> list[tuple[Any, Any]]: ...

    def __getitem__(self, b: int | slice) -> Any:
        if isinstance(b, slice):
            return [self._build(i) for i in range(*b.indices(self._n))]
        if not -self._n <= b < self._n:
            raise IndexError(f"task {b} of a block of {self._n}")
        return self._build(b % self._n)
