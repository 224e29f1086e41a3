"""Routers over logged outcomes (:mod:`agents.routing.routers`) and their scoring.

The budget-aware routing learners, CORL's tier controller and BoPO, live with the other
learners: :mod:`agents.learners.corl` and :mod:`agents.learners.bopo`. Importing this
package does not import torch.
"""
