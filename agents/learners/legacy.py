"""The learners' module paths before issue #25, for old files that name them.

Issue #25 moved the learners into :mod:`agents.learners` (from ``agents.lora``,
``agents.routing`` and ``agents.multiagent``). The project's own formats never name a
module (a model directory is safetensors + JSON, a router's state likewise), but an SB3
``.zip`` pickles its policy class by path: one saved before the move names
``agents.lora.policies.AllocatorPolicy``. :func:`old_module_paths` lets such a file load
(:func:`agents.learners.checkpoints.load_allocator` with ``trust_pickle=True``) without
keeping the old modules around: while it is open, importing an old path gives the module
that replaced it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: Old dotted path -> the module that replaced it.
OLD_MODULES = {
    "agents.lora": "agents.learners",
    "agents.lora.training": "agents.learners.training",
    "agents.lora.checkpoints": "agents.learners.checkpoints",
    "agents.lora.lora_ppo": "agents.learners.lora_ppo",
    "agents.lora.supervised": "agents.learners.supervised",
    "agents.lora.dagger": "agents.learners.dagger",
    "agents.lora.pretrain": "agents.learners.pretrain",
    "agents.lora.fast_ppo": "agents.learners.ppo",
    "agents.lora.policies": "agents.learners.common.policies",
    "agents.lora.distributions": "agents.learners.common.distributions",
    "agents.lora.adapters": "agents.learners.common.adapters",
    "agents.lora.fused_loss": "agents.learners.common.fused_loss",
    "agents.lora.fused_network": "agents.learners.common.fused_network",
    "agents.lora.fast_optim": "agents.learners.common.fast_optim",
    "agents.lora.recurrent": "agents.learners.common.recurrent",
    "agents.lora.ppo_args": "agents.learners.common.ppo_args",
    "agents.routing.corl": "agents.learners.corl",
    "agents.routing.bopo": "agents.learners.bopo",
    "agents.routing.bopo_sft": "agents.learners.bopo_sft",
    "agents.multiagent.training": "agents.learners.multitenant",
    "agents.multiagent.adapters": "agents.learners.multitenant_adapters",
}


@contextmanager
def old_module_paths() -> Iterator[None]:
    """While open, an old path (``agents.lora.policies``) is the module that replaced it.

    Each new module is imported and entered in ``sys.modules`` under its old name, which
    is what unpickling looks up (a new module whose optional extra is missing is left
    out: nothing saved with it could load anyway). On exit the old names are removed.
    """
    added = []
    for old, new in OLD_MODULES.items():
        if old in sys.modules:
            continue
        try:
            sys.modules[old] = importlib.import_module(new)
        except ImportError:
            continue
        added.append(old)
    try:
        yield
    finally:
        for old in added:
            sys.modules.pop(old, None)
