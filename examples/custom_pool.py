"""Plug in your own agent pool from a YAML file and score the baselines on it.

Usage: python examples/custom_pool.py [--episodes N]
"""

import argparse
import tempfile
from pathlib import Path

from agents.baselines import BASELINES
from agents.evaluation import compare, format_table

POOL_YAML = """\
skills: [retrieval, math, web, code, reasoning, writing]
agents:
  - {name: my_search, role: retriever, cost: 0.001, flops: 1.0e9,
     capability: [0.8, 0.0, 0.5, 0.0, 0.0, 0.0]}
  - {name: my_python, role: code, cost: 0.002, flops: 2.0e9,
     capability: [0.0, 0.85, 0.0, 0.9, 0.0, 0.0]}
  - {name: my_8b_llm, role: llm, cost: 0.002, flops: 1.6e13,
     capability: [0.3, 0.4, 0.1, 0.45, 0.65, 0.7]}
  - {name: my_frontier_llm, role: llm, cost: 0.05, flops: 2.0e14,
     capability: [0.5, 0.8, 0.3, 0.8, 0.95, 0.95]}
"""

parser = argparse.ArgumentParser(allow_abbrev=False)  # a misspelt option is an error
parser.add_argument("--episodes", type=int, default=200)
args = parser.parse_args()

with tempfile.TemporaryDirectory() as tmp:
    pool_file = Path(tmp) / "my_pool.yaml"
    pool_file.write_text(POOL_YAML)
    # env kwargs are passed to gym.make: the pool can be a path, a dict or an AgentPool
    results = compare(
        {name: BASELINES[name] for name in ("random", "capability", "greedy", "oracle")},
        "cost_envs/ToolBench-v0",
        episodes=args.episodes,
        seed=0,
        env_kwargs={"pool": str(pool_file)},
    )
print(format_table(results))
