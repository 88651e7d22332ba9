"""Closed-form predictions and fits that the chapters compare with measurements.

Everything here is the book's own derivation (chapters 2-3) unless a docstring cites a paper:
moments of inner products of random embeddings, the signal-to-noise heuristic for a Hebbian
memory, parameter counts, and least-squares power-law fits on log-log axes.
"""

from __future__ import annotations

import math

import numpy as np

from .config import check_choice, check_int


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
    check_choice("model", model, ("attn", "mlp"))
    d = check_int("d", d, 1)
    if model == "attn":
        return {"W_V": d * d, "W_KQ": d * d, "frozen": 0}
    m = check_int("m", m, 1)
    return {"W_V": d * m, "W_KQ": d * d, "frozen": m * d}


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


# ---- chapter 5: step 2
# The book's own derivation (chapter 5): the attention direction k after step 2, its population
# mean, the signal-to-noise ratio of the attention scores, and the accuracy it implies.

def trigger_score_scale(V: int, L: int) -> float:
    """kappa = (L - 1)(1 - 1/V) / (L^3 V): E[k] ~ kappa z_trig to leading order, so the trigger's
    score bonus is mu ~ kappa |z_trig|^2 and a token's score is sigma_j ~ kappa e_j . z_trig."""
    V, L = check_int("V", V, 2), check_int("L", L, 1)
    return (L - 1) * (1 - 1 / V) / (L ** 3 * V)


def _normal_cdf(x):
    import torch
    return torch.special.ndtr(torch.as_tensor(np.asarray(x, float))).numpy()


_GRID = np.linspace(-12.0, 12.0, 4801)          # quadrature grid for the standard normal


def gaussian_attention_accuracy(r: float, L: int) -> float:
    """P(X_0 + r > max(X_1..X_{L-1})) for i.i.d. standard normal X: the attention accuracy when the
    token scores are Gaussian and the trigger adds r standard deviations. = int phi(x) Phi(x + r)^(L-1)."""
    L = check_int("L", L, 1)
    if isinstance(r, bool) or not isinstance(r, (int, float)) or math.isnan(r):
        raise ValueError(f"r must be a real number, got {r!r}")
    if L == 1:
        return 1.0
    x = _GRID
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    return float(np.trapezoid(phi * _normal_cdf(x + r) ** (L - 1), x))


def critical_snr(L: int, threshold: float = 0.99) -> float:
    """The signal-to-noise ratio r*(L) at which gaussian_attention_accuracy(r, L) = threshold."""
    L = check_int("L", L, 2)
    if not (isinstance(threshold, float) and 0.0 < threshold < 1.0):
        raise ValueError(f"threshold must be a float in (0, 1), got {threshold!r}")
    lo, hi = -10.0, 40.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gaussian_attention_accuracy(mid, L) < threshold else (lo, mid)
    return (lo + hi) / 2


def population_min_d(L: int, threshold: float = 0.99) -> float:
    """Smallest d for which attention reaches the threshold at N = infinity: r_inf = |z| sqrt(d) with
    |z|^2 ~ 1, so d >= r*(L)^2 (chapter 5)."""
    return critical_snr(L, threshold) ** 2


def trigger_self_bias(V: int, d: int, L: int) -> float:
    """beta = V (1 + (L - 1)/d): the trigger's bonus on N samples is mu(N) ~ kappa |z|^2 (1 + beta/N).
    Each sample's own trigger token has |e + z|^2 ~ 2 and meets z again in its own noise tokens."""
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 1)
    return V * (1 + (L - 1) / d)


def popularity_variance(V: int, d: int) -> float:
    """Variance over tokens j of e_j . S ebar (S = E^T E / V, ebar = mean e): rho (rho+1)(rho+4) / V^4,
    rho = V/d, to leading order (fourth Marchenko-Pastur moment)."""
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    rho = V / d
    return rho * (rho + 1) * (rho + 4) / V ** 4


def imbalance_noise(V: int, d: int, L: int) -> float:
    """B: the finite-batch label imbalance adds ((L-1)/L)^3 |abar_N|^2 S ebar to k, with E|abar_N|^2
    = (1 - 1/V)/N, so the token scores gain a spread s_N with s_N^2 / kappa^2 = B / N^2,
    B = (L - 1)^4 V^2 popularity_variance(V, d)."""
    L = check_int("L", L, 1)
    return (L - 1) ** 4 * V ** 2 * popularity_variance(V, d)


def attention_snr(N, V: int, d: int, L: int):
    """Signal-to-noise ratio of the attention scores after step 2 on N samples (the book's derivation):
    r(N) = (1 + beta/N) / sqrt(1/d + B/N^2) (|z|^2 = 1). Accepts an array of N."""
    N = np.asarray(N, float)
    if (N <= 0).any():
        raise ValueError("N must be positive")
    beta, B = trigger_self_bias(V, d, L), imbalance_noise(V, d, L)
    return (1 + beta / N) / np.sqrt(1.0 / d + B / N ** 2)


def predicted_attention_nstar(V: int, d: int, L: int, threshold: float = 0.99,
                              n_min: float = 16, n_max: float = 2 ** 20) -> float:
    """Smallest N in [n_min, n_max] (fine geometric grid) with attention_snr(N) >= r*(L); inf if none."""
    grid = np.geomspace(n_min, n_max, 2000)
    ok = attention_snr(grid, V, d, L) >= critical_snr(L, threshold)
    return float(grid[np.argmax(ok)]) if ok.any() else math.inf
