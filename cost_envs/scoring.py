"""Answer scoring shared by the environments."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def token_f1(prediction: Iterable[object], reference: Iterable[object]) -> float:
    """Token-level F1 of a predicted answer against a reference (SQuAD-style, multisets).

    Tokens may be strings or integer ids. Both empty gives 1.0; exactly one empty gives 0.0.
    """
    pred = list(prediction)
    ref = list(reference)
    if not pred or not ref:
        return float(pred == ref)
    overlap = sum((Counter(pred) & Counter(ref)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred)
    recall = overlap / len(ref)
    return 2 * precision * recall / (precision + recall)
