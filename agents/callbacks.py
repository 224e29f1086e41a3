"""Cost accounting for SB3 training runs: CPS, FLOPs per success and call ratios in the logger.

:class:`CostMetricsCallback` reads the per-step ``info`` of the cost-envs contract
(``calls`` at every step; ``success``, ``episode_cost`` and ``episode_flops``, the env's
own ledger, at the last), so it works with any wrapper stack, SB3's ``Monitor`` included
(``Monitor`` overwrites ``info["episode"]``, which is why the contract's keys are used).
An episode cut short by a foreign time limit (Gymnasium's ``TimeLimit``) carries no
ledger; for those the per-step ``cost`` and ``flops`` are added up instead.

At the end of every rollout it records, over the last ``window`` finished episodes:

==============================  ===================================================
key                             value
==============================  ===================================================
``cost/cps``                    total cost / max(1, successes)
``cost/flops_per_success``      total FLOPs / max(1, successes)
``cost/episode_cost``           mean cost per episode
``rollout/success_rate``        fraction of episodes that succeeded
``cost/call_ratio/<agent>``     fraction of steps in which ``<agent>`` was called
==============================  ===================================================

They go through ``self.logger``, so they land in TensorBoard, CSV and stdout beside SB3's
own keys, except ``rollout/success_rate`` when SB3 logs it itself: every cost-envs env
puts ``is_success`` in its final info, so SB3 computes it over the model's
``stats_window_size`` (100, like ``window``'s default) and one writer owns the key; with
another ``window`` the logger's value is SB3's and the callback's is in the history.
The same values are appended to :attr:`CostMetricsCallback.history` with the step count,
which is what the learning-curve figures plot.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from agents.evaluation import evaluate
from cost_envs.config import integer
from cost_envs.metrics import EpisodeRecord, summarize


class CostMetricsCallback(BaseCallback):
    """Log cost metrics of finished training episodes (module docstring).

    Args:
        window: Finished episodes the metrics are computed over (SB3 uses 100 for its
            ``rollout/ep_rew_mean``).
        verbose: SB3 verbosity.
    """

    def __init__(self, window: int = 100, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.window = integer(window, "window", minimum=1, where="CostMetricsCallback")
        self.episodes: deque[EpisodeRecord] = deque(maxlen=window)
        self.history: list[dict[str, Any]] = []
        self.agent_names: tuple[str, ...] = ()
        # Per sub-env running totals of the episode in progress (cost, FLOPs, calls, steps),
        # one row each, so that a step adds them for every sub-env at once.
        self._cost = np.zeros(0)
        self._flops = np.zeros(0)
        self._calls = np.zeros((0, 0), dtype=np.int64)
        self._length = np.zeros(0, dtype=np.int64)
        # Finished episodes' fields, made EpisodeRecords (validated) at the rollout's end:
        # only the last ``window`` are ever summarised.
        self._finished: deque[tuple[Any, ...]] = deque(maxlen=window)

    def _on_training_start(self) -> None:
        pool = self.training_env.get_attr("pool")[0]
        self.agent_names = tuple(pool.names)
        n = self.training_env.num_envs
        # learn(reset_num_timesteps=False) continues the episodes in progress: keep their
        # totals. A fresh run resets the envs, so it starts from zero.
        if self.model.num_timesteps == 0 or len(self._length) != n:
            self._cost, self._flops = np.zeros(n), np.zeros(n)
            self._calls = np.zeros((n, len(self.agent_names)), dtype=np.int64)
            self._length = np.zeros(n, dtype=np.int64)

    def _on_step(self) -> bool:
        infos, dones = self.locals["infos"], self.locals["dones"]
        n = len(infos)
        if len(dones) != n:
            raise ValueError(f"CostMetricsCallback: {n} infos but {len(dones)} dones")
        # the same float64 and int64 additions, sub-env by sub-env, as one array operation
        self._cost += np.fromiter((info["cost"] for info in infos), np.float64, n)
        self._flops += np.fromiter((info["flops"] for info in infos), np.float64, n)
        self._calls += np.array([info["calls"] for info in infos], dtype=np.int64)
        self._length += 1
        for index in np.flatnonzero(dones).tolist():
            info = infos[index]
            self._finished.append((
                bool(info.get("success", False)), float(info.get("quality", 0.0)),
                float(info.get("episode_cost", self._cost[index])),
                float(info.get("episode_flops", self._flops[index])),
                self._calls[index].copy(), int(self._length[index])))
            self._cost[index] = self._flops[index] = 0.0
            self._calls[index] = 0
            self._length[index] = 0
        return True

    def _on_rollout_end(self) -> None:
        while self._finished:
            success, quality, cost, flops, calls, length = self._finished.popleft()
            self.episodes.append(EpisodeRecord(success=success, quality=quality, cost=cost,
                                               flops=flops, calls=calls, length=length))
        if not self.episodes:
            return
        summary = summarize(self.episodes)
        values = {
            "cost/cps": summary["cps"],
            "cost/flops_per_success": summary["flops_per_success"],
            "cost/episode_cost": summary["avg_cost"],
            "rollout/success_rate": summary["success_rate"],
        }
        for name, ratio in zip(self.agent_names, summary["call_ratio"], strict=True):
            values[f"cost/call_ratio/{name}"] = float(ratio)
        buffer = self.model.ep_success_buffer  # from info["is_success"]; set by learn()
        sb3_logs_success = buffer is not None and len(buffer) > 0
        for key, value in values.items():
            if not (key == "rollout/success_rate" and sb3_logs_success):
                self.logger.record(key, value)
        self.history.append({"timesteps": self.num_timesteps, **values})


def gradient_steps(model: Any) -> int:
    """A PPO model's optimizer steps so far: its epochs times minibatches per epoch.

    SB3's (and sb3-contrib's) PPO count an epoch in ``_n_updates``, and its
    ``RolloutBuffer.get`` yields ceil(rollout / batch_size) minibatches an epoch; an epoch
    cut short by ``target_kl`` counts whole.
    """
    batches = -(-model.n_steps * model.n_envs // model.batch_size)
    return int(model._n_updates * batches)


class EvaluateAtSteps(BaseCallback):
    """Score the policy on a fixed task set at given environment-step counts: learning curves.

    At the start of every rollout (so after the update of the rollout before) whose step
    count has reached the next entry of ``at_steps``, and once at the end of training,
    the current policy plays ``episodes`` tasks of task seed ``seed`` deterministically
    (:func:`agents.evaluation.evaluate`, on a fresh env: training's envs and random
    streams are not touched, so a run trains the same weights with or without it).
    :attr:`curve` gets one entry per evaluation: ``timesteps``, ``gradient_steps``
    (optimizer steps so far: PPO's epochs times minibatches, reported beside env steps;
    an epoch cut short by ``target_kl`` counts whole) and the
    per-episode ``returns`` (or what :meth:`scores` records instead).

    Args:
        env_id: The id the policy is scored on.
        at_steps: Env-step counts to evaluate at (each at the first rollout boundary at or
            after it).
        episodes: Evaluation tasks.
        seed: Their task seed (the tables' evaluation set: 0).
        env_kwargs: ``gym.make`` arguments of the evaluation env.
    """

    def __init__(self, env_id: str, at_steps: Any, episodes: int = 400, seed: int = 0,
                 env_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__(0)
        self.env_id = env_id
        self.at_steps = sorted(integer(step, "at_steps", minimum=0, where="EvaluateAtSteps")
                               for step in at_steps)
        self.episodes = integer(episodes, "episodes", minimum=1, where="EvaluateAtSteps")
        self.seed = integer(seed, "seed", minimum=0, where="EvaluateAtSteps")
        self.env_kwargs = dict(env_kwargs or {})
        self.curve: list[dict[str, Any]] = []
        self._next = 0

    def _on_step(self) -> bool:
        return True

    def scores(self) -> dict[str, Any]:
        """What a checkpoint records beside its step counts: the per-episode ``returns``.

        A subclass scores the policy otherwise by overriding this.
        """
        result = evaluate(self.model.policy, self.env_id, episodes=self.episodes,
                          seed=self.seed, env_kwargs=self.env_kwargs)
        return {"returns": [float(value) for value in result.returns]}

    def _evaluate(self) -> None:
        model = self.model
        self.curve.append({"timesteps": int(self.num_timesteps),
                           "gradient_steps": gradient_steps(model), **self.scores()})

    def _on_rollout_start(self) -> None:
        if self._next < len(self.at_steps) and self.num_timesteps >= self.at_steps[self._next]:
            self._evaluate()
            while (self._next < len(self.at_steps)
                   and self.num_timesteps >= self.at_steps[self._next]):
                self._next += 1

    def _on_training_end(self) -> None:
        if not self.curve or self.curve[-1]["timesteps"] != self.num_timesteps:
            self._evaluate()
