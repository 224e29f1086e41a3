"""Allocators for cost_envs: baselines, evaluation and (with torch) learned policies.

This package is installed with the ``agents`` extra (``pip install 'cost-envs[agents]'``):
importing it without the extra's dependencies fails at once with a one-line
``ImportError`` naming that command (:func:`cost_envs.extras.require_extra`), rather
than deep inside a training run. The check only looks the modules up: importing this
package does not import torch; modules that need it import it themselves.
"""

from cost_envs.extras import require_extra

require_extra("agents", "the agents package")
