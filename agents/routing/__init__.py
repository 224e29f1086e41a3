"""Budget-aware routers: CORL's tier controller, BoPO, and routers over logged outcomes.

Importing this package does not import torch; :mod:`agents.routing.corl` and
:mod:`agents.routing.bopo` do.
"""
