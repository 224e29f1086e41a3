"""Train the paper's learned allocators on a cost-envs environment: one call per method.

=============  =====================================================================
method         what is trained
=============  =====================================================================
``ppo``        PPO from scratch; the same network with a plain, trainable encoder
``lora``       the supervised LoRA allocator (:mod:`agents.learners.supervised`); no RL
``lora-ppo``   ``lora``, then LoRA-guided PPO (:mod:`agents.learners.lora_ppo`) from it
``ppo-sil``    ``ppo`` plus self-imitation of its best episodes (:mod:`agents.learners.sil`)
``ppo-grpo``   ``ppo`` on group-relative advantages (:mod:`agents.learners.grpo`)
``bdq``        a branching dueling Q-network (:mod:`agents.learners.bdq`), off-policy;
               ``ppo=`` takes ``BranchingDQN``'s arguments instead of PPO's
``dyna``       ``bdq`` learning also from a learned model's imagined steps
               (:mod:`agents.learners.dyna`); ``ppo=`` takes ``DynaBDQ``'s arguments
``sac-bits``   discrete soft actor-critic per bit (:mod:`agents.learners.sac_bits`),
               off-policy; ``ppo=`` takes ``SACPerBit``'s arguments
=============  =====================================================================

Environments. The RL stage (``ppo``, and ``lora-ppo``'s PPO) steps ``n_envs`` sub-envs of
the id's native batched env (:func:`agents.vec_env.make_batched_vec_env`, one numpy env,
no per-sub-env Python loop); the supervised stage plays one ``gym.make`` env. With
``n_envs=1`` the batched env trains bit for bit the model a ``gym.make`` env under SB3's
own ``DummyVecEnv`` trains (same weights, same history; ``tests/test_train_batched.py``),
so one code path serves every ``n_envs``.

Seeds. ``seed`` fixes the network initialisation and the training tasks. Sub-env 0
draws its training tasks from task seed ``TRAIN_TASK_SEED + seed``, the others from
seeds of their own past every other range (:func:`agents.seeds.train_task_seeds`: runs
with different seeds share no sub-env's stream, as they would under SB3's ``seed + i``),
and the supervised traces come from ``TRACE_TASK_SEED + seed``. Evaluation resets with
the small seeds (``EVAL_TASK_SEED`` onwards), far below ``TRAIN_TASK_SEED``, so no
method is scored on a task it trained on.

Both RL stages train with :class:`agents.learners.ppo.FastPPO` (``lora-ppo`` through its
subclass): SB3's PPO updates, bit for bit, in fewer Python calls.

PPO hyperparameters are shared by ``ppo`` and ``lora-ppo`` where the paper's A.4 fixes
them (clip 0.2, entropy 0.01, value 0.5, GAE 0.95, 512 steps per rollout, minibatch 64);
``ppo`` uses SB3's default learning rate 3e-4 for its whole network, ``lora-ppo`` 5e-5
for the adapter.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import HumanOutputFormat, KVWriter, Logger
from stable_baselines3.common.utils import set_random_seed

import cost_envs
from agents.callbacks import CostMetricsCallback, EvaluateAtSteps
from agents.learners import (
    ACTION_DISTRIBUTIONS,
    BASES,
    FROM_SCRATCH,
    METHOD_SETTINGS,
    METHODS,
    NOT_PPO,
    PPO_SETTINGS,
)
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.common.ppo_args import LORA_PPO_ARGUMENTS, PPO_ARGUMENTS, check_hyperparameters
from agents.learners.dagger import fit_supervised
from agents.learners.grpo import GroupRelativePPO
from agents.learners.lora_ppo import LoraGuidedPPO
from agents.learners.pretrain import pretrained_base_path
from agents.learners.supervised import SupervisedConfig, policy_for
from agents.progress import learn_progress
from agents.seeds import EVAL_TASK_SEED, TRACE_TASK_SEED, train_task_seeds
from agents.vec_env import BatchedVecEnv, make_batched_vec_env
from cost_envs.config import integer
from cost_envs.limits import check_training_memory

#: ``gym.make`` options, not arguments of an env: a model's ``env_kwargs`` may not carry
#: them, since they would change the env it is scored on (a time limit, the checker, the
#: autoreset or API wrappers). ``render_mode`` is an env argument, but one that chooses
#: how an episode is shown, which is the viewer's business (``gym.make`` may even wrap the
#: env for it, and a text renderer would print into ``evaluate --json``), never a model's.
GYM_MAKE_OPTIONS = ("max_episode_steps", "disable_env_checker", "autoreset",
                    "apply_api_compatibility", "order_enforce", "additional_wrappers",
                    "vector_kwargs", "render_mode")
#: Torch threads :func:`train` uses by default: the networks are a few 64-wide layers and
#: batches of 64, where one thread is fastest (issue #13: torch's default of one thread per
#: core trained 4-12x slower on 2 cores); parallel runs go in separate processes instead.
DEFAULT_TORCH_THREADS = 1
#: What ``train(ppo=...)`` may override: SB3 ``PPO``'s hyperparameters, read from its
#: signature (:mod:`agents.learners.common.ppo_args`). Anything else is an error, never ignored.
PPO_OVERRIDES = frozenset(PPO_ARGUMENTS)
#: What ``train(ppo=...)`` may also override for ``lora-ppo``: the arguments of
#: :class:`agents.learners.lora_ppo.LoraGuidedPPO` that plain PPO does not have.
LORA_PPO_OVERRIDES = frozenset(LORA_PPO_ARGUMENTS)


@dataclass
class TrainedAllocator:
    """A trained policy and where it came from; an allocator (SB3's ``predict``).

    Attributes:
        policy: The network.
        env_id: Registered id it was trained on.
        env_kwargs: ``gym.make`` keyword arguments (JSON values; a pool as its dict).
        method: One of :data:`METHODS`.
        seed: Training seed.
        timesteps: Environment steps of RL actually taken (0 for ``lora``); SB3 completes
            its last rollout, so this is ``timesteps`` rounded up to whole rollouts.
        base: ``pretrained`` or ``random`` (``None`` for ``ppo``'s trainable encoder).
        history: The training callback's history (learning curves).
        n_envs: Sub-envs the RL stage stepped (1 for ``lora``, and for models saved before
            it was recorded).
        curve: The evaluations ``train(evaluate_at=...)`` asked for
            (:class:`agents.callbacks.EvaluateAtSteps`; not saved with the model).
    """

    policy: AllocatorPolicy
    env_id: str
    env_kwargs: dict[str, Any]
    method: str
    seed: int
    timesteps: int
    base: str | None
    history: list[dict[str, Any]] = field(default_factory=list)
    n_envs: int = 1
    curve: list[dict[str, Any]] = field(default_factory=list)

    def predict(
        self,
        observation: np.ndarray,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]:
        """The policy's action (``deterministic``: call agent i iff ``p_i > 0.5``)."""
        return self.policy.predict(observation, state, episode_start, deterministic)


def _json_env_kwargs(env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Env kwargs as JSON values: a pool (object, dict or file) becomes its dict form."""
    out = dict(env_kwargs)
    if "pool" in out:
        out["pool"] = cost_envs.pool.coerce_pool(out["pool"]).to_dict()
    return out


def _base_path(env_id: str, base: str) -> str | None:
    if base not in BASES:
        raise ValueError(f"base: expected one of {list(BASES)}, got {base!r}")
    return str(pretrained_base_path(env_id)) if base == "pretrained" else None


def train(
    env_id: str,
    method: str,
    timesteps: int,
    seed: int = 0,
    base: str = "pretrained",
    env_kwargs: Mapping[str, Any] | None = None,
    supervised: SupervisedConfig = SupervisedConfig(),  # noqa: B008  (frozen, immutable)
    tensorboard_log: str | Path | None = None,
    progress_bar: bool = False,
    verbose: int = 0,
    ppo: Mapping[str, Any] | None = None,
    torch_threads: int | None = DEFAULT_TORCH_THREADS,
    n_envs: int = 1,
    action_distribution: str = "independent",
    evaluate_at: Sequence[int] = (),
    eval_episodes: int = 400,
    eval_seed: int = EVAL_TASK_SEED,
) -> TrainedAllocator:
    """Train ``method`` on ``env_id`` (module docstring) and return the allocator.

    Args:
        env_id: A registered cost-envs id.
        method: One of :data:`METHODS`.
        timesteps: RL environment steps over all sub-envs (ignored by ``lora``), >= 1.
        seed: Training seed, >= 0.
        base: ``pretrained`` (the shipped base) or ``random`` (the ablation); LoRA only.
        env_kwargs: ``gym.make`` keyword arguments, e.g. ``{"pool": "my_pool.yaml"}``.
        supervised: Supervised-stage settings (default :class:`SupervisedConfig`).
        tensorboard_log: SB3 ``tensorboard_log`` directory (needs ``tensorboard``).
        progress_bar: Show the RL stage's and the supervised stage's progress: bars on
            a terminal, a plain line per tenth of the RL run elsewhere
            (:mod:`agents.progress`).
        verbose: SB3 verbosity.
        ppo: Overrides of :data:`PPO_SETTINGS` and the learning rate for ``ppo`` and
            ``lora-ppo`` (keys of :data:`PPO_OVERRIDES`, and for ``lora-ppo`` those of
            :data:`LORA_PPO_OVERRIDES`); ``None`` keeps the paper's.
        torch_threads: Torch's intra-op threads while training, restored afterwards.
            Default 1 (:data:`DEFAULT_TORCH_THREADS`): these networks are so small that
            torch's default (one thread per core) spends more time synchronising threads
            than computing. ``None`` leaves torch's setting alone.
        n_envs: Sub-envs of the batched env the RL stage steps at once, >= 1 (module
            docstring; ignored by ``lora``). ``n_steps`` stays SB3's per-sub-env count: a
            rollout is ``n_envs * n_steps`` steps, so ``timesteps`` is rounded up to a
            multiple of it and ``batch_size`` splits the bigger rollout.
        action_distribution: The policy's action head
            (:data:`agents.learners.ACTION_DISTRIBUTIONS`): ``independent`` (the paper's)
            or ``autoregressive``.
        evaluate_at: Env-step counts at which the RL stage's policy is scored on the
            evaluation tasks (``eval_episodes`` of task seed ``eval_seed``,
            :class:`agents.callbacks.EvaluateAtSteps`), and once at the end: the learning
            curve in ``curve``. Empty: none.
        eval_episodes: Evaluation tasks of the curve (the tables': 400).
        eval_seed: Their first reset seed: the validation set's (``EVAL_TASK_SEED``, where
            the curves' stop marks are read) unless a report scores the end elsewhere.

    Raises:
        ValueError: One line naming a bad argument, a ``gym.make`` option in
            ``env_kwargs`` (``max_episode_steps`` ...: the batched env takes the env's
            own arguments, ``budget`` and ``on_exceed`` only), a value the env refuses,
            or ``n_envs x n_steps`` whose batched env and rollout buffer cannot fit in the
            memory available (:func:`cost_envs.limits.check_training_memory`).
    """
    if method not in METHODS:
        raise ValueError(f"method: expected one of {list(METHODS)}, got {method!r}")
    integer(timesteps, "timesteps", minimum=1)
    integer(seed, "seed", minimum=0)
    integer(n_envs, "n_envs", minimum=1)
    if evaluate_at and method == "lora":
        raise ValueError("evaluate_at: lora trains no RL stage, so it has no learning curve; "
                         "evaluate the returned allocator instead")
    if action_distribution not in ACTION_DISTRIBUTIONS:
        raise ValueError(f"action_distribution: expected one of {list(ACTION_DISTRIBUTIONS)}, "
                         f"got {action_distribution!r}")
    if torch_threads is not None:
        integer(torch_threads, "torch_threads", minimum=1)
    settings = ppo_settings(ppo, method)
    kwargs = _json_env_kwargs(env_kwargs or {})
    if method != "lora":
        _check_batched_kwargs(kwargs)
    base_path = _base_path(env_id, base) if method not in FROM_SCRATCH else None
    with threads(torch_threads):
        set_random_seed(seed)
        # The supervised stage's env, and for every method the check of env_kwargs with
        # gym.make's own messages (a budget the single env refuses is refused here).
        env = gym.make(env_id, **kwargs)
        if method != "lora":  # before the batched env and the rollout buffer exist
            check_training_memory(env, n_envs, settings.get("n_steps", PPO_SETTINGS["n_steps"]))
        callback = CostMetricsCallback()
        scorer = (EvaluateAtSteps(env_id, evaluate_at, eval_episodes, seed=eval_seed,
                                  env_kwargs=kwargs)
                  if evaluate_at else None)
        # SB3's own bar (rich's, on stdout) would write frames into a redirected log
        bar = learn_progress(f"{method} RL", progress_bar)
        callbacks: list[BaseCallback] = [c for c in (callback, scorer, bar) if c is not None]
        common: dict[str, Any] = {"device": "cpu", "verbose": verbose, "tensorboard_log":
                  None if tensorboard_log is None else str(tensorboard_log)}
        if method in FROM_SCRATCH:
            module, name = FROM_SCRATCH[method]
            cls = getattr(importlib.import_module(module), name)
            model = cls(AllocatorPolicy, make_batched_vec_env(env_id, n_envs, **kwargs),
                        policy_kwargs={"lora_rank": None,
                                       "action_distribution": action_distribution},
                        **settings, **common)
        else:
            policy = policy_for(env, base=base_path, action_distribution=action_distribution)
            fit_supervised(policy, env, supervised, seed=seed,
                           trace_seed=TRACE_TASK_SEED + seed, progress=progress_bar)
            if method == "lora":
                env.close()
                return TrainedAllocator(policy, env_id, kwargs, method, seed, 0, base)
            model = LoraGuidedPPO.from_supervised(
                policy, make_batched_vec_env(env_id, n_envs, **kwargs), **settings, **common)
        if tensorboard_log is None:
            quiet_logger(model, verbose)
        # GRPO replays each task on a group of sub-envs seeded alike (agents.learners.grpo)
        seeds = (model.task_seeds(seed) if isinstance(model, GroupRelativePPO)
                 else train_task_seeds(seed, n_envs))
        venv = model.get_env()
        assert venv is not None  # the model was built with one above
        if n_envs == 1:  # SB3's own call, which any VecEnv takes
            venv.seed(seeds[0])
        else:
            batched = venv.unwrapped
            assert isinstance(batched, BatchedVecEnv)  # make_batched_vec_env's, in a VecMonitor
            batched.seed_each(seeds)
        model.learn(timesteps, callback=callbacks, tb_log_name=method)
        env.close()
        venv.close()
        # SB3 finishes the rollout it is in, so the steps taken can exceed ``timesteps``.
        policy = cast(AllocatorPolicy, model.policy)  # both models were built with one above
        return TrainedAllocator(policy, env_id, kwargs, method, seed, model.num_timesteps,
                                base if method not in FROM_SCRATCH else None,
                                callback.history, n_envs,
                                scorer.curve if scorer else [])


def _check_batched_kwargs(kwargs: Mapping[str, Any]) -> None:
    """Refuse ``gym.make`` options: the batched env of the RL stage takes none of them."""
    for key in kwargs:
        if key in GYM_MAKE_OPTIONS:
            raise ValueError(f"env_kwargs: {key!r} is a gym.make option, not an argument of "
                             "the env; training steps the batched env, which takes the env's "
                             "own arguments, budget and on_exceed only")


def ppo_settings(overrides: Mapping[str, Any] | None, method: str) -> dict[str, Any]:
    """:data:`PPO_SETTINGS` with ``overrides`` applied (keys and values ``method`` accepts).

    Raises:
        ValueError: One line naming an unknown key and the valid ones, or a bad value
            (:func:`agents.learners.common.ppo_args.check_hyperparameters`).
    """
    return {**({} if method in NOT_PPO else PPO_SETTINGS), **METHOD_SETTINGS.get(method, {}),
            **check_hyperparameters(overrides or {}, method)}


def quiet_logger(model: Any, verbose: int = 0) -> None:
    """Log to stdout when ``verbose``, else nowhere, and never to a directory.

    Without a logger of its own SB3 makes an empty /tmp/SB3-<time> directory on every
    ``learn()``.
    """
    outputs: list[KVWriter] = [HumanOutputFormat(sys.stdout)] if verbose else []
    model.set_logger(Logger(folder=None, output_formats=outputs))


def configure_torch_threads() -> None:
    """:data:`DEFAULT_TORCH_THREADS` for the whole process (the CLI's and experiments')."""
    torch.set_num_threads(DEFAULT_TORCH_THREADS)


@contextmanager
def threads(n: int | None) -> Iterator[None]:
    """Torch's intra-op thread count set to ``n`` inside the block (``None``: unchanged)."""
    if n is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
