"""Text features a router reads: statistics of a query and of the weak model's answer.

* :func:`text_statistics`: seven statistics of a query's text (log characters, words,
  numbers and sentences, the longest number's digit count, whether it has a percentage,
  whether it has a fraction word);
* :func:`answer_statistics`: what a cascade reads in the weak model's logged answer
  (whether it states a final answer as ``#### n``, whether that number is an integer,
  arithmetic slips in its ``<<a*b=c>>`` calculator annotations, hedging and
  self-correction phrases, ...);
* :func:`weak_answers`: the weak model's answer texts, all a cascade may read.

Only numpy and the standard library: importing this loads no torch.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from cost_envs.traces import TraceDataset

#: Names of :func:`text_statistics`' columns.
STATISTICS = ("log_chars", "log_words", "log_numbers", "log_sentences", "max_digits",
              "has_percent", "has_fraction")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SENTENCE = re.compile(r"[.?!](?:\s|$)")
_FRACTION = re.compile(r"\d/\d|\bhalf\b|\bthird|\bquarter|\bfifth", re.IGNORECASE)
_FRACTION_WORDS = ("half", "third", "quarter", "fifth")


def _has_fraction(text: str, lowered: str) -> bool:
    """Whether ``_FRACTION`` matches in ``text`` (``lowered``: ``text.lower()``).

    An ASCII text without "/" or a fraction word cannot match, and saying so is far
    cheaper than the search; other texts are always searched (Unicode case folding could
    match a fraction word written in other letters).
    """
    if text.isascii() and "/" not in text and not any(w in lowered for w in _FRACTION_WORDS):
        return False
    return bool(_FRACTION.search(text))


def text_statistics(texts: Sequence[str]) -> np.ndarray:
    """Seven statistics per text (see :data:`STATISTICS`), float64 ``(n, 7)``."""
    rows = []
    for t in texts:
        numbers = _NUMBER.findall(t)
        lowered = t.lower()
        rows.append((
            math.log1p(len(t)), math.log1p(len(t.split())), math.log1p(len(numbers)),
            math.log1p(len(_SENTENCE.findall(t))),
            max((sum(c.isdigit() for c in x) for x in numbers), default=0),
            float("%" in t or "percent" in lowered), float(_has_fraction(t, lowered)),
        ))
    return np.array(rows, dtype=np.float64).reshape(len(texts), len(STATISTICS))


#: Names of :func:`answer_statistics`' columns.
ANSWER_STATISTICS = (
    "has_final", "final_not_integer", "final_in_prompt", "final_is_last_result",
    "final_has_words", "log_final", "log_chars", "log_lines", "log_annotations",
    "annotation_error", "log_hedges", "log_decimals", "prompt_numbers_used",
)
#: A final answer in GSM8K's form: ``#### 18`` (an optional ``$``, commas, a sign).
_FINAL = re.compile(r"####[ \t]*\$?[ \t]*(-?\d[\d,]*(?:\.\d+)?|-?\.\d+)")
#: A calculator annotation of GSM8K's reference style: ``<<9*2=18>>``.
_ANNOTATION = re.compile(r"<<([^<>=]*)=([^<>]*)>>")
_SIGNED_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_RESULT = re.compile(r"=\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?)")
#: Hedging, approximation and self-correction phrases.
_HEDGE = re.compile(
    r"\b(?:however|but|wait|actually|mistake|instead|assum\w*|approximately|about|around|"
    r"roughly|estimate\w*|round\w*|nearest|whole number|cannot|can't|not possible|"
    r"impossible|note)\b|\u2248|\?", re.IGNORECASE)
_ARITHMETIC = re.compile(r"[\d.+\-*/() ]+")
_OPERATORS: dict[type, Any] = {ast.Add: operator.add, ast.Sub: operator.sub,
                               ast.Mult: operator.mul, ast.Div: operator.truediv}


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _evaluate(node: ast.AST) -> float:
    """Value of a parsed expression of numbers, ``+ - * /``, unary minus and brackets."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool)):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError("not plain arithmetic")


def arithmetic_value(expression: str) -> float | None:
    """The value of a plain arithmetic expression (``"12+5*3"``), or ``None``.

    Numbers (commas as thousands separators), ``+ - * /`` (also ``x``, a multiplication
    sign and a Markdown-escaped star) and brackets; anything else, a division by zero or an
    expression over 200 characters gives ``None``. Nothing is executed: the expression
    is parsed with :mod:`ast` and only those nodes are evaluated.
    """
    text = expression.replace(",", "").replace("\\", "").replace("\u00d7", "*")
    text = text.replace("x", "*").strip()
    if not text or len(text) > 200 or not _ARITHMETIC.fullmatch(text):
        return None
    try:
        return _evaluate(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def answer_statistics(answers: Sequence[str], prompts: Sequence[str]) -> np.ndarray:
    """What an answer text shows of its own reliability, float64 ``(n, 13)``.

    Read from the answer (and, for two columns, its prompt) only, in the order of
    :data:`ANSWER_STATISTICS`:

    * ``has_final``: it states a final answer as ``#### n`` (GSM8K's format);
    * ``final_not_integer``: that number has a fractional part (GSM8K's answers are
      whole numbers, so this is a prior about the benchmark, not about the text);
    * ``final_in_prompt``: that number is one of the prompt's numbers (copied, not
      computed);
    * ``final_is_last_result``: it equals the last ``= x`` result of the working (or
      its last number when there is no ``=``);
    * ``final_has_words``: words follow the number on the ``####`` line (units, prose);
    * ``log_final``: ``log10(1 + |final number|)`` (0 without one);
    * ``log_chars``, ``log_lines``: ``log1p`` of the answer's characters and line breaks;
    * ``log_annotations``: ``log1p`` of its ``<<a*b=c>>`` calculator annotations;
    * ``annotation_error``: some annotation's expression does not evaluate to its stated
      result (beyond 1% rounding; see :func:`arithmetic_value`);
    * ``log_hedges``: ``log1p`` of hedging and self-correction phrases ("however",
      "wait", "assume", "approximately", "round", "cannot", "?", ...);
    * ``log_decimals``: ``log1p`` of non-integer numbers in the working;
    * ``prompt_numbers_used``: share of the prompt's distinct numbers that the working
      mentions (1 for a prompt without numbers).

    An empty answer gives zeros except ``prompt_numbers_used`` (0 when the prompt has
    numbers).
    """
    if len(answers) != len(prompts):
        raise ValueError(f"answer_statistics: expected as many prompts as answers, got "
                         f"{len(prompts)} and {len(answers)}")
    rows = []
    for answer, prompt in zip(answers, prompts, strict=True):
        match = _FINAL.search(answer)
        final = _number(match.group(1)) if match else None
        working = answer[: match.start()] if match else answer
        errors = 0
        annotations = _ANNOTATION.findall(answer)
        for left, right in annotations:
            value, stated = arithmetic_value(left), arithmetic_value(right)
            if value is not None and stated is not None and (
                    abs(value - stated) > 0.01 * max(1.0, abs(value))):
                errors += 1
        numbers = [x for x in map(_number, _SIGNED_NUMBER.findall(working)) if x is not None]
        given = {x for x in map(_number, _SIGNED_NUMBER.findall(prompt)) if x is not None}
        results = [x for x in map(_number, _RESULT.findall(working)) if x is not None]
        last = results[-1] if results else (numbers[-1] if numbers else None)
        after = answer[match.end():].split("\n", 1)[0].strip() if match else ""
        rows.append((
            float(final is not None),
            float(final is not None and final != round(final)),
            float(final is not None and final in given),
            float(final is not None and last is not None and math.isclose(final, last)),
            float(bool(re.search(r"[A-Za-z]", after))),
            math.log10(1.0 + abs(final)) if final is not None else 0.0,
            math.log1p(len(answer)),
            math.log1p(answer.count("\n")),
            math.log1p(len(annotations)),
            float(errors > 0),
            math.log1p(len(_HEDGE.findall(answer))),
            math.log1p(sum(1 for x in numbers if x != round(x))),
            len(given & set(numbers)) / len(given) if given else 1.0,
        ))
    return np.array(rows, dtype=np.float64).reshape(len(answers), len(ANSWER_STATISTICS))


def weak_answers(data: TraceDataset, weak: str) -> list[str]:
    """The weak model's logged answer texts (``""`` where absent): all a cascade reads.

    Raises:
        ValueError: When the data has no answer texts for ``weak`` at all.
    """
    j = data.model_index(weak)
    answers = [] if data.responses is None else [row[j] or "" for row in data.responses]
    if not any(answers):
        raise ValueError(f"{data.source}: the cascade reads the weak model's answers, but the "
                         f"data has no answer texts for {weak!r} (a '{weak}_response' column "
                         "or 'response' field)")
    return answers
