"""The best training-free rule: prompt length, its direction chosen on training data.

``"rule"`` (:class:`RuleRouter`) between two models, ``"multi-rule"``
(:class:`RuleMultiRouter`) between any number: prompt-length bands routed up the
models' training cost-accuracy frontier, the same rule carried to K models (its docstring
says why this family).

On groups a router never saw (MMLU subjects held out by subject), a rule that learns no
weights, "send the shortest prompts to the strong model", routed as well as the learned
routers at equal cost (issue #39). :class:`RuleRouter` puts such a rule in every table:
its ``fit`` searches a small, fixed family of rules on the *training* queries only and
keeps the member whose training threshold curve has the best AIQ, the criterion
cross-validation chooses every router's setting by (:mod:`~agents.routers.cv`:
RouterBench's area under the convex hull of accuracy against cost per query,
:func:`~agents.routers.bootstrap.threshold_aiq`); ties go to the earlier member.

**The family** (:data:`MEMBERS`), each a ranking of the queries by the prompt's length,
``log(1 + characters)``, the first of the
:func:`~agents.routers.statistics.text_statistics` every router computes:

* ``"shortest-first"``: the shortest prompts go to the strong model;
* ``"longest-first"``: the longest prompts go to the strong model.

A threshold on the ranking sweeps from always-weak (no query reaches it) to
always-strong (every query does): those two rules are the ends of every threshold curve,
so they are not members of their own.

**Why no per-group prior.** A rule "the groups where the strong model gained most in
training go to it first" would need the query's group at prediction time, and a
router reads a query only through its text (:meth:`~agents.routers.base.Router.inputs`:
statistics and text features); the groups are metadata of the logs, not an input. In
the held-out tables that hold out groups, moreover, every test query's group is unseen,
so such a member would always fall back to the length rule. It is left out.

**Why no price member.** Before a call, its price is the prompt's tokens times the
input price plus the expected output tokens times the output price. Without learned
weights the output estimate is one number per model (its training mean), so each
model's estimated price is affine in its prompt tokens, and so is the extra price of the
strong call when both models count the prompt alike. The report's RouteLLM logs count
them as ``ceil(characters / 4)`` for both models (``token_counter="approx"``,
:mod:`cost_envs.traces.readers`): the estimated price ranks the queries exactly as their
length in characters does (up to ties within four characters), so "cheapest first" is
"shortest-first". The per-query output estimate of the priced router
(:mod:`~agents.routers.priced`) is a learned regression: it belongs to that router, not
to a training-free family.

The score is the logistic of the standardised length (negated for shortest-first): a
number in ``(0, 1)``, monotone in the chosen ranking, so the threshold calibration
(:func:`~agents.routers.calibration.calibrate_share`) and the threshold curves read it as
they read any two-model router's score. A saved rule holds the standardiser of the
statistics and the chosen member's index in :data:`MEMBERS`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agents.routers.base import (
    Inputs,
    Router,
    TwoModelRouter,
    array_of,
    arrays_of_shapes,
    register,
)
from agents.routers.bootstrap import threshold_aiq
from agents.routers.inputs import call_costs
from agents.routers.multi import MultiRouter
from agents.routers.statistics import STATISTICS, text_statistics
from cost_envs.metrics.frontier import aiq
from cost_envs.traces import TraceDataset

#: The rules :meth:`RuleRouter.fit` chooses among, in order of preference on a tie.
MEMBERS = ("shortest-first", "longest-first")
#: What :attr:`RuleMultiRouter.chosen` says when training leaves the cheapest model alone
#: on the frontier (no dearer model more accurate in training).
CHEAPEST_ALONE = "the cheapest model alone"
#: The column of :data:`~agents.routers.statistics.STATISTICS` the rules rank by.
LENGTH = STATISTICS.index("log_chars")


def member_scores(member: str, length: np.ndarray) -> np.ndarray:
    """Scores in ``(0, 1)`` of a member on standardised lengths; higher: the strong model."""
    signed = -length if member == "shortest-first" else length
    # clipped so that exp never overflows; standardised lengths are far inside the clip
    return 1.0 / (1.0 + np.exp(-np.clip(signed, -500.0, 500.0)))


def checked_members(members: Any) -> tuple[str, ...]:
    """``members`` as a tuple of distinct names of :data:`MEMBERS` (ValueError otherwise)."""
    found = tuple(members) if isinstance(members, (list, tuple)) else ()
    unknown = [m for m in found if m not in MEMBERS]
    if not found or unknown or len(set(found)) != len(found):
        raise ValueError(f"members: expected distinct rules of {list(MEMBERS)}, got "
                         f"{members!r}")
    return found


def best_member(members: Sequence[str], train_aiq: Mapping[str, float]) -> str:
    """The member with the best training AIQ: the first on a tie; ``nan`` loses to any number.

    (``nan``: equal costs, no curve to compare; with every member ``nan`` the first is
    kept.)
    """
    return max(members, key=lambda m: (np.nan_to_num(train_aiq[m], nan=-np.inf),
                                       -list(members).index(m)))


def member_index(value: np.ndarray, members: Sequence[str]) -> int:
    """A saved ``"member"`` array's index into :data:`MEMBERS`, checked against ``members``."""
    allowed = [float(MEMBERS.index(m)) for m in members]
    if value.shape != (1,) or float(value[0]) not in allowed:
        raise ValueError(f"arrays: 'member': expected one index of {dict(enumerate(MEMBERS))}"
                         f" among the members {list(members)}, got {value.tolist()}")
    return int(value[0])


@register
@dataclass
class RuleRouter(TwoModelRouter):
    """The best of :data:`MEMBERS` on the training queries (no learned weights).

    Args:
        weak: Name of the weak (cheap) model.
        strong: Name of the strong (expensive) model.
        members: The rules searched (default all of :data:`MEMBERS`).
        n_features: Unused: the rule reads the prompt's statistics, no text features
            (a field because every router has it).
        hashed_weight: Unused, 0 (as ``n_features``).
        text_features: Unused (as ``n_features``).
        with_ngrams: Unused (as ``n_features``).
    """

    weak: str
    strong: str
    members: Sequence[str] = MEMBERS
    n_features: int = 1
    hashed_weight: float = 0.0
    text_features: str = "hashed"
    with_ngrams: bool = True

    kind: ClassVar[str] = "rule"

    def __post_init__(self) -> None:
        self.members = checked_members(self.members)
        super().__post_init__()
        self._member: int | None = None  # index into MEMBERS
        #: Training AIQ of each member searched (``nan``: the two models cost the same).
        self.train_aiq: dict[str, float] = {}

    # ------------------------------------------------------------------ what it reads
    def inputs(self, data: TraceDataset) -> Inputs:
        """``(statistics, no text features)``: the rule reads the prompt's statistics only."""
        return text_statistics(data.prompts), np.zeros((data.n_queries, 0))

    def targets(self, data: TraceDataset) -> np.ndarray:
        """``(n, 2)``: the weak and the strong model's score on each training query."""
        return data.scores[:, [data.model_index(self.weak), data.model_index(self.strong)]]

    def _model_costs(self, data: TraceDataset, costs: Any) -> np.ndarray:
        """``(n, 2)``: the weak and the strong call's cost (what the search's AIQ reads)."""
        cols = [data.model_index(self.weak), data.model_index(self.strong)]
        return call_costs(data, costs)[:, cols]

    # ------------------------------------------------------------------ the search
    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        if costs is None:
            raise ValueError("RuleRouter: fit_inputs needs the training calls' costs "
                             "(training_costs), got None")
        quality, cost = np.asarray(y, dtype=np.float64), np.asarray(costs, dtype=np.float64)
        ends = sorted((float(cost[:, 0].mean()), float(cost[:, 1].mean())))
        self.train_aiq = {m: threshold_aiq(member_scores(m, x[:, LENGTH]), quality[:, 0],
                                           quality[:, 1], cost[:, 0], cost[:, 1], ends)
                          for m in self.members}
        self._member = MEMBERS.index(best_member(self.members, self.train_aiq))

    @property
    def member(self) -> str:
        """The rule chosen on the training data (ValueError before ``fit``)."""
        if self._member is None:
            raise ValueError("RuleRouter: call fit first")
        return MEMBERS[self._member]

    @property
    def label(self) -> str:
        """How tables name it: the rule and that it was chosen on training data."""
        return f"best training-free rule (chosen on training data: {self.member})"

    def _score(self, x: np.ndarray) -> np.ndarray:
        return member_scores(self.member, x[:, LENGTH])

    # ------------------------------------------------------------------ state
    def _model_arrays(self) -> dict[str, np.ndarray]:
        return {"member": np.array([float(MEMBERS.index(self.member))])}

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        self._member = member_index(array_of(arrays, "member", 1), self.members)


@register
@dataclass
class RuleMultiRouter(MultiRouter):
    """The training-free rule over K models: length bands up the training frontier.

    Routed as every K-model router (:class:`~agents.routers.multi.MultiRouter`:
    ``argmax_j p_j - lam * cost_j / cost_max``, each model at its mean training cost), with
    ``p_j(q) = (1 - r(q)) * a_cheapest + r(q) * a_j``: ``a_j`` is model ``j``'s training
    accuracy and ``r(q)`` in ``(0, 1)`` the chosen member's length score
    (:func:`member_scores`). The utility is then, up to a constant,
    ``r(q) * (a_j - lam' * cost_j)`` with ``lam' = lam / (r(q) cost_max)``: each query goes
    to the model the single models' training frontier picks at a price per unit of cost
    that falls as ``r(q)`` rises. Only the vertices of that frontier (the upper convex
    hull of the models' mean training cost and accuracy) are ever chosen, and at any
    ``lam`` the prompts fall in bands of length, the higher-ranked bands on the dearer
    frontier models.

    **Why this family.** It is the two-model rule carried to K models, not another one:
    with two models and the dearer more accurate in training, each ``lam``'s decisions
    are a threshold on ``r``, so its sweep is :class:`RuleRouter`'s threshold curve for the
    same member (thinned to the ``lam`` grid every K-model sweep has); where the dearer
    is not the more accurate in training, no training figure says it is worth its price,
    and the rule calls the cheaper model alone (always-weak, an end of the two-model
    family). A fixed pair of models with the two-model rule would leave the frontier's
    middle models out; length bands reach every frontier model. It learns no weights:
    of the training data it reads each model's mean accuracy and cost (the single models'
    frontier, which random routing on the frontier reads too), the length's mean and
    spread (the standardiser every router has) and the direction of the ranking, chosen
    as :class:`RuleRouter` chooses it: the member of ``members`` whose training ``lam``
    sweep has the best AIQ (the criterion cross-validation chooses the K-model routers'
    settings by, :mod:`~agents.routers.cv`; the first on a tie). No price or per-group
    member, for :class:`RuleRouter`'s reasons (the module doc).

    Args:
        models: The models to route between (default: all of the training data's).
        members: The rules searched (default all of :data:`MEMBERS`).
        n_features: Unused: the rule reads the prompt's statistics only (a field of
            every router).
        l2: Unused (a field of the K-model routers' base; no regression here).
        hashed_weight: Unused, 0 (as ``n_features``).
        text_features: Unused (as ``n_features``).
        with_ngrams: Unused (as ``n_features``).
    """

    # the base's other fields keep their defaults: only these two read differently here
    n_features: int = 1
    hashed_weight: float = 0.0
    members: Sequence[str] = MEMBERS

    kind: ClassVar[str] = "multi-rule"

    def __post_init__(self) -> None:
        self.members = checked_members(self.members)
        super().__post_init__()
        self._member: int | None = None  # index into MEMBERS
        self._accuracy: np.ndarray | None = None
        #: Training AIQ of each member's ``lam`` sweep (``nan``: the models cost the same).
        self.train_aiq: dict[str, float] = {}

    def inputs(self, data: TraceDataset) -> Inputs:
        """``(statistics, no text features)``: the rule reads the prompt's statistics only."""
        return text_statistics(data.prompts), np.zeros((data.n_queries, 0))

    # ------------------------------------------------------------------ the search
    def _fit_model(self, x: np.ndarray, y: np.ndarray, costs: Any) -> None:
        if y.shape != (len(x), len(self.models)) or costs is None:
            raise ValueError(f"RuleMultiRouter: expected ({len(x)}, {len(self.models)}) "
                             f"correctness and the calls' costs, got {y.shape} and {costs!r}")
        quality, cost = np.asarray(y, dtype=np.float64), np.asarray(costs, dtype=np.float64)
        self._accuracy, self._cost = quality.mean(axis=0), cost.mean(axis=0)
        span = [float(self._cost.min()), float(self._cost.max())]
        rows, cols = np.arange(len(x))[:, None], np.arange(len(self.models))
        for member in self.members:
            p = self._win(member, x[:, LENGTH])
            d = self._route(p, self._lams(p), cols)  # the sweep a calibration reads
            self.train_aiq[member] = (aiq(cost[rows, d].mean(axis=0),
                                          quality[rows, d].mean(axis=0), span)
                                      if span[1] > span[0] else float("nan"))
        self._member = MEMBERS.index(best_member(self.members, self.train_aiq))

    def _win(self, member: str, length: np.ndarray) -> np.ndarray:
        """``(n, K)``: ``(1 - r) a_cheapest + r a_j`` of standardised lengths."""
        accuracy = self._coefficients()
        r = member_scores(member, length)[:, None]
        cheapest = accuracy[int(np.argmin(self._fitted()[1]))]
        return (1.0 - r) * cheapest + r * accuracy[None, :]

    def _coefficients(self) -> np.ndarray:
        if self._accuracy is None:  # what "fitted" means to the K-model base
            raise ValueError("RuleMultiRouter: call fit first")
        return self._accuracy

    @property
    def member(self) -> str:
        """The rule chosen on the training data (ValueError before ``fit``)."""
        if self._member is None:
            raise ValueError("RuleMultiRouter: call fit first")
        return MEMBERS[self._member]

    @property
    def chosen(self) -> str:
        """What training chose: the member, or :data:`CHEAPEST_ALONE`.

        Where no dearer model is more accurate than the cheapest in training, only the
        cheapest is on the training frontier: every member calls it alone (their AIQs
        tie and the first is kept), so the member says nothing of the routing.
        """
        accuracy, cost = self._coefficients(), self._fitted()[1]
        return CHEAPEST_ALONE if accuracy[int(np.argmin(cost))] >= accuracy.max() else (
            self.member)

    @property
    def label(self) -> str:
        """How tables name it: the rule and that it was chosen on training data."""
        return f"best training-free rule (chosen on training data: {self.chosen})"

    def _predict(self, x: np.ndarray) -> np.ndarray:
        return self._win(self.member, x[:, LENGTH])

    # ------------------------------------------------------------------ state
    def _model_arrays(self) -> dict[str, np.ndarray]:
        return {"accuracy": self._coefficients(), "cost": self._fitted()[1],
                "member": np.array([float(MEMBERS.index(self.member))])}

    def _load_model_arrays(self, arrays: Mapping[str, Any]) -> None:
        k = len(self.models)
        if k < 2:
            raise ValueError(f"config: models: expected at least two, got {self.models}")
        got = arrays_of_shapes(arrays, {"accuracy": (k,), "cost": (k,), "member": (1,)})
        if ((got["accuracy"] < 0) | (got["accuracy"] > 1)).any() or (got["cost"] < 0).any():
            raise ValueError(f"arrays: expected 'accuracy' in [0, 1] and 'cost' >= 0, got "
                             f"{got['accuracy'].tolist()} and {got['cost'].tolist()}")
        self._member = member_index(got["member"], self.members)
        self._accuracy, self._cost = got["accuracy"], got["cost"]


#: A training-free rule's kind -> its class and the key of its operating point in a record.
RULES: dict[str, tuple[type[Router], str]] = {RuleRouter.kind: (RuleRouter, "threshold"),
                                               RuleMultiRouter.kind: (RuleMultiRouter, "lam")}


def rule_record(rule: Router, point: float) -> dict[str, Any]:
    """A fitted rule and its operating point as JSON values, kept in a saved router's meta.

    So that ``route score`` sets the router beside the rule of the router's own training
    split, wherever it scores it. The point is ``"threshold"`` for :class:`RuleRouter`
    (``inf``, no strong call, is ``None``) and ``"lam"`` for :class:`RuleMultiRouter`.
    """
    if type(rule).kind not in RULES or not isinstance(rule, RULES[type(rule).kind][0]):
        raise TypeError(f"rule_record: expected a rule of {sorted(RULES)}, got "
                        f"{type(rule).__name__}")
    config, arrays = rule.to_state()
    return {"config": config, "arrays": {k: v.tolist() for k, v in arrays.items()},
            RULES[rule.kind][1]: None if math.isinf(point) else float(point)}


def rule_from_record(record: Mapping[str, Any]) -> tuple[RuleRouter | RuleMultiRouter, float]:
    """The rule and point :func:`rule_record` kept (``ValueError`` on a bad record)."""
    config = record.get("config") if isinstance(record, Mapping) else None
    kind = str(config.get("router")) if isinstance(config, Mapping) else ""
    cls, key = RULES.get(kind, RULES[RuleRouter.kind])  # a bad config fails in from_state
    if not isinstance(record, Mapping) or set(record) != {"config", "arrays", key}:
        raise ValueError(f"rule: expected keys {sorted(['arrays', 'config', key])}, got "
                         f"{sorted(record) if isinstance(record, Mapping) else record!r}")
    arrays = record["arrays"]
    if not isinstance(arrays, Mapping) or not isinstance(config, Mapping):
        raise ValueError(f"rule: expected 'config' and 'arrays' objects, got "
                         f"{config!r} and {arrays!r}")
    rule = cls.from_state(config, {k: np.asarray(v, dtype=np.float64)
                                   for k, v in arrays.items()})
    point = record[key]
    if point is not None and not isinstance(point, (int, float)):
        raise ValueError(f"rule: {key!r}: expected a number or null, got {point!r}")
    assert isinstance(rule, (RuleRouter, RuleMultiRouter))
    return rule, math.inf if point is None else float(point)
