"""What a model name selects: RouteLLM's router-NAME-THRESHOLD, fixed routes, downgrades."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.routers import make_router, save_router
from agents.serve.config import parse_config
from agents.serve.inputs import ApiError
from agents.serve.routes import Routes
from cost_envs.traces import load_traces

TRACES = Path(__file__).resolve().parents[1] / "cost_envs" / "data" / "example_traces.jsonl"
WEAK, STRONG = "gpt-4.1-nano", "gpt-4.1"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    data = load_traces(TRACES).select_models([WEAK, STRONG])
    paths = {}
    for kind in ("logistic", "cascade"):
        router = make_router(kind, WEAK, STRONG, n_features=16).fit(data)
        paths[kind] = tmp_path_factory.mktemp(kind) / "r"
        save_router(paths[kind], router, 0.5)
    return paths


def _config(path: Path, models: dict | None = None) -> dict:
    route = {"name": "demo", "path": str(path)}
    if models is not None:
        route["models"] = models
    return {"models": [{"name": n, "base_url": "http://127.0.0.1:1/v1", "input_price": p,
                        "output_price": 4 * p} for n, p in
                       (("small", 0.1), ("medium", 0.4), ("large", 2.0))],
            "routers": [route, {"name": "cheap", "model": "small", "fallbacks": ["large"]}]}


def test_names_select_routers_thresholds_and_fixed_routes(saved: dict[str, Path]) -> None:
    routes = Routes(parse_config(_config(saved["logistic"], {WEAK: "small", STRONG: "large"})))
    assert routes.names() == ["small", "medium", "large", "router-demo", "cheap"]
    assert routes.plan("medium", "hi").models == ("medium",)
    assert routes.plan("cheap", "hi").models == ("small", "large")
    low = routes.plan("router-demo-0.0", "a hard question")  # any score is above 0
    high = routes.plan("router-demo-1.0", "a hard question")
    assert (low.models, high.models) == (("large", "small"), ("small", "large"))
    assert low.route == "router-demo" and low.decision.point == 0.0
    assert routes.plan("router-demo", "x").decision.point == 0.5  # the saved point
    for name in ("router-demo-abc", "router-nope-0.5", "gpt-5"):
        with pytest.raises(ApiError, match=r"model: expected one of \['small'") as err:
            routes.plan(name, "x")
        assert err.value.status == 404 and err.value.param == "model"


def test_a_router_needs_its_models_configured(saved: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match=r"routers: demo: the router's model 'gpt-4.1-nano' "
                                         r"is not one of models .*map it with models"):
        Routes(parse_config(_config(saved["logistic"])))


def test_a_cascade_plans_its_weak_model_then_decides_on_its_answer(
        saved: dict[str, Path]) -> None:
    routes = Routes(parse_config(_config(saved["cascade"], {WEAK: "small", STRONG: "large"})))
    plan = routes.plan("router-demo-0.3", "a hard question")
    assert plan.models == ("small", "large") and plan.decision.needs_answer
    assert plan.cascade is routes.routers["demo"] and plan.decision.point == 0.3
    # after the weak answer: the cascade's own decision at the plan's point, mapped
    for point, expected in ((0.0, "large"), (1.0, None)):  # every score is in (0, 1)
        plan = routes.plan(f"router-demo-{point}", "a hard question")
        assert plan.escalation("a hard question", "I am not sure.") == expected
    fixed = routes.plan("cheap", "hi")
    assert fixed.cascade is None
    with pytest.raises(ValueError, match="cheap: not a cascade"):
        fixed.escalation("hi", "hello")
