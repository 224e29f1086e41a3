"""Allocators for cost_envs: baselines, evaluation and (with torch) learned policies.

Importing this package does not import torch; modules that need it import it themselves.
"""
