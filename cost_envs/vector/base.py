"""BatchedOrchestrationEnv: N sub-envs of one orchestration env stepped as numpy arrays.

What every batched env shares lives here: seeding (each sub-env has its own generator,
seeded exactly as a single env's ``reset(seed=...)`` seeds ``np_random``), the task queue
(each sub-env draws its tasks in blocks from its generator as the single env's own
``draw_block`` does, so sub-env ``i`` sees the tasks a single env seeded like it would;
one pass derives the blocks of every sub-env refilling in a step), action validation,
pricing, the cost/FLOPs ledger, Eq. 1, autoreset and the ``info`` dict. A family module
supplies the batched transition (see the hooks below); :mod:`cost_envs.vector.budget`
adds per-sub-env budgets through :meth:`BatchedOrchestrationEnv.attach_budget`.

**Equivalence.** With the same seeds and actions, a batched env returns what
``gym.make_vec(id, num_envs, vectorization_mode="sync")`` (``SyncVectorEnv`` over single
envs) returns, bit for bit: observations, rewards, flags and ``info`` with its ``_key``
masks (``tests/test_vector.py`` checks it for every id with a batched implementation).
Every float is computed by the same operations in the same order as the single env's
(prices summed agent by agent in index order, Eq. 1 term by term).

**Autoreset** follows Gymnasium 1.x (``gymnasium.vector.AutoresetMode``), chosen with
``autoreset_mode`` and stated in ``metadata["autoreset_mode"]``:

* ``NEXT_STEP`` (the default, as ``SyncVectorEnv``'s): a sub-env whose episode ended is
  reset by the next ``step``, which ignores its action and returns its first observation,
  reward 0, both flags False and no info keys for it.
* ``SAME_STEP``: the sub-env is reset within the step that ended its episode; the returned
  observation is the new episode's first, the last one is in ``info["final_obs"]`` and the
  step's info in ``info["final_info"]`` (each with its mask).
* ``DISABLED``: no autoreset; reset ended sub-envs with
  ``reset(options={"reset_mask": mask})``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from cost_envs.actions import binary_actions, describe
from cost_envs.core import MAX_ORACLE_AGENTS, OrchestrationEnv
from cost_envs.limits import batched_env_bytes, check_memory
from cost_envs.vector.array_ops import read_only
from cost_envs.vector.info import VectorInfo

REFILL_CHUNK = 16  #: most sub-envs whose blocks one pass of ``_refill`` draws


def check_num_envs(num_envs: Any, where: str) -> int:
    """``num_envs`` as an int >= 1, else a one-line ``ValueError`` naming it."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
        raise ValueError(f"{where}: num_envs: expected an int >= 1, got {num_envs!r}")
    return int(num_envs)


def coerce_autoreset(mode: Any, where: str) -> AutoresetMode:
    """An :class:`AutoresetMode` or its value (``"NextStep"``, ``"SameStep"``, ``"Disabled"``)."""
    if isinstance(mode, AutoresetMode):
        return mode
    try:
        return AutoresetMode(mode)
    except ValueError:
        raise ValueError(f"{where}: autoreset_mode: expected one of "
                         f"{[m.value for m in AutoresetMode]}, got {mode!r}") from None


class BatchedOrchestrationEnv(VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """Base class of the batched envs: ``num_envs`` sub-envs of ``env_class``.

    What every batched env promises, stated here once: its single env's spaces per
    sub-env; its arguments, ``num_envs`` (the number of sub-envs), ``autoreset_mode`` (a
    ``gymnasium.vector.AutoresetMode``, default ``NEXT_STEP``) and, as keywords,
    ``env_class``'s own; and, seeded alike, the trajectories of
    ``gym.make(id, **kwargs)`` of that env's id (the module doc: seeding, autoreset and
    ``info``).

    A family module sets ``env_class`` and implements four hooks, each over the sub-envs
    ``idx`` (an int array) only:

    * ``_draw(rng, n)``: ``n`` tasks' raw draws (a named tuple of arrays, leading axis
      ``n``): the generator calls of the single env's ``draw_block``, no more. Sub-env
      ``i``'s queue is rows ``i * task_block ...`` of ``self.blocks`` (the same tuple).
      ``_derive(draws)``: the queued arrays (smallest exact dtypes) from the draws of
      every sub-env drawing in a step, stacked: per-task work runs once per step, not per
      sub-env. Rejection sampling overrides ``_draw_many(rngs, n)`` instead.
    * ``_start(idx, rows)``: start a task in each sub-env of ``idx``: ``rows`` are the
      tasks' rows of ``self.blocks`` (also kept in ``self._task`` for the episode).
    * ``_transition(idx, calls)``: one turn with ``calls`` (``(len(idx), m)`` int8) at turn
      ``self._turn[idx]``; returns ``(ended, success, quality)`` arrays.
    * ``_observe(idx)``: the observations, shape ``(len(idx), *obs_shape)`` (with
      ``observe_all``, ``idx`` may also be ``slice(None)``: every sub-env).

    For the hooks' speed (all optional): ``observe_all``; ``self._step_codes``, the
    stepping sub-envs' joint-action codes (:meth:`action_codes`) in the current step
    (``None`` above ``MAX_ORACLE_AGENTS`` agents); :mod:`cost_envs.vector.array_ops`.

    Args:
        num_envs: Number of sub-envs.
        autoreset_mode: An :class:`~gymnasium.vector.AutoresetMode` (or its value).
        **env_kwargs: The single env's arguments (checked by building one).
    """

    env_class: type[OrchestrationEnv[Any]]
    single_observation_space: spaces.Box
    #: True when calls cost the pool's prices in every episode (the single env's
    #: ``_task_prices`` is ``None``); a family whose prices depend on the task sets it
    #: False and writes ``_call_costs``, ``_call_flops``, ``_step_cost``, ``_step_flops``
    #: in ``_start``.
    fixed_prices: bool = True
    #: True when ``_observe`` also takes ``slice(None)`` (every sub-env, no gathers): the
    #: step then observes every sub-env at once. Valid because an observation is a pure
    #: function of its sub-env's state, which a sub-env that did not step keeps.
    observe_all: bool = False

    def __init__(self, num_envs: int, *,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                 **env_kwargs: Any) -> None:
        name = type(self).__name__
        self.num_envs = check_num_envs(num_envs, name)
        self.autoreset_mode = coerce_autoreset(autoreset_mode, name)
        if env_kwargs.get("render_mode") is not None:
            # Nothing here renders; accepting the mode would hand it to the single env
            # only and leave render() failing later.
            raise ValueError(f"{name}: render_mode={env_kwargs['render_mode']!r} is not "
                             "supported by a batched env; expected None (use "
                             "vectorization_mode='sync' to render sub-envs)")
        # The single env checks the arguments and is the one home of the pool, the
        # reward weights, the spaces and the task draw.
        self.single_env = self.env_class(**env_kwargs)
        # before any array of num_envs rows: a size that cannot fit is one line, not a crash
        check_memory(batched_env_bytes(self.single_env, self.num_envs),
                     f"{name}: num_envs={self.num_envs}", "use fewer sub-envs")
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": []}
        self.render_mode = None
        n, m = self.num_envs, self.single_env.n_agents
        self.n_agents = m
        self.reward_weights = self.single_env.reward_weights
        self.single_action_space = self.single_env.action_space
        self.action_space = batch_space(self.single_action_space, n)
        space = self.single_env.observation_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"{name}: expected a single env with a Box observation space, "
                            f"got {space}")
        self.single_observation_space = space
        self.observation_space = batch_space(self.single_observation_space, n)
        self.task_block = self.single_env.task_block
        self._rngs: list[np.random.Generator | None] = [None] * n
        self.blocks: Any = None
        self._task = np.zeros(n, dtype=np.int64)  # the current task's row of self.blocks
        self._queued = np.zeros(n, dtype=np.int64)  # next task of each sub-env's block
        self._queued[:] = self.task_block  # empty: the first reset draws a block
        self._turn = np.zeros(n, dtype=np.int64)
        self._episode_cost = np.zeros(n)
        self._episode_flops = np.zeros(n)
        # A row per sub-env: its calls' money (m), their FLOPs (m), the step's money and
        # FLOPs; the four named views below are its columns, so a family whose prices
        # depend on the task can also write a task's prices with one row assignment.
        self._prices = np.zeros((n, 2 * m + 2))
        self._call_costs = self._prices[:, :m]
        self._call_flops = self._prices[:, m:2 * m]
        self._step_cost = self._prices[:, 2 * m]
        self._step_flops = self._prices[:, 2 * m + 1]
        self._call_costs[:] = self.single_env.pool.costs
        self._call_flops[:] = self.single_env.pool.flops
        # joint-action codes (action_codes) and the number of calls of each code
        self._bits: np.ndarray | None = None
        self._calls_by_code: np.ndarray | None = None
        if m <= MAX_ORACLE_AGENTS:
            self._bits = (1 << np.arange(m)).astype(np.float32)
            self._calls_by_code = np.zeros(1, dtype=np.int64)
            for _ in range(m):  # popcount of 0 .. 2**m - 1
                self._calls_by_code = np.concatenate((self._calls_by_code, self._calls_by_code + 1))
        #: the stepping sub-envs' action codes in the current step (None for m > 16)
        self._step_codes: np.ndarray | None = None
        self._price_table = self._prices_by_code() if self.fixed_prices else None
        space = self.single_observation_space
        self._obs = np.zeros((n, *space.shape), space.dtype)  # batch_space's shape and dtype
        self._ended = np.zeros(n, dtype=np.bool_)
        self._started = False
        self._budget: Any = None

    # ------------------------------------------------------------------ hooks
    def _draw(self, rng: np.random.Generator, n: int) -> Any:
        raise NotImplementedError

    def _derive(self, draws: Any) -> Any:
        """The queued arrays of ``draws`` (``_draw``'s of several sub-envs, stacked)."""
        return draws

    def _start(self, idx: np.ndarray, rows: np.ndarray) -> None:
        raise NotImplementedError

    def _transition(self, idx: np.ndarray,
                    calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _observe(self, idx: np.ndarray | slice) -> np.ndarray:
        raise NotImplementedError

    # ----------------------------------------------------------- properties
    @property
    def env_name(self) -> str:
        """The registered id when made through ``gym.make_vec``, else the class name."""
        return self.spec.id if self.spec is not None else type(self).__name__

    @property
    def episode_cost(self) -> np.ndarray:
        """Each sub-env's spend in its current episode (a read-only view of the ledger)."""
        return read_only(self._episode_cost)

    @property
    def episode_flops(self) -> np.ndarray:
        """Each sub-env's FLOPs in its current episode (a read-only view)."""
        return read_only(self._episode_flops)

    @property
    def call_costs(self) -> np.ndarray:
        """Money per call of each agent in each sub-env's episode, ``(num_envs, m)``."""
        return read_only(self._call_costs)

    @property
    def step_cost(self) -> np.ndarray:
        """Money every step of each sub-env's episode costs whatever the action."""
        return read_only(self._step_cost)

    @property
    def turn(self) -> np.ndarray:
        """Steps taken in each sub-env's current episode."""
        return read_only(self._turn)

    # ---------------------------------------------------------------- reset
    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every sub-env (or those of ``options["reset_mask"]``), as ``SyncVectorEnv``.

        Args:
            seed: ``None``; an int ``s`` (sub-env ``i`` gets ``s + i``); or one seed (or
                ``None``) per sub-env. A seeded sub-env draws its tasks afresh from it.
            options: Only ``{"reset_mask": bool array (num_envs,)}``: reset those alone.

        Returns:
            The observations and an empty info (single envs' reset infos are empty).
        """
        n = self.num_envs
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif isinstance(seed, int | np.integer) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(n)]
        elif isinstance(seed, Sequence) and len(seed) == n:
            seeds = list(seed)
        else:
            raise ValueError(f"{self.env_name}: seed: expected None, an int or {n} seeds, "
                             f"got {seed!r}")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"{self.env_name}: unknown reset option(s) {sorted(options)}; "
                             "expected only 'reset_mask' (replay a task with the single env)")
        if mask is None:
            mask = np.ones(n, dtype=np.bool_)
        elif not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_
                  and mask.shape == (n,) and mask.any()):
            raise ValueError(f"{self.env_name}: options['reset_mask']: expected a bool array "
                             f"of shape ({n},) with a True, got {mask!r}")
        idx = mask.nonzero()[0]
        for i in idx.tolist():
            if seeds[i] is not None:
                self._rngs[i], _ = seeding.np_random(seeds[i])
                self._queued[i] = self.task_block  # the new seed defines the tasks from here
        self._begin(idx)
        self._started = True
        return self._obs.copy(), {}

    def _begin(self, idx: np.ndarray, observe: bool = True) -> None:
        """Start the next task of each sub-env of ``idx`` (and observe it if ``observe``)."""
        if len(idx) == 0:
            return
        empty = idx[self._queued[idx] == self.task_block]
        if len(empty):
            self._refill(empty.tolist())
        rows = idx * self.task_block + self._queued[idx]
        self._queued[idx] += 1
        self._task[idx] = rows
        self._start(idx, rows)
        self._turn[idx] = 0
        self._episode_cost[idx] = 0.0
        self._episode_flops[idx] = 0.0
        self._ended[idx] = False
        if observe:
            self._obs[idx] = self._observe(idx)
        if self._budget is not None:
            self._budget.on_reset(idx)

    def _refill(self, ids: list[int]) -> None:
        """Draw the next block of tasks of each sub-env of ``ids``, each from its own generator.

        One pass per :data:`REFILL_CHUNK` sub-envs (bounding the transient arrays whatever
        ``num_envs``): their draws, one ``_derive`` over all, one write per queued array.
        """
        size = self.task_block
        for start in range(0, len(ids), REFILL_CHUNK):
            chunk = ids[start:start + REFILL_CHUNK]
            rngs = [self._generator(i) for i in chunk]
            queued = self._derive(self._draw_many(rngs, size))
            if self.blocks is None:  # zeros: pages are committed as the queues fill
                self.blocks = queued._make(np.zeros((self.num_envs * size, *a.shape[1:]),
                                                    a.dtype) for a in queued)
            at = (np.asarray(chunk)[:, None] * size + np.arange(size)).reshape(-1)
            for block, value in zip(self.blocks, queued, strict=True):
                block[at] = value
            self._queued[chunk] = 0

    def _generator(self, i: int) -> np.random.Generator:
        """Sub-env ``i``'s generator (an unseeded sub-env gets one as a single env would)."""
        rng = self._rngs[i]
        if rng is None:
            rng, _ = seeding.np_random()  # as a single env's unseeded one
            self._rngs[i] = rng
        return rng

    def _draw_many(self, rngs: list[np.random.Generator], n: int) -> Any:
        """``n`` tasks' draws from each generator of ``rngs`` (``_draw``'s), stacked in order.

        Each sub-env has its own stream: its generator's calls cannot be merged.
        """
        drawn = [self._draw(rng, n) for rng in rngs]
        if len(drawn) == 1:
            return drawn[0]
        return drawn[0]._make(np.concatenate(arrays) for arrays in zip(*drawn, strict=True))

    # ----------------------------------------------------------------- step
    def validate_actions(self, actions: Any) -> np.ndarray:
        """``actions`` as a fresh ``(num_envs, m)`` int8 0/1 array, or a ``ValueError``.

        The check every env form shares (:func:`cost_envs.actions.binary_actions`).
        """
        shape = (self.num_envs, self.n_agents)
        calls = binary_actions(actions, shape)
        if calls is not None:
            return calls
        raise ValueError(
            f"{self.env_name}: invalid actions {describe(actions)}: expected an element of "
            f"MultiBinary({shape}), an array of shape {shape} holding only 0 and 1 (row j is "
            f"sub-env j's action, bit i calls agent {list(self.single_env.pool.names)}[i])")

    def _prices_by_code(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Money and FLOPs of every joint action, priced once by the single env's ``price``.

        Indexed by the action's code ``sum_i bit_i 2**i``; ``None`` for pools too large to
        tabulate (more than ``MAX_ORACLE_AGENTS`` agents).
        """
        m = self.n_agents
        if m > MAX_ORACLE_AGENTS:
            return None
        priced = [self.single_env.price([i for i in range(m) if code >> i & 1])
                  for code in range(2**m)]
        cost, flops = (np.array(column) for column in zip(*priced, strict=True))
        return cost, flops

    def action_codes(self, calls: np.ndarray) -> np.ndarray:
        """Each row's joint-action code ``sum_i bit_i 2**i`` of a 0/1 (or boolean) ``(k, m)`` array.

        A float32 matmul (exact: codes below ``2**MAX_ORACLE_AGENTS``), several times faster
        than ``packbits`` or an integer sum. Requires ``m <= MAX_ORACLE_AGENTS``.
        """
        if self._bits is None:
            raise ValueError(f"{self.env_name}: action codes need at most {MAX_ORACLE_AGENTS} "
                             f"agents, got {self.n_agents}")
        return (calls.astype(np.float32) @ self._bits).astype(np.int64)

    def price(self, idx: np.ndarray, calls: np.ndarray,
              codes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Money and FLOPs of ``calls`` in sub-envs ``idx``: the single env's ``price``.

        Summed agent by agent in index order from the step cost, as the single env does,
        so the totals agree with it (and with a budget's check) to the last bit. ``codes``:
        the calls' :meth:`action_codes`, when the caller has them.
        """
        if self._price_table is not None:
            cost_of, flops_of = self._price_table
            code = self.action_codes(calls) if codes is None else codes
            return cost_of[code], flops_of[code]
        called = calls != 0
        m = self.n_agents
        prices = self._prices.take(idx, axis=0)
        cost, flops = prices[:, 2 * m], prices[:, 2 * m + 1]
        for i in range(m):
            cost = cost + np.where(called[:, i], prices[:, i], 0.0)
            flops = flops + np.where(called[:, i], prices[:, m + i], 0.0)
        return cost, flops

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        """Step every sub-env (autoresetting as ``autoreset_mode`` says).

        Args:
            actions: ``(num_envs, m)`` 0/1 array, row ``j`` the action of sub-env ``j``.

        Returns:
            ``(observations, rewards, terminations, truncations, info)``.

        Raises:
            ResetNeeded: Before the first ``reset``, or (``DISABLED``) stepping an ended
                sub-env.
            ValueError: If ``actions`` is not an element of the batched action space.
        """
        if not self._started:
            raise ResetNeeded(f"{self.env_name}: call reset() before step()")
        n = self.num_envs
        calls = self.validate_actions(actions)
        if self.autoreset_mode == AutoresetMode.DISABLED and self._ended.any():
            raise ResetNeeded(
                f"{self.env_name}: sub-envs {self._ended.nonzero()[0].tolist()} ended; reset "
                "them with reset(options={'reset_mask': ...}) (autoreset is disabled)")
        resetting = (self._ended.copy() if self.autoreset_mode == AutoresetMode.NEXT_STEP
                     else np.zeros(n, dtype=np.bool_))
        stepping = ~resetting
        cut = np.zeros(n, dtype=np.bool_)
        if self._budget is not None:
            calls, cut = self._budget.before_step(calls, stepping)
        run = stepping & ~cut
        idx = run.nonzero()[0]
        # NEXT_STEP with observe_all: start the resetting sub-envs' next episodes now (they
        # do not step), so that the step's one observation of every sub-env covers them
        begun = self.observe_all and self.autoreset_mode == AutoresetMode.NEXT_STEP
        if begun:
            self._begin(resetting.nonzero()[0], observe=False)
        rewards = np.zeros(n)
        terminated = np.zeros(n, dtype=np.bool_)
        info = VectorInfo(n)
        step_calls = calls.take(idx, axis=0)  # take: faster than calls[idx]
        codes = self._step_codes = (None if self._bits is None
                                    else self.action_codes(step_calls))
        cost, flops = self.price(idx, step_calls, codes)
        ended, success, quality = self._transition(idx, step_calls)
        self._turn[idx] += 1
        self._episode_cost[idx] += cost
        self._episode_flops[idx] += flops
        w = self.reward_weights
        # Eq. 1 term by term, as RewardWeights.__call__ evaluates it for one step
        n_calls = (step_calls.sum(axis=1, dtype=np.int64)
                   if codes is None or self._calls_by_code is None  # both or neither
                   else self._calls_by_code[codes])
        rewards[idx] = (w.alpha * success.astype(np.float64) + w.beta * quality
                        - w.lam * cost - w.gamma * n_calls)
        terminated[idx] = ended
        if self.observe_all:
            self._obs[:] = self._observe(slice(None))
        else:
            self._obs[idx] = self._observe(idx)
        info.set("cost", idx, cost, np.float64, mask=run)
        info.set("flops", idx, flops, np.float64, mask=run)
        info.put("calls", calls * run[:, None], run.copy())  # int8, zero where not run
        # terminated is the mask of idx[ended] (zero where not run)
        self._final_info(info, idx[ended], success[ended], quality[ended], terminated)
        if cut.any():  # ended by the budget without stepping: nothing spent
            info.set("cost", cut, 0.0, np.float64)
            info.set("flops", cut, 0.0, np.float64)
            info.set("calls", cut, np.zeros((1, self.n_agents), np.int8), np.int8)
            self._final_info(info, cut.nonzero()[0], np.zeros(cut.sum(), np.bool_),
                             np.zeros(cut.sum()))
        if self._budget is not None:
            self._budget.after_step(info, stepping, cut)
        done = terminated | cut
        return self._autoreset(resetting, done, rewards, terminated, cut, info, begun)

    def _final_info(self, info: VectorInfo, idx: np.ndarray, success: np.ndarray,
                    quality: np.ndarray, mask: np.ndarray | None = None) -> None:
        """The last step's keys (core.py's ``_final_info``) for the sub-envs ``idx``.

        ``mask``: ``idx`` as a boolean mask, when the caller has it (else built here).
        """
        if len(idx) == 0:
            return
        if mask is None:
            mask = np.zeros(self.num_envs, dtype=np.bool_)
            mask[idx] = True
        info.set("success", idx, success, np.bool_, mask=mask)
        info.set("is_success", idx, success, np.bool_, mask=mask)
        info.set("quality", idx, quality, np.float64, mask=mask)
        info.set("episode_cost", idx, self._episode_cost[idx], np.float64, mask=mask)
        info.set("episode_flops", idx, self._episode_flops[idx], np.float64, mask=mask)

    def _autoreset(self, resetting: np.ndarray, done: np.ndarray, rewards: np.ndarray,
                   terminated: np.ndarray, truncated: np.ndarray, info: VectorInfo,
                   begun: bool = False,
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Reset whom ``autoreset_mode`` says (unless ``begun`` already), return the 5-tuple."""
        extra: dict[str, Any] = {}
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            if not begun:
                self._begin(resetting.nonzero()[0])
            self._ended = done
        elif self.autoreset_mode == AutoresetMode.SAME_STEP and done.any():
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in done.nonzero()[0].tolist():
                final_obs[i] = self._obs[i].copy()
            extra = {"final_obs": final_obs, "_final_obs": done.copy(),
                     "final_info": info.subset(done), "_final_info": done.copy()}
            info.drop(done)  # the reset's (empty) info replaces the step's, as in SyncVectorEnv
            self._begin(done.nonzero()[0])
        else:
            self._ended = done
        out = info.as_dict()
        out.update(extra)
        return self._obs.copy(), rewards, terminated, truncated.copy(), out

    def attach_budget(self, budget: Any) -> None:
        """Let a :class:`~cost_envs.vector.budget.VectorHardBudget` filter each step.

        ``budget.before_step(calls, stepping)`` returns the calls to run and the sub-envs
        to cut short; ``budget.after_step(info, stepping, cut)`` adds its info keys before
        any autoreset; ``budget.on_reset(idx)`` hears of every sub-env reset.

        Raises:
            ValueError: If a budget is already attached.
        """
        if self._budget is not None:
            raise ValueError(f"{self.env_name}: a budget is already attached; expected one")
        self._budget = budget

    def close_extras(self, **kwargs: Any) -> None:
        """Release the task queues."""
        self.blocks = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_name}, num_envs={self.num_envs})"
