"""ExpertRouting's generative model: benchmark profiles, models, prices' constants, questions.

The tables :class:`~cost_envs.envs.expert_routing.ExpertRoutingEnv` draws its questions
from (see its docstring for what they mean and where they come from): the benchmark
profiles, the controller's and experts' accuracy curves and token counts, the tiers'
budgets, :class:`ExpertTask`, one drawn question with all of its luck, and the arrays of
a block of questions (:class:`ExpertBlock`) and of their tables (:class:`BlockArrays`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, NamedTuple

import numpy as np

from cost_envs.config import coerce_config, number, text
from cost_envs.core import Prices

#: Benchmark profiles: difficulty ~ Beta(a, b) and prompt length in tokens (mean).
PROFILES: dict[str, tuple[float, float, float]] = {
    "gsm8k": (1.5, 8.0, 110.0),
    "math500": (2.5, 4.0, 150.0),
    "aime": (8.0, 2.5, 220.0),
}
PROFILE_NAMES = tuple(PROFILES)
#: Difficulty bands, the pool's skills; capabilities are accuracies at the band centres.
BANDS = ("easy", "medium", "hard")
BAND_CENTRES = (1 / 6, 1 / 2, 5 / 6)
#: Tokens of instructions and context around the question, for every call.
SYSTEM_TOKENS = 150.0
#: Tokens the controller reads per round besides the question (the experts' answers).
CONTROLLER_READ_TOKENS = 400.0
#: Log-normal spread of each model's token counts around their mean, per task.
TOKEN_SPREAD = 0.25


@dataclass(frozen=True)
class ModelProfile:
    """How one model (the controller or an expert) answers and what it writes.

    Accuracy on a question of difficulty ``d`` is ``sigmoid(sharpness * (skill - d))``;
    output tokens are ``output_tokens * (1 + 2d)`` and reasoning tokens
    ``reasoning_tokens * exp(3d)``, each times a per-task log-normal factor.

    Args:
        name: The model's name in the price table.
        skill: Difficulty at which the model is right half of the time.
        sharpness: How fast its accuracy falls around ``skill``.
        trust: Weight the controller gives its answers when answers disagree.
        output_tokens: Mean visible output tokens on a question of difficulty 0.
        reasoning_tokens: Mean hidden reasoning tokens at difficulty 0 (billed).
    """

    name: str
    skill: float
    sharpness: float
    trust: float
    output_tokens: float
    reasoning_tokens: float = 0.0

    def __post_init__(self) -> None:
        text(self.name, "model name")
        where = f"model {self.name!r}"
        for f in fields(self)[1:]:
            positive = f.name in ("trust", "sharpness")  # a weight and a slope: 0 is no model
            object.__setattr__(self, f.name, number(getattr(self, f.name), f.name, minimum=0,
                                                    inclusive=not positive, where=where))

    def accuracy(self, difficulty: np.ndarray | float) -> np.ndarray:
        """Chance of a right answer at ``difficulty``."""
        # A float skips np.asarray: the same float64 operations at a third of the cost
        # (every question drawn computes four of these).
        d = difficulty if isinstance(difficulty, float) else np.asarray(difficulty)
        return 1.0 / (1.0 + np.exp(-self.sharpness * (self.skill - d)))

    @classmethod
    def coerce(cls, value: ModelProfile | Mapping[str, Any] | str) -> ModelProfile:
        """A profile, its dict form, or the name of a default expert."""
        return coerce_config(cls, value, DEFAULT_EXPERTS, "experts")


def accuracies(models: Sequence[ModelProfile], difficulty: np.ndarray) -> np.ndarray:
    """``(n, len(models))``: :meth:`ModelProfile.accuracy` of each model at each difficulty.

    ``accuracy``'s float64 operations elementwise: one numpy call for a block's curves
    instead of one Python call per model and question. The single env's tables and the
    batched env's queue both come from here, so they hold the same bits whatever numpy's
    ``exp`` does on the CPU (its loop computes each element alone, whatever the length).
    """
    skill = np.array([model.skill for model in models])
    sharpness = np.array([model.sharpness for model in models])
    return 1.0 / (1.0 + np.exp(-sharpness * (skill - difficulty[:, None])))


# Curves fitted so that the mean accuracy over each profile's difficulty distribution is
# close to published results of each model (GSM8K / MATH500 / AIME 2024), as listed in
# the class docstring; token counts follow the models' typical answer lengths.
CONTROLLER = ModelProfile("Qwen/Qwen2.5-7B-Instruct", skill=0.53, sharpness=10.6, trust=1.0,
                          output_tokens=350.0)
DEFAULT_EXPERTS: dict[str, ModelProfile] = {
    "gpt-4.1-nano": ModelProfile("gpt-4.1-nano", 0.59, 5.6, trust=1.2, output_tokens=400.0),
    "gpt-4.1": ModelProfile("gpt-4.1", 0.75, 5.2, trust=1.6, output_tokens=450.0),
    "o3": ModelProfile("o3", 1.47, 3.2, trust=2.5, output_tokens=250.0,
                       reasoning_tokens=1200.0),
}

#: Per-query budgets of the tiers (USD), used by ``BudgetTier`` unless given its own:
#: low affords the controller and GPT-4.1-nano, medium a GPT-4.1 answer, high o3 on
#: hard questions, at the packaged prices. They are fixed amounts: with a price table of
#: your own, pass ``BudgetTier(env, budgets={...})`` to match it.
TIER_BUDGETS = {"low": 0.0015, "medium": 0.015, "high": 0.15}


@dataclass(frozen=True, eq=False)
class ExpertTask:
    """One question with all of its randomness (privileged).

    Attributes:
        profile: Index into ``PROFILE_NAMES``.
        difficulty: True difficulty in ``[0, 1]``.
        difficulty_estimate: What the controller perceives, ``clip(d + N(0, 0.1))``.
        controller_luck: The controller is right iff this is below its accuracy.
        luck: ``(max_rounds, m)``: expert ``i`` consulted in round ``t`` is right iff
            ``luck[t, i]`` is below its accuracy (each consultation is a fresh sample).
        prompt_tokens: Tokens of the question.
        token_factors: ``(m + 1,)`` log-normal factors of the experts' and (last) the
            controller's token counts on this question.

    ``controller_luck`` and ``luck`` are the question's luck (``luck_fields``): uniform
    draws that decide whether each answer is right. The rest are its parameters: the
    difficulty fixes every model's accuracy, and the difficulty, prompt tokens and token
    factors fix every call's price. :func:`with_fresh_luck` redraws only the luck.
    """

    #: The fields that are luck, each uniform on [0, 1) (a subclass adds its own).
    luck_fields: ClassVar[tuple[str, ...]] = ("controller_luck", "luck")

    profile: int
    difficulty: float
    difficulty_estimate: float
    controller_luck: float
    luck: np.ndarray
    prompt_tokens: float
    token_factors: np.ndarray


def with_fresh_luck(task: ExpertTask, rng: np.random.Generator) -> ExpertTask:
    """The same question with all of its luck drawn again from ``rng``, its parameters kept.

    Every field named in ``task.luck_fields`` (v0: the controller's and each round's and
    expert's luck; v1 adds which wrong answer each model gives) is drawn afresh, uniform
    on [0, 1) like the env draws it, with its shape; the difficulty, prompt, token factors
    (and v1's distractors and attraction) are shared with ``task``. Replay the result with
    ``reset(options={"task": ...})``: averaging over such draws is averaging over the luck
    for fixed parameters, which is how ``agents.planning``'s expected scores are checked.
    The env never calls this, so its task stream and dynamics are unchanged.
    """
    fresh: dict[str, Any] = {}
    for name in task.luck_fields:
        old = getattr(task, name)
        if isinstance(old, np.ndarray):
            new = rng.random(tuple(old.shape))  # a tuple: numpy's stubs type the draw an array
            new.flags.writeable = False
            fresh[name] = new
        else:
            fresh[name] = float(rng.random())
    return replace(task, **fresh)


class ExpertBlock(NamedTuple):
    """A block of questions as arrays (:meth:`ExpertRoutingEnv.draw_block`), question first."""

    profile: np.ndarray  # (n,) index into PROFILE_NAMES
    difficulty: np.ndarray
    estimate: np.ndarray  # the perceived difficulty
    controller_luck: np.ndarray
    luck: np.ndarray  # (n, max_rounds, m)
    prompt: np.ndarray  # prompt tokens
    factors: np.ndarray  # (n, m + 1) token factors, the controller's last


class BlockArrays(NamedTuple):
    """What a block's tables hold, as arrays (:meth:`ExpertRoutingEnv.block_arrays`)."""

    hits: np.ndarray  # (n, max_rounds, m): expert i consulted in round t is right
    controller_right: np.ndarray  # (n,)
    call_costs: np.ndarray  # (n, m)
    call_flops: np.ndarray  # (n, m)
    step_cost: np.ndarray  # (n,): the controller's round
    step_flops: np.ndarray
    static_obs: np.ndarray  # (n, d) read-only: the observation's slots fixed per question


def block_prices(arrays: BlockArrays) -> list[Prices]:
    """Each question's :class:`Prices` (its rows of ``arrays``)."""
    return [Prices(*row) for row in zip(arrays.call_costs, arrays.call_flops,
                                        arrays.step_cost.tolist(), arrays.step_flops.tolist(),
                                        strict=True)]
