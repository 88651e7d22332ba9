"""Chapter 5 (the attention step, step 2): the attention direction's mean, the signal-to-noise
ratio of the attention scores, the accuracy it implies and the N it needs.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.config import check_int
from ..core.search import first_true_real
from .ch04_value_step import trigger_self_bias  # noqa: F401  (chapter 5's beta; defined with chapter 4's factor)


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
    return first_true_real(lambda r: gaussian_attention_accuracy(r, L) >= threshold, -10.0, 40.0, 1e-12, "linear")


def population_min_d(L: int, threshold: float = 0.99) -> float:
    """Smallest d for which attention reaches the threshold at N = infinity: r_inf = |z| sqrt(d) with
    |z|^2 ~ 1, so d >= r*(L)^2 (chapter 5)."""
    return critical_snr(L, threshold) ** 2


def popularity_variance(V: int, d: int) -> float:
    """Variance over tokens j of e_j . S ebar (S = E^T E / V, ebar = mean e): rho (rho+1)(rho+4) / V^4,
    rho = V/d, to leading order (fourth Marchenko-Pastur moment)."""
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    rho = V / d
    return rho * (rho + 1) * (rho + 4) / V ** 4


def self_term_noise_variance(V: int, d: int) -> float:
    """Variance over tokens j of e_j . (S ebar - ebar / V): rho (rho^2 + 3 rho + 1) / V^4 to leading
    order (Marchenko-Pastur moments of E E^T seen from the all-ones vector)."""
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    rho = V / d
    return rho * (rho * rho + 3 * rho + 1) / V ** 4


def imbalance_noise(V: int, d: int, L: int) -> float:
    """B (the book's derivation, chapter 5, leading order): the part of the self-term D across the
    trigger is (1 - 1/V)(L-1)(L-2)/L^2 (S ebar - ebar/V), so the token scores gain a spread s_N with
    s_N^2 / (kappa^2 |z|^2) (1 + beta/N)^2 = B / (N + beta)^2,
    B = L^2 (L-2)^2 V^2 self_term_noise_variance(V, d) = L^2 (L-2)^2 rho (rho^2 + 3 rho + 1) / V^2."""
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 1)
    return L ** 2 * (L - 2) ** 2 * V ** 2 * self_term_noise_variance(V, d)


def attention_snr(N, V: int, d: int, L: int):
    """Signal-to-noise ratio of E[k | N] (the book's derivation, |z| = 1, leading order):
    r(N) = 1 / sqrt(1/d + B/(N + beta)^2). Accepts an array of N."""
    N = np.asarray(N, float)
    if not (np.isfinite(N) & (N > 0)).all():
        bad = float(N[~(np.isfinite(N) & (N > 0))].ravel()[0])
        raise ValueError(f"N must be positive and finite, got {bad!r}")
    beta, B = trigger_self_bias(V, d, L), imbalance_noise(V, d, L)
    return 1.0 / np.sqrt(1.0 / d + B / (N + beta) ** 2)


def softmax_focus(lam, L: int, d: int):
    """Mean softmax weight on the informative position when its logit is lam and the L - 1 others are
    lam X_t, X_t ~ N(0, 1/d), with the sum of the others' exponentials replaced by its mean (the book's
    heuristic, chapter 5): 1 / (1 + (L - 1) exp(-lam + lam^2 / (2 d))). Accepts an array of lam."""
    L, d = check_int("L", L, 1), check_int("d", d, 1)
    lam = np.asarray(lam, float)
    if not np.isfinite(lam).all():
        raise ValueError("lam must be finite")
    return 1.0 / (1.0 + (L - 1) * np.exp(-lam + lam ** 2 / (2 * d)))


def predicted_attention_nstar(V: int, d: int, L: int, threshold: float = 0.99,
                              n_min: float = 1, n_max: float = 2 ** 20) -> float:
    """Smallest N in [n_min, n_max] (fine geometric grid) with attention_snr(N) >= r*(L); inf if none."""
    from ..core.config import check_float
    n_min = check_float("n_min", n_min, 0.0, strict_min=True)
    n_max = check_float("n_max", n_max, n_min, strict_min=True)
    grid = np.geomspace(n_min, n_max, 2000)
    ok = attention_snr(grid, V, d, L) >= critical_snr(L, threshold)
    return float(grid[np.argmax(ok)]) if ok.any() else math.inf


# ---- chapter 5, finite batch: the excess noise with the batch-to-batch fluctuation of k

def excess_noise(N, V: int, d: int, L: int, F1: float, F2: float = 0.0):
    """Excess noise-to-signal X(N) = 1/r^2 - 1/r_inf^2 (|z| = 1) of one batch's k, to first order in its
    fluctuation: (B + F2 + F1 N) / (N + beta)^2, with B = imbalance_noise (the mean's self-term),
    beta = trigger_self_bias, and the fluctuation's variance N^-2 (F1 N + F2) to order 1/N^2 (F1, F2 =
    `lib.analysis.k_noise.fluctuation_coefficients`, in units of mu_inf^2; F2 is the whole 1/N^2
    coefficient: the pair moments, -3 F1 and twice the psi-self cross moment).
    The fluctuation falls like F1 / N, the self-term like B / N^2: past N_c = (B + F2) / F1 the 1/N term
    dominates. Accepts an array of N."""
    N = np.asarray(N, float)
    if not (np.isfinite(N) & (N > 0)).all():
        raise ValueError(f"N must be positive and finite, got {N!r}")
    for name, x, low in (("F1", F1, 0.0), ("F2", F2, -math.inf)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < low:
            raise ValueError(f"{name} must be a finite number{' >= 0' if low == 0 else ''}, got {x!r}")
    return (imbalance_noise(V, d, L) + F2 + F1 * N) / (N + trigger_self_bias(V, d, L)) ** 2


def attention_snr_fluct(N, V: int, d: int, L: int, F1: float, F2: float = 0.0):
    """r(N) = 1 / sqrt(1/d + excess_noise(N, ...)): attention_snr with the batch-to-batch fluctuation of k.
    Accepts an array of N."""
    return 1.0 / np.sqrt(1.0 / check_int("d", d, 1) + excess_noise(N, V, d, L, F1, F2))
