"""Every malformed action, in every env form, gets one ValueError line and changes nothing.

Issue #26: the batched env let numpy's own errors through (and an ``__array__`` that raises
escaped as that exception), a ``bytearray`` or a masked array was taken for bits, and the
forms disagreed. Here each class of malformed action is tried on every registered id as a
single env, a batched env (a whole batch and one bad row), with a hard budget, and on every
multi-tenant id (one bad tenant); after the refusal the env must step exactly as a twin
that never saw the bad action.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import cost_envs
from cost_envs.multiagent import MULTIAGENT_ENV_IDS, parallel_env
from cost_envs.registration import VECTOR_IDS

IDS = [env_id for env_id in cost_envs.ENV_IDS if "TraceRouting" not in env_id]


class RaisingArray:
    """An object whose conversion to an array fails with its own exception."""

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise RuntimeError("no array here")


MALFORMED: dict[str, Callable[[int], Any]] = {
    "too long": lambda m: np.zeros(m + 1, np.int8),
    "too short": lambda m: [0] * (m - 1),
    "nested once more": lambda m: np.zeros((1, m), np.int8),
    "a 2": lambda m: np.full(m, 2),
    "a -1 as int8": lambda m: np.full(m, -1, np.int8),
    "a half": lambda m: np.full(m, 0.5),
    "NaN": lambda m: np.full(m, np.nan),
    "inf": lambda m: np.full(m, np.inf),
    "text": lambda m: np.array(["0"] * m),
    "a string": lambda m: "0" * m,
    "objects": lambda m: np.array([0] * m, dtype=object),
    "complex": lambda m: np.zeros(m, complex),
    "bytearray": lambda m: bytearray(m),
    "bytes": lambda m: bytes(m),
    "masked array": lambda m: np.ma.array(np.zeros(m, np.int8), mask=[True] + [False] * (m - 1)),
    "__array__ raises": lambda m: RaisingArray(),
    "ragged": lambda m: [[0], [0, 1]],
    "a dict": lambda m: {"call": 1},
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))


@pytest.fixture(scope="module")
def twins() -> Iterator[Callable[..., tuple[Any, Any]]]:
    """``twins(key, make)``: two envs ``make`` builds, made once per key for the module.

    Each test resets both with the same seed before it tries its action, so a test starts
    from the same state on a pair made before as on a new one (the contract: the same
    seed, the same trajectory); making them was most of each test's time.
    """
    made: dict[Any, tuple[Any, Any]] = {}

    def twins(key: Any, make: Callable[[], Any]) -> tuple[Any, Any]:
        if key not in made:
            made[key] = (make(), make())
        return made[key]

    yield twins
    for pair in made.values():
        for env in pair:
            env.close()


def _refused(step: Callable[[Any], Any], action: Any, space: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        step(action)
    message = str(excinfo.value)
    assert "\n" not in message and f"expected an element of MultiBinary({space}" in message


@pytest.mark.parametrize("kind", list(MALFORMED))
@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("budget", [None, 0.05], ids=["free", "hard budget"])
def test_a_single_env_refuses_it_and_steps_on_as_its_twin(env_id, kind, budget, twins):
    kwargs = {} if budget is None else {"budget": budget}
    env, twin = twins(("single", env_id, budget), lambda: gym.make(env_id, **kwargs))
    env.reset(seed=3)
    twin.reset(seed=3)
    m = env.action_space.n
    _refused(env.step, MALFORMED[kind](m), str(m))
    good = np.zeros(m, np.int8)
    good[0] = 1
    assert _same(env.step(good), twin.step(good))


@pytest.mark.parametrize("kind", list(MALFORMED))
@pytest.mark.parametrize("env_id", [env_id for env_id in VECTOR_IDS if env_id in IDS])
@pytest.mark.parametrize("where", ["whole batch", "one row"])
def test_a_batched_env_refuses_it_and_steps_on_as_its_twin(env_id, kind, where, twins):
    env, twin = twins(("batched", env_id), lambda: gym.make_vec(
        env_id, num_envs=3, vectorization_mode="vector_entry_point"))
    env.reset(seed=3)
    twin.reset(seed=3)
    m = env.single_action_space.n
    bad = MALFORMED[kind](m)
    actions = bad if where == "whole batch" else [np.zeros(m, np.int8), np.ones(m, np.int8),
                                                   bad]
    _refused(env.step, actions, f"(3, {m})")
    good = np.zeros((3, m), np.int8)
    good[:, 0] = 1
    assert _same(env.step(good), twin.step(good))


@pytest.mark.parametrize("kind", list(MALFORMED))
@pytest.mark.parametrize("env_id", sorted(MULTIAGENT_ENV_IDS))
def test_a_multi_tenant_env_refuses_it_before_any_tenant_steps(env_id, kind, twins):
    env, twin = twins(("multi-tenant", env_id), lambda: parallel_env(env_id))
    env.reset(seed=3)
    twin.reset(seed=3)
    m = env.action_space(env.agents[0]).n
    good = {agent: np.eye(m, dtype=np.int8)[0] for agent in env.agents}
    # the last tenant's action is the bad one: the others must not have stepped or spent
    _refused(env.step, {**good, env.agents[-1]: MALFORMED[kind](m)}, str(m))
    assert _same(env.step(good), twin.step(good))


VALID: dict[str, Callable[[np.ndarray], Any]] = {
    "int8": lambda bits: bits.astype(np.int8),
    "bool": lambda bits: bits.astype(bool),
    "float32": lambda bits: bits.astype(np.float32),
    "int64 list": lambda bits: bits.astype(np.int64).tolist(),
    "tuple": lambda bits: tuple(bits.tolist()),
    "read-only": lambda bits: _read_only(bits.astype(np.int8)),
    "non-contiguous": lambda bits: np.repeat(bits.astype(np.int8), 2, axis=-1)[..., ::2],
}


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("kind", list(VALID))
@pytest.mark.parametrize("form", ["single", "batched", "multi-tenant"])
def test_every_well_formed_action_steps_as_int8_does(kind, form):
    # The check refuses only malformed actions: each valid form steps as the int8 one.
    if form == "multi-tenant":
        make = lambda: parallel_env("cost_envs/MultiTenantToolBench-v0")  # noqa: E731
    elif form == "batched":
        make = lambda: gym.make_vec("cost_envs/ToolBench-v0", num_envs=64,  # noqa: E731
                                    vectorization_mode="vector_entry_point")
    else:
        make = lambda: gym.make("cost_envs/ToolBench-v0")  # noqa: E731
    env, twin = make(), make()
    env.reset(seed=3)
    twin.reset(seed=3)
    if form == "multi-tenant":
        bits = {agent: np.eye(8, dtype=np.int8)[1] for agent in env.agents}
        assert _same(env.step({a: VALID[kind](b) for a, b in bits.items()}), twin.step(bits))
    else:
        shape = (64, 8) if form == "batched" else (8,)  # 512 bits: the large-batch path
        bits = np.random.default_rng(0).integers(0, 2, shape).astype(np.int8)
        assert _same(env.step(VALID[kind](bits)), twin.step(bits))
