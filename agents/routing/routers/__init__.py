"""The routers over logged outcomes: one family, one base class, one registry.

:data:`ROUTERS` maps a name to a router class; every router is a
:class:`~agents.routing.routers.base.Router` over ``K`` models (two-model routers are
``K = 2``) and has

* ``features``: what it reads of a query, a
  :class:`~agents.routing.routers.features.TextFeatures` (text statistics and a text
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
:mod:`~agents.routing.routers.two_model`), ``"priced"`` (two-model and cost-aware:
predicted accuracy gained per expected extra dollar, :mod:`~agents.routing.routers.priced`),
``"multi-logistic"`` (any number of models, :mod:`~agents.routing.routers.multi`) and
``"multi-priced"`` (the same with each call priced per query, as ``"priced"`` prices it).
Around them, one of each:
:mod:`~agents.routing.routers.calibration` (the operating point, on training data),
:func:`~agents.routing.routers.cv.cross_validate` (settings by folds of the training
data, mean validation AIQ), :mod:`~agents.routing.routers.state` (the save format).
``cost-envs route`` (:mod:`agents.cli.route`) uses them from the command line. Importing
this package loads no torch.
"""

from agents.routing.routers.base import (
    ROUTERS,
    STATE_FORMAT,
    Router,
    TwoModelRouter,
    make_router,
    register,
    router_class,
    router_from_state,
)
from agents.routing.routers.calibration import (
    Calibration,
    LamCalibration,
    calibrate,
    calibrate_cost,
    calibrate_lam,
    calibrate_share,
)
from agents.routing.routers.cv import CV_FOLDS, CV_GRIDS, CVChoice, cross_validate
from agents.routing.routers.features import (
    TEXT_ENCODERS,
    TextFeatures,
    embedding_lookup,
    register_text_features,
)
from agents.routing.routers.multi import SINGLE_MODELS, MultiRouter, sweep_metrics
from agents.routing.routers.priced import PricedMultiRouter, PricedRouter
from agents.routing.routers.state import SavedRouter, load_router, save_router
from agents.routing.routers.two_model import (
    CascadeRouter,
    KNNRouter,
    LogisticRouter,
    cascade_curve,
)

__all__ = [
    "CV_FOLDS", "CV_GRIDS", "ROUTERS", "SINGLE_MODELS", "STATE_FORMAT", "TEXT_ENCODERS",
    "CVChoice", "Calibration", "CascadeRouter", "KNNRouter", "LamCalibration",
    "LogisticRouter", "MultiRouter", "PricedMultiRouter", "PricedRouter", "Router",
    "SavedRouter", "TextFeatures",
    "TwoModelRouter", "calibrate", "calibrate_cost", "calibrate_lam", "calibrate_share",
    "cascade_curve", "cross_validate", "embedding_lookup", "load_router", "make_router",
    "register", "register_text_features", "router_class", "router_from_state",
    "save_router", "sweep_metrics",
]
