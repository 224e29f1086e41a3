"""Conformal thresholds: a router's operating point calibrated on held-out units.

Issue #39 point 3's "conformal thresholds", for :mod:`experiments.traces.rule_screen`.
A router with a fixed score ``s`` sends a query to the strong model when ``s >= t``. The
*units* are what is exchangeable between calibration and deployment: whole groups
(MMLU subjects, RouterArena domains) where a split holds groups out, single prompts
where it holds out queries (GSM8K). A unit ``g``'s loss at ``t`` is its strong-call
share, ``L_g(t) = sum(w_i [s_i >= t]) / sum(w_i)`` over its queries ``i``, with ``w = 1``
(the share of calls) or ``w`` the strong call's extra price (the share of the extra
dollars always-strong would spend); ``L_g`` is non-increasing in ``t`` for ``w >= 0``.
Given ``n`` calibration units, scored by a model that saw none of them:

* :func:`conformal_threshold` (high-probability cost control): the lowest ``t`` at which
  the ``k``-th smallest of ``L_1(t) .. L_n(t)`` is at most ``target``, with
  ``k = ceil((n + 1)(1 - alpha))``; ``inf`` (no strong call) when ``k > n``. For a new
  unit exchangeable with the calibration units, ``P(L_new(t) <= target) >= 1 - alpha``:
  with ``T_g`` the highest threshold unit ``g`` exceeds the target at (``L_g(t) <=
  target`` exactly when ``t > T_g``), ``t`` lies just above the ``k``-th smallest
  ``T_g``, and a new unit's ``T`` is at most that with probability ``>= k / (n + 1)``.
* :func:`risk_control_threshold` (conformal risk control, Angelopoulos et al. 2022): the
  lowest ``t`` with ``(sum_g L_g(t) + 1) / (n + 1) <= target`` (the loss is bounded by
  1), so that ``E[L_new(t)] <= target``: a bound on the mean share, not on every unit's.

Both guarantees are marginal: over the draw of the calibration units and the new one.
They hold for the model that scored the calibration units; refitting it afterwards on
more data (the calibration units too) would void them, so the screen does not.
"""

from __future__ import annotations

import math

import numpy as np


def _units(scores: np.ndarray, units: np.ndarray, weights: np.ndarray | None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores, unit codes (0 .. n-1) and weights as arrays, checked."""
    s = np.asarray(scores, dtype=np.float64)
    _, codes = np.unique(np.asarray(units), return_inverse=True)
    w = np.ones(len(s)) if weights is None else np.asarray(weights, dtype=np.float64)
    if s.ndim != 1 or codes.shape != s.shape or w.shape != s.shape:
        raise ValueError("scores, units and weights: expected 1-d arrays of one length, got "
                         f"{s.shape}, {np.shape(units)} and {w.shape}")
    if not np.all(np.isfinite(s)) or np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError("scores: expected finite values; weights: finite and >= 0")
    return s, codes.reshape(-1), w


def _check(target: float, alpha: float | None = None) -> None:
    if not 0 <= target <= 1:
        raise ValueError(f"target: expected a share in [0, 1], got {target!r}")
    if alpha is not None and not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a number in (0, 1), got {alpha!r}")


def unit_shares(calls: np.ndarray, units: np.ndarray, weights: np.ndarray | None = None
                ) -> np.ndarray:
    """Each unit's strong-call share (weighted by ``weights``), in order of its code.

    A unit whose weights sum to 0 has share 0 (no call of it costs anything).
    """
    c = np.asarray(calls, dtype=bool)
    _, codes = np.unique(np.asarray(units), return_inverse=True)
    codes = codes.reshape(-1)
    w = np.ones(len(c)) if weights is None else np.asarray(weights, dtype=np.float64)
    total = np.bincount(codes, weights=w)
    called = np.bincount(codes, weights=w * c, minlength=len(total))
    return np.divide(called, total, out=np.zeros_like(total), where=total > 0)


def unit_limits(scores: np.ndarray, units: np.ndarray, target: float,
                weights: np.ndarray | None = None) -> np.ndarray:
    """Per unit ``T_g``: ``L_g(t) <= target`` exactly when ``t > T_g`` (``-inf``: any ``t``).

    ``T_g`` is the score of the unit's query that would take its share past ``target``
    when its queries are called from the highest score down (tied scores go together).
    """
    s, codes, w = _units(scores, units, weights)
    _check(target)
    out = np.full(int(codes.max()) + 1 if len(codes) else 0, -np.inf)
    for g in range(len(out)):
        mine = codes == g
        order = np.argsort(-s[mine], kind="stable")
        own, cum = s[mine][order], np.cumsum(w[mine][order])
        if cum[-1] <= 0:
            continue  # a unit that costs nothing is within any target
        allowed = int(np.searchsorted(cum / cum[-1], target * (1 + 1e-12), side="right"))
        if allowed < len(own):
            out[g] = own[allowed]
    return out


def order_statistic(n: int, alpha: float) -> int:
    """``ceil((n + 1)(1 - alpha))``: which smallest of ``n`` calibration values to read.

    It exceeds ``n`` when there are too few units for ``alpha`` (then no finite threshold
    is certified). Computed with a tolerance so that, e.g., ``n = 9, alpha = 0.1`` gives 9.
    """
    _check(0.0, alpha)
    return math.ceil((n + 1) * (1 - alpha) - 1e-9)


def conformal_threshold(scores: np.ndarray, units: np.ndarray, target: float, alpha: float,
                        weights: np.ndarray | None = None) -> float:
    """The lowest threshold whose ``k``-th smallest calibration unit share is <= ``target``.

    ``k`` is :func:`order_statistic` of the number of units; ``inf`` (no strong call) when
    it exceeds it. See the module's docstring for the guarantee.

    Args:
        scores: The router's scores of the calibration queries (a model fitted without
            them).
        units: The unit (group, or prompt) of each calibration query.
        target: The strong-call share (or cost share) a new unit should stay within.
        alpha: The allowed probability of a new unit exceeding it.
        weights: Per query weight of a strong call (``None``: 1, the share of calls).
    """
    limits = unit_limits(scores, units, target, weights)
    k = order_statistic(len(limits), alpha)
    if k > len(limits) or len(limits) == 0:
        return float("inf")
    return float(np.nextafter(np.sort(limits)[k - 1], np.inf))


def risk_control_threshold(scores: np.ndarray, units: np.ndarray, target: float,
                           weights: np.ndarray | None = None) -> float:
    """The lowest threshold with ``(sum_g L_g(t) + 1) / (n + 1) <= target``.

    Conformal risk control of the mean unit share (the loss is bounded by ``B = 1``):
    just above the highest calibration score when only no strong call meets it, ``inf``
    when even that does not (``1 / (n + 1) > target``).
    """
    s, codes, w = _units(scores, units, weights)
    _check(target)
    n = int(codes.max()) + 1 if len(codes) else 0
    if 1.0 / (n + 1) > target * (1 + 1e-12):
        return float("inf")
    total = np.bincount(codes, weights=w, minlength=n)
    share = np.divide(w, total[codes], out=np.zeros_like(w), where=total[codes] > 0)
    order = np.argsort(-s, kind="stable")
    ordered, risk = s[order], (np.cumsum(share[order]) + 1.0) / (n + 1)
    # thresholds at each distinct score: calling every query scored at or above it
    last = np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))
    ok = last[risk[last] <= target * (1 + 1e-12)]
    return float(ordered[ok[-1]]) if ok.size else float(np.nextafter(ordered[0], np.inf))
