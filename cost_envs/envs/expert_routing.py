"""ExpertRouting-v0: a controller that answers math questions itself or consults experts."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from cost_envs.config import integer, one_of
from cost_envs.core import OrchestrationEnv, Outcome, Prices, State
from cost_envs.envs.expert_routing_tables import (
    BAND_CENTRES,
    BANDS,
    CONTROLLER,
    CONTROLLER_READ_TOKENS,
    DEFAULT_EXPERTS,
    PROFILE_NAMES,
    PROFILES,
    SYSTEM_TOKENS,
    TIER_BUDGETS,
    TOKEN_SPREAD,
    BlockArrays,
    ExpertBlock,
    ExpertTask,
    ModelProfile,
    accuracies,
    block_prices,
    with_fresh_luck,
)
from cost_envs.pool import AgentPool, AgentSpec
from cost_envs.prices import PriceTable, coerce_prices
from cost_envs.reward import RewardWeights

#: The generative model's names, importable from here as before the split.
__all__ = ["BANDS", "BAND_CENTRES", "CONTROLLER", "CONTROLLER_READ_TOKENS",
           "DEFAULT_EXPERTS", "PROFILES", "PROFILE_NAMES", "SYSTEM_TOKENS",
           "TIER_BUDGETS", "TOKEN_SPREAD", "ExpertRoutingEnv", "ExpertTask",
           "ModelProfile", "with_fresh_luck"]

#: Each profile's Beta(a, b) of the difficulty and mean prompt tokens, by profile index.
_BETA_A, _BETA_B, _MEAN_PROMPT = np.array([PROFILES[p] for p in PROFILE_NAMES]).T.copy()


class _Tables(NamedTuple):
    answers: list  # answers[t][i]: expert i's answer in round t, 1 right or 0 wrong
    controller_right: bool
    prices: Prices
    static_obs: np.ndarray  # the observation's slots fixed for the question


#: The two ways an episode ends (immutable, so shared rather than built at every answer).
_RIGHT_ANSWER = Outcome(True, 10.0)
_WRONG_ANSWER = Outcome(False, 0.0)
#: Entries of the per-env caches of votes and observation slots before they are cleared
#: (a pool of m experts has 3**m states per turn; only the visited ones are kept).
_CACHE_LIMIT = 1 << 16


class ExpertRoutingEnv(OrchestrationEnv[ExpertTask]):
    """Answer math questions with a small controller that may consult frozen experts.

    ## Description

    The centralised multi-LLM system of CORL (arXiv 2511.02755). A controller (a
    Qwen2.5-7B-class model) receives a math question. In each of up to ``max_rounds``
    rounds it either answers now or consults any subset of frozen experts (by default
    GPT-4.1-nano, GPT-4.1 and o3), reads their answers, and decides again. Every call is
    billed as tokens x price from a dated, sourced price table (reasoning tokens billed),
    so what a question costs depends on which experts were asked and on how hard it is.

    **Generative model.** A question comes from a benchmark profile (``"gsm8k"``,
    ``"math500"``, ``"aime"``; ``"mixed"`` draws one uniformly per question) with a
    difficulty ``d ~ Beta(1.5, 8)``, ``Beta(2.5, 4)`` or ``Beta(8, 2.5)``. Model ``j`` is
    right with probability ``sigmoid(k_j (s_j - d))`` with (s, k) = controller
    (0.53, 10.6), GPT-4.1-nano (0.59, 5.6), GPT-4.1 (0.75, 5.2), o3 (1.47, 3.2), which
    gives mean accuracies on the three profiles of .96/.73/.13, .90/.72/.29, .95/.84/.48
    and .98/.97/.90, close to the published GSM8K / MATH500 / AIME 2024 results of these
    models. At reset the task fixes the controller's luck and, for every round and
    expert, a fresh luck draw (asking again re-samples the answer). Right answers agree
    with each other; wrong answers are all different (as in math, where two wrong
    answers rarely coincide). The final answer is the controller's weighted vote over
    its own answer and each consulted expert's latest answer, with trusts controller
    1.0, GPT-4.1-nano 1.2, GPT-4.1 1.6, o3 2.5 (a tie goes to the controller's own
    answer). So one consulted expert overrides the controller, and agreeing answers
    pool their weight: the controller plus a right GPT-4.1-nano (2.2) outvote a wrong
    GPT-4.1 (1.6), not a wrong o3 (2.5).

    Tokens: each call reads the question (110/150/220 tokens on average per profile)
    plus 150 tokens of instructions; an expert writes ``o (1 + 2d)`` tokens
    (o = 400, 450, 250) and o3 also reasons for ``1200 exp(3d)`` tokens; the controller
    reads 400 more tokens and writes ``350 (1 + 2d)`` per round. Each model's counts
    carry a per-question log-normal factor (sigma 0.25). With the default table a round
    of the controller costs about $0.0004, GPT-4.1-nano $0.0004, GPT-4.1 $0.008 and o3
    $0.02 (easy) to $0.11 (hard).

    Adaptivity pays because agreement is observed: when a cheap expert agrees with
    the controller the answer is almost surely right and the controller can stop;
    disagreement, or a hard-looking question, is worth an expensive expert.

    ## Action Space

    ``MultiBinary(m)`` over the experts: bit ``i`` consults expert ``i`` this round. The
    all-zero action answers now (the episode ends).

    ## Observation Space

    ``Box(0, 1, (10 + 2m,), float32)``, see ``observation_layout``: the profile one-hot,
    the perceived difficulty, rounds left / ``max_rounds``, which experts were consulted,
    whether each consulted expert's latest answer is the current leading answer,
    whether the controller's own answer is, the leading answer's share of the vote, and
    ``task_embedding``, the one-hot difficulty band (easy / medium / hard) of the
    perceived difficulty. True difficulty, luck and correctness are never observed.

    ## Rewards

    Eq. 1 of the LoRA-Guided PPO paper like every cost-envs env (success = the final
    answer is right, quality 10 or 0). CORL's reward, the task performance gated by
    the query's budget, comes from the :class:`cost_envs.wrappers.BudgetTier` wrapper,
    which also puts the tier in the observation.

    ## Starting State

    A question drawn from ``np_random`` (or ``options["task"]``), no expert consulted.

    ## Episode End

    Terminated when the controller answers (all-zero action) or after the
    ``max_rounds``-th consultation, after which it answers. Success iff the answer is
    right.

    ## Arguments

    * ``profile``: ``"gsm8k"``, ``"math500"``, ``"aime"`` or ``"mixed"`` (default).
    * ``experts``: names of default experts or :class:`ModelProfile` objects/dicts
      (default GPT-4.1-nano, GPT-4.1, o3), in action order.
    * ``prices``: a :class:`cost_envs.prices.PriceTable`, its dict form or a file path
      (merged onto the packaged table, the default); must price the controller and experts.
    * ``max_rounds``: consultation rounds per question (1-8, default 3).
    * ``reward_weights``: :class:`RewardWeights` or a mapping; ``render_mode``: ``"ansi"``.
    * ``budget``, ``on_exceed``: HardBudget built by ``gym.make`` (:mod:`cost_envs.registration`).

    ## Fixed rules

    A fixed rule is mostly as good as the learned controllers (issues #10, #11): in most
    profile-tiers the best fixed row (a single expert, consulting all, escalating until
    two answers agree, or the searched rule of ``agents/rules.py``) is within the
    intervals of PPO and the tier adapters (5 seeds). They are ahead on the mixed low tier
    and behind on the mixed and AIME high tiers. The planner of
    ``agents/planning/expert.py`` is at or above every fixed row in every tier.

    ## Version History

    * v0: initial version.
    """

    task_type: type[ExpertTask] = ExpertTask
    #: The arrays :meth:`draw_block` returns (a subclass with arrays of its own sets its own).
    block_type: type = ExpertBlock
    #: Name in error messages (a subclass with its own id sets its own).
    env_label = "ExpertRouting-v0"

    def __init__(
        self,
        profile: str = "mixed",
        experts: Sequence[ModelProfile | Mapping[str, Any] | str] | None = None,
        prices: PriceTable | Mapping[str, Any] | str | Path | None = None,
        max_rounds: int = 3,
        reward_weights: RewardWeights | Mapping[str, float] | None = None,
        render_mode: str | None = None,
    ) -> None:
        name = self.env_label
        one_of(profile, "profile", (*PROFILE_NAMES, "mixed"), where=name)
        max_rounds = integer(max_rounds, "max_rounds", minimum=1, maximum=8, where=name)
        if experts is None:
            experts = list(DEFAULT_EXPERTS)
        if isinstance(experts, (str, Mapping)) or not isinstance(experts, Sequence) or (
                not experts):
            raise ValueError(f"{name}: experts: expected a non-empty list, got {experts!r}")
        self.experts = tuple(ModelProfile.coerce(e) for e in experts)
        names = [e.name for e in self.experts]
        if len(set(names)) != len(names):
            raise ValueError(f"{name}: experts: duplicate names in {names}")
        self.price_table = coerce_prices(prices)
        self.price_table.require([CONTROLLER.name, *names], f"{name}: prices")
        self.profile = profile
        self.max_rounds = max_rounds
        self.controller = CONTROLLER
        self._model_prices = [self.price_table[n] for n in names]
        self._controller_price = self.price_table[CONTROLLER.name]
        self._accuracy_at_bands = np.array(
            [[float(e.accuracy(c)) for c in BAND_CENTRES] for e in self.experts])
        pool = self._nominal_pool()
        super().__init__(pool, reward_weights, render_mode)
        m = self.n_agents
        self.observation_layout = {
            "profile": slice(0, 3),
            "difficulty": slice(3, 4),
            "rounds_left": slice(4, 5),
            "consulted": slice(5, 5 + m),
            "agrees_with_leading": slice(5 + m, 5 + 2 * m),
            "controller_leading": slice(5 + 2 * m, 6 + 2 * m),
            "support": slice(6 + 2 * m, 7 + 2 * m),
            "task_embedding": slice(7 + 2 * m, 10 + 2 * m),
        }
        self.observation_space = spaces.Box(0.0, 1.0, shape=(10 + 2 * m,), dtype=np.float32)
        self._trust = [e.trust for e in self.experts]
        self.tier_budgets = dict(TIER_BUDGETS)
        # The vote and the observation's per-step slots are pure functions of the state
        # and of how the controller answered: computed once per env, not at every step.
        self._votes: dict[tuple, tuple[bool, int, float, float]] = {}
        self._slots: dict[tuple, np.ndarray] = {}
        self._slots_at = slice(4, 7 + 2 * m)  # rounds_left .. support

    def _nominal_pool(self) -> AgentPool:
        """The experts at their mean price over the profile (the agent pool's nominal cost)."""
        mixes = PROFILE_NAMES if self.profile == "mixed" else (self.profile,)
        agents = []
        for j, expert in enumerate(self.experts):
            costs, flops = [], []
            for name in mixes:
                a, b, prompt = PROFILES[name]
                d = a / (a + b)
                cost, flop = self._call_price(j, d, prompt, 1.0)
                costs.append(cost)
                flops.append(flop)
            agents.append(AgentSpec(expert.name, "expert", float(np.mean(costs)),
                                    float(np.mean(flops)),
                                    tuple(float(expert.accuracy(c)) for c in BAND_CENTRES)))
        return AgentPool(tuple(agents), BANDS)

    def _call_price(self, j: int, d: Any, prompt: Any, factor: Any, growth: Any = None
                    ) -> tuple[Any, Any]:
        """Money and FLOPs of one call of expert ``j`` on a question of difficulty ``d``.

        ``d``, ``prompt`` and ``factor`` may be arrays over a block of questions; then
        ``growth``, ``exp(3 d)`` of each (``math.exp``, as for one question), is given.
        """
        expert, price = self.experts[j], self._model_prices[j]
        if growth is None:
            growth = math.exp(3.0 * d)
        read = prompt + SYSTEM_TOKENS
        write = expert.output_tokens * (1.0 + 2.0 * d) * factor
        reason = expert.reasoning_tokens * growth * factor
        return price.cost(read, write, reason), price.flops(read + write + reason)

    def _controller_round_price(self, d: Any, prompt: Any, factor: Any) -> tuple[Any, Any]:
        """Money and FLOPs of the controller's own round (floats or arrays, as above)."""
        read = prompt + SYSTEM_TOKENS + CONTROLLER_READ_TOKENS
        write = CONTROLLER.output_tokens * (1.0 + 2.0 * d) * factor
        return (self._controller_price.cost(read, write),
                self._controller_price.flops(read + write))

    # ------------------------------------------------------------------ tasks
    def draw_block(self, rng: np.random.Generator, n: int) -> ExpertBlock:
        """``n`` questions' arrays from ``rng``: the one draw of ``reset`` and of the batched env.

        A subclass's own arrays (:meth:`_draw_more`) are drawn after v0's, so its questions
        and luck are v0's for the same generator.
        """
        m = self.n_agents
        if self.profile == "mixed":
            profile = rng.integers(0, len(PROFILE_NAMES), n)
        else:
            profile = np.full(n, PROFILE_NAMES.index(self.profile))
        difficulty = rng.beta(_BETA_A.take(profile), _BETA_B.take(profile))
        estimate = difficulty + rng.normal(0.0, 0.1, n)
        np.minimum(np.maximum(estimate, 0.0, out=estimate), 1.0, out=estimate)  # np.clip
        controller_luck = rng.random(n)
        luck = rng.random((n, self.max_rounds, m))
        # np.rint is np.round's rounding to integers (half to even), without its wrapper
        prompt = np.rint(_MEAN_PROMPT.take(profile) * rng.lognormal(-0.3**2 / 2, 0.3, n))
        factors = rng.lognormal(-TOKEN_SPREAD**2 / 2, TOKEN_SPREAD, (n, m + 1))
        luck.flags.writeable = False  # tasks are views into these blocks
        factors.flags.writeable = False
        return self.block_type(profile, difficulty, estimate, controller_luck, luck, prompt,
                               factors, *self._draw_more(rng, n))

    def _draw_more(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
        """A subclass's own arrays of ``n`` questions, drawn after v0's (none here)."""
        return ()

    def _more_fields(self, block: Any) -> dict[str, list[Any]]:
        """A subclass's own task fields of each question of ``block`` (none here)."""
        return {}

    def _more_arrays(self, tasks: list[Any]) -> tuple[np.ndarray, ...]:
        """A subclass's own block arrays of ``tasks`` (:meth:`_draw_more`'s; none here)."""
        return ()

    def _generate_block(self, rng: np.random.Generator, n: int
                        ) -> list[tuple[ExpertTask, _Tables]]:
        block = self.draw_block(rng, n)
        return list(zip(self._tasks_of(block), self._block_tables(block), strict=True))

    def _tasks_of(self, block: ExpertBlock) -> list[ExpertTask]:
        """The questions of ``block`` as tasks (their luck and factors views of its arrays)."""
        more = self._more_fields(block)
        luck, factors = block.luck, block.factors
        return [self.task_type(
            profile=p, difficulty=d, difficulty_estimate=e, controller_luck=c, luck=luck[b],
            prompt_tokens=t, token_factors=factors[b],
            **{name: values[b] for name, values in more.items()},
        ) for b, (p, d, e, c, t) in enumerate(zip(
            block.profile.tolist(), block.difficulty.tolist(), block.estimate.tolist(),
            block.controller_luck.tolist(), block.prompt.tolist(), strict=True))]

    def _block_of(self, tasks: list[ExpertTask]) -> ExpertBlock:
        """The block arrays of ``tasks`` (a replayed task), as :meth:`draw_block` gives them."""
        return self.block_type(
            np.array([task.profile for task in tasks]),
            np.array([task.difficulty for task in tasks]),
            np.array([task.difficulty_estimate for task in tasks]),
            np.array([task.controller_luck for task in tasks]),
            np.stack([task.luck for task in tasks]),
            np.array([task.prompt_tokens for task in tasks]),
            np.stack([task.token_factors for task in tasks]),
            *self._more_arrays(tasks))

    def _tables(self, task: ExpertTask) -> _Tables:
        return self._block_tables(self._block_of([task]))[0]

    def _block_tables(self, block: ExpertBlock) -> list[_Tables]:
        """The tables of the questions of ``block`` (a drawn block, or one replayed task)."""
        arrays = self.block_arrays(block)
        return [_Tables(a, r, p, o) for a, r, p, o in zip(
            arrays.hits.astype(np.int64).tolist(), arrays.controller_right.tolist(),
            block_prices(arrays),
            arrays.static_obs, strict=True)]

    def block_arrays(self, block: ExpertBlock) -> BlockArrays:
        """What the tables hold, vectorised over the questions of ``block``.

        Which expert is right in which round, whether the controller is, each call's and
        round's price and the fixed observation slots: the single env's tables and the
        batched env's (:mod:`cost_envs.vector.expert_routing`) queue both come from here.
        Elementwise float64 arithmetic is the same in numpy as in Python, operation for
        operation, so the prices are those of :meth:`_call_price` on each question to the
        last bit. The accuracy curves are one numpy ``exp`` over the block
        (:func:`accuracies`); o3's reasoning growth stays ``math.exp`` per question, as
        :meth:`_call_price` computes it for one question, since numpy's vectorised
        ``exp`` may round differently from the C library's on some CPUs (AVX-512).
        """
        m = self.n_agents
        d, prompt, factors = block.difficulty, block.prompt, block.factors
        n = len(d)
        accuracy = accuracies((*self.experts, CONTROLLER), d)  # the controller's last
        hits = block.luck < accuracy[:, None, :m]
        right = block.controller_luck < accuracy[:, m]
        growth = np.array([math.exp(3.0 * x) for x in d.tolist()])
        costs, flops = np.empty((n, m)), np.empty((n, m))
        for j in range(m):
            costs[:, j], flops[:, j] = self._call_price(j, d, prompt, factors[:, j], growth)
        step_costs, step_flops = self._controller_round_price(d, prompt, factors[:, m])
        return BlockArrays(hits, right, costs, flops, step_costs, step_flops,
                           self._static_observations(block))

    def _check_task(self, task: ExpertTask) -> None:
        super()._check_task(task)
        if task.luck.shape[0] != self.max_rounds:
            raise ValueError(f"{self.env_name}: options['task'] was drawn for "
                             f"{task.luck.shape[0]} rounds, this env has {self.max_rounds}")

    def _task_prices(self, task: ExpertTask, tables: _Tables) -> Prices:
        return tables.prices

    # ------------------------------------------------------------- dynamics
    def _initial_state(self, task: ExpertTask, tables: _Tables) -> State:
        self._answers = tables.answers
        self._controller_right = tables.controller_right
        # what the vote depends on besides the state (v1: the controller's answer code)
        self._voter: bool | int = tables.controller_right
        self._static_obs = tables.static_obs
        return (-1,) * self.n_agents  # per expert: -1 not consulted, 0 wrong, 1 right

    def _transition(self, turn: int, state: State, called: list[int]
                    ) -> tuple[State, Outcome | None]:
        # Every version's dynamics: a consulted expert's answer of the round (a code fixed
        # at reset) replaces its last one; after the last round the vote decides.
        if called:
            answers = self._answers[turn]
            status = list(state)
            for i in called:
                status[i] = answers[i]
            state = tuple(status)
            if turn + 1 < self.max_rounds:
                return state, None
        return state, _RIGHT_ANSWER if self._vote(state)[0] else _WRONG_ANSWER

    def _vote(self, state: State) -> tuple[bool, int, float, float]:
        """:meth:`_count_votes` of ``state``, cached per (controller's answer, state)."""
        key = (self._voter, state)
        vote = self._votes.get(key)
        if vote is None:
            if len(self._votes) >= _CACHE_LIMIT:
                self._votes.clear()
            vote = self._votes[key] = self._count_votes(state)
        return vote

    def _count_votes(self, state: State) -> tuple[bool, int, float, float]:
        """The weighted vote: (leading answer right, leading wrong source, its weight, total).

        Right answers pool their trust; each wrong answer stands alone. The leading wrong
        source is -1 for the controller, else an expert index (ties: the controller,
        then the lower index).
        """
        own = self.controller.trust
        right_weight = own if self._controller_right else 0.0
        best_wrong, best_source = (0.0, -2) if self._controller_right else (own, -1)
        total = own
        for i, s in enumerate(state):
            if s < 0:
                continue
            weight = self._trust[i]
            total += weight
            if s == 1:
                right_weight += weight
            elif weight > best_wrong:
                best_wrong, best_source = weight, i
        right = right_weight > best_wrong or (
            right_weight == best_wrong and self._controller_right)
        leading = right_weight if right else best_wrong
        return right, best_source, leading, total

    def _static_observations(self, block: ExpertBlock) -> np.ndarray:
        """The slots fixed for each question (the others are 0), read-only ``(n, d)``."""
        n, layout = len(block.estimate), self.observation_layout
        obs = np.zeros((n, *self.observation_space.shape), dtype=np.float32)
        rows = np.arange(n)
        estimate = block.estimate
        obs[rows, layout["profile"].start + block.profile] = 1.0
        obs[:, layout["difficulty"].start] = estimate
        band = np.minimum((estimate * 3).astype(np.int64), 2)  # int() of each: truncation
        obs[rows, layout["task_embedding"].start + band] = 1.0
        obs.flags.writeable = False
        return obs

    def _observe(self, turn: int, state: State) -> np.ndarray:
        obs = self._static_obs.copy()
        key = (turn, self._voter, state)
        slots = self._slots.get(key)
        if slots is None:
            if len(self._slots) >= _CACHE_LIMIT:
                self._slots.clear()
            slots = self._slots[key] = self._dynamic_slots(turn, state)
        obs[self._slots_at] = slots
        return obs

    def _dynamic_slots(self, turn: int, state: State) -> np.ndarray:
        """The slots from ``rounds_left`` to ``support`` at ``turn`` in ``state``.

        The one layout of these slots for every version: a version's answers and vote
        differ only in who gives the leading answer (:meth:`_gives_leading`).
        """
        m = self.n_agents
        slots = np.zeros(3 + 2 * m, dtype=np.float32)
        vote = self._vote(state)
        slots[0] = (self.max_rounds - turn) / self.max_rounds
        for i, s in enumerate(state):
            if s >= 0:
                slots[1 + i] = 1.0
                slots[1 + m + i] = float(self._gives_leading(vote, state, i))
        slots[1 + 2 * m] = float(self._gives_leading(vote, state, -1))
        slots[2 + 2 * m] = vote[2] / vote[3]
        slots.flags.writeable = False
        return slots

    def _gives_leading(self, vote: tuple[bool, int, float, float], state: State,
                       source: int) -> bool:
        """Whether ``source`` (an expert's index, -1 the controller) gives the leading answer.

        v0's answers are right (1) or each wrong alone: a right source leads with the
        right answer, else only the leading wrong source leads.
        """
        right, leading_wrong = vote[0], vote[1]
        if right:
            return self._controller_right if source < 0 else state[source] == 1
        return source == leading_wrong

    # ------------------------------------------------------------- helpers
    def rule_based_action(self, observation: np.ndarray) -> np.ndarray:
        """Escalate until agreement: CORL's hand-written reference policy.

        Consult the cheapest expert whose accuracy on the perceived difficulty band is at
        least 0.8 (the most accurate one if none is); stop as soon as the controller's own
        answer leads with an expert's support; otherwise escalate to the next more
        expensive expert not yet consulted; answer when none is left. Uses only the
        observation.
        """
        layout = self.observation_layout
        action = np.zeros(self.n_agents, dtype=np.int8)
        consulted = observation[layout["consulted"]] > 0.5
        agree = observation[layout["agrees_with_leading"]] > 0.5
        if consulted.any() and bool(observation[layout["controller_leading"]][0] > 0.5) and (
                agree & consulted).any():
            return action
        band = int(np.argmax(observation[layout["task_embedding"]]))
        order = np.argsort(self.pool.costs, kind="stable")
        capable = [i for i in order if self._accuracy_at_bands[i, band] >= 0.8]
        start = capable[0] if capable else int(np.argmax(self._accuracy_at_bands[:, band]))
        rank = {int(i): r for r, i in enumerate(order)}
        for i in order:
            if rank[int(i)] >= rank[start] and not consulted[i]:
                action[i] = 1
                return action
        return action

    def _describe(self) -> str:
        task = self._task
        if task is None:
            return "no task"
        names = [e.name for e in self.experts]
        asked = {names[i]: ("right" if s == 1 else "wrong")
                 for i, s in enumerate(self._state) if s >= 0}
        return (f"{PROFILE_NAMES[task.profile]} question, difficulty {task.difficulty:.2f}; "
                f"controller {'right' if self._controller_right else 'wrong'}; asked {asked}")
