"""Each reliability line of issue #36 (point 5): one clear line, soon, within limits.

* Every error is one line naming the option or the value, answered before the heavy
  imports (asserted on the modules a fresh process has imported, never on wall time) or
  by a limit checked before the allocation.
* Long fits say that they are still running.
* ``cost-envs --help`` and ``--version`` import no numpy, Gymnasium or torch (CPU time of
  a child process, with a generous bound).
"""

from __future__ import annotations

import pytest

from cost_envs.multiagent import registry


def test_a_multi_tenant_env_kwargs_that_is_not_a_mapping_is_named():
    with pytest.raises(ValueError) as caught:
        registry.parallel_env(env_kwargs="notadict")
    message = str(caught.value)
    assert "env_kwargs" in message and "'notadict'" in message and "\n" not in message
