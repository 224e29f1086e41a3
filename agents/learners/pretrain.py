"""Pretrain the frozen base W once per env family; adapters then specialise it per pool.

A randomly initialised frozen base makes LoRA learn several times slower than a plain MLP
(the issue measured about 4.5x on this kind of machine), so the default base is
pretrained: one encoder is trained, multi-task, on :class:`GreedyHeuristic` labels over
``n_pools`` randomised agent pools of the env family, each pool with a head of its own.
The heads are thrown away; the encoder, which has learned what the tasks need from the
observation alone (it never sees the pool), is frozen and shipped. A deployment then
learns a LoRA adapter and a new head for its own pool: "pretrain once, adapt per
deployment".

Randomised pools:

* ToolBench: a random subset of 3-12 tools of the 12-tool catalogue, each price scaled
  by ``exp(N(0, 0.5))``.
* FlightPlanner: the six preset agents, each price scaled by ``exp(N(0, 0.5))`` and each
  capability by ``U(0.7, 1.15)`` (clipped to 1), each validator dropped with chance 1/4.

The shipped bases in ``agents/learners/pretrained/`` were made by ``cost-envs pretrain`` with the
defaults below; their JSON config records the recipe, and a test rebuilds them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from safetensors.torch import save
from torch import nn
from torch.nn import functional as F

from agents.files import write_files_atomic
from agents.learners.checkpoint_paths import base_files
from agents.learners.checkpoint_paths import (  # torch-free; re-exported here
    check_base_writable as check_base_writable,
)
from agents.learners.common.policies import check_base, tanh_mlp
from agents.learners.supervised import greedy_traces
from agents.progress import progress_bar
from agents.seeds import PRETRAIN_TASK_SEED
from cost_envs.envs.flight_planner import flight_planner_pool
from cost_envs.envs.toolbench import TOOLBENCH_CATALOGUE
from cost_envs.pool import AgentPool, AgentSpec

#: Task seeds of the pretraining traces start here, away from the evaluation seeds (0..)
#: and from the training seeds of :mod:`agents.learners.training`.
#: Where the shipped bases live, one ``<EnvName>.safetensors`` + ``.json`` per env.
PRETRAINED_DIR = Path(__file__).parent / "pretrained"


def _env_name(env_id: str) -> str:
    return env_id.split("/")[-1]


def pretrained_base_path(env_id: str) -> Path:
    """The shipped base of ``env_id``; ``FileNotFoundError`` saying how to make one."""
    path = PRETRAINED_DIR / f"{_env_name(env_id)}.safetensors"
    if not path.is_file():
        shipped = sorted(p.stem for p in PRETRAINED_DIR.glob("*.safetensors"))
        raise FileNotFoundError(
            f"no pretrained base for {env_id} (shipped: {shipped}); make one with "
            f"`cost-envs pretrain --env {env_id} --out PATH` (it writes PATH.safetensors "
            "and PATH.json) and pass PATH.safetensors as base, or use base='random'"
        )
    return path


def _scaled(spec: AgentSpec, price: float, capability: Iterable[float]) -> AgentSpec:
    return AgentSpec(spec.name, spec.role, spec.cost * price, spec.flops,
                     tuple(float(c) for c in capability))


def randomized_pool(env_id: str, rng: np.random.Generator) -> AgentPool:
    """One random pool of ``env_id``'s family (module docstring)."""
    name = _env_name(env_id)
    if name == "ToolBench-v0":
        catalogue = TOOLBENCH_CATALOGUE
        size = int(rng.integers(3, len(catalogue) + 1))
        chosen = np.sort(rng.choice(len(catalogue), size, replace=False))
        agents = tuple(_scaled(catalogue.agents[i], float(np.exp(rng.normal(0.0, 0.5))),
                               catalogue.agents[i].capability) for i in chosen)
        return AgentPool(agents, catalogue.skills)
    if name in ("FlightPlanner-v0", "FlightPlanner-v1"):  # v1: the same pools, more observed
        preset = flight_planner_pool()
        kept: list[AgentSpec] = []
        for spec in preset.agents:
            if spec.role == "validator" and rng.random() < 0.25:
                continue
            capability = np.minimum(np.asarray(spec.capability) * rng.uniform(0.7, 1.15), 1.0)
            kept.append(_scaled(spec, float(np.exp(rng.normal(0.0, 0.5))), capability))
        return AgentPool(tuple(kept), preset.skills)
    raise ValueError(f"no randomised pool family for {env_id!r}; expected "
                     "cost_envs/ToolBench-v0 or cost_envs/FlightPlanner-v0 or -v1")


def pretrain_base(
    env_id: str,
    n_pools: int = 24,
    episodes: int = 200,
    steps: int = 3000,
    hidden_sizes: Sequence[int] = (64, 64),
    seed: int = 0,
    progress: bool = False,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train the base encoder; returns its state dict and JSON config (with the recipe).

    Args:
        env_id: A registered id with a pool family (see :func:`randomized_pool`).
        n_pools: Randomised pools.
        episodes: Greedy episodes per pool.
        steps: Adam steps (batch 256, one pool per step, round-robin).
        hidden_sizes: Encoder widths.
        seed: Seed of the pools, the tasks and the initialisation.
        progress: Bars of the pools' traces and of the Adam steps on a terminal
            (:mod:`agents.progress`); pretraining takes minutes.
    """
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    datasets = []
    with progress_bar(n_pools, "pretrain: pool traces", progress, "pool") as bar:
        for index in range(n_pools):
            env = gym.make(env_id, pool=randomized_pool(env_id, rng))
            traces = greedy_traces(env, episodes, seed=PRETRAIN_TASK_SEED + seed * 1000 + index)
            datasets.append((torch.as_tensor(traces.observations),
                             torch.as_tensor(traces.labels)))
            env.close()
            bar.update(1)
    obs_dim = datasets[0][0].shape[1]
    encoder = tanh_mlp(obs_dim, hidden_sizes)
    width = int(hidden_sizes[-1])
    heads = nn.ModuleList(nn.Linear(width, labels.shape[1]) for _, labels in datasets)
    optimizer = torch.optim.Adam([*encoder.parameters(), *heads.parameters()], lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    bar = progress_bar(steps, "pretrain: steps", progress, "step")
    for step in range(steps):
        pool = step % n_pools
        obs, labels = datasets[pool]
        rows = torch.randint(len(obs), (256,), generator=generator)
        logits = heads[pool](encoder(obs[rows]))
        loss = F.binary_cross_entropy_with_logits(logits, labels[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        bar.update(1)
    bar.close()
    window = max(1, min(n_pools * 4, steps // 4))
    config = {
        "env_id": env_id,
        "obs_dim": obs_dim,
        "hidden_sizes": [int(size) for size in hidden_sizes],
        "recipe": {"n_pools": n_pools, "episodes": episodes, "steps": steps, "seed": seed,
                   "task_seeds": f"{PRETRAIN_TASK_SEED} + 1000 * seed + pool",
                   "labels": "GreedyHeuristic(threshold=0.7)", "batch_size": 256,
                   "optimizer": "Adam(lr=1e-3)"},
        "first_loss": float(np.mean(losses[:window])),
        "final_loss": float(np.mean(losses[-window:])),
        "torch": torch.__version__,
    }
    state = {name: tensor.detach().clone().contiguous()
             for name, tensor in encoder.state_dict().items()}
    return state, config


def save_base(state: dict[str, torch.Tensor], config: dict[str, Any], path: str | Path) -> Path:
    """Write ``<path>.safetensors`` and ``<path>.json``; returns the weights path.

    A ``path`` already ending in ``.safetensors`` is used as is. The pair is checked as
    :func:`agents.learners.common.policies.load_base` will check it, so a base that saves
    also loads.
    """
    weights, config_path = base_files(path)
    check_base(state, config, f"base encoder {weights}")
    text = json.dumps(config, indent=2, allow_nan=False) + "\n"
    # One pair, all or nothing: never new weights beside an old config (base_files keeps
    # them side by side).
    write_files_atomic(weights.parent, {weights.name: save(state), config_path.name: text})
    return weights
