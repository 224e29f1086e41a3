"""AgenticRouting-v0: run each step of a long-horizon agent task with a small or a large model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from cost_envs.core import OrchestrationEnv, Outcome, Prices, State
from cost_envs.envs.agentic_profiles import (
    MAX_HORIZON,
    MAX_RECOVERY,
    MAX_SUBGOALS,
    PROFILE_NAMES,
    PROFILES,
    RoutingProfile,
)
from cost_envs.pool import AgentPool, AgentSpec
from cost_envs.prices import PriceTable, Tokens, coerce_prices
from cost_envs.reward import RewardWeights
from cost_envs.task_blocks import TaskBlock

#: The pool's one skill: the current step needs multi-step reasoning (the task embedding).
SKILLS = ("reasoning",)
#: Uniform range of the difficulty ``d`` of a subgoal of each class (``CLASSES`` of
#: :mod:`cost_envs.envs.agentic_profiles`).
CLASS_RANGES = ((0.0, 0.3), (0.35, 0.7), (0.75, 1.0))
#: Per-turn success probability of the small and the large model on difficulty ``d``:
#: ``p(d) = 1 / (1 + exp(-(a - b d)))`` with ``(a, b)`` below.
SMALL_CURVE = (4.0, 10.0)
LARGE_CURVE = (6.0, 9.0)
#: Difficulty of a recovery step (undoing a wrong action is routine work).
RECOVERY_DIFFICULTY = 0.1
#: Noise of the observed difficulty signal and of the reasoning tag.
SIGNAL_NOISE = 0.12
TAG_NOISE = 0.12
TAG_THRESHOLD = 0.45
FAILURE_CAP = 3
#: Log-normal spread of a task's per-step token counts around the profile's means, and the
#: range the factor is clipped to (so a large step always costs at least a small one).
TOKEN_SPREAD = 0.3
TOKEN_FACTOR_RANGE = (0.5, 2.0)
DEFAULT_SMALL = "Qwen/Qwen2.5-7B-Instruct"
DEFAULT_LARGE = "gpt-4.1"


def success_probability(difficulty: np.ndarray | float, curve: tuple[float, float]
                        ) -> np.ndarray:
    """Per-turn chance that a model with ``curve = (a, b)`` clears a step of ``difficulty``."""
    a, b = curve
    return 1.0 / (1.0 + np.exp(-(a - b * np.asarray(difficulty, dtype=np.float64))))


@dataclass(frozen=True, eq=False)
class AgenticTask:
    """One long-horizon task with all of its randomness (privileged).

    Attributes:
        profile: Name of the profile the task was drawn from.
        difficulty: ``(K,)`` true difficulty in ``[0, 1]`` of each subgoal.
        signal: ``(K,)`` the observed difficulty, ``clip(d + N(0, 0.12), 0, 1)``.
        reasoning: ``(K,)`` int8, the observed "needs reasoning" tag,
            ``d + N(0, 0.12) > 0.45``.
        luck: ``(horizon,)`` the luck ``u_t`` of each turn, shared by both models: the
            model run at turn ``t`` clears its step iff ``u_t < p_model(d)``.
        harm_luck: ``(horizon,)`` the harm luck ``w_t``: a failed step at turn ``t``
            is harmful (adds recovery steps) iff ``harm_luck[t] < harm_model``.
        input_tokens: Tokens read per step on this task.
        output_tokens: Tokens written per step on this task.
    """

    profile: str
    difficulty: np.ndarray
    signal: np.ndarray
    reasoning: np.ndarray
    luck: np.ndarray
    harm_luck: np.ndarray
    input_tokens: float
    output_tokens: float

    @property
    def n_subgoals(self) -> int:
        """Number of subgoals ``K``."""
        return len(self.difficulty)

    @property
    def horizon(self) -> int:
        """Steps available."""
        return len(self.luck)


def with_fresh_luck(task: AgenticTask, rng: np.random.Generator) -> AgenticTask:
    """The same task with its luck (``luck``, ``harm_luck``) drawn again from ``rng``.

    The rest (difficulties, observed signals and tags, token counts) is shared with
    ``task``. Averaging over such draws replayed with ``reset(options={"task": ...})`` is
    averaging over the luck for fixed hidden parameters, which is how
    ``agents.planning``'s expected returns are checked. The env never calls this, so its
    task stream and dynamics are unchanged.
    """
    luck, harm_luck = rng.random(task.horizon), rng.random(task.horizon)
    luck.flags.writeable = harm_luck.flags.writeable = False
    return replace(task, luck=luck, harm_luck=harm_luck)


class _Tables(NamedTuple):
    p_small: list  # per subgoal, the small model's chance per turn
    p_large: list
    luck: list
    harm_luck: list
    rows: np.ndarray  # observation row per number of subgoals done
    prices: Prices


# Observation indices (see observation_layout).
_PROGRESS, _LEFT, _TURNS, _SLACK, _DIFF, _TAG, _REC, _FAILED, _FAILS, _RATIO = range(10)
_OBS_DIM = 10 + len(PROFILE_NAMES)


class AgenticRoutingEnv(OrchestrationEnv[AgenticTask]):
    """Route every step of a long-horizon agent task to a small or a large model.

    ## Description

    The setting of BoPO (Budget-Aware Agentic Routing via Boundary-Guided Training). An
    agent works through a long-horizon task (profiles shaped like ALFWorld, SciWorld and
    AppWorld); at every step a router decides whether the small model (default
    ``Qwen/Qwen2.5-7B-Instruct``) or the large model (default ``gpt-4.1``) runs the
    step. Each step is billed as tokens x price from a dated, sourced price table. A
    small model is cheap per step but its failures waste turns and can do harm that
    takes extra steps to undo, so on some tasks always-small ends up costing more than
    always-large (the paper's *cost inversions*). Success is only known at the end.

    **Generative model.** A task has ``K`` subgoals (uniform in the profile's range) and
    a routine share ``r ~ Beta(kappa mix_0, kappa (1 - mix_0))``; each subgoal is
    ``routine`` with probability ``r``, else ``hard`` or ``very_hard`` in the ratio
    ``mix_1 : mix_2`` (so the class shares average ``mix`` and hard subgoals cluster in
    hard tasks), with difficulty ``d`` uniform on [0, .3], [.35, .7] or [.75, 1]. At turn
    ``t`` the chosen model attempts the current step and clears it iff the turn's luck
    ``u_t ~ U(0, 1)`` (fixed at reset, the same for both models) is below its chance
    ``p(d) = sigmoid(a - b d)``: small (a, b) = (4, 10), large (6, 9), so small/large clear
    a step of difficulty 0.1 with .95/.99, 0.5 with .27/.82, 0.8 with .02/.23 and 1.0 with
    .002/.05. At equal turns the large model therefore clears every step the small one
    clears. A failed step is *harmful* iff a second luck ``w_t ~ U(0, 1)`` is below
    ``harm_small`` (.6) or ``harm_large`` (.15); a harmful failure adds
    ``recovery_steps`` (3) recovery steps (difficulty 0.1 each, at most 9 pending) that
    must be cleared before the next subgoal. The episode terminates with success when the
    last subgoal is cleared and with failure at the task's horizon.

    ========  =======  ====  =================  =====  ======  =====  ======
    profile   horizon  K     mix (r / h / vh)   kappa  input   output demo
    ========  =======  ====  =================  =====  ======  =====  ======
    alfworld  50       3-6   .84 / .11 / .05    1.5    1800    80     1200
    sciworld  50       5-10  .68 / .22 / .10    2.0    3000    110    2000
    appworld  40       4-8   .50 / .28 / .22    2.0    5500    200    3500
    ========  =======  ====  =================  =====  ======  =====  ======

    Tokens: a step reads ``input`` tokens and writes ``output`` tokens on average (each
    times a per-task log-normal factor, sigma 0.3, clipped to [0.5, 2]); the small model
    also reads ``demo`` tokens of in-context demonstrations at every step (7B models need
    them to keep the action format; the large model is prompted zero-shot). With the
    default price table a small step costs about $0.0009 / $0.0015 / $0.0028 and a large
    step $0.0042 / $0.0069 / $0.0126 (ALFWorld / SciWorld / AppWorld), about 4.6x.

    On 400 tasks per profile (task seed 30000) the boundary policies give the strata
    (easy: always-small succeeds; hard: only always-large does; intractable: neither)
    82/16/1% (ALFWorld), 49/42/8% (SciWorld) and 32/54/15% (AppWorld), and always-small
    costs more than always-large (a cost inversion) on 14%, 15% and 15% of the tasks: its
    failures run to the horizon or pile up recovery steps (see ``agents.learners.bopo``).

    **Pricing.** The small model runs every step unless the large one runs it instead,
    so the episode's prices are ``step_cost`` = the small model's per-step cost (paid on
    every step) and ``call_costs = [large - small]``: a large step costs exactly
    ``env.price([0])``, the same figure the ledger, the oracle and ``HardBudget`` use.
    This needs a large step to cost at least a small one on every task: the large model
    must cost at least as much per token and per parameter, and outweigh the small
    model's demonstrations at the fewest tokens a task can have (checked at
    construction). FLOPs: ``2 x active parameters x tokens``, billed the same way.

    Adaptivity pays because the next step's difficulty is partly observed (a noisy
    signal and a "needs reasoning" tag), failures are observed, and the turns left are
    observed: routine steps are best left to the small model, hard ones to the large,
    and a small model that keeps failing burns both money and the horizon.

    ## Action Space

    ``MultiBinary(1)``: 1 = the large model runs this step, 0 = the small model does
    (a cheaper way to go on, so ``zero_action_fallback`` is True: ``HardBudget`` masks
    an unaffordable large step down to a small one).

    ## Observation Space

    ``Box(0, 1, (13,), float32)``, see ``observation_layout``: ``progress`` (subgoals done
    / K), ``subgoals_left`` / 10, ``turns_left`` / 50, ``slack`` (turns left minus steps
    still needed, / 50), ``difficulty`` (the current step's observed difficulty signal;
    0.1 on a recovery step, 0 when done), ``task_embedding`` (the "needs reasoning" tag of
    the current step), ``recovering`` (recovery steps pending / 9), ``failed_last_step``,
    ``consecutive_failures`` (capped at 3, / 3), ``price_ratio`` (a small step's cost over
    a large step's on this task) and the ``profile`` one-hot (alfworld, sciworld,
    appworld; zeros for a custom profile). The luck and true difficulties are never
    observed.

    ## Rewards

    Eq. 1 of the LoRA-Guided PPO paper, ``alpha*S + beta*Q - lam*cost - gamma*n_calls``
    with ``n_calls`` = 1 on a large step; ``S`` and ``Q`` (quality = 10 x the fraction of
    subgoals cleared, SciWorld-style partial credit) are paid on the final step. BoPO's
    boundary-relative reward is applied by ``agents.learners.bopo``, not by the env.

    ## Starting State

    Subgoal 0 of a task drawn from ``np_random`` (or ``options["task"]``), turn 0, no
    recovery pending.

    ## Episode End

    Terminated on success (every subgoal cleared) or at the task's horizon (failure).
    Budgets are wrappers and truncate.

    ## Arguments

    * ``profile``: ``"alfworld"`` (default), ``"sciworld"``, ``"appworld"``, or a
      :class:`RoutingProfile` (or its dict form) for a benchmark of your own.
    * ``prices``: a :class:`~cost_envs.prices.PriceTable`, its dict form or a JSON/YAML
      path, merged onto the packaged table (list only the models you change).
    * ``small``, ``large``: model names in the price table (default
      ``Qwen/Qwen2.5-7B-Instruct`` and ``gpt-4.1``). Steps are billed as the profile's
      input and output tokens only: this env models no hidden reasoning tokens, so a
      reasoning model (``o3``) as ``large`` is billed as if it did not reason.
    * ``reward_weights``: :class:`RewardWeights` or a mapping.
    * ``render_mode``: ``None`` or ``"ansi"``.
    * ``budget``, ``on_exceed``: HardBudget built by ``gym.make`` (:mod:`cost_envs.registration`).

    ## Fixed rules

    A fixed rule is as good as learning here (issues #10, #11): the fitted difficulty
    threshold or the best rule of ``agents/rules.py`` is within the intervals of BoPO's
    and PPO's return on all three profiles (5 seeds); no learned row closes a resolved
    share of the gap to the planner of ``agents/planning/agentic.py``.

    ## Version History

    * v0: initial version.
    """

    task_type = AgenticTask
    zero_action_fallback = True
    #: Consecutive failures are observed up to this many (``consecutive_failures``).
    failure_cap = FAILURE_CAP
    observation_layout = {
        "progress": slice(0, 1),
        "subgoals_left": slice(1, 2),
        "turns_left": slice(2, 3),
        "slack": slice(3, 4),
        "difficulty": slice(4, 5),
        "task_embedding": slice(5, 6),
        "recovering": slice(6, 7),
        "failed_last_step": slice(7, 8),
        "consecutive_failures": slice(8, 9),
        "price_ratio": slice(9, 10),
        "profile": slice(10, 10 + len(PROFILE_NAMES)),
    }

    def __init__(
        self,
        profile: RoutingProfile | Mapping[str, Any] | str = "alfworld",
        prices: PriceTable | Mapping[str, Any] | str | Path | None = None,
        small: str = DEFAULT_SMALL,
        large: str = DEFAULT_LARGE,
        reward_weights: RewardWeights | Mapping[str, float] | None = None,
        render_mode: str | None = None,
    ) -> None:
        self.profile = RoutingProfile.coerce(profile)
        table = coerce_prices(prices)
        table.require([small, large], source="AgenticRouting-v0")
        self.small_price, self.large_price = table[small], table[large]
        self.price_table = table
        prof = self.profile
        low = TOKEN_FACTOR_RANGE[0]
        self._check_dominance(prof.input_tokens * low, prof.output_tokens * low)
        nominal_small, nominal_large = self._step_prices(prof.input_tokens, prof.output_tokens)
        # The pool's price is the nominal extra cost of a large step at the profile's mean
        # token counts; each episode bills the task's own tokens (env.call_costs).
        pool = AgentPool(
            (AgentSpec("large", "llm", nominal_large[0] - nominal_small[0],
                       nominal_large[1] - nominal_small[1], (0.9,)),),
            SKILLS,
        )
        super().__init__(pool, reward_weights, render_mode)
        self._one_hot = np.zeros(len(PROFILE_NAMES), dtype=np.float32)
        if PROFILES.get(self.profile.name) == self.profile:
            self._one_hot[PROFILE_NAMES.index(self.profile.name)] = 1.0
        self.observation_space = spaces.Box(0.0, 1.0, shape=(_OBS_DIM,), dtype=np.float32)
        self._rec_small = float(success_probability(RECOVERY_DIFFICULTY, SMALL_CURVE))
        self._rec_large = float(success_probability(RECOVERY_DIFFICULTY, LARGE_CURVE))

    def _step_prices(self, input_tokens: Tokens, output_tokens: Tokens
                     ) -> tuple[tuple[Tokens, Tokens], tuple[Tokens, Tokens]]:
        """(money, FLOPs) of a small step and of a large step with these token counts."""
        small_input = input_tokens + self.profile.demo_tokens
        small, large = self.small_price, self.large_price
        return ((small.cost(small_input, output_tokens),
                 small.flops(small_input + output_tokens)),
                (large.cost(input_tokens, output_tokens),
                 large.flops(input_tokens + output_tokens)))

    def _check_dominance(self, input_tokens: float, output_tokens: float) -> None:
        """A large step must cost at least a small one (money and FLOPs) on every task.

        A step is billed as the small model's price plus the large model's extra
        (``call_costs = large - small``). The difference grows with the token counts when
        the large model costs at least as much per token, so checking the fewest tokens a
        task can have (``input_tokens``, ``output_tokens``, priced by :meth:`_step_prices`)
        covers every task.
        """
        small, large = self.small_price, self.large_price
        where = (f"AgenticRouting-v0: {self.price_table.label}: the large model "
                 f"{large.name!r} and the small model {small.name!r}")
        for key in ("input", "output", "active_params_billion"):
            if getattr(large, key) < getattr(small, key):
                raise ValueError(
                    f"{where}: the large model has a lower {key} ({getattr(large, key)}) "
                    f"than the small one ({getattr(small, key)}); a step is billed as the "
                    "small model's price plus the large model's extra (call_costs = large - "
                    "small), so the large model must cost at least as much per token and per "
                    "FLOP"
                )
        (small_cost, small_flops), (large_cost, large_flops) = self._step_prices(
            input_tokens, output_tokens)
        for what, big, little in (("money", large_cost, small_cost),
                                  ("FLOPs", large_flops, small_flops)):
            if big < little:
                raise ValueError(
                    f"{where}: with the profile's fewest tokens a large step costs less "
                    f"{what} ({big:.3g}) than a small step with its "
                    f"{self.profile.demo_tokens:g} demonstration tokens ({little:.3g}); "
                    "call_costs = large - small would be negative. Lower the profile's "
                    "demo_tokens or pick other models"
                )

    # ------------------------------------------------------------------ tasks
    def draw_block(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
        """``n`` tasks' arrays, padded: the one draw of ``reset`` and of the batched env."""
        prof = self.profile
        k_max, horizon = prof.max_subgoals, prof.horizon
        n_sub = rng.integers(prof.min_subgoals, k_max + 1, n)
        kappa, mix = prof.concentration, prof.mix
        routine = rng.beta(kappa * mix[0], kappa * (1.0 - mix[0]), n)
        p_hard = (1.0 - routine) * (mix[1] / (mix[1] + mix[2]))  # (n,)
        pick = rng.random((n, k_max))
        cls = np.where(pick < routine[:, None], 0,
                       np.where(pick < (routine + p_hard)[:, None], 1, 2))
        low = np.array([r[0] for r in CLASS_RANGES])[cls]
        high = np.array([r[1] for r in CLASS_RANGES])[cls]
        difficulty = low + (high - low) * rng.random((n, k_max))
        signal = np.clip(difficulty + rng.normal(0.0, SIGNAL_NOISE, (n, k_max)), 0.0, 1.0)
        reasoning = (difficulty + rng.normal(0.0, TAG_NOISE, (n, k_max))
                     > TAG_THRESHOLD).astype(np.int8)
        luck = rng.random((n, horizon))
        harm_luck = rng.random((n, horizon))
        tokens = np.clip(np.exp(rng.normal(0.0, TOKEN_SPREAD, (n, 2))), *TOKEN_FACTOR_RANGE)
        return (n_sub, difficulty, signal, reasoning, luck, harm_luck,  # then the tokens
                *np.round(tokens * (prof.input_tokens, prof.output_tokens)).T)

    def _generate_block(self, rng: np.random.Generator, n: int) -> TaskBlock:
        n_sub, *arrays, input_tokens, output_tokens = self.draw_block(rng, n)
        for array in arrays:  # difficulty, signal, reasoning, luck, harm_luck
            array.flags.writeable = False  # tasks are views into these blocks
        difficulty, signal, reasoning, luck, harm_luck = arrays
        def task(b: int) -> tuple[AgenticTask, _Tables]:  # built when reached (gc)
            k, name = int(n_sub[b]), self.profile.name
            drawn = AgenticTask(name, difficulty[b, :k], signal[b, :k], reasoning[b, :k], luck[b],
                                harm_luck[b], float(input_tokens[b]), float(output_tokens[b]))
            return drawn, self._tables(drawn)
        return TaskBlock(n, task)

    def _check_task(self, task: AgenticTask) -> None:
        if task.profile != self.profile.name or task.horizon != self.profile.horizon:
            raise ValueError(
                f"{self.env_name}: options['task'] was drawn for profile {task.profile!r} "
                f"(horizon {task.horizon}), this env has profile {self.profile.name!r} "
                f"(horizon {self.profile.horizon})"
            )

    def _tables(self, task: AgenticTask) -> _Tables:
        (small_cost, small_flops), (large_cost, large_flops) = self._step_prices(
            task.input_tokens, task.output_tokens)
        prices = Prices(np.array([large_cost - small_cost]), np.array([large_flops - small_flops]),
                        step_cost=small_cost, step_flops=small_flops)
        k = task.n_subgoals
        rows = self.observation_rows(np.array([k]), task.signal[None], task.reasoning[None],
                                     np.array([small_cost]), np.array([large_cost]))[0]
        return _Tables(success_probability(task.difficulty, SMALL_CURVE).tolist(),
                       success_probability(task.difficulty, LARGE_CURVE).tolist(),
                       task.luck.tolist(), task.harm_luck.tolist(), rows, prices)

    def observation_rows(self, n_subgoals: np.ndarray, signal: np.ndarray,
                         reasoning: np.ndarray, small_cost: np.ndarray,
                         large_cost: np.ndarray) -> np.ndarray:
        """``rows[b, j]``, shape ``(n, W + 1, obs)``: task b at j subgoals done, bar turns."""
        width = signal.shape[1]
        rows = np.zeros((len(n_subgoals), width + 1, _OBS_DIM), dtype=np.float32)
        done, k = np.arange(width + 1), n_subgoals[:, None]
        rows[:, :, _PROGRESS], rows[:, :, _LEFT] = done / k, (k - done) / MAX_SUBGOALS
        valid = done[:width] < k  # padded columns past a task's subgoals stay 0
        rows[:, :width, _DIFF], rows[:, :width, _TAG] = signal * valid, reasoning * valid
        large_step = small_cost + (large_cost - small_cost)
        with np.errstate(divide="ignore", invalid="ignore"):
            rows[:, :, _RATIO] = np.where(large_step > 0, small_cost / large_step, 1.0)[:, None]
        rows[:, :, 10:] = self._one_hot
        return rows

    def _task_prices(self, task: AgenticTask, tables: _Tables) -> Prices:
        return tables.prices

    # ------------------------------------------------------------- dynamics
    def _initial_state(self, task: AgenticTask, tables: _Tables) -> State:
        self._p_small, self._p_large = tables.p_small, tables.p_large
        self._luck, self._harm_luck = tables.luck, tables.harm_luck
        self._rows = tables.rows
        self._k, self._horizon = task.n_subgoals, task.horizon
        return (0, 0, 0)

    def _transition(
        self, turn: int, state: State, called: list[int]
    ) -> tuple[State, Outcome | None]:
        done, recovering, fails = state
        large = bool(called)
        u = self._luck[turn]
        if recovering:
            if u < (self._rec_large if large else self._rec_small):
                recovering -= 1
                fails = 0
            else:
                fails = min(fails + 1, FAILURE_CAP)
        elif u < (self._p_large[done] if large else self._p_small[done]):
            done += 1
            fails = 0
            if done == self._k:
                return (done, 0, 0), Outcome(True, 10.0)
        else:
            fails = min(fails + 1, FAILURE_CAP)
            harm = self.profile.harm_large if large else self.profile.harm_small
            if self._harm_luck[turn] < harm:
                recovering = min(recovering + self.profile.recovery_steps, MAX_RECOVERY)
        if turn + 1 >= self._horizon:
            return (done, recovering, fails), Outcome(False, 10.0 * done / self._k)
        return (done, recovering, fails), None

    def _observe(self, turn: int, state: State) -> np.ndarray:
        done, recovering, fails = state
        obs = self._rows[done].copy()
        turns_left = self._horizon - turn
        obs[_TURNS] = turns_left / MAX_HORIZON
        slack = turns_left - (self._k - done) - recovering
        obs[_SLACK] = slack / MAX_HORIZON if slack > 0 else 0.0
        if recovering:
            obs[_DIFF] = RECOVERY_DIFFICULTY
            obs[_TAG] = 0.0
            obs[_REC] = recovering / MAX_RECOVERY
        if fails:
            obs[_FAILED] = 1.0  # fails counts consecutive failures up to the last step
            obs[_FAILS] = fails / FAILURE_CAP
        return obs

    def step_prices(self) -> tuple[float, float]:
        """Money of a small step and of a large step in the current episode.

        Priced by :meth:`price` (the ledger's own sum), so they match ``info["cost"]``.
        """
        return self.price([])[0], self.price([0])[0]

    def consecutive_failures(self, observation: np.ndarray) -> int:
        """Consecutive failed steps up to the observation's turn (capped at ``failure_cap``).

        Decoded from the observation alone (the Cascade baseline reads it).
        """
        return round(float(observation[_FAILS]) * FAILURE_CAP)

    def rule_based_action(self, observation: np.ndarray) -> np.ndarray:
        """The fixed rule: the large model when the step looks hard or the last one failed.

        Large iff the observed difficulty signal is >= 0.5 or the last step failed; uses
        only the observation (the RuleBased baseline calls it).
        """
        hard = observation[_DIFF] >= 0.5 or observation[_FAILED] > 0.5
        return np.array([1 if hard else 0], dtype=np.int8)

    def _describe(self) -> str:
        task = self._task
        if task is None:
            return "no task"
        done, recovering, fails = self._state
        return (f"profile {task.profile}: {done}/{task.n_subgoals} subgoals, "
                f"{recovering} recovery steps pending, {fails} consecutive failures")
