"""What a router reads of a query: :class:`TextFeatures`, and the hook for your own.

Every router of :data:`agents.routers.ROUTERS` reads a query through one
:class:`TextFeatures` object, in two parts:

* **statistics**: the prompt's seven :func:`~agents.routers.statistics.text_statistics`
  (and, for a cascade, the weak model's answer's
  :func:`~agents.routers.statistics.answer_statistics`), standardised on the
  training queries;
* **text features**: a vector per text from an *encoder* of :data:`TEXT_ENCODERS`, scaled
  by ``weight`` (0 ignores the words): ``"hashed"`` (hashed word unigrams and bigrams,
  numpy, ``n_features`` wide) or ``"minilm"`` (all-MiniLM-L6-v2 sentence embeddings, the
  ``embeddings`` extra, 384 wide), or **your own**.

**Your own features.** :func:`register_text_features` adds an encoder by name: a
callable mapping a list of texts to a ``(len(texts), dim)`` matrix, for instance a
lookup of embeddings you computed beforehand (a column of your logs:
:func:`embedding_lookup` turns ``{prompt: vector}`` into such a callable). Then build any
router with ``text_features="<name>"``. A saved router records the name, not the
callable: register the same name before loading it in another process (loading
otherwise fails naming the encoder it needs); the command line does it from
``--features MODULE:FUNCTION`` or an installed entry point, checked against the digest
the router recorded (:mod:`agents.routers.user_features`). Only numpy here: no torch is
imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.routers.statistics import (
    ANSWER_STATISTICS,
    STATISTICS,
    answer_statistics,
    text_statistics,
    weak_answers,
)
from cost_envs.config import integer, number
from cost_envs.traces import TraceDataset
from cost_envs.traces.features import MINILM_DIM, hashed_features, minilm_features


@dataclass(frozen=True)
class TextEncoder:
    """A text-feature encoder: ``encode(texts) -> (len(texts), dim)`` floats.

    Attributes:
        encode: The callable.
        dim: Its width; ``None`` when the router's ``n_features`` sets it (hashing).
        cached: Whether each text's vector is computed once per process (slow encoders:
            cross-validation encodes the same prompts many times).
    """

    encode: Callable[..., Any]
    dim: int | None
    cached: bool = False


#: Vectors of cached encoders by (encoder, text), for the process (deterministic, so
#: caching changes nothing but time).
_CACHE: dict[tuple[str, str], np.ndarray] = {}


def _hashed(texts: Sequence[str], n_features: int) -> np.ndarray:
    return hashed_features(texts, n_features)


#: The text encoders by name: ``"hashed"``, ``"minilm"`` and those registered.
TEXT_ENCODERS: dict[str, TextEncoder] = {
    "hashed": TextEncoder(_hashed, None),
    "minilm": TextEncoder(minilm_features, MINILM_DIM, cached=True),
}


def register_text_features(name: str, encode: Callable[[list[str]], Any], dim: int,
                           *, cached: bool = True) -> None:
    """Make ``text_features=name`` a router input: your own features of a text.

    Args:
        name: The name routers and saved files use (not ``"hashed"`` or ``"minilm"``).
        encode: Maps a list of texts to a ``(len(texts), dim)`` array of finite numbers.
        dim: Its width, >= 1.
        cached: Compute each text's vector once per process (default; pass ``False``
            for an encoder that is cheaper than the cache).

    Raises:
        ValueError: On a built-in or empty name, a ``dim`` below 1, or a non-callable.
    """
    if not isinstance(name, str) or not name or name in ("hashed", "minilm"):
        raise ValueError(f"name: expected a new non-empty name (not 'hashed' or 'minilm'), "
                         f"got {name!r}")
    if not callable(encode):
        raise ValueError(f"encode: expected a callable texts -> matrix, got {encode!r}")
    integer(dim, "dim", minimum=1)
    TEXT_ENCODERS[name] = TextEncoder(encode, dim, cached)
    for key in [k for k in _CACHE if k[0] == name]:  # a re-registered name: forget its vectors
        del _CACHE[key]


def embedding_lookup(vectors: Mapping[str, Any]) -> Callable[[list[str]], np.ndarray]:
    """An encoder that looks each text up in ``{text: vector}`` (precomputed embeddings).

    Raises (when called):
        ValueError: Naming the first text that has no vector.
    """
    table = {k: np.asarray(v, dtype=np.float64) for k, v in vectors.items()}

    def encode(texts: list[str]) -> np.ndarray:
        missing = [t for t in texts if t not in table]
        if missing:
            raise ValueError(f"embedding_lookup: no vector for text {missing[0][:60]!r} "
                             f"({len(missing)} texts missing)")
        return np.array([table[t] for t in texts])

    return encode


def text_encoder(name: str) -> TextEncoder:
    """The encoder registered as ``name`` (ValueError naming the ones there are)."""
    if name not in TEXT_ENCODERS:
        raise ValueError(f"text_features: expected one of {sorted(TEXT_ENCODERS)} (your own: "
                         f"register_text_features({name!r}, ...) first), got {name!r}")
    return TEXT_ENCODERS[name]


@dataclass(frozen=True)
class TextFeatures:
    """A router's inputs: text statistics and ``weight`` x text-encoder features.

    Args:
        text: The encoder's name in :data:`TEXT_ENCODERS`.
        n_features: Width of the ``"hashed"`` encoder (unused by the others).
        weight: Scale of the text features relative to the standardised statistics.
        answers: Also read the weak model's logged answer (a cascade): its statistics,
            and its text features before the prompt's.
        ngrams: With your own encoder (not ``"hashed"`` or ``"minilm"``): its features
            after the hashed n-grams (``n_features`` of them) rather than instead of them.
    """

    text: str = "hashed"
    n_features: int = 512
    weight: float = 1.0
    answers: bool = False
    ngrams: bool = False

    def __post_init__(self) -> None:
        integer(self.n_features, "n_features", minimum=1)
        number(self.weight, "hashed_weight", minimum=0)
        text_encoder(self.text)
        if not isinstance(self.ngrams, bool):
            raise ValueError(f"with_ngrams: expected True or False, got {self.ngrams!r}")

    @property
    def adds_ngrams(self) -> bool:
        """Whether the hashed n-grams come before your own encoder's features."""
        return self.ngrams and self.text not in ("hashed", "minilm")

    @property
    def widths(self) -> tuple[int, int]:
        """Columns of (statistics, text features), as :meth:`raw` builds them."""
        dim = text_encoder(self.text).dim or self.n_features
        if self.adds_ngrams:
            dim += self.n_features
        if self.answers:
            return len(STATISTICS) + len(ANSWER_STATISTICS), 2 * dim
        return len(STATISTICS), dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The text features of ``texts``, float64 ``(len(texts), width)``.

        The encoder's, after the hashed n-grams when :attr:`adds_ngrams`.
        """
        own = self._encoded(texts)
        if not self.adds_ngrams:
            return own
        ngrams = np.asarray(TEXT_ENCODERS["hashed"].encode(texts, self.n_features),
                            dtype=np.float64)
        return np.hstack([ngrams, own])

    def _encoded(self, texts: Sequence[str]) -> np.ndarray:
        """The encoder's features of ``texts``, float64 ``(len(texts), dim)``."""
        encoder = text_encoder(self.text)
        dim = encoder.dim or self.n_features
        if encoder.dim is None:
            out = np.asarray(encoder.encode(texts, self.n_features), dtype=np.float64)
        elif encoder.cached:
            missing = list(dict.fromkeys(t for t in texts if (self.text, t) not in _CACHE))
            if missing:
                vectors = self._checked(encoder.encode(missing), len(missing), dim)
                _CACHE.update({(self.text, t): v for t, v in zip(missing, vectors,
                                                                 strict=True)})
            out = np.array([_CACHE[(self.text, t)] for t in texts]).reshape(len(texts), dim)
        else:
            out = encoder.encode(list(texts))
        return self._checked(out, len(texts), dim)

    def _checked(self, matrix: Any, n: int, dim: int) -> np.ndarray:
        out = np.asarray(matrix, dtype=np.float64)
        if out.shape != (n, dim) or not np.isfinite(out).all():
            raise ValueError(f"text_features={self.text!r}: expected finite numbers of shape "
                             f"({n}, {dim}), got shape {out.shape}")
        return out

    def raw(self, data: TraceDataset, weak: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(statistics, text features)`` of ``data``'s queries, before standardising.

        Per query and deterministic, so a caller may compute them once and index them
        per fold. ``weak`` names the model whose answer a cascade reads.
        """
        if not self.answers:
            return text_statistics(data.prompts), self.encode(data.prompts)
        if weak is None:
            raise ValueError("TextFeatures(answers=True): expected the weak model's name")
        answers = weak_answers(data, weak)
        stats = np.hstack([text_statistics(data.prompts),
                           answer_statistics(answers, data.prompts)])
        return stats, np.hstack([self.encode(answers), self.encode(data.prompts)])


def standardiser(stats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, std)`` of the statistics' columns; a zero spread becomes 1."""
    std = stats.std(axis=0)
    return stats.mean(axis=0), np.where(std > 0, std, 1.0)


def design(stats: np.ndarray, text: np.ndarray, mean: np.ndarray, std: np.ndarray,
           weight: float) -> np.ndarray:
    """The model's input matrix: standardised statistics, then ``weight`` x text features."""
    return np.hstack([(stats - mean) / std, weight * text])
