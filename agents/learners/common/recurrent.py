"""sb3-contrib's ``RecurrentPPO`` on cost-envs' ``MultiBinary`` actions.

sb3-contrib's ``RecurrentRolloutBuffer`` stores actions in the action space's dtype, int8
for ``MultiBinary``, and pads them into int8 tensors, so the first update fails inside
``Bernoulli.log_prob`` ("result type Float can't be cast to the desired output type
Char"). SB3's own ``RolloutBuffer`` casts actions to float32 when it samples; the recurrent
one does not. :class:`FloatActionBuffer` stores them as float32 from the start (the values
are 0 and 1, so nothing is lost), and :class:`RecurrentPPO` is sb3-contrib's class with
that buffer, a drop-in that takes the same arguments::

    >>> import gymnasium as gym
    >>> import cost_envs
    >>> from agents.learners.common.recurrent import RecurrentPPO
    >>> model = RecurrentPPO("MlpLstmPolicy", gym.make("cost_envs/ToolBench-v0"),
    ...                      n_steps=16, batch_size=16, n_epochs=1, seed=0)
    >>> _ = model.learn(32)

:func:`use_float_actions` fixes a model built with sb3-contrib's class itself. Nothing
else changes: the policy, its LSTM states, losses and updates are sb3-contrib's.
"""

from __future__ import annotations

import numpy as np
from sb3_contrib import RecurrentPPO as ContribRecurrentPPO
from sb3_contrib.common.recurrent.buffers import RecurrentRolloutBuffer


class FloatActionBuffer(RecurrentRolloutBuffer):
    """``RecurrentRolloutBuffer`` whose actions are float32 (what the policy's log-prob takes)."""

    def reset(self) -> None:
        """Empty the buffer, its action array in float32."""
        super().reset()
        self.actions = self.actions.astype(np.float32)


def use_float_actions(model: ContribRecurrentPPO) -> ContribRecurrentPPO:
    """Give an sb3-contrib ``RecurrentPPO`` a :class:`FloatActionBuffer` (before ``learn``).

    Keeps the buffer's size, spaces, LSTM state shape, device, ``gamma`` and
    ``gae_lambda``. Dict observations (``RecurrentDictRolloutBuffer``) are refused.

    Returns:
        ``model`` itself.

    Raises:
        ValueError: If ``model``'s buffer is not a plain ``RecurrentRolloutBuffer``.
    """
    buffer = model.rollout_buffer
    # isinstance first for the type checker: type() below is the check that matters
    if not isinstance(buffer, RecurrentRolloutBuffer) or type(buffer) not in (
            RecurrentRolloutBuffer, FloatActionBuffer):
        raise ValueError(f"use_float_actions: expected a RecurrentRolloutBuffer, got "
                         f"{type(buffer).__name__} (dict observations are not supported)")
    model.rollout_buffer = FloatActionBuffer(
        buffer.buffer_size, buffer.observation_space, buffer.action_space,
        buffer.hidden_state_shape, buffer.device, gae_lambda=buffer.gae_lambda,
        gamma=buffer.gamma, n_envs=buffer.n_envs)
    return model


class RecurrentPPO(ContribRecurrentPPO):
    """sb3-contrib's ``RecurrentPPO`` with :class:`FloatActionBuffer`; the same arguments."""

    def _setup_model(self) -> None:
        super()._setup_model()
        use_float_actions(self)


__all__ = ["FloatActionBuffer", "RecurrentPPO", "use_float_actions"]
