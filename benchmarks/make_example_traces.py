"""Generate ``cost_envs/data/example_traces.jsonl``: a small *synthetic* trace dataset.

TraceRouting-v0 replays logged outcomes of real models; ``gym.make`` with no arguments
needs data that ships with the package, and the real RouteLLM logs cannot (they live
outside the repository). This script writes a stand-in in the generic JSONL schema of
``cost_envs.traces``: 300 templated arithmetic word problems, each answered by three
models. **Every outcome is simulated.** The model names (``gpt-4.1-nano``, ``gpt-4.1``,
``o3``) only select prices from the packaged price table; nothing here was measured on
those models.

Generative model (fixed seed, so the file is reproducible byte for byte):

* A problem has 1-5 operation clauses (buy, give away, double/triple, share evenly, lose
  a percentage) on a starting count. Its difficulty is
  ``d = 0.45 * clauses + 0.6 * [has a percentage] + 0.35 * [has a division]
  + 0.25 * log10(largest number) + N(0, 0.3)`` (the noise is a hidden "trickiness").
* Model k answers correctly with probability ``(1 - 0.2) * sigmoid(skill_k - 1.4 * d)``
  with skills 4.5 (gpt-4.1-nano), 5.5 (gpt-4.1) and 7.0 (o3), independently given ``d``:
  the prompt's wording (clause count, "percent", "evenly", big numbers) predicts who is
  right, but not perfectly, and every model also slips on 20% of the queries whatever
  their difficulty, so the models err on different queries (as real models do: on
  RouteLLM's GSM8K, Mixtral is right on 7% of the questions GPT-4 gets wrong).
* These numbers were chosen so that the default env discriminates allocators (the
  adaptivity targets of ``tests/test_adaptivity.py``): accuracies come out near 0.61,
  0.67 and 0.76, the three models together solve 95% of the queries, and o3 alone is
  needed on 7%.
* A correct answer shows its steps and ends with ``#### <answer>``. A wrong one shows a
  wrong result and, with probability 0.5, is cut off before the final-answer marker.
* Input tokens are ``ceil(characters / 4)`` of the prompt plus a 24-token instruction;
  output tokens the same count of the answer, plus, for o3, hidden reasoning tokens
  (about 250 per clause), which it bills at the output price.

Usage: ``python benchmarks/make_example_traces.py [--output PATH] [--check]``
(``--check`` only verifies that the committed file matches what this script writes).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

OUTPUT = Path(__file__).resolve().parents[1] / "cost_envs" / "data" / "example_traces.jsonl"
N_QUERIES = 300
SEED = 20240611
MODELS = (("gpt-4.1-nano", 4.5), ("gpt-4.1", 5.5), ("o3", 7.0))
SLOPE = 1.4
SLIP = 0.2
INSTRUCTION_TOKENS = 24
REASONING_PER_CLAUSE = 250

NAMES = ("Ann", "Ben", "Chloe", "Dev", "Elif", "Femi", "Gita", "Hugo", "Ines", "Jun")
ITEMS = ("apples", "stamps", "marbles", "books", "shells", "coins", "stickers", "cards")


def tokens(text: str) -> int:
    """The approximate token count of ``cost_envs.traces`` (ceil(characters / 4))."""
    return -(-len(text) // 4)


def make_problem(rng: np.random.Generator) -> tuple[str, int, list[str], float]:
    """A word problem: (prompt, answer, worked steps, difficulty before noise)."""
    name, item = NAMES[rng.integers(len(NAMES))], ITEMS[rng.integers(len(ITEMS))]
    big = rng.random() < 0.3
    count = int(rng.integers(100, 5000) if big else rng.integers(5, 60))
    sentences = [f"{name} has {count} {item}."]
    steps = []
    largest = count
    percent = divide = False
    n_clauses = int(rng.choice([1, 2, 3, 4, 5], p=[0.2, 0.25, 0.25, 0.18, 0.12]))
    for _ in range(n_clauses):
        op = rng.choice(["buy", "give", "times", "share", "lose"],
                        p=[0.28, 0.28, 0.16, 0.14, 0.14])
        if op == "buy":
            k = int(rng.integers(2, 40 if not big else 900))
            sentences.append(f"Then {name} buys {k} more {item}.")
            steps.append(f"{count} + {k} = {count + k}")
            count += k
        elif op == "give" and count > 2:
            k = int(rng.integers(1, count))
            sentences.append(f"{name} gives {k} {item} to a friend.")
            steps.append(f"{count} - {k} = {count - k}")
            count -= k
        elif op == "times":
            k = int(rng.choice([2, 3]))
            word = "doubles" if k == 2 else "triples"
            sentences.append(f"Next, {name} {word} the number of {item}.")
            steps.append(f"{count} * {k} = {count * k}")
            count *= k
        elif op == "share":
            divisors = [k for k in (2, 3, 4, 5, 6) if count % k == 0]
            if not divisors:
                count += 1
                sentences.append(f"{name} finds one more {item[:-1]}.")
                steps.append(f"{count - 1} + 1 = {count}")
                divisors = [k for k in (2, 3, 4, 5, 6) if count % k == 0] or [1]
            k = int(rng.choice(divisors))
            sentences.append(f"{name} splits the {item} evenly into {k} boxes and keeps "
                             "one box.")
            steps.append(f"{count} / {k} = {count // k}")
            count //= k
            divide = True
        else:
            pct = int(rng.choice([10, 20, 25, 50]))
            if (count * pct) % 100:
                count += (100 // math.gcd(pct, 100)) - count % (100 // math.gcd(pct, 100))
                sentences.append(f"{name} gets a few more, so now there are {count}.")
                steps.append(f"now {count}")
            lost = count * pct // 100
            sentences.append(f"{name} loses {pct} percent of the {item}.")
            steps.append(f"{pct}% of {count} = {lost}, {count} - {lost} = {count - lost}")
            count -= lost
            percent = True
        largest = max(largest, count)
    sentences.append(f"How many {item} does {name} have now?")
    difficulty = (0.45 * n_clauses + 0.6 * percent + 0.35 * divide
                  + 0.25 * math.log10(max(largest, 1)))
    return " ".join(sentences), count, steps, difficulty


def answer_text(steps: list[str], answer: int, correct: bool, truncated: bool,
                rng: np.random.Generator) -> str:
    """A worked answer; a wrong one ends on a wrong number and may lack the marker."""
    shown = list(steps)
    if not correct:
        wrong = answer + int(rng.choice([-1, 1])) * int(rng.integers(1, max(3, answer // 3 + 2)))
        if shown:
            shown[-1] = shown[-1].rsplit("=", 1)[0] + f"= {wrong}"
        answer = wrong
    body = "\n".join(f"Step {i + 1}: {s}." for i, s in enumerate(shown))
    if not correct and truncated:
        return body[: max(10, len(body) * 2 // 3)]
    return f"{body}\n#### {answer}"


def generate() -> list[dict]:
    """The dataset's rows, query-major, in the generic schema."""
    rng = np.random.default_rng(SEED)
    rows = []
    for q in range(N_QUERIES):
        prompt, answer, steps, base = make_problem(rng)
        difficulty = base + rng.normal(0.0, 0.3)
        n_clauses = len(steps)
        for model, skill in MODELS:
            p = 1.0 / (1.0 + math.exp(-(skill - SLOPE * difficulty)))
            slip = rng.random() < SLIP
            correct = bool(rng.random() < p) and not slip
            truncated = bool(rng.random() < 0.5)
            response = answer_text(steps, answer, correct, truncated, rng)
            output = tokens(response)
            if model == "o3":
                output += int(REASONING_PER_CLAUSE * n_clauses * rng.uniform(0.6, 1.4))
            rows.append({
                "query_id": f"q{q:03d}",
                "model": model,
                "correct": correct,
                "input_tokens": tokens(prompt) + INSTRUCTION_TOKENS,
                "output_tokens": output,
                "prompt": prompt,
                "response": response,
            })
    return rows


def render(rows: list[dict]) -> str:
    """JSONL text: one compact object per line, keys in schema order."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the file differs from what would be written")
    args = parser.parse_args(argv)
    text = render(generate())
    if args.check:
        same = args.output.exists() and args.output.read_text(encoding="utf-8") == text
        print(f"{args.output}: {'up to date' if same else 'differs'}")
        return 0 if same else 1
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {len(text.splitlines())} rows to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
