"""The routers over logged outcomes: one family, one base class, one registry.

:data:`ROUTERS` maps a name to a router class; every router is a
:class:`~agents.routers.base.Router` over ``K`` models (two-model routers are
``K = 2``) and has

* ``features``: what it reads of a query, a
  :class:`~agents.routers.features.TextFeatures` (text statistics and a text
  encoder: hashed n-grams, MiniLM embeddings, or your own through
  :func:`register_text_features`);
* ``fit(train)``: learn from the training queries only;
* ``predict(data) -> (n, K)``: each model's win probability (a two-model router's
  ``scores(data)`` is the strong model's column: P(the weak model is wrong));
* ``decide(win, point)`` / ``route(data, point)``: the model that answers each query at
  an operating point (a threshold, or ``lam``), a step of its own so that another rule
  can replace it;
* ``to_state() -> (config, arrays)`` and ``from_state(config, arrays)``.

The routers: ``"logistic"``, ``"knn"`` and ``"cascade"`` (two-model,
:mod:`~agents.routers.two_model`), ``"priced"`` (two-model and cost-aware:
predicted accuracy gained per expected extra dollar, :mod:`~agents.routers.priced`),
``"rule"`` (two-model and training-free: the prompt-length ranking, shortest or longest
first, that scores best on the training data, :mod:`~agents.routers.rule`),
the anchors' routers (issue #39: the field's baselines, two-model, with documented fixed
settings): ``"cluster"`` (Avengers-Pro's cluster routing: each model's smoothed accuracy
on the query's nearest k-means cluster, :mod:`~agents.routers.cluster`), ``"mlp"`` and
``"svm"`` (scikit-learn classifiers of the weak model's failure,
:mod:`~agents.routers.classifiers`), ``"mf"`` (RouteLLM's matrix factorisation, in numpy,
:mod:`~agents.routers.mf`) and ``"elo"`` (RouteLLM's similarity-weighted Elo; plain Elo at
``gamma=0``, :mod:`~agents.routers.elo`); ``"multi-logistic"`` (any number of models,
:mod:`~agents.routers.multi`), ``"multi-priced"`` (the same with each call priced per
query, as ``"priced"`` prices it) and ``"multi-cluster"`` (cluster routing over any
number of models, traded against cost as ``"multi-logistic"`` trades,
:mod:`~agents.routers.cluster`) and ``"multi-rule"`` (the training-free rule over any
number of models: prompt-length bands up the training frontier of the models,
:mod:`~agents.routers.rule`).
Around them, one of each:
:mod:`~agents.routers.calibration` (the operating point, on training data),
:func:`~agents.routers.cv.cross_validate` (settings by folds of the training
data, mean validation AIQ), :mod:`~agents.routers.state` (the save format).
``cost-envs route`` (:mod:`agents.cli.route`) uses them from the command line.

Routing on logs has this one home. How a routing table scores decisions:
:mod:`~agents.routers.evaluation` (the exact scorer, APGR/CPT/AIQ with intervals, and
:func:`~agents.routers.evaluation.compare_with_random`, random routing matched per
resample at the same share and the same cost), reading :mod:`~agents.routers.inputs`
(call costs, decisions as probabilities), :mod:`~agents.routers.baselines` (the
literature's random, frontier, oracle and threshold routing) and
:mod:`~agents.routers.bootstrap` (every metric on one draw of resamples, in memory linear
in the queries). Routers acting in TraceRouting-v0 as allocators:
:class:`~agents.routers.policy.RouterPolicy` and
:class:`~agents.routers.random_router.RandomRouter` (the env's ``random-router``). The
budget-aware routing learners, CORL's tier controller and BoPO, live with the other
learners: :mod:`agents.learners.corl` and :mod:`agents.learners.bopo`. Importing this
package loads no torch.
"""

from agents.routers.base import (
    ROUTERS,
    STATE_FORMAT,
    Router,
    TwoModelRouter,
    make_router,
    register,
    router_class,
    router_from_state,
)
from agents.routers.calibration import (
    Calibration,
    LamCalibration,
    calibrate,
    calibrate_cost,
    calibrate_lam,
    calibrate_share,
)
from agents.routers.classifiers import MLPRouter, SVMRouter
from agents.routers.cluster import ClusterMultiRouter, ClusterRouter
from agents.routers.cv import CV_FOLDS, CV_GRIDS, CVChoice, cross_validate
from agents.routers.elo import EloRouter
from agents.routers.features import (
    TEXT_ENCODERS,
    TextFeatures,
    embedding_lookup,
    register_text_features,
)
from agents.routers.mf import MFRouter
from agents.routers.multi import SINGLE_MODELS, MultiRouter, sweep_metrics
from agents.routers.priced import PricedMultiRouter, PricedRouter
from agents.routers.rule import RuleMultiRouter, RuleRouter
from agents.routers.state import SavedRouter, load_router, save_router
from agents.routers.two_model import (
    CascadeRouter,
    KNNRouter,
    LogisticRouter,
    cascade_curve,
)

__all__ = [
    "CV_FOLDS", "CV_GRIDS", "ROUTERS", "SINGLE_MODELS", "STATE_FORMAT", "TEXT_ENCODERS",
    "CVChoice", "Calibration", "CascadeRouter", "ClusterMultiRouter", "ClusterRouter",
    "EloRouter", "KNNRouter", "LamCalibration", "LogisticRouter", "MFRouter", "MLPRouter",
    "MultiRouter", "PricedMultiRouter", "PricedRouter", "Router", "RuleMultiRouter", "RuleRouter",
    "SVMRouter",
    "SavedRouter", "TextFeatures", "TwoModelRouter", "calibrate", "calibrate_cost",
    "calibrate_lam", "calibrate_share", "cascade_curve", "cross_validate",
    "embedding_lookup", "load_router", "make_router", "register", "register_text_features",
    "router_class", "router_from_state", "save_router", "sweep_metrics",
]
