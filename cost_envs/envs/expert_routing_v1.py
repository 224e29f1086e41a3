"""ExpertRouting-v1: ExpertRouting-v0 where wrong answers can coincide (issue #10)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from cost_envs.core import Prices, State
from cost_envs.envs.expert_routing import (
    PROFILE_NAMES,
    ExpertRoutingEnv,
    ExpertTask,
)
from cost_envs.envs.expert_routing_tables import BlockArrays, block_prices

#: Shares of the attractive wrong answers ("distractors") of a question with 1, 2 or 3 of
#: them: the first is the most attractive (a Zipf-like fall-off).
DISTRACTOR_SHARES: dict[int, tuple[float, ...]] = {
    1: (1.0,),
    2: (2 / 3, 1 / 3),
    3: (1 / 2, 1 / 3, 1 / 6),
}
#: A question's attraction (chance that a wrong answer is one of its distractors) is
#: drawn from Beta(2, 2): mean 0.5, most questions between 0.2 and 0.8.
ATTRACTION_BETA = (2.0, 2.0)
#: Answer codes: 0 is the right answer, 1..3 a distractor; every other wrong answer is
#: unique to its source (the controller's is ``OWN_WRONG``, expert ``i``'s ``OTHER_WRONG + i``).
RIGHT = 0
OWN_WRONG = 99
OTHER_WRONG = 100
NOT_CONSULTED = -1


def pairwise_coincidence() -> float:
    """Chance that two wrong answers to a question coincide, over the question distribution.

    ``E[q^2] * E[sum_k p_k^2]`` with ``q ~ Beta(2, 2)`` and ``K`` uniform on 1..3 with the
    shares of ``DISTRACTOR_SHARES``: ``0.3 * 0.648 = 0.194``.
    """
    a, b = ATTRACTION_BETA
    mean = a / (a + b)
    second_moment = a * b / ((a + b) ** 2 * (a + b + 1)) + mean**2
    concentration = np.mean([sum(p * p for p in s) for s in DISTRACTOR_SHARES.values()])
    return float(second_moment * concentration)


@dataclass(frozen=True, eq=False)
class ExpertTaskV1(ExpertTask):
    """An ExpertRouting-v1 question: a v0 question plus its attractive wrong answers.

    Attributes (besides :class:`ExpertTask`'s):
        attraction: Chance ``q`` that a wrong answer to this question is a distractor.
        distractor_shares: How a distractor answer splits among the question's 1-3
            distractors (sums to 1).
        controller_slip: When the controller is wrong, its answer is distractor ``k`` iff
            this lies in ``q * [c_{k-1}, c_k)`` (``c`` the cumulative shares), else a
            wrong answer of its own.
        slips: ``(max_rounds, m)``: the same for expert ``i`` consulted in round ``t``.

    The slips are luck, like v0's luck fields; the attraction and the distractors'
    shares are parameters of the question.
    """

    luck_fields: ClassVar[tuple[str, ...]] = (*ExpertTask.luck_fields, "controller_slip",
                                              "slips")

    attraction: float
    distractor_shares: tuple[float, ...]
    controller_slip: float
    slips: np.ndarray


class ExpertBlockV1(NamedTuple):
    """:class:`ExpertBlock`'s arrays and v1's own (:meth:`ExpertRoutingV1Env.draw_block`)."""

    profile: np.ndarray
    difficulty: np.ndarray
    estimate: np.ndarray
    controller_luck: np.ndarray
    luck: np.ndarray
    prompt: np.ndarray
    factors: np.ndarray
    n_distractors: np.ndarray  # (n,) 1..3
    shares: np.ndarray  # (n, K) the distractors' shares, padded with 0
    attraction: np.ndarray
    controller_slip: np.ndarray
    slips: np.ndarray  # (n, max_rounds, m)


class _TablesV1(NamedTuple):
    answers: list  # answers[t][i]: expert i's answer code when consulted in round t
    controller_answer: int
    prices: Prices
    static_obs: np.ndarray  # the observation's slots fixed for the question


def wrong_answer(slip: float, attraction: float, shares: tuple[float, ...], own: int) -> int:
    """The answer code of a wrong model: a distractor ``1..K`` or its own code ``own``.

    Distractor ``k`` iff ``slip`` is below ``attraction * (p_1 + ... + p_k)`` (the sums
    taken in order) and not below the previous one.
    """
    return int(wrong_answers(np.array([slip]), [attraction], [shares], own)[0])


def pad_shares(shares: Sequence[tuple[float, ...]]) -> np.ndarray:
    """Questions' distractor shares as rows padded with 0 (a missing distractor adds 0)."""
    width = max(map(len, shares))
    return np.array([(*question, *(0.0,) * (width - len(question))) for question in shares])


#: ``DISTRACTOR_SHARES[k]`` padded, row ``k - 1``: a drawn block's shares by indexing.
_PADDED_SHARES = pad_shares([DISTRACTOR_SHARES[k] for k in sorted(DISTRACTOR_SHARES)])


def wrong_answers(slips: np.ndarray, attraction: Sequence[float] | np.ndarray,
                  shares: Sequence[tuple[float, ...]] | np.ndarray, own: Any) -> np.ndarray:
    """:func:`wrong_answer` of a block of questions at once, int64 of ``slips``' shape.

    ``slips`` has the questions on its first axis; ``attraction`` and ``shares`` give
    each question's (``shares`` as tuples or as :func:`pad_shares`' rows, the same codes);
    ``own`` is a code or an array that broadcasts against ``slips``.
    """
    padded = shares if isinstance(shares, np.ndarray) else pad_shares(shares)
    # the running sum over k, one term at a time in order (np.cumsum's additions, without
    # its cost on a short axis)
    cumulative = np.asarray(attraction, dtype=np.float64)[:, None] * padded
    for k in range(1, padded.shape[1]):
        cumulative[:, k] += cumulative[:, k - 1]
    per_question = (len(padded), *(1,) * (slips.ndim - 1))
    # the first k whose threshold the slip is below, choosing from the last k down
    code = np.where(slips < cumulative[:, -1].reshape(per_question), padded.shape[1], own)
    for k in range(padded.shape[1] - 2, -1, -1):
        code = np.where(slips < cumulative[:, k].reshape(per_question), k + 1, code)
    return code


class ExpertRoutingV1Env(ExpertRoutingEnv):
    """ExpertRouting-v0 with common wrong answers: agreement raises but never proves correctness.

    ## Description

    The same centralised multi-LLM system as :class:`ExpertRoutingEnv` (CORL, arXiv
    2511.02755): a Qwen2.5-7B-class controller answers a math question itself or
    consults frozen experts (GPT-4.1-nano, GPT-4.1, o3) over up to ``max_rounds`` rounds,
    every call billed as tokens x price. Questions, difficulties, accuracy curves,
    trusts, tokens and prices are exactly v0's (see its docstring); for the same seed the
    first block of 64 questions is v0's, question for question, with the same luck.

    **Generative model: what changed.** In v0 wrong answers never coincide, so two
    agreeing models are certainly right and verification is free. Real math benchmarks
    have common wrong answers (stopping a step early, a misread quantity, an off-by-one
    count), so in v1 each question has ``K`` attractive wrong answers, the distractors,
    ``K`` uniform on {1, 2, 3}, with shares (1), (2/3, 1/3) or (1/2, 1/3, 1/6), and an
    attraction ``q ~ Beta(2, 2)`` (mean 0.5). A model that is wrong (same accuracy curve
    and luck as in v0) gives distractor ``k`` with probability ``q p_k`` and otherwise a
    wrong answer of its own, which matches nothing. The distractors and their shares
    belong to the question, so they are shared by the controller and every expert, and
    by repeated consultations of one expert (each consultation draws afresh which wrong
    answer it gives). Two wrong answers to a question therefore coincide with probability
    ``E[q^2] E[sum p_k^2] = 0.3 x 0.648 = 0.194`` (``pairwise_coincidence()``); on a
    question with attraction ``q`` and one distractor, with ``q^2``.

    Where the numbers come from: they are a modelling assumption, not a fit. The one
    large measurement we know of, Kim et al., "Correlated Errors in Large Language
    Models" (ICML 2025, arXiv 2506.07962), finds that two LLMs that both err pick the
    same wrong option about 60% of the time, on 4-option multiple-choice MMLU where
    chance is 1/3. Free-form math answers have no fixed list of options, so two wrong
    answers coincide less often than that, but not never (self-consistency voting, Wang
    et al., ICLR 2023, gains because wrong answers are *less* concentrated than right
    ones, not because they never agree). 0.19, a third of the multiple-choice figure,
    with questions ranging from trap-free (``q`` near 0) to strongly attractive (``q``
    near 1), is our plausible middle; the constants ``DISTRACTOR_SHARES`` and
    ``ATTRACTION_BETA`` hold it.

    The vote is v0's weighted vote over answers rather than over right/wrong: every
    answer pools the trust of the sources that gave it (controller 1.0, GPT-4.1-nano
    1.2, GPT-4.1 1.6, o3 2.5), the answer with the largest weight is final, and a tie
    goes to the controller's own answer, then to a wrong answer over the right one, then
    to the lower expert index (which is v0's rule when no distractor is drawn). So a
    controller and a GPT-4.1-nano agreeing on a distractor (2.2) outvote a right GPT-4.1
    (1.6). Agreement is still evidence but no longer proof, least of all on hard
    questions where both are usually wrong: the controller is right on 96% / 72% / 13%
    of GSM8K / MATH500 / AIME questions (60% mixed), and on 99.8% / 96% / 31% (91%) of
    those where GPT-4.1-nano's first answer agrees with it (measured on 8000 questions
    per profile; in v0 the latter is 100% everywhere).

    All of it, the distractors, the attraction and which wrong answer each model gives
    at each round, is drawn at reset into the task, so outcomes are a function of
    (task, actions) and the oracle is a true hindsight optimum.

    ## Action Space

    ``MultiBinary(m)`` over the experts, as in v0: bit ``i`` consults expert ``i`` this
    round; the all-zero action answers now.

    ## Observation Space

    v0's: ``Box(0, 1, (10 + 2m,), float32)`` with the same ``observation_layout``. The
    slot ``agrees_with_leading`` says whether an expert's latest answer *is* the leading
    answer, which now may be a shared wrong answer; the distractors, the attraction and
    which answers are right are never observed.

    ## Rewards

    As v0: Eq. 1 with success = the final answer is right (quality 10 or 0);
    :class:`cost_envs.wrappers.BudgetTier` gives CORL's budget-gated reward.

    ## Starting State

    A question drawn from ``np_random`` (or ``options["task"]``, an
    :class:`ExpertTaskV1`), no expert consulted.

    ## Episode End

    As v0: terminated when the controller answers or after the ``max_rounds``-th
    consultation. Success iff the final answer is right. With the default trusts, as in
    v0, a question is solvable iff the controller or some expert in some round is right
    (consulting only right experts outvotes the controller's 1.0); the oracle answers at
    once on the others.

    ## Arguments

    v0's: ``profile``, ``experts``, ``prices``, ``max_rounds``, ``reward_weights``,
    ``render_mode``.

    * ``budget``, ``on_exceed``: HardBudget built by ``gym.make`` (:mod:`cost_envs.registration`).

    ## Fixed rules

    Coinciding wrong answers make agreement a weaker signal, but a fixed rule still
    matches the learned controllers in most profile-tiers (5 seeds; issues #10, #11): they
    are ahead on the mixed profile's low tier and behind on AIME's medium tier, where
    GPT-4.1 alone is the best fixed row.

    ## Version History

    * v1: wrong answers can coincide: per question 1-3 distractors shared by all models,
      so agreement raises but never proves correctness. Issue #10 found that v0 made
      verification free (any two agreeing models are certainly right), which real math
      benchmarks with common wrong answers do not allow.
    * v0: initial version (:class:`ExpertRoutingEnv`).
    """

    task_type = ExpertTaskV1
    block_type = ExpertBlockV1
    env_label = "ExpertRouting-v1"

    # ------------------------------------------------------------------ tasks
    def _draw_more(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
        # drawn after v0's draws: the same questions and luck as v0 for the same seed
        m = self.n_agents
        n_distractors = rng.integers(1, len(DISTRACTOR_SHARES) + 1, n)
        attraction = rng.beta(*ATTRACTION_BETA, n)
        controller_slip = rng.random(n)
        slips = rng.random((n, self.max_rounds, m))
        slips.flags.writeable = False
        return (n_distractors, _PADDED_SHARES[n_distractors - 1], attraction, controller_slip,
                slips)

    def _more_fields(self, block: ExpertBlockV1) -> dict[str, list[Any]]:
        return {
            "attraction": block.attraction.tolist(),
            "distractor_shares": [DISTRACTOR_SHARES[k] for k in block.n_distractors.tolist()],
            "controller_slip": block.controller_slip.tolist(),
            "slips": list(block.slips),
        }

    def _more_arrays(self, tasks: list[Any]) -> tuple[np.ndarray, ...]:
        shares = [task.distractor_shares for task in tasks]
        return (np.array([len(s) for s in shares]), pad_shares(shares),
                np.array([task.attraction for task in tasks]),
                np.array([task.controller_slip for task in tasks]),
                np.stack([task.slips for task in tasks]))

    def answer_codes(self, block: ExpertBlockV1, arrays: BlockArrays
                     ) -> tuple[np.ndarray, np.ndarray]:
        """v0's hits turned into answer codes: ``(n, max_rounds, m)`` and the controller's ``(n,)``.

        The one home of v1's answers, for the single env's tables and the batched env's.
        """
        wrong = wrong_answers(block.slips, block.attraction, block.shares,
                              OTHER_WRONG + np.arange(self.n_agents))
        own = wrong_answers(block.controller_slip, block.attraction, block.shares, OWN_WRONG)
        return (np.where(arrays.hits, RIGHT, wrong),
                np.where(arrays.controller_right, RIGHT, own))

    # v1's block and tables (ExpertBlockV1, _TablesV1) carry v0's fields and more
    def _block_tables(  # type: ignore[override]  # see above
            self, block: ExpertBlockV1) -> list[_TablesV1]:
        """v0's tables with each right or wrong answer turned into its code."""
        # v1's blocks are not ExpertBlocks but begin with their fields, all block_arrays reads
        arrays = self.block_arrays(block)  # type: ignore[arg-type]  # v0's fields and more
        answers, own = self.answer_codes(block, arrays)
        return [_TablesV1(a, o, p, obs) for a, o, p, obs in zip(
            answers.tolist(), own.tolist(), block_prices(arrays), arrays.static_obs,
            strict=True)]

    def _check_task(self, task: ExpertTask) -> None:
        super()._check_task(task)
        slips = task.slips  # type: ignore[attr-defined]  # task_type: ExpertTaskV1
        if getattr(slips, "shape", None) != task.luck.shape:
            raise ValueError(f"{self.env_name}: options['task'].slips must have the shape "
                             f"of its luck {task.luck.shape}")

    # ------------------------------------------------------------- dynamics
    def _initial_state(  # type: ignore[override]  # v1's tables: v0's fields and more
            self, task: ExpertTask, tables: _TablesV1) -> State:
        self._answers = tables.answers
        self._controller_answer = tables.controller_answer
        self._controller_right = tables.controller_answer == RIGHT
        self._voter = tables.controller_answer  # what the vote depends on besides the state
        self._static_obs = tables.static_obs
        return (NOT_CONSULTED,) * self.n_agents  # per expert: its latest answer code

    def _count_votes(self, state: State) -> tuple[bool, int, float, float]:
        """The weighted vote over answers: (leading answer right, its code, its weight, total).

        Each answer pools the trust of its sources; ties go to the controller's answer,
        then to a wrong answer over the right one, then to the lower expert index.
        """
        own_answer = self._controller_answer
        total = self.controller.trust
        weights = {own_answer: total}
        first: dict[int, int] = {own_answer: -1}
        for i, answer in enumerate(state):
            if answer < 0:
                continue
            weight = self._trust[i]
            total += weight
            weights[answer] = weights.get(answer, 0.0) + weight
            first.setdefault(answer, i)
        lead = max(weights, key=lambda a: (weights[a], a == own_answer, a != RIGHT, -first[a]))
        return lead == RIGHT, lead, weights[lead], total

    def _gives_leading(self, vote: tuple[bool, int, float, float], state: State,
                       source: int) -> bool:
        # v1's vote names the leading answer's code: whoever gave that code leads
        answer = self._controller_answer if source < 0 else state[source]
        return answer == vote[1]

    # ------------------------------------------------------------- helpers
    @property
    def answers(self) -> tuple[int, list[list[int]]]:
        """Privileged: the controller's answer code and ``answers[t][i]`` of the episode.

        Codes: 0 right, 1..3 a distractor, ``OWN_WRONG`` / ``OTHER_WRONG + i`` a wrong
        answer no other source gives. For analysis and tests, never for policies.
        """
        return self._controller_answer, [list(row) for row in self._answers]

    def _describe(self) -> str:
        task = self._task
        if task is None:
            return "no task"
        names = [e.name for e in self.experts]

        def word(code: int) -> str:
            return "right" if code == RIGHT else (
                f"distractor {code}" if code < OWN_WRONG else "wrong (its own)")

        asked = {names[i]: word(a) for i, a in enumerate(self._state) if a >= 0}
        # task_type is ExpertTaskV1: its distractor_shares and attraction are there
        return (f"{PROFILE_NAMES[task.profile]} question, difficulty {task.difficulty:.2f}, "
                f"{len(task.distractor_shares)} distractor(s) "  # type: ignore[attr-defined]
                f"at attraction {task.attraction:.2f}; "  # type: ignore[attr-defined]
                f"controller {word(self._controller_answer)}; asked {asked}")
