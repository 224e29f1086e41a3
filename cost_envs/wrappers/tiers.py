"""Budget tiers: CORL's per-query budget, shown to the policy and gating its reward."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol, SupportsFloat, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from cost_envs.config import number
from cost_envs.wrappers.budget import HardBudget
from cost_envs.wrappers.chain import find_wrapper

TIERS = ("low", "medium", "high")
REWARD_MODES = ("gated", "soft")


class _Spend(Protocol):
    """What :class:`BudgetTier` reads of ``env.unwrapped`` (checked at construction)."""

    @property
    def episode_cost(self) -> float: ...


class BudgetTier(gym.Wrapper[np.ndarray, Any, np.ndarray, Any], gym.utils.RecordConstructorArgs):
    """A per-query budget tier (low / medium / high), observed and gating the reward.

    CORL trains one controller for several budget levels: each query comes with a tier,
    the tier is part of the observation, and the reward is the task performance gated by
    the tier's budget. This wrapper does exactly that on any cost-envs environment.

    **Tier.** At each ``reset`` the tier is drawn uniformly (or with ``probabilities``)
    from the wrapper's own generator, seeded by ``reset(seed=...)``, so the env's task
    stream is the same with or without the wrapper. ``reset(options={"tier": "low"})``
    fixes it for that episode, and ``tier="low"`` at construction for every episode;
    other options (``"task"``) go to the env.

    **Observation.** The env's observation followed by the tier's one-hot (in ``TIERS``
    order) and the remaining budget fraction ``max(0, 1 - spent / budget)``: 0 once the
    query is over budget. ``Box`` bounds are the env's, extended with ``[0, 1]``.

    **Reward.** Zero on every step but the last. On the last step, with ``S`` the task
    performance (1 for success, else 0) and ``C`` the episode's cost:

    * ``reward="gated"`` (CORL, default): ``S`` if ``C <= budget`` else 0;
    * ``reward="soft"``: ``S - penalty * max(0, C - budget) / budget``, a documented
      alternative that keeps a gradient on how far over budget a query went.

    The env's own reward is discarded. Going over budget never ends the episode (the
    reward says it was wasted). To forbid it, put :class:`HardBudget` underneath: this
    wrapper then hands it each episode's tier budget with :meth:`HardBudget.set_budget`
    before every reset, so the hard cap follows the tier. (Put it beneath, not above: a
    ``HardBudget`` above would cut episodes short without this wrapper seeing the last
    step.) The spend is the env's own ledger (``env.unwrapped.episode_cost``).

    ``info`` also holds ``tier`` and ``budget`` at every step, ``budget_remaining``
    after each step and ``within_budget`` on the last one.

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> import cost_envs
        >>> from cost_envs.wrappers import BudgetTier
        >>> env = BudgetTier(gym.make("cost_envs/ExpertRouting-v0"))
        >>> obs, info = env.reset(seed=0, options={"tier": "high"})
        >>> info["tier"], obs[-4:-1].tolist(), float(obs[-1])
        ('high', [0.0, 0.0, 1.0], 1.0)
        >>> _, reward, terminated, _, info = env.step(np.zeros(3, dtype=np.int8))
        >>> terminated, reward == float(info["success"] and info["within_budget"])
        (True, True)

    Args:
        env: A cost-envs environment (possibly wrapped) with a ``Box`` observation.
        budgets: Budget per tier (finite, > 0, increasing from low to high); default the
            env's ``tier_budgets``.
        tier: A tier for every episode, or ``None`` to draw one per episode.
        probabilities: Chance of each tier when drawn (default uniform).
        reward: ``"gated"`` or ``"soft"``.
        penalty: Weight of the relative overspend under ``reward="soft"`` (finite, >= 0).

    Raises:
        ValueError: If an argument is invalid, naming it and what was expected.
    """

    def __init__(
        self,
        env: gym.Env[np.ndarray, Any],
        budgets: Mapping[str, float] | None = None,
        tier: str | None = None,
        probabilities: Mapping[str, float] | None = None,
        reward: str = "gated",
        penalty: float = 1.0,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, budgets=budgets, tier=tier, probabilities=probabilities, reward=reward,
            penalty=penalty)
        gym.Wrapper.__init__(self, env)
        if budgets is None:
            budgets = getattr(env.unwrapped, "tier_budgets", None)
            if budgets is None:
                raise ValueError(f"BudgetTier: {type(env.unwrapped).__name__} has no default "
                                 f"tier_budgets; pass budgets={{tier: money}} for {list(TIERS)}")
        self.budgets = _check_budgets(budgets)
        if tier is not None and tier not in TIERS:
            raise ValueError(f"BudgetTier: tier: expected None or one of {list(TIERS)}, "
                             f"got {tier!r}")
        self.fixed_tier = tier
        self.probabilities = _check_probabilities(probabilities)
        if reward not in REWARD_MODES:
            raise ValueError(f"BudgetTier: reward: expected one of {list(REWARD_MODES)}, "
                             f"got {reward!r}")
        number(penalty, "penalty", minimum=0, where="BudgetTier")
        self.reward_mode = reward
        self.penalty = float(penalty)
        space = env.observation_space
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"BudgetTier: expected a 1-D Box observation space, got {space}")
        extra = len(TIERS) + 1
        box = spaces.Box(
            np.concatenate([space.low, np.zeros(extra)]).astype(space.dtype),
            np.concatenate([space.high, np.ones(extra)]).astype(space.dtype),
            dtype=space.dtype,
        )
        self.observation_space = box
        self._size = box.shape[0]
        self._dtype = space.dtype
        self._hard_budget = find_wrapper(env, HardBudget)
        ledger = env.unwrapped
        if not hasattr(ledger, "episode_cost"):
            raise ValueError(f"BudgetTier: expected a cost-envs environment (with an "
                             f"episode_cost ledger), got {type(ledger).__name__}")
        self._ledger = cast(_Spend, ledger)  # its attribute was checked just above
        self._rng = np.random.default_rng()
        self._tier = TIERS[0] if tier is None else tier
        self._needs_reset = True

    @property
    def added_observation_layout(self) -> dict[str, slice]:
        """Where the appended slots sit: ``tier`` (one-hot, ``TIERS`` order), ``budget_left``."""
        size = self._size
        return {"tier": slice(size - len(TIERS) - 1, size - 1),
                "budget_left": slice(size - 1, size)}

    @property
    def tier(self) -> str:
        """The current episode's tier."""
        return self._tier

    @property
    def budget(self) -> float:
        """The current episode's budget."""
        return self.budgets[self._tier]

    @property
    def _spent(self) -> float:
        """The episode's spend so far: the env's own ledger."""
        return float(self._ledger.episode_cost)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset the env and pick the episode's tier.

        Args:
            seed: Seeds the env and, independently, the tier draws.
            options: ``{"tier": name}`` fixes this episode's tier; the rest go to the env.

        Returns:
            The extended observation and the env's info plus ``tier`` and ``budget``.
        """
        options = dict(options or {})
        forced = options.pop("tier", None)
        if forced is not None and forced not in TIERS:
            raise ValueError(f"BudgetTier: options['tier']: expected one of {list(TIERS)}, "
                             f"got {forced!r}")
        if seed is not None:
            # Its own stream (a child of the seed): the env's np_random is left alone, so
            # the env meets the same tasks with or without this wrapper.
            self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7469]))
        if forced is not None:
            self._tier = forced
        elif self.fixed_tier is not None:
            self._tier = self.fixed_tier
        else:
            self._tier = TIERS[int(self._rng.choice(len(TIERS), p=self.probabilities))]
        if self._hard_budget is not None:
            self._hard_budget.set_budget(self.budget)  # the hard cap beneath follows the tier
        obs, info = self.env.reset(seed=seed, options=options or None)
        self._needs_reset = False
        info = {**info, "tier": self._tier, "budget": self.budget}
        return self._extend(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env, track the spend and pay the gated (or soft) reward at the end."""
        if self._needs_reset:
            raise ResetNeeded("BudgetTier: call reset() before step() (the episode has not "
                              "started or has ended)")
        obs, _, terminated, truncated, info = self.env.step(action)
        budget = self.budget
        info["tier"] = self._tier
        info["budget"] = budget
        info["budget_remaining"] = budget - self._spent
        reward = 0.0
        if terminated or truncated:
            self._needs_reset = True
            within = self._spent <= budget
            info["within_budget"] = within
            performance = float(info.get("success", False))
            if self.reward_mode == "gated":
                reward = performance if within else 0.0
            else:
                reward = performance - self.penalty * max(0.0, self._spent - budget) / budget
        return self._extend(obs), reward, terminated, truncated, info

    def _extend(self, obs: np.ndarray) -> np.ndarray:
        extra = np.zeros(len(TIERS) + 1, dtype=self._dtype)
        extra[TIERS.index(self._tier)] = 1.0
        extra[-1] = max(0.0, 1.0 - self._spent / self.budget)
        return np.concatenate([np.asarray(obs, dtype=self._dtype), extra])


def _check_budgets(budgets: Mapping[str, float]) -> dict[str, float]:
    if not isinstance(budgets, Mapping) or set(budgets) != set(TIERS):
        got = sorted(map(repr, budgets)) if isinstance(budgets, Mapping) else budgets
        raise ValueError(f"BudgetTier: budgets: expected a mapping with exactly the keys "
                         f"{list(TIERS)}, got {got!r}")
    for name in TIERS:
        number(budgets[name], f"budgets[{name!r}]", minimum=0, inclusive=False,
               where="BudgetTier")
    values = [float(budgets[name]) for name in TIERS]
    if not values[0] < values[1] < values[2]:
        raise ValueError(f"BudgetTier: budgets: expected low < medium < high, got "
                         f"{dict(zip(TIERS, values, strict=True))}")
    return dict(zip(TIERS, values, strict=True))


def _check_probabilities(probabilities: Mapping[str, float] | None) -> np.ndarray:
    if probabilities is None:
        return np.full(len(TIERS), 1.0 / len(TIERS))
    if not isinstance(probabilities, Mapping) or not set(probabilities) <= set(TIERS):
        raise ValueError(f"BudgetTier: probabilities: expected a mapping over {list(TIERS)}, "
                         f"got {probabilities!r}")
    values = []
    for name in TIERS:
        values.append(number(probabilities.get(name, 0.0), f"probabilities[{name!r}]",
                             minimum=0, where="BudgetTier"))
    total = sum(values)
    if not math.isclose(total, 1.0, rel_tol=1e-9, abs_tol=1e-9):
        raise ValueError(f"BudgetTier: probabilities: expected values summing to 1, got {total}")
    return np.array(values) / total
