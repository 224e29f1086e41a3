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
    for name in ("router-nope-0.5", "gpt-5"):
        with pytest.raises(ApiError, match=r"model: expected one of \['small'") as err:
            routes.plan(name, "x")
        assert err.value.status == 404 and err.value.param == "model"


#: Every malformed or out-of-range threshold of a router whose score is a probability.
BAD_THRESHOLDS = ("1.5", "-0.5", "nan", "NaN", "inf", "-inf", "infinity", "0x1", "", "abc",
                  "1_0", " 0.5", "0.5 ", "1e309", "0.5-0.5", "1.0000001", "-1e-9", "½")


def test_one_parser_reads_every_threshold_form(saved: dict[str, Path]) -> None:
    routes = Routes(parse_config(_config(saved["logistic"], {WEAK: "small", STRONG: "large"})))
    for text in ("0", "1", "0.25", ".5", "5e-1", "+0.5", "1.", "-0", "1E0"):
        assert routes.plan(f"router-demo-{text}", "x").decision.point == float(text)
    for text in BAD_THRESHOLDS:  # 1.5 was routed, -0.5 a 404, nan a 400: one answer now
        with pytest.raises(ApiError) as err:
            routes.plan(f"router-demo-{text}", "x")
        assert (err.value.status, err.value.param) == (400, "model")
        assert err.value.message == (
            f"model: 'router-demo-{text}': expected 'router-demo' or "
            f"'router-demo-THRESHOLD' with THRESHOLD a number in [0, 1], got threshold "
            f"{text!r}")
    for name in ("router-nosuch-0.5", "router-demo0.5", "router-", "router-cheap",
                 "router-cheap-0.5", "router-small-0.5", "demo-0.5"):
        with pytest.raises(ApiError) as err:
            routes.plan(name, "x")
        assert (err.value.status, err.value.code) == (404, "model_not_found"), name


def test_a_threshold_belongs_to_the_longest_router_name(saved: dict[str, Path]) -> None:
    config = _config(saved["logistic"], {WEAK: "small", STRONG: "large"})
    config["routers"].append({"name": "demo-0", "path": str(saved["cascade"]),
                              "models": {WEAK: "small", STRONG: "large"}})
    routes = Routes(parse_config(config))
    assert routes.plan("router-demo-0", "x").cascade is routes.routers["demo-0"]  # its name
    at = routes.plan("router-demo-0-0.3", "x")
    assert at.cascade is routes.routers["demo-0"] and at.decision.point == 0.3
    assert routes.plan("router-demo-0.3", "x").decision.point == 0.3
    with pytest.raises(ApiError, match=r"'router-demo-0-': expected 'router-demo-0' or"):
        routes.plan("router-demo-0-", "x")


@pytest.mark.parametrize("kind", ["priced", "multi-logistic"])
def test_a_point_that_is_not_a_probability_is_a_finite_number_from_0(
        kind: str, tmp_path: Path) -> None:
    data = load_traces(TRACES).select_models([WEAK, STRONG])
    save_router(tmp_path / "r", make_router(kind, WEAK, STRONG, n_features=16).fit(data), 0.5)
    routes = Routes(parse_config(_config(tmp_path / "r", {WEAK: "small", STRONG: "large"})))
    for text in ("0", "1.5", "1e3"):  # accuracy per dollar, or lam: not capped at 1
        assert routes.plan(f"router-demo-{text}", "x").decision.point == float(text)
    for text in ("-0.5", "nan", "inf", "1e309", "0x1", ""):
        with pytest.raises(ApiError) as err:
            routes.plan(f"router-demo-{text}", "x")
        assert err.value.status == 400 and err.value.message.endswith(
            f"with THRESHOLD a finite number >= 0, got threshold {text!r}")


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
