"""Your own text features for a router: a function from texts to a ``(len(texts), dim)`` matrix.

docs/routing.md's worked example fits a router on it from the command line and scores the
router again in another process (tests/test_cli_route.py runs those commands):

    cost-envs route train --data cost_envs/data/example_traces.jsonl --weak gpt-4.1-nano \\
        --strong o3 --features examples/text_features.py:shape --save routers/shape
    cost-envs route score --router routers/shape --data cost_envs/data/example_traces.jsonl \\
        --features examples/text_features.py:shape

Run it to see the features of two prompts: ``python examples/text_features.py``.
"""

from __future__ import annotations

import numpy as np


def shape(texts: list[str]) -> np.ndarray:
    """Three numbers per text: its question marks, its share of digits, log(1 + words)."""
    return np.array([[text.count("?"), sum(c.isdigit() for c in text) / max(len(text), 1),
                      np.log1p(len(text.split()))] for text in texts],
                    dtype=np.float64).reshape(len(texts), 3)


if __name__ == "__main__":
    prompts = ["How many of the 12 apples are left?", "Name the capital of France."]
    for prompt, row in zip(prompts, shape(prompts), strict=True):
        print(f"{prompt!r}: questions {row[0]:.0f}, digits {row[1]:.3f}, log words {row[2]:.3f}")
