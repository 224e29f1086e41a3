"""AgenticRouting's planner: exact dynamic programming over (turn, subgoal, recovery, spend).

On AgenticRouting-v0 the luck of a turn (``u_t``, which decides whether the step is
cleared, and ``w_t``, whether a failure is harmful) is drawn independently for each turn,
and what a turn can do depends only on the subgoal reached, the recovery steps pending,
the model run and the money spent so far; the count of consecutive failures is observed
but changes no outcome. The money spent after ``t`` turns with ``n`` large steps is
``t c_small + n (c_large - c_small)`` (a task's prices are fixed), so
``(turn, subgoals done, recovery pending, large steps so far)`` is a sufficient state, and
backward induction over it, vectorised over all but the turn, gives the policy of the
highest expected return exactly. A per-episode budget (``HardBudget`` in the env's
wrapper chain) enters through which model each state can afford.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from agents.planning.common import TaskPlanner
from cost_envs.envs.agentic_profiles import MAX_HORIZON, MAX_RECOVERY
from cost_envs.envs.agentic_routing import (
    LARGE_CURVE,
    RECOVERY_DIFFICULTY,
    SMALL_CURVE,
    AgenticRoutingEnv,
    AgenticTask,
    success_probability,
)
from cost_envs.wrappers import HardBudget
from cost_envs.wrappers.chain import find_wrapper

#: The models, in the order of the plan's value tables (action bit 0 = small, 1 = large).
MODELS = ("small", "large")


@dataclass(frozen=True)
class AgenticPlan:
    """The dynamic-programming solution of one task's parameters under one budget.

    Attributes:
        values: ``values[t, j, r, n]``, the expected return (Eq. 1, the env's weights)
            from turn ``t`` with ``j`` subgoals done, ``r`` recovery steps pending and
            ``n`` large steps run so far, under the optimal policy.
        large: ``large[t, j, r, n]``, True where the optimal action is the large model
            (ties go to the small one, the cheaper).
        small_cost: Money of a small step on this task (``env.price([])``).
        large_cost: Money of a large step (``env.price([0])``).
    """

    values: np.ndarray
    large: np.ndarray
    small_cost: float
    large_cost: float

    @property
    def expected_return(self) -> float:
        """The expected return of an episode from its start."""
        return float(self.values[0, 0, 0, 0])


def _spent(turns: int, n_large: np.ndarray, small: float, large: float) -> np.ndarray:
    """Money spent after ``turns`` turns of which ``n_large`` ran the large model."""
    return (turns - n_large) * small + n_large * large


def plan_agentic(env: AgenticRoutingEnv, task: AgenticTask, small_cost: float,
                 large_cost: float, budget: float = np.inf, truncate: bool = False
                 ) -> AgenticPlan:
    """Exact backward induction for ``task``'s parameters on ``env``'s model and weights.

    Reads ``task.difficulty`` and ``task.horizon``, the env's profile (harm
    probabilities, recovery steps), reward weights and the models' curves; never
    ``task.luck`` or ``task.harm_luck``.

    Args:
        env: The env (its profile and reward weights).
        task: The task to plan.
        small_cost: Money of a small step on this task.
        large_cost: Money of a large step on this task.
        budget: Money an episode may spend (``HardBudget``'s), ``inf`` for none.
        truncate: ``HardBudget``'s ``on_exceed="truncate"``: an unaffordable step ends the
            episode; otherwise (``"mask"``) an unaffordable large step runs the small
            model, and the episode is cut short only when a small step is unaffordable.
    """
    prof, weights = env.profile, env.reward_weights
    k, horizon, rec_steps = task.n_subgoals, task.horizon, prof.recovery_steps
    p_clear = np.stack([success_probability(task.difficulty, curve)
                        for curve in (SMALL_CURVE, LARGE_CURVE)])  # (2, k)
    p_rec = [float(success_probability(RECOVERY_DIFFICULTY, c)) for c in (SMALL_CURVE,
                                                                          LARGE_CURVE)]
    harm = (prof.harm_small, prof.harm_large)
    price = (small_cost, large_cost)
    step_reward = [-weights.lam * price[a] - weights.gamma * a for a in (0, 1)]
    win = weights.alpha + weights.beta * 10.0
    n_large = np.arange(horizon + 2)
    # values[t] over (subgoals done j < k, recovery pending r, large steps n); at the
    # horizon the episode has failed with quality 10 j / k, paid on its last step.
    values = np.zeros((horizon + 1, k, rec_steps + 1, horizon + 2))
    values[horizon] = (weights.beta * 10.0 * np.arange(k) / k)[:, None, None]
    large = np.zeros((horizon, k, rec_steps + 1, horizon + 2), dtype=bool)
    for t in reversed(range(horizon)):
        after = np.concatenate([values[t + 1], values[t + 1][:, :, -1:]], axis=2)
        q = np.empty((2, k, rec_steps + 1, horizon + 2))
        for a in (0, 1):
            nxt = after[:, :, a:a + horizon + 2]  # n grows by one on a large step
            cleared = np.append(nxt[1:, 0], np.full((1, horizon + 2), win), axis=0)
            q[a, :, 0] = (p_clear[a][:, None] * cleared + (1.0 - p_clear[a][:, None]) * (
                harm[a] * nxt[:, rec_steps] + (1.0 - harm[a]) * nxt[:, 0]))
            q[a, :, 1:] = p_rec[a] * nxt[:, :-1] + (1.0 - p_rec[a]) * nxt[:, 1:]
            q[a] += step_reward[a]
        spent = _spent(t, n_large, small_cost, large_cost)
        fits = [spent + price[a] <= budget for a in (0, 1)]  # (n,) each
        if truncate:
            q[0][..., ~fits[0]] = 0.0  # cut short: reward 0, the episode ends
            q[1][..., ~fits[1]] = 0.0
        else:
            q[1][..., ~fits[1]] = q[0][..., ~fits[1]]  # masked down to the small model
            q[:, ..., ~fits[0]] = 0.0
        large[t] = q[1] > q[0]
        values[t] = np.maximum(q[0], q[1])
    return AgenticPlan(values, large, small_cost, large_cost)


class AgenticPlanner(TaskPlanner[AgenticPlan]):
    """Privileged: the best router for a player who knows the task but not its luck.

    **What it knows.** The env's generative model (its docstring's, in code: per-turn
    clearing chances ``sigmoid(a - b d)`` of each model, the harm probabilities, the
    recovery steps and their difficulty), the reward weights, the current task's hidden
    parameters (each subgoal's true difficulty ``task.difficulty``, the horizon, and the
    per-step prices its token counts give, read from the env's ledger prices), and the
    budget of a ``HardBudget`` in the wrapper chain it was built on (read at every
    episode, so ``set_budget`` and ``BudgetTier`` are followed) and its ``on_exceed`` mode.
    It reads the turn, the subgoals done and the recovery pending from the observation,
    and the money spent so far from the env's ledger (``episode_cost``, which every
    policy sees summed in ``info["cost"]``).

    **What it does not know.** The task's luck: the draws ``u_t`` that decide whether the
    step at turn ``t`` is cleared and ``w_t`` that decide whether a failure is harmful. It
    never reads ``AgenticTask.luck`` or ``harm_luck``; changing them changes its actions
    only through the outcomes it observes. It does not need the noisy difficulty signal or
    the reasoning tag: it knows the true difficulties they are noisy copies of.

    **What it does.** At the first step of each task it solves :func:`plan_agentic`, the
    exact backward induction over (turn, subgoals done, recovery pending, large steps so
    far), and then plays the plan: the policy that maximises the expected episode return
    under the env's reward weights (Eq. 1, the score of BoPO's ``gap_closed`` block; BoPO
    and PPO themselves train on their own cost-weighted rewards). The only differences
    from the env are the ``2**-53`` granularity of its uniforms and the rounding of the
    running sum of prices the budget is checked against (the plan uses ``(t - n) c_small
    + n c_large``, the ledger adds the steps one by one): a budget within a rounding step
    of a reachable spend may be judged differently.

    On BoPO's 400 evaluation tasks per profile (task seed 0, under BoPO's per-task budget)
    its mean return is 1.294 / 1.019 / 0.525 (ALFWorld / SciWorld / AppWorld), above the
    better fitted rule's 1.276 / 0.962 / 0.375 (paired 95% intervals of the difference
    [+0.002, +0.038], [+0.030, +0.084], [+0.094, +0.203]) and below the hindsight
    oracle's 1.402 / 1.239 / 0.965; its mean expected return over those tasks, 1.2875 /
    1.0099 / 0.4873, matches the mean over 20 fresh draws of each task's luck, 1.2912 /
    1.0130 / 0.4935. Solving a task takes about 2 ms.

    Args:
        env: An AgenticRouting env (``cost_envs/AgenticRouting-v0``, any profile), possibly
            wrapped (under ``HardBudget`` the plan respects its budget).
    """

    env: AgenticRoutingEnv  # checked by TaskPlanner.__init__
    family = (AgenticRoutingEnv, "AgenticRouting's generative model (luck independent per "
              "turn)", "cost_envs/AgenticRouting-v0")

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._budget = find_wrapper(env, HardBudget)
        layout = self.env.observation_layout
        self._turns_left = layout["turns_left"].start
        self._progress = layout["progress"].start
        self._recovering = layout["recovering"].start

    def _limits(self) -> tuple[float, bool]:
        if self._budget is None:
            return np.inf, False
        return self._budget.budget, self._budget.on_exceed == "truncate"

    def _plan_key(self, task: AgenticTask) -> tuple[Any, ...]:
        # solved once per task, prices and budget
        return (task.difficulty.tobytes(), task.horizon, *self.env.step_prices(),
                *self._limits())

    def _solve(self, task: AgenticTask) -> AgenticPlan:
        return plan_agentic(self.env, task, *self.env.step_prices(), *self._limits())

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The plan's action at the observed state and the ledger's spend."""
        plan = self.plan()
        horizon, k = plan.large.shape[:2]
        turn = horizon - round(float(observation[self._turns_left]) * MAX_HORIZON)
        done = round(float(observation[self._progress]) * k)
        pending = round(float(observation[self._recovering]) * MAX_RECOVERY)
        extra = plan.large_cost - plan.small_cost
        spent = self.env.episode_cost - turn * plan.small_cost
        n_large = round(spent / extra) if extra > 0 else 0
        if not (0 <= turn < horizon and 0 <= done < k and 0 <= n_large <= turn
                and pending < plan.large.shape[2]):
            raise ValueError(f"AgenticPlanner: the observation (turn {turn}, {done} subgoals "
                             f"done, {pending} recovery pending) is not a decision point of "
                             "the env's current task")
        return np.array([plan.large[turn, done, pending, n_large]], dtype=np.int8)

