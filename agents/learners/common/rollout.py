"""A PPO update's rollout as flat arrays and its per-minibatch statistics, as SB3 makes them.

:class:`Rollout` is the rollout buffer flattened once and each epoch's shuffled
minibatches cut from one gather; the functions turn the per-minibatch tensors an update
keeps into the floats SB3 logs (``agents.learners.ppo.FastPPO``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.buffers import RolloutBuffer

#: Rollout-buffer arrays a PPO update reads, in SB3's ``RolloutBuffer.get`` order.
BUFFER_FIELDS = ("observations", "actions", "values", "log_probs", "advantages", "returns")


class Rollout:
    """A full rollout buffer as flat torch tensors, and each epoch's shuffled minibatches.

    Flattens the buffer as SB3's ``RolloutBuffer.get`` does (in place, so that what SB3
    reads afterwards, ``explained_variance`` among it, is unchanged) and converts each
    array once. :meth:`epoch` draws the epoch's permutation from numpy's global generator,
    one ``np.random.permutation`` as ``get`` does, gathers every field once in that order
    and yields contiguous ``batch_size`` row slices: the rows, values and dtypes of the
    minibatches SB3 makes.
    """

    def __init__(self, buffer: RolloutBuffer) -> None:
        if not buffer.full:
            raise ValueError("Rollout: the rollout buffer is not full; collect a rollout first")
        if not buffer.generator_ready:
            for name in BUFFER_FIELDS:
                buffer.__dict__[name] = buffer.swap_and_flatten(buffer.__dict__[name])
            buffer.generator_ready = True
        self.size = buffer.buffer_size * buffer.n_envs
        # _get_samples: actions cast to float32, the four per-step arrays flattened
        self.arrays = (
            buffer.observations,
            buffer.actions.astype(np.float32, copy=False),
            *(buffer.__dict__[name].flatten() for name in BUFFER_FIELDS[2:]),
        )
        self.tensors = tuple(torch.as_tensor(array, device=buffer.device)
                             for array in self.arrays)

    def epoch(self, batch_size: int, numpy: bool = False) -> list[tuple[Any, ...]]:
        """This epoch's minibatches, in SB3's order.

        Each is ``(obs, actions, old_values, old_log_prob, advantages, returns)``: torch
        tensors, or with ``numpy`` numpy arrays (the same values; :func:`as_tensors`
        makes them tensors).
        """
        order = np.random.permutation(self.size)
        if numpy:
            shuffled: list[Any] = [array.take(order, axis=0) for array in self.arrays]
            return [tuple(array[start:start + batch_size] for array in shuffled)
                    for start in range(0, self.size, batch_size)]
        index = torch.from_numpy(order)
        # split: the same row slices as views, one call per field
        return list(zip(*(tensor.index_select(0, index).split(batch_size)
                          for tensor in self.tensors), strict=True))


def as_tensors(batch: tuple[np.ndarray, ...]) -> tuple[torch.Tensor, ...]:
    """A minibatch of numpy arrays as CPU tensors sharing their memory."""
    return tuple(torch.from_numpy(array) for array in batch)


def as_floats(values: list[Any]) -> list[float]:
    """0-d tensors (or numpy scalars) as the floats ``.item()`` gives."""
    if all(isinstance(value, torch.Tensor) for value in values):
        return torch.stack(values).tolist() if values else []  # one conversion
    return [value.item() for value in values]


def clip_fractions(ratios: list[torch.Tensor], clip_range: float) -> list[float]:
    """Each minibatch's ``mean(|ratio - 1| > clip_range)``, as SB3's ``.item()`` floats.

    A mean of 0/1 values is a count over the minibatch size whatever the summation order,
    so the row means of same-sized minibatches stacked are SB3's per-minibatch values.
    """
    return _by_size(ratios, lambda r: ((r - 1).abs() > clip_range).float().mean(dim=-1))


def approx_kls(ratios: list[torch.Tensor], log_ratios: list[torch.Tensor]) -> list[Any]:
    """SB3's per-minibatch ``mean((exp(log_ratio) - 1) - log_ratio)`` as float32 scalars.

    ``ratio`` is ``exp(log_ratio)`` already (the same operation on the same values).
    """
    # (r - 1) - l elementwise in numpy (IEEE: the same bits); torch's CPU mean is its sum
    # divided by the count
    return [torch.sum(torch.from_numpy((ratio.numpy() - 1) - log_ratio.numpy())).numpy()
            / np.float32(len(ratio)) for ratio, log_ratio in zip(ratios, log_ratios, strict=True)]


def _by_size(tensors: list[torch.Tensor],
             rows: Callable[[torch.Tensor], torch.Tensor]) -> list[float]:
    """``rows`` applied to runs of same-length tensors stacked, as floats in order."""
    out: list[float] = []
    start = 0
    while start < len(tensors):
        end = start
        while end < len(tensors) and len(tensors[end]) == len(tensors[start]):
            end += 1
        out.extend(rows(torch.stack(tensors[start:end])).tolist())
        start = end
    return out
