"""Per-episode money budgets, enforced as a wrapper like Gymnasium's ``TimeLimit``."""

from __future__ import annotations

import copy
from typing import Any, Protocol, SupportsFloat, cast

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded

from cost_envs.config import number
from cost_envs.wrappers.episode import EpisodeWrapper

ON_EXCEED_MODES = ("mask", "truncate")


class _PricedEnv(Protocol):
    """What :class:`HardBudget` uses of ``env.unwrapped`` (checked by name at construction)."""

    @property
    def call_costs(self) -> np.ndarray: ...
    @property
    def step_cost(self) -> float: ...
    @property
    def episode_cost(self) -> float: ...
    def validate_action(self, action: Any) -> np.ndarray: ...
    def price(self, called: list[int]) -> tuple[float, float]: ...
    def truncate(self) -> dict[str, Any]: ...


class HardBudget(EpisodeWrapper, gym.utils.RecordConstructorArgs):
    """Caps an episode's spend: the env's ledger ``episode_cost`` never exceeds ``budget``.

    Agent ``i`` costs ``env.unwrapped.call_costs[i]`` per call (the pool's price, or the
    current task's where calls are priced by tokens), plus ``env.unwrapped.step_cost`` per
    step whatever the action. Before forwarding an action the wrapper prices it with the
    env's own ``price`` and checks that ``spent + cost(action) <= budget``, where ``spent``
    is the env's ledger (``env.unwrapped.episode_cost``, the one place an episode's spend
    is summed). When the check fails:

    * ``on_exceed="mask"`` (default): requested agents are dropped until the action is
      affordable. Scanning the requested agents in action-bit order, each is kept when
      it still fits the remaining budget together with those kept before it, and
      dropped otherwise (the result depends only on the requested agents' prices).
      ``info["calls"]`` from the inner env shows what actually ran. When
      nothing requested is affordable the budget is exhausted for this request and the
      episode is truncated as with ``"truncate"`` (forwarding the all-zero action instead
      would silently turn it into the env's "answer now" or "commit"), except on envs whose
      all-zero action is a cheaper way to go on (``zero_action_fallback``, e.g. the small
      model of AgenticRouting), which get it when it fits.

    * ``on_exceed="truncate"``: the episode ends as truncated *without* calling the inner
      env's ``step``, so nothing is spent. The step returns the last observation, reward
      ``0.0``, ``terminated=False``, ``truncated=True`` and an ``info`` with ``cost`` and
      ``flops`` ``0.0``, all-zero ``calls``, the final-step keys of
      ``env.unwrapped.truncate()`` (``success=False``, ``quality=0.0``, ``episode_cost``,
      ``episode_flops``) and ``budget_exceeded=True``. The episode then needs ``reset``.

    In both modes ``info["budget_remaining"]`` is set at every step and running out of
    budget never sets ``terminated``. :meth:`action_masks` gives the mask sb3-contrib's
    ``MaskablePPO`` expects for ``MultiBinary(m)``: ``2*m`` booleans, for agent ``i``
    ``[2i]`` (bit may be 0, always True) and ``[2i+1]`` (bit may be 1: agent ``i`` alone is
    affordable). Several individually affordable agents may still overspend together;
    the wrapper then masks or truncates as above.

    **Per-episode budgets.** :meth:`set_budget` changes the budget from the next
    ``reset`` on (the running episode keeps its own). It is the one way to change it:
    :class:`~cost_envs.wrappers.BudgetTier` stacked above calls it before every reset so
    that the hard cap follows each episode's tier.

    The wrapper must sit directly on the env whose ``pool`` prices the action (or on
    wrappers that do not change actions or costs). ``gym.make(id, budget=...,
    on_exceed=...)`` builds it there, inside the made env, so that wrappers stacked on top
    (SB3's ``Monitor`` in ``make_vec_env``, rl-zoo3's) see the episodes it cuts short;
    ``make_vec_env(..., wrapper_class=HardBudget)`` would put it above the ``Monitor``.

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> import cost_envs
        >>> from cost_envs.wrappers import HardBudget
        >>> env = HardBudget(gym.make("cost_envs/ToolBench-v0"), budget=0.01)
        >>> _ = env.reset(seed=0)
        >>> mask = env.action_masks()  # [bit i may be 0, bit i may be 1] for each tool
        >>> mask.shape, bool(mask[0::2].all())
        ((16,), True)
        >>> call_all = np.ones(8, dtype=np.int8)
        >>> _, _, terminated, truncated, info = env.step(call_all)  # unaffordable tools dropped
        >>> info["cost"] <= 0.01, truncated, info["budget_remaining"] >= 0
        (True, False, True)
        >>> env = HardBudget(gym.make("cost_envs/ToolBench-v0"), 0.0, on_exceed="truncate")
        >>> _ = env.reset(seed=0)
        >>> _, reward, terminated, truncated, info = env.step(call_all)
        >>> reward, terminated, truncated, info["cost"], info["budget_exceeded"]
        (0.0, False, True, 0.0, True)

    Args:
        env: The environment to wrap; ``env.unwrapped`` must provide ``call_costs``,
            ``step_cost``, ``validate_action``, ``price``, ``truncate`` and ``episode_cost`` (every
            ``OrchestrationEnv`` does).
        budget: Money an episode may spend, finite and ``>= 0``.
        on_exceed: ``"mask"`` or ``"truncate"``.

    Raises:
        ValueError: If ``budget`` or ``on_exceed`` is invalid.
        TypeError: If ``env.unwrapped`` lacks the orchestration-env interface.
    """

    def __init__(self, env: gym.Env[Any, Any], budget: float, on_exceed: str = "mask") -> None:
        check_budget_args(budget, on_exceed)
        gym.utils.RecordConstructorArgs.__init__(self, budget=budget, on_exceed=on_exceed)
        gym.Wrapper.__init__(self, env)
        base = env.unwrapped
        missing = [
            name for name in ("call_costs", "step_cost", "validate_action", "price", "truncate",
                              "episode_cost")
            if not hasattr(base, name)
        ]
        if missing:
            raise TypeError(
                f"HardBudget: expected an env whose unwrapped env is an OrchestrationEnv "
                "(with call_costs, step_cost, validate_action, price, truncate, episode_cost), "
                "got "
                f"{type(base).__name__} "
                f"missing {missing}"
            )
        self._budget = float(budget)
        self._next_budget = self._budget
        self._on_exceed = on_exceed
        self._truncate = on_exceed == "truncate"
        self._base = cast(_PricedEnv, base)  # its attributes were checked just above
        self._fallback = bool(getattr(base, "zero_action_fallback", False))
        self._read_prices()
        self._validate = self._base.validate_action
        self._price = self._base.price
        self._last_obs: Any = None
        self._needs_reset = True

    @property
    def budget(self) -> float:
        """The current episode's budget."""
        return self._budget

    def set_budget(self, budget: float) -> None:
        """Use ``budget`` for every episode from the next ``reset`` on.

        Args:
            budget: Money an episode may spend, finite and ``>= 0``.

        Raises:
            ValueError: If ``budget`` is not a finite number >= 0.
        """
        _check_budget(budget, "set_budget")
        self._next_budget = float(budget)

    @property
    def _spent(self) -> float:
        """The episode's spend so far: the env's own ledger."""
        return self._base.episode_cost

    @property
    def on_exceed(self) -> str:
        """What happens to an action that would overspend: ``"mask"`` or ``"truncate"``."""
        return self._on_exceed

    @property
    def remaining_budget(self) -> float:
        """Money left in the current episode (``budget`` minus the env's ``episode_cost``)."""
        return self._budget - self._spent

    def action_masks(self) -> np.ndarray:
        """``MaskablePPO`` mask for ``MultiBinary(m)``: ``[can be 0, can be 1]`` per agent.

        Returns:
            A fresh boolean array of shape ``(2*m,)``: index ``2i`` is always True, index
            ``2i+1`` is True iff agent ``i`` alone fits the remaining budget.
        """
        mask = np.ones(2 * len(self._cost_list), dtype=bool)
        # Same comparison as step() (spent + cost <= budget), not cost <= remaining: the
        # two can differ by one rounding step and the mask must agree with what step() does.
        mask[1::2] = [self._spent + (self._step_cost + c) <= self._budget
                      for c in self._cost_list]
        return mask

    def _read_prices(self) -> None:
        """This episode's prices (they may depend on the task, so read at every reset)."""
        self._cost_list: list[float] = self._base.call_costs.tolist()
        self._step_cost = float(self._base.step_cost)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Check the action against the remaining budget, then mask, truncate or forward it.

        Args:
            action: An element of the env's ``MultiBinary(m)`` action space.

        Returns:
            The usual 5-tuple; ``info`` also holds ``budget_remaining``.

        Raises:
            ResetNeeded: If the episode has not started or has ended.
            ValueError: If ``action`` is not a valid action of the env.
        """
        if self._needs_reset:
            raise ResetNeeded(
                "HardBudget: call reset() before step() (the episode has not started or has "
                "ended)"
            )
        calls = self._validate(action)
        # Priced by the env itself, so spent + cost is bit for bit the running total the
        # env will report and the check is exact.
        cost, _ = self._price(calls.nonzero()[0].tolist())
        if self._spent + cost > self._budget:
            if self._truncate:
                return self._cut_short()
            action = self._affordable(calls)
            fallback_fits = self._fallback and self._spent + self._step_cost <= self._budget
            if not action.any() and not fallback_fits:
                return self._cut_short()
        obs, reward, terminated, truncated, info = self.env.step(action)
        # A copy: the caller gets obs itself and may write into it before a cut-short step.
        self._last_obs = _copy(obs)
        self._needs_reset = terminated or truncated
        info["budget_remaining"] = self._budget - self._spent
        return obs, reward, terminated, truncated, info

    def _episode_started(self, obs: Any) -> None:
        # the env's reset has reset the ledger the budget is checked against
        self._budget = self._next_budget
        self._read_prices()
        # A copy: the caller gets obs itself and may write into it before a cut-short step.
        self._last_obs = _copy(obs)
        self._needs_reset = False

    def _affordable(self, calls: np.ndarray) -> np.ndarray:
        """The requested agents, in bit order, that still fit with those kept before them."""
        kept = np.zeros_like(calls)
        total = self._step_cost
        for i in calls.nonzero()[0].tolist():
            # total + cost accumulates in index order exactly as the env's price() will
            # add up the kept agents, so spent + price <= budget holds to the last bit
            if self._spent + (total + self._cost_list[i]) <= self._budget:
                total += self._cost_list[i]
                kept[i] = 1
        return kept

    def _cut_short(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """End the episode as truncated without stepping the env (nothing is spent)."""
        self._needs_reset = True
        info: dict[str, Any] = {
            "cost": 0.0,
            "flops": 0.0,
            "calls": np.zeros(len(self._cost_list), dtype=np.int8),
        }
        info.update(self._base.truncate())
        info["budget_exceeded"] = True
        info["budget_remaining"] = self._budget - self._spent
        # A copy again: each returned observation is a fresh object, as the env's are.
        return _copy(self._last_obs), 0.0, False, True, info


def _copy(obs: Any) -> Any:
    """A fresh copy of an observation: an array's own copy (fast), else a deep copy."""
    return obs.copy() if isinstance(obs, np.ndarray) else copy.deepcopy(obs)


def _check_budget(budget: Any, what: str) -> None:
    number(budget, what, minimum=0, where="HardBudget")


def check_budget_args(budget: Any, on_exceed: Any) -> None:
    """Check :class:`HardBudget`'s arguments without building it (``gym.make`` checks early).

    Raises:
        ValueError: ``budget`` is not a finite number >= 0, or ``on_exceed`` is not one of
            :data:`ON_EXCEED_MODES`; the message names the bad value.
    """
    _check_budget(budget, "budget")
    if on_exceed not in ON_EXCEED_MODES:
        raise ValueError(
            f"HardBudget: on_exceed: expected one of {list(ON_EXCEED_MODES)}, got {on_exceed!r}"
        )
