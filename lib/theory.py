"""Closed-form predictions and fits that the chapters compare with measurements.

Everything here is the book's own derivation (chapters 2-3) unless a docstring cites a paper:
moments of inner products of random embeddings, the signal-to-noise heuristic for a Hebbian
memory, parameter counts, and least-squares power-law fits on log-log axes.
"""

from __future__ import annotations

import math

import numpy as np

from .config import check_choice, check_int
from .featuremaps import REGISTRY


def inner_product_moments(d: int, embedding: str = "gaussian") -> dict:
    """Mean, variance and fourth moment of <e_i, e_j> (i != j) for independent random embeddings.

    gaussian (N(0, I/d)):  E = 0, Var = 1/d, E[x^4] = 3(d + 2)/d^3 (x = sum_k a_k b_k; derived in
                           chapter 2 with sympy);
    sphere (uniform):      E = 0, Var = 1/d, E[x^4] = 3 / (d (d + 2)).
    """
    d = check_int("d", d, 1)
    check_choice("embedding", embedding, ("gaussian", "sphere"))
    if embedding == "gaussian":
        return {"mean": 0.0, "var": 1.0 / d, "m4": 3.0 * (d + 2) / d ** 3}
    return {"mean": 0.0, "var": 1.0 / d, "m4": 3.0 / (d * (d + 2))}


def predicted_coherence(V: int, d: int) -> float:
    """sqrt(2 log(V(V-1)/2) / d): the maximum of V(V-1)/2 independent N(0, 1/d) overlaps (chapter 2)."""
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    return math.sqrt(2 * math.log(V * (V - 1) / 2) / d) if V > 2 else math.sqrt(2 / (math.pi * d))


def capacity_from_constant(d: float, c: float) -> float:
    """The n solving d^2 = c n log n (n > 1), e.g. c = 1.3 for [Nichani et al.]'s fit (chapter 2)."""
    if not (d > 0 and c > 0):
        raise ValueError(f"d and c must be positive, got d={d}, c={c}")
    target = d * d / c
    lo, hi = 1.0, max(2.0, target)            # n log n is increasing on n > 1
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid * math.log(mid) < target else (lo, mid)
    return (lo + hi) / 2


def hebbian_margin_ratio(n: int, d: int) -> float:
    """Signal / cross-talk standard deviation of a Hebbian memory with n pairs in dimension d.

    Signal u_y^T W e_x ~ 1; the cross-talk on a wrong label k sums about n terms of size
    (u_k . u_{Pi x'}) (e_{x'} . e_x) ~ 1/d each, so its standard deviation is about sqrt(n)/d.
    """
    return d / math.sqrt(check_int("n", n, 1))


def param_count(model: str, d: int, m: int | None = None) -> dict:
    """Trainable parameters of the two models (W_V and W_KQ), and the frozen ones (F)."""
    check_choice("model", model, tuple(REGISTRY))
    d = check_int("d", d, 1)
    feature_map = REGISTRY[model]
    if feature_map.needs_m:
        m = check_int("m", m, 1)
    width, frozen = feature_map.widths(d, m)
    return {"W_V": d * width, "W_KQ": d * d, "frozen": frozen}


def fit_power_law(x, y) -> tuple[float, float]:
    """Least-squares fit of log y = slope log x + log c; returns (slope, c)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError("x and y must be arrays of the same length >= 2")
    if (x <= 0).any() or (y <= 0).any():
        raise ValueError("x and y must be positive for a log-log fit")
    slope, logc = np.polyfit(np.log(x), np.log(y), 1)
    return float(slope), float(math.exp(logc))


def fit_constant(num, den) -> float:
    """Least-squares constant c in num ~ c den through the origin (e.g. d^2 = c n log n)."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    if num.shape != den.shape or num.size < 1:
        raise ValueError("num and den must be arrays of the same positive length")
    return float((num * den).sum() / (den * den).sum())
