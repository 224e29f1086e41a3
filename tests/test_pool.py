"""AgentPool validation and file loading, and the envs' acceptance of user pools."""

from __future__ import annotations

import copy
import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import cost_envs.pool
from cost_envs import FlightPlannerEnv, ToolBenchEnv, flight_planner_pool, toolbench_pool
from cost_envs.envs import flight_planner, toolbench
from cost_envs.pool import AgentPool, AgentSpec

SUFFIXES = (".json", ".yaml", ".yml")


def write_pool(path: Path, data: Any) -> Path:
    """Write plain data as JSON or YAML according to the suffix."""
    if path.suffix == ".json":
        path.write_text(json.dumps(data), encoding="utf-8")  # NaN/inf become NaN/Infinity
    else:
        path.write_text(yaml.safe_dump(data), encoding="utf-8")  # NaN/inf become .nan/.inf
    return path


def small_pool_dict() -> dict[str, Any]:
    return toolbench_pool(3).to_dict()


# ------------------------------------------------------------------------------ round trip
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_file_round_trips(tmp_path: Path, suffix: str) -> None:
    pool = toolbench_pool(8)
    path = write_pool(tmp_path / f"pool{suffix}", pool.to_dict())
    loaded = AgentPool.from_file(path)
    assert loaded == pool
    assert loaded.to_dict() == pool.to_dict()
    np.testing.assert_array_equal(loaded.costs, pool.costs)


def test_str_path_and_uppercase_suffix(tmp_path: Path) -> None:
    path = write_pool(tmp_path / "POOL.json", small_pool_dict())
    path = path.rename(tmp_path / "POOL.JSON")
    assert AgentPool.from_file(str(path)) == toolbench_pool(3)


def test_module_docstring_yaml_example_loads(tmp_path: Path) -> None:
    # the schema example users copy from the docs must itself be a valid pool file; it
    # writes FLOPs as 2.0e8, as people do, which YAML 1.1 (PyYAML) reads as a string
    example = cost_envs.pool.__doc__.split("::", 1)[1]
    path = tmp_path / "example.yaml"
    path.write_text(textwrap.dedent(example), encoding="utf-8")
    pool = AgentPool.from_file(path)
    assert pool.names == ("bm25",)
    assert pool.agents[0].flops == 2.0e8


# --------------------------------------------------------------------------- bad files
def _edit(change: Any) -> dict[str, Any]:
    data = small_pool_dict()
    change(data)
    return data


def _set_agent(key: str, value: Any, index: int = 0) -> Any:
    return lambda d: d["agents"][index].__setitem__(key, value)


FIRST_NAME = small_pool_dict()["agents"][0]["name"]

# name -> (data edit, substrings the message must contain besides the path)
BAD_POOLS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "unknown top key": (lambda d: d.__setitem__("price_table", {}), ("price_table", "expected")),
    "unknown agent key": (_set_agent("price", 1.0), ("agents[0]", "price", "expected")),
    "negative cost": (_set_agent("cost", -0.5), ("agents[0]", "cost", "expected", ">= 0")),
    "negative flops": (_set_agent("flops", -1.0), ("agents[0]", "flops", "expected", ">= 0")),
    "nan cost": (_set_agent("cost", float("nan")), ("agents[0]", "cost", "expected", "finite")),
    "inf cost": (_set_agent("cost", float("inf")), ("agents[0]", "cost", "expected", "finite")),
    "string cost": (_set_agent("cost", "cheap"), ("agents[0]", "cost", "expected")),
    "bool cost": (_set_agent("cost", True), ("agents[0]", "cost", "expected")),
    "short capability": (
        _set_agent("capability", [0.5] * 5),
        ("capability", "expected 6"),
    ),
    "long capability": (
        _set_agent("capability", [0.5] * 7, index=2),
        ("capability", "expected 6"),
    ),
    "capability above 1": (
        _set_agent("capability", [1.5, 0, 0, 0, 0, 0]),
        ("agents[0]", "capability", "expected", "[0, 1]"),
    ),
    "capability below 0": (
        _set_agent("capability", [0, -0.1, 0, 0, 0, 0], index=1),
        ("agents[1]", "capability", "expected", "[0, 1]"),
    ),
    "capability not a list": (
        _set_agent("capability", "strong"),
        ("agents[0]", "capability", "expected"),
    ),
    "duplicate names": (
        lambda d: d["agents"][1].__setitem__("name", d["agents"][0]["name"]),
        ("name", "duplicate", FIRST_NAME),
    ),
    "missing agent key": (
        lambda d: d["agents"][0].pop("cost"),
        ("agents[0]", "missing", "cost", "expected"),
    ),
    "missing top key": (lambda d: d.pop("skills"), ("missing", "skills", "expected")),
    "empty agents": (lambda d: d.__setitem__("agents", []), ("agents", "expected")),
    "agents not a list": (lambda d: d.__setitem__("agents", {"a": 1}), ("agents", "expected")),
    "empty name": (_set_agent("name", ""), ("name", "expected")),
}


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
@pytest.mark.parametrize("case", sorted(BAD_POOLS))
def test_bad_pool_file_raises_naming_file_key_and_expectation(
    tmp_path: Path, suffix: str, case: str
) -> None:
    edit, fragments = BAD_POOLS[case]
    path = write_pool(tmp_path / f"pool{suffix}", _edit(edit))
    with pytest.raises(ValueError) as excinfo:
        AgentPool.from_file(path)
    message = str(excinfo.value)
    for fragment in (str(path), *fragments):
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text("- just\n- a list\n", encoding="utf-8")
    with pytest.raises(ValueError, match="expected a mapping") as excinfo:
        AgentPool.from_file(path)
    assert str(path) in str(excinfo.value)


@pytest.mark.parametrize("name", ["pool.txt", "pool.toml", "pool", "pool.json.bak"])
def test_wrong_suffix(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(json.dumps(small_pool_dict()), encoding="utf-8")
    with pytest.raises(ValueError) as excinfo:
        AgentPool.from_file(path)
    message = str(excinfo.value)
    assert str(path) in message and ".json" in message and ".yaml" in message


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("pool.json", '{"skills": ["a"], "agents": [', "JSON"),
        ("pool.json", "", "JSON"),
        ("pool.yaml", "skills: [a, b\nagents: {", "YAML"),
        ("pool.yml", "skills:\n  - a\n bad-indent: 1\n", "YAML"),
    ],
)
def test_invalid_syntax(tmp_path: Path, name: str, text: str, fragment: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as excinfo:
        AgentPool.from_file(path)
    message = str(excinfo.value)
    assert str(path) in message and fragment in message and "valid" in message


# ----------------------------------------------------------------------- AgentSpec / Pool
def test_pool_arrays_are_read_only() -> None:
    # envs share the pool's arrays; a write through one env must not reprice the others
    pool = toolbench_pool(3)
    for array in (pool.costs, pool.flops, pool.capabilities):
        with pytest.raises(ValueError):
            array[0] = 1.0


def test_direct_construction_validates() -> None:
    spec = toolbench_pool(1).agents[0]
    with pytest.raises(ValueError, match="capability"):
        AgentPool((spec,), ("only_one_skill",))
    with pytest.raises(ValueError, match="duplicate"):
        AgentPool((spec, spec), toolbench.SKILLS)
    with pytest.raises(ValueError, match="cost"):
        AgentSpec("x", "llm", -1.0, 0.0, (0.0,) * 6)


# ----------------------------------------------------------------------- envs and pools
def _pool_forms(pool: AgentPool, tmp_path: Path) -> dict[str, Any]:
    return {
        "AgentPool": pool,
        "dict": pool.to_dict(),
        "json path": write_pool(tmp_path / "p.json", pool.to_dict()),
        "yaml str path": str(write_pool(tmp_path / "p.yaml", pool.to_dict())),
    }


def _check_env_uses(env: Any, pool: AgentPool) -> None:
    assert env.pool == pool
    assert env.action_space.n == len(pool)
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.ones(len(pool), dtype=np.int8))
    assert info["cost"] == pytest.approx(float(pool.costs.sum()))


@pytest.mark.parametrize("form", ["AgentPool", "dict", "json path", "yaml str path"])
def test_toolbench_accepts_custom_pool(tmp_path: Path, form: str) -> None:
    specs = toolbench_pool(12).agents
    pool = AgentPool((specs[5], specs[2], specs[0]), toolbench.SKILLS)  # reordered subset
    _check_env_uses(ToolBenchEnv(pool=_pool_forms(pool, tmp_path)[form]), pool)


@pytest.mark.parametrize("form", ["AgentPool", "dict", "json path", "yaml str path"])
def test_flight_planner_accepts_custom_pool(tmp_path: Path, form: str) -> None:
    specs = {a.role: a for a in flight_planner_pool().agents}  # one agent per role
    pool = AgentPool(tuple(specs.values()), flight_planner.SKILLS)
    _check_env_uses(FlightPlannerEnv(pool=_pool_forms(pool, tmp_path)[form]), pool)


def test_toolbench_rejects_pool_with_other_skills() -> None:
    with pytest.raises(ValueError, match="skills"):
        ToolBenchEnv(pool=flight_planner_pool())
    reordered = toolbench_pool(3).to_dict()
    reordered["skills"] = list(reversed(reordered["skills"]))  # same names, wrong order
    with pytest.raises(ValueError, match="skills"):
        ToolBenchEnv(pool=reordered)


def _flight_pool_with_roles(*roles: str) -> AgentPool:
    return AgentPool(
        tuple(
            AgentSpec(f"agent{i}", role, 0.001, 1e9, (0.5, 0.5, 0.5))
            for i, role in enumerate(roles)
        ),
        flight_planner.SKILLS,
    )


def test_flight_planner_rejects_pools_with_wrong_skills_or_roles() -> None:
    with pytest.raises(ValueError, match="skills"):
        FlightPlannerEnv(pool=toolbench_pool(3))
    with pytest.raises(ValueError, match="llm"):
        FlightPlannerEnv(pool=_flight_pool_with_roles("planner", "search", "llm"))
    with pytest.raises(ValueError, match="planner"):
        FlightPlannerEnv(pool=_flight_pool_with_roles("search", "validator"))
    with pytest.raises(ValueError, match="search"):
        FlightPlannerEnv(pool=_flight_pool_with_roles("planner", "validator"))
    # the validator is optional: a planner and a searcher can already book a trip
    assert FlightPlannerEnv(pool=_flight_pool_with_roles("planner", "search")).action_space.n == 2


@pytest.mark.parametrize("k", range(1, 13))
def test_toolbench_pool_size(k: int) -> None:
    env = ToolBenchEnv(pool_size=k)
    assert env.action_space.n == k and env.action_space.shape == (k,)
    assert env.pool == toolbench_pool(k)
    env.reset(seed=k)
    env.step(np.ones(k, dtype=np.int8))


@pytest.mark.parametrize("k", [0, 13, -1])
def test_toolbench_pool_size_out_of_range(k: int) -> None:
    with pytest.raises(ValueError, match="pool_size"):
        ToolBenchEnv(pool_size=k)


def test_env_does_not_mutate_user_dict() -> None:
    data = small_pool_dict()
    before = copy.deepcopy(data)
    ToolBenchEnv(pool=data)
    assert data == before


def test_toolbench_rejects_pool_and_pool_size_together() -> None:
    with pytest.raises(ValueError, match="pool_size=4"):
        ToolBenchEnv(pool=toolbench_pool(4), pool_size=4)


def test_flight_planner_without_validator_never_asks_for_validation() -> None:
    env = FlightPlannerEnv(pool=_flight_pool_with_roles("planner", "search"))
    embedding = env.observation_layout["task_embedding"]
    obs, _ = env.reset(seed=0)
    for _ in range(200):
        obs, _, terminated, truncated, _ = env.step(np.ones(2, dtype=np.int8))
        assert obs[embedding][2] == 0.0  # the "validate" need of the embedding
        if terminated or truncated:
            obs, _ = env.reset()
