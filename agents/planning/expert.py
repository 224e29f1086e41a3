"""ExpertRouting's planner: exact expectimax over the controller's beliefs, blind to the luck.

On ExpertRouting-v0 and -v1 a question's outcome hangs on luck the controller never sees:
whether its own answer is right, and which answer each consulted expert gives in each
round (v1: which wrong answer, when wrong). What it sees after each round is the vote's
summary in the observation. Given the question's parameters, the answers are independent
across models and rounds, so the posterior over the *current* answers (the controller's
and each consulted expert's latest) is a sufficient statistic of what was seen, and it
has few states: ``(K + 2) (K + 3) ** m`` with ``K`` distractors (v0: ``K = 0``; 54 states
with 3 experts, at most 1080 in v1). An expectimax over those beliefs, every action and
every observation it can produce, over the few rounds left, is the exact optimum for a
player who knows the parameters but not the luck. :class:`AnswerSpace` holds the states
and what each shows; :class:`ExpertPlanner` plans and plays.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from agents.planning.common import Planner
from cost_envs.envs.expert_routing import ExpertRoutingEnv
from cost_envs.envs.expert_routing_v1 import ExpertRoutingV1Env
from cost_envs.wrappers import TIERS, BudgetTier
from cost_envs.wrappers.chain import find_wrapper

#: Largest number of answer states the planner enumerates (3 experts and 3 distractors
#: need 1080; 5 experts and 3 distractors would need 38880).
MAX_STATES = 20_000
#: Action values closer than this share of the belief's mass are ties, broken by the lower
#: expected cost (float noise is ~1e-16; a real difference this small changes nothing).
TIE = 1e-9


@dataclass(frozen=True)
class AnswerSpace:
    """Every joint state of the current answers, and what the observation shows of each.

    A state is the controller's answer code ``c`` in ``0..K+1`` and each expert's latest
    answer ``s_i`` in ``-1..K+1`` (-1: not consulted), with codes 0 right, ``1..K`` the
    question's distractors and ``K + 1`` a wrong answer of the source's own (which matches
    no other source's). States are indexed in C order over the tensor of shape
    ``(K + 2, K + 3, ..., K + 3)`` whose expert axes hold ``s_i + 1``.

    Attributes:
        shape: The tensor shape.
        right: ``(L,)`` 1.0 where the vote's leading answer is right.
        signature: ``(L,)`` index of the observation the state shows (its row of
            ``observed``).
        observed: ``(S, 2m + 2)`` float32: the observation's ``consulted``,
            ``agrees_with_leading``, ``controller_leading`` and ``support`` slots.
        order: ``(L,)`` states sorted by signature; ``starts``: where each signature's
            run begins in it (for ``np.add.reduceat``).
        index: The bytes of each row of ``observed`` -> its signature.
    """

    shape: tuple[int, ...]
    right: np.ndarray
    signature: np.ndarray
    observed: np.ndarray
    order: np.ndarray
    starts: np.ndarray
    index: dict[bytes, int]

    @property
    def size(self) -> int:
        """Number of states."""
        return len(self.right)

    def lookup(self, slots: np.ndarray) -> int:
        """The signature of observed slots (float32), or -1 if no state shows them."""
        return self.index.get(np.asarray(slots, np.float32).tobytes(), -1)

    def by_signature(self, values: np.ndarray, axis: int = 1) -> np.ndarray:
        """Sums of ``values`` over each signature's states, states along ``axis``."""
        return np.add.reduceat(np.take(values, self.order, axis=axis), self.starts, axis=axis)


def vote(controller: int, experts: tuple[int, ...], distractors: int,
         controller_trust: float, trusts: tuple[float, ...]) -> tuple[bool, np.ndarray]:
    """The env's weighted vote on answer codes: (leading answer right, observed slots).

    Every answer pools the trust of its sources in source order (the controller, then the
    experts by index: the env's order, so the floats are the env's); the heaviest answer
    leads; ties go to the controller's answer, then to a wrong answer over the right
    one, then to the lower source index (v1's rule, which is v0's when no answer is a
    distractor). A code ``distractors + 1`` is its source's own wrong answer.
    """
    own: Any = ("own", -1) if controller == distractors + 1 else controller
    weights = {own: controller_trust}
    first = {own: -1}
    total = controller_trust
    answers: list[Any] = []
    for i, code in enumerate(experts):
        answer: Any = None if code < 0 else ("own", i) if code == distractors + 1 else code
        answers.append(answer)
        if answer is None:
            continue
        total += trusts[i]
        weights[answer] = weights.get(answer, 0.0) + trusts[i]
        first.setdefault(answer, i)
    lead = max(weights, key=lambda a: (weights[a], a == own, a != 0, -first[a]))
    m = len(experts)
    slots = np.zeros(2 * m + 2, dtype=np.float32)
    for i, answer in enumerate(answers):
        if answer is not None:
            slots[i] = 1.0
            slots[m + i] = float(answer == lead)
    slots[2 * m] = float(own == lead)
    slots[2 * m + 1] = weights[lead] / total
    return lead == 0, slots


@functools.lru_cache(maxsize=16)
def answer_space(m: int, distractors: int, controller_trust: float,
                 trusts: tuple[float, ...]) -> AnswerSpace:
    """The :class:`AnswerSpace` of ``m`` experts and ``distractors`` distractors (cached)."""
    codes = distractors + 2
    shape = (codes, *(codes + 1,) * m)
    right: list[float] = []
    rows: list[np.ndarray] = []
    keys: dict[bytes, int] = {}
    signature = []
    for state in itertools.product(range(codes), *(range(-1, codes),) * m):
        is_right, slots = vote(state[0], state[1:], distractors, controller_trust, trusts)
        right.append(float(is_right))
        key = slots.tobytes()
        if key not in keys:
            keys[key] = len(rows)
            rows.append(slots)
        signature.append(keys[key])
    signature_array = np.array(signature)
    order = np.argsort(signature_array, kind="stable")
    starts = np.searchsorted(signature_array[order], np.arange(len(rows)))
    observed = np.array(rows)
    observed.flags.writeable = False
    return AnswerSpace(shape, np.array(right), signature_array, observed, order, starts, keys)


@dataclass(frozen=True)
class Objective:
    """What the planner maximises: the reward of the env as it is wrapped.

    Under :class:`~cost_envs.wrappers.BudgetTier` (CORL) a right answer is worth 1, gated
    by the tier's budget (``reward="gated"``: 0 if the episode cost more) or less the soft
    penalty ``penalty * max(0, C - budget) / budget``. Without it, the env's Eq. 1:
    ``alpha + 10 beta`` for a right answer, ``lam`` per unit of money and ``gamma`` per call.
    Ties (within :data:`TIE`) go to the lower expected cost.
    """

    gain: float = 1.0
    budget: float = math.inf
    gated: bool = False
    soft_penalty: float = 0.0
    lam: float = 0.0
    gamma: float = 0.0

    def end(self, success: np.ndarray, mass: np.ndarray, total: Any) -> np.ndarray:
        """Value of ending with ``success`` right mass of ``mass`` at episode cost ``total``."""
        if self.gated:
            return self.gain * success * (total <= self.budget)
        if self.soft_penalty:
            over = np.maximum(0.0, total - self.budget) / self.budget
            return self.gain * success - self.soft_penalty * over * mass
        return self.gain * success


class ExpertPlanner(Planner):
    """Privileged: the best policy for a controller that knows the question but not its luck.

    **What it knows.** The env's generative model (its docstrings', in code: accuracy
    ``sigmoid(k (s - d))`` of each model, v1's distractors, the trusts and the weighted
    vote with its tie rules, which answers the observation shows), and the current
    question's parameters: its difficulty (so every model's accuracy), the price of every
    call and of the controller's round (which follow from the difficulty, the prompt's
    tokens and the models' token factors; read from the env's price of each action), and
    in v1 its attraction and distractor shares. It reads the round, what the vote shows
    and the tier from the observation, the tier's budget from the ``BudgetTier`` wrapper
    and the money spent from the env's ledger.

    **What it does not know.** The luck: ``controller_luck`` and ``luck`` (whether the
    controller and each consultation are right) and v1's ``controller_slip`` and
    ``slips`` (which wrong answer). It never reads them
    (:data:`ExpertTask.luck_fields <cost_envs.envs.expert_routing.ExpertTask>`); they reach
    it only through the observations.

    **What it does.** It keeps the posterior over the current answers (the controller's
    and each consulted expert's latest, :class:`AnswerSpace`) given every observation so
    far, and at each round solves, by expectimax over that belief, every joint action
    and every observation the action can produce, the rounds left. Answers are
    independent across models and rounds given the parameters, and a consultation
    replaces the expert's earlier answer in the vote, so the belief over current answers
    is a sufficient statistic and the policy is exactly optimal for what it knows (ties
    within :data:`TIE` of the belief's mass go to the cheaper action). The objective is
    the reward of the env as given (:class:`Objective`): CORL's accuracy within the tier's
    budget under ``BudgetTier``, Eq. 1 without it. Under a gated tier a consultation
    that cannot end within the budget is worth nothing and is not expanded.

    On CORL's evaluation queries (400 per profile and tier, task seed 0) its accuracy
    within budget is at or above the best fixed row of every one of the 24 (env, profile,
    tier) tables, by 0 to 0.075, and below the hindsight oracle's by 0 to 0.38 (the
    oracle sees which answers will be right). Mixed profile, low / medium / high tier:
    0.640 / 0.805 / 0.930 on v0 (best fixed row 0.588 / 0.787 / 0.900, oracle 0.685 /
    0.950 / 0.983) and 0.670 / 0.772 / 0.930 on v1 (0.610 / 0.752 / 0.910; 0.710 / 0.948 /
    0.985). It takes 2 ms per question on average (7 ms at most, v1's high tier).

    Args:
        env: ``cost_envs/ExpertRouting-v0`` or ``-v1`` (any experts, prices and rounds, at
            most :data:`MAX_STATES` answer states), possibly inside ``BudgetTier``; no
            other wrapper may change its observation.
    """

    env: ExpertRoutingEnv  # checked by __init__

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if type(self.env) not in (ExpertRoutingEnv, ExpertRoutingV1Env):
            raise ValueError(f"ExpertPlanner: needs ExpertRouting's generative model (answers "
                             f"independent per model and round, the weighted vote); it applies "
                             f"to cost_envs/ExpertRouting-v0 and -v1, not {self.env.env_name}")
        base = self.env
        self.m = base.n_agents
        self.rounds = base.max_rounds
        self._trusts = (float(base.controller.trust), tuple(float(e.trust) for e in base.experts))
        most = 3 if isinstance(base, ExpertRoutingV1Env) else 0
        states = (most + 2) * (most + 3) ** self.m
        if states > MAX_STATES:
            raise ValueError(f"ExpertPlanner: enumerates the answer states, at most "
                             f"{MAX_STATES}; {self.m} experts need {states}")
        self.tiers = find_wrapper(env, BudgetTier)
        self.objective = _objective(base, self.tiers)
        layout = base.observation_layout
        self._slots = np.r_[tuple(layout[k] for k in (
            "consulted", "agrees_with_leading", "controller_leading", "support"))]
        self._rounds_left = layout["rounds_left"].start
        self._tier_slot = None if self.tiers is None else self.tiers.added_observation_layout[
            "tier"]
        shape = env.observation_space.shape  # with the slots a wrapper adds
        if shape is None:
            raise ValueError(f"ExpertPlanner: expected an observation space with a shape, got "
                             f"{env.observation_space}")
        self._size = int(shape[0])
        self._episode: _Episode | None = None
        self._turn = -1
        self._belief = np.zeros(0)
        self._action = 0

    # ------------------------------------------------------------ public
    def expected(self, tier: str | None = None) -> tuple[float, float]:
        """(expected reward, expected cost) of the current question from its start.

        ``tier``: the budget tier to plan for (default the wrapper's current one); the
        reward is the :class:`Objective`'s, so under a gated tier the first value is the
        chance of a right answer within the tier's budget.
        """
        if self.env.task is None:
            raise ValueError("ExpertPlanner: the env has no question yet; reset it first")
        objective = self.objective if tier is None else _objective(self.env, self.tiers, tier)
        episode = _Episode(self.env, self._trusts, objective)
        values, costs, _ = episode.solve(0, 0.0, episode.start[None])
        return float(values[0]), float(costs[0])

    def act(self, observation: np.ndarray) -> np.ndarray:
        """The expectimax action at the observed round, given everything seen so far."""
        obs = np.asarray(observation)
        if obs.shape != (self._size,):
            raise ValueError(f"ExpertPlanner: expected an observation of {self._size} entries "
                             f"(the env it was built on), got shape {obs.shape}")
        turn = self.rounds - round(float(obs[self._rounds_left]) * self.rounds)
        if turn == 0:
            objective = self.objective
            if self._tier_slot is not None:
                tier = TIERS[int(np.argmax(obs[self._tier_slot]))]
                objective = _objective(self.env, self.tiers, tier)
            self._episode = _Episode(self.env, self._trusts, objective)
            belief = self._episode.start
        elif self._episode is not None and turn == self._turn + 1 and (
                self._episode.task is self.env.task):
            belief = self._episode.consult(self._belief[None], self._action)[0]
        else:
            raise ValueError(f"ExpertPlanner: round {turn} does not follow round {self._turn} "
                             "of the question it planned; it must see every step")
        episode = self._episode
        signature = episode.space.lookup(obs[self._slots])
        belief = np.where(episode.space.signature == signature, belief, 0.0)
        if not belief.sum() > 0:
            raise ValueError(f"ExpertPlanner: the observation at round {turn} is impossible "
                             "under the env's model and what was seen before")
        belief /= belief.sum()
        _, _, pick = episode.solve(turn, float(self.env.episode_cost), belief[None])
        self._turn, self._belief, self._action = turn, belief, int(pick[0])
        return episode.actions[self._action].copy()



def _objective(base: ExpertRoutingEnv, tiers: BudgetTier | None,
               tier: str | None = None) -> Objective:
    if tiers is None:
        w = base.reward_weights
        return Objective(gain=w.alpha + 10.0 * w.beta, lam=w.lam, gamma=w.gamma)
    budget = tiers.budgets[tier or tiers.tier]
    if tiers.reward_mode == "gated":
        return Objective(budget=budget, gated=True)
    return Objective(budget=budget, soft_penalty=tiers.penalty)


class _Episode:
    """One question's parameters, prices and answer laws, and the expectimax over them."""

    def __init__(self, env: ExpertRoutingEnv, trusts: tuple[float, tuple[float, ...]],
                 objective: Objective) -> None:
        task = env.task
        if task is None:
            raise ValueError("ExpertPlanner: the env has no task yet; reset it first")
        self.task = task
        shares = tuple(getattr(task, "distractor_shares", ()))
        attraction = float(getattr(task, "attraction", 0.0))
        k = len(shares)
        self.space = answer_space(env.n_agents, k, *trusts)
        self.objective = objective
        self.rounds = env.max_rounds
        d = task.difficulty

        def law(accuracy: float) -> np.ndarray:  # right, distractors 1..K, its own wrong
            wrong = 1.0 - accuracy
            return np.array([accuracy, *(wrong * attraction * p for p in shares),
                             wrong * (1.0 - attraction)])

        shape = self.space.shape
        self.laws = []  # expert i's law on its tensor axis (0: not consulted)
        for i, expert in enumerate(env.experts):
            axis = [1] * len(shape)
            axis[1 + i] = shape[1 + i]
            self.laws.append(np.r_[0.0, law(float(expert.accuracy(d)))].reshape(axis))
        start = np.zeros(shape)
        at: tuple[slice | int, ...] = (slice(None), *(0,) * env.n_agents)
        start[at] = law(float(env.controller.accuracy(d)))
        self.start = start.ravel()
        table, _ = env.joint_actions_by_cost()  # the answer-now action first
        self.actions = np.array(table)
        self.called = [row.nonzero()[0].tolist() for row in self.actions]
        self.price = np.array([env.price(c)[0] for c in self.called])
        self.penalty = objective.lam * self.price + objective.gamma * self.actions.sum(axis=1)
        # success[:, a]: chance the vote is right after action a ends the episode
        right = self.space.right.reshape(shape)
        columns = []
        for called in self.called:
            f = right
            for i in called:
                f = (f * self.laws[i]).sum(axis=1 + i, keepdims=True)
            columns.append(np.broadcast_to(f, shape).ravel())
        self.success = np.stack(columns, axis=1)

    def consult(self, beliefs: np.ndarray, action: int) -> np.ndarray:
        """Beliefs after the experts of ``action`` answer afresh (before seeing them)."""
        n = len(beliefs)
        b = beliefs.reshape(n, *self.space.shape)
        for i in self.called[action]:
            b = b.sum(axis=2 + i, keepdims=True) * self.laws[i][None]
        return np.broadcast_to(b, (n, *self.space.shape)).reshape(n, -1)

    def _choose(self, values: np.ndarray, costs: np.ndarray, mass: np.ndarray
                ) -> np.ndarray:
        """Per row, the action of the highest value; within :data:`TIE`, the cheapest."""
        best = values.max(axis=-1, keepdims=True)
        cheapest = np.where(values >= best - TIE * mass[..., None], costs, np.inf)
        return np.argmin(cheapest, axis=-1)

    def _ending(self, success: np.ndarray, mass: np.ndarray, totals: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """Values and costs of actions that end the episode, ``success[..., a]``."""
        values = self.objective.end(success, mass[..., None], totals) - (
            mass[..., None] * self.penalty)
        return values, mass[..., None] * totals

    def solve(self, turn: int, spent: float, beliefs: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Expectimax from round ``turn`` at spend ``spent``: (values, costs, actions) per row.

        ``beliefs`` are ``(n, L)`` unnormalised; values and costs scale with their mass.
        """
        n = len(beliefs)
        mass = beliefs.sum(axis=1)
        totals = spent + self.price
        values, costs = self._ending(beliefs @ self.success, mass, totals)
        if turn + 1 < self.rounds:  # a consultation does not end the episode
            values[:, 1:], costs[:, 1:] = -np.inf, np.inf
            for a in range(1, len(self.price)):
                if self.objective.gated and totals[a] + self.price[0] > self.objective.budget:
                    continue  # worth 0 and dearer than answering now
                after = self.consult(beliefs, a)
                value, cost = self._children(turn + 1, totals[a], after)
                values[:, a] = value - mass * self.penalty[a]
                costs[:, a] = cost
        pick = self._choose(values, costs, mass)
        rows = np.arange(n)
        return values[rows, pick], costs[rows, pick], pick

    def _children(self, turn: int, spent: float, after: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Expected value and cost over what the round shows, deciding optimally after it."""
        space = self.space
        if turn + 1 == self.rounds:  # the children's choice ends the episode: linear in them
            mass = space.by_signature(after)  # (n, S)
            success = space.by_signature(after[:, :, None] * self.success[None])  # (n, S, A)
            values, costs = self._ending(success, mass, spent + self.price)
            pick = self._choose(values, costs, mass)[..., None]
            return (np.take_along_axis(values, pick, -1).sum(axis=(1, 2)),
                    np.take_along_axis(costs, pick, -1).sum(axis=(1, 2)))
        rows, shown = np.nonzero(space.by_signature(after) > 0)
        children = np.where(space.signature[None] == shown[:, None], after[rows], 0.0)
        values, costs, _ = self.solve(turn, spent, children)
        n = len(after)
        return np.bincount(rows, values, n), np.bincount(rows, costs, n)
