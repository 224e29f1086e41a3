"""The examples in docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["cost_envs.wrappers.budget", "cost_envs.wrappers.limits", "cost_envs.registration",
           "agents.learners.common.recurrent", "experiments.shared.histories"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
