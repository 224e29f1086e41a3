"""BoPO's AppWorld profile at the ``long`` scale: PPO (λ=1) and BoPO past ``--scale full``.

At five times the default RL steps (``--scale full``) PPO (λ=1) closed 0.17 [-0.03, 0.36]
of AppWorld's gap between the best fixed rule and the planner, unresolved. This run
doubles those steps (327,680 per router), scores on 1000 evaluation tasks instead of
400 (task seed 0, so the intervals can resolve a gain of that size) and trains the
table's AppWorld rows only: PPO (λ=1), the tuned PPO, BoPO as in the paper, with 5
seeds (:data:`experiments.bopo_jobs.SCALES` ``"long"``). About 30 minutes on one core.

``python -m experiments.bopo_long [--out DIR]`` writes ``bopo.md``, ``bopo.json`` and
``pareto_bopo_appworld.png``/``.svg`` into ``DIR`` (default
``benchmarks/results/bopo_long``), all or nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments.bopo import report

#: Where the results go by default.
OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "bopo_long"


def main(argv: list[str] | None = None) -> None:
    """Run the AppWorld rows at the ``long`` scale and write the report."""
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m experiments.bopo_long",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"output folder (default {OUT})")
    args = parser.parse_args(argv)
    report(args.out, "long", log=print, profiles=("appworld",))


if __name__ == "__main__":
    main()
