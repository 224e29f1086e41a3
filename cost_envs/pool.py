"""Agent pools: who can be called, at what price, with which capabilities.

An :class:`AgentPool` is the allocator's menu. Each :class:`AgentSpec` has a name, a role
(``planner``, ``retriever``, ``llm`` ...), a money cost per call, a FLOP count per call and
a capability vector over the environment's skills, each entry in ``[0, 1]``. Pools are
immutable and validated at construction, so an environment never sees a negative price or
a capability vector of the wrong length. Users bring their own pool as a dict, a JSON file
or a YAML file (see :meth:`AgentPool.from_file`)::

    skills: [retrieval, math, web, code, reasoning, writing]
    agents:
      - {name: bm25, role: retriever, cost: 0.0004, flops: 2.0e8,
         capability: [0.6, 0, 0.1, 0, 0, 0]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cost_envs.config import (
    integer,
    number,
    probability,
    records,
    reject_unknown,
    require_keys,
    text,
)
from cost_envs.config_files import FileTable

_AGENT_KEYS = ("name", "role", "cost", "flops", "capability")
_POOL_KEYS = ("skills", "agents")


@dataclass(frozen=True)
class AgentSpec:
    """One callable sub-agent.

    Args:
        name: Unique name within its pool.
        role: Free-form role label; environments may require particular roles.
        cost: Money spent per call (the presets use US dollars). Finite, >= 0.
        flops: Floating-point operations per call. Finite, >= 0.
        capability: Strength per skill of the pool, each in ``[0, 1]``.
    """

    name: str
    role: str
    cost: float
    flops: float
    capability: tuple[float, ...]

    def __post_init__(self) -> None:
        text(self.name, "agent name")
        where = f"agent {self.name!r}"
        text(self.role, "role", where=where)
        for key in ("cost", "flops"):
            object.__setattr__(self, key, number(getattr(self, key), key, minimum=0, where=where))
        if isinstance(self.capability, (str, bytes)) or not isinstance(
            self.capability, (Sequence, np.ndarray)
        ):
            raise ValueError(
                f"{where}: capability: expected a list of numbers in [0, 1], "
                f"got {self.capability!r}"
            )
        values = tuple(self.capability)
        for i, value in enumerate(values):
            probability(value, f"capability[{i}]", where=where)
        object.__setattr__(self, "capability", tuple(float(v) for v in values))


@dataclass(frozen=True)
class AgentPool(FileTable):
    """An ordered, validated set of agents sharing one skill vocabulary.

    Bit ``i`` of an environment's ``MultiBinary(m)`` action calls ``agents[i]``.

    Args:
        agents: The agents, in action order. Names must be unique.
        skills: Names of the capability dimensions; every capability vector has this length.
        source: The file the pool was read from (``""`` if none): errors that an env
            raises about the pool name it.
    """

    agents: tuple[AgentSpec, ...]
    skills: tuple[str, ...]
    source: str = field(default="", repr=False, compare=False)
    costs: np.ndarray = field(init=False, repr=False, compare=False)
    flops: np.ndarray = field(init=False, repr=False, compare=False)
    capabilities: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        agents = tuple(self.agents)
        skills = tuple(self.skills)
        if not agents:
            raise ValueError("agent pool: expected at least one agent, got none")
        if not skills or not all(isinstance(s, str) and s for s in skills):
            raise ValueError(f"agent pool: skills: expected non-empty strings, got {skills!r}")
        if len(set(skills)) != len(skills):
            raise ValueError(f"agent pool: skills: expected unique names, got {list(skills)!r}")
        seen: set[str] = set()
        for i, agent in enumerate(agents):
            if not isinstance(agent, AgentSpec):
                raise ValueError(f"agents[{i}]: expected an AgentSpec, got {agent!r}")
            if agent.name in seen:
                raise ValueError(f"agents[{i}]: name: {agent.name!r} is a duplicate; "
                                 "expected unique agent names")
            seen.add(agent.name)
            if len(agent.capability) != len(skills):
                raise ValueError(
                    f"agents[{i}]: agent {agent.name!r}: capability: expected {len(skills)} "
                    f"values (one per skill {list(skills)}), got {len(agent.capability)}"
                )
        object.__setattr__(self, "agents", agents)
        object.__setattr__(self, "skills", skills)
        for name, values in (
            ("costs", [a.cost for a in agents]),
            ("flops", [a.flops for a in agents]),
            ("capabilities", [a.capability for a in agents]),
        ):
            array = np.array(values, dtype=np.float64)
            array.flags.writeable = False  # shared by every env built on this pool
            object.__setattr__(self, name, array)

    def __len__(self) -> int:
        return len(self.agents)

    @property
    def label(self) -> str:
        """``"pool <file>"``, or ``"pool"`` for a pool not read from a file."""
        return f"pool {self.source}" if self.source else "pool"

    @property
    def names(self) -> tuple[str, ...]:
        """Agent names in action order."""
        return tuple(a.name for a in self.agents)

    @property
    def roles(self) -> tuple[str, ...]:
        """Agent roles in action order."""
        return tuple(a.role for a in self.agents)

    def index(self, name: str) -> int:
        """Position of the agent called ``name`` (its action bit)."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no agent named {name!r}; agents are {list(self.names)}") from None

    def subset(self, size: int) -> AgentPool:
        """The first ``size`` agents, as a new pool."""
        integer(size, "pool_size", minimum=1, maximum=len(self))
        return AgentPool(self.agents[:size], self.skills, self.source)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form accepted by :meth:`from_dict` (JSON/YAML friendly)."""
        return {
            "skills": list(self.skills),
            "agents": [
                {
                    "name": a.name,
                    "role": a.role,
                    "cost": a.cost,
                    "flops": a.flops,
                    "capability": list(a.capability),
                }
                for a in self.agents
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>",
                  file: str = "") -> AgentPool:
        """Build a pool from plain data, rejecting anything unexpected.

        Args:
            data: ``{"skills": [...], "agents": [{name, role, cost, flops, capability}, ...]}``.
            source: Where the data came from; prefixed to every error message.
            file: The file it was read from, kept as the pool's ``source`` (``""``: none).

        Raises:
            ValueError: Naming ``source``, the offending key and what was expected.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: expected a mapping with keys {list(_POOL_KEYS)}")
        reject_unknown(data, _POOL_KEYS, source)
        require_keys(data, _POOL_KEYS, source)
        skills = data["skills"]
        if not isinstance(skills, list) or not all(isinstance(s, str) and s for s in skills):
            raise ValueError(f"{source}: skills: expected a list of skill names, got {skills!r}")
        agents = records(
            data["agents"], "agents", source,
            lambda entry: AgentSpec(**{k: entry[k] for k in _AGENT_KEYS}),
            allowed=_AGENT_KEYS, required=_AGENT_KEYS,
            not_a_mapping=lambda entry: f"expected a mapping with keys {list(_AGENT_KEYS)}")
        try:
            return cls(tuple(agents), tuple(skills), source=file)
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None


def coerce_pool(pool: AgentPool | Mapping[str, Any] | str | Path) -> AgentPool:
    """Accept a pool, its dict form or a path to a pool file."""
    if isinstance(pool, AgentPool):
        return pool
    if isinstance(pool, Mapping):
        return AgentPool.from_dict(pool)
    if isinstance(pool, (str, Path)):
        return AgentPool.from_file(pool)
    raise ValueError(f"pool: expected an AgentPool, a mapping or a file path, got {pool!r}")
