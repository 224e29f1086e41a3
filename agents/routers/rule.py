"""The best training-free rule (``"rule"``): prompt length, its direction chosen on training data.

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

from agents.routers.base import Inputs, Router, TwoModelRouter, array_of, register
from agents.routers.bootstrap import threshold_aiq
from agents.routers.inputs import call_costs
from agents.routers.statistics import STATISTICS, text_statistics
from cost_envs.traces import TraceDataset

#: The rules :meth:`RuleRouter.fit` chooses among, in order of preference on a tie.
MEMBERS = ("shortest-first", "longest-first")
#: The column of :data:`~agents.routers.statistics.STATISTICS` the rules rank by.
LENGTH = STATISTICS.index("log_chars")


def member_scores(member: str, length: np.ndarray) -> np.ndarray:
    """Scores in ``(0, 1)`` of a member on standardised lengths; higher: the strong model."""
    signed = -length if member == "shortest-first" else length
    # clipped so that exp never overflows; standardised lengths are far inside the clip
    return 1.0 / (1.0 + np.exp(-np.clip(signed, -500.0, 500.0)))


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
        members = tuple(self.members) if isinstance(self.members, (list, tuple)) else ()
        unknown = [m for m in members if m not in MEMBERS]
        if not members or unknown or len(set(members)) != len(members):
            raise ValueError(f"members: expected distinct rules of {list(MEMBERS)}, got "
                             f"{self.members!r}")
        self.members = members
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
        # max over the members in order: the first best wins a tie; nan (equal costs:
        # no curve to compare) loses to any number, and the first member is kept
        best = max(self.members, key=lambda m: (np.nan_to_num(self.train_aiq[m],
                                                              nan=-np.inf),
                                                -self.members.index(m)))
        self._member = MEMBERS.index(best)

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
        value = array_of(arrays, "member", 1)
        allowed = [float(MEMBERS.index(m)) for m in self.members]
        if value.shape != (1,) or float(value[0]) not in allowed:
            raise ValueError(f"arrays: 'member': expected one index of {dict(enumerate(MEMBERS))}"
                             f" among the members {list(self.members)}, got {value.tolist()}")
        self._member = int(value[0])


def rule_record(rule: Router, threshold: float) -> dict[str, Any]:
    """A fitted rule and its threshold as JSON values, kept in the meta of a saved router.

    So that ``route score`` sets the router beside the rule of the router's own training
    split, wherever it scores it. ``threshold`` ``inf`` (no strong call) is ``None``.
    """
    if not isinstance(rule, RuleRouter):
        raise TypeError(f"rule_record: expected a RuleRouter, got {type(rule).__name__}")
    config, arrays = rule.to_state()
    return {"config": config, "arrays": {k: v.tolist() for k, v in arrays.items()},
            "threshold": None if math.isinf(threshold) else float(threshold)}


def rule_from_record(record: Mapping[str, Any]) -> tuple[RuleRouter, float]:
    """The rule and threshold :func:`rule_record` kept (``ValueError`` on a bad record)."""
    if not isinstance(record, Mapping) or set(record) != {"config", "arrays", "threshold"}:
        raise ValueError(f"rule: expected keys ['arrays', 'config', 'threshold'], got "
                         f"{sorted(record) if isinstance(record, Mapping) else record!r}")
    arrays = record["arrays"]
    if not isinstance(arrays, Mapping) or not isinstance(record["config"], Mapping):
        raise ValueError(f"rule: expected 'config' and 'arrays' objects, got "
                         f"{record['config']!r} and {arrays!r}")
    rule = RuleRouter.from_state(record["config"], {k: np.asarray(v, dtype=np.float64)
                                                    for k, v in arrays.items()})
    threshold = record["threshold"]
    if threshold is not None and not isinstance(threshold, (int, float)):
        raise ValueError(f"rule: 'threshold': expected a number or null, got {threshold!r}")
    assert isinstance(rule, RuleRouter)
    return rule, math.inf if threshold is None else float(threshold)
