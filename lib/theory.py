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


# ---- chapter 4: step 1
#
# The logits of the one-step memory V1 = eta G1 (uniform attention in the memory and in the test
# sample, trigger in the value path, Gaussian N(0, I/d) embeddings, one shared vocabulary), split as
# in `lib.decompose` (grouping "step1"). Moments are over everything random: embeddings, the training
# batch and the test sample; "at" is the correct label y, "off" a wrong label k != y. The book's own
# heuristic derivation (chapter 4): leading orders in 1/V, 1/d, 1/N, with every term kept that leads
# in some regime. Units: the mean signal 1 / (V L^2).


def step1_signal_unit(V: int, L: int) -> float:
    """1 / (V L^2): the signal at the correct label, u_y^T G1 obar ~ (n_x/N)(1/L)(1/L)."""
    return 1.0 / (check_int("V", V, 2) * check_int("L", L, 1) ** 2)


def step1_term_moments(N: int, d: int, L: int, V: int) -> dict:
    """Predicted mean and variance of each step-1 logit term, in units of 1/(V L^2).

    Returns {term: {"mean_at", "var_at", "mean_off", "var_off"}} for the terms signal, crosstalk,
    other_tokens, trigger, ubar, and trigger+ubar (their sum: the shared parts cancel). Symbols:
    f = 1 + (V-1)/N = E[(V n_i/N)^2], q = 1 + 2/d = E|e|^4, cu = V^2 E[(u_k . u_bar)^2] = q + (V-1)/d,
    cn = V^2 E[(u_k . u_n)^2] = f cu with u_n = sum_i (n_i/N) u_{Pi i}.
    """
    N, d, L, V = (check_int("N", N, 1), check_int("d", d, 1), check_int("L", L, 1), check_int("V", V, 2))
    f = 1.0 + (V - 1) / N
    q = 1.0 + 2.0 / d
    cu = q + (V - 1) / d
    cn = f * cu
    out = {}
    # signal: 1[k = y] (V n_x/N) |u_y|^2 |e_x|^2
    out["signal"] = dict(mean_at=1.0, var_at=f * q * q - 1.0, mean_off=0.0, var_off=0.0)
    # crosstalk: sum_{i} (V n_i/N) C_ki (e_i . e_x) off the matched path, plus the trigger's
    # cross-talk A = V L (u_k . u_n)(z . o_tok) and B = V L z . w_k (memory tokens read by z)
    x_at = (V - 1) * f / d ** 2
    x_off = f * (2 * q / d + (V - 2) / d ** 2)
    tc_a = (L / d) * cn * (1 + (L - 1) / V)
    tc_b = cu * (f * (1 + (L * L - 1) / V) + V * (L - 1) / N) / d
    tc_ab = f * L * L * cu / (V * d)
    tc = tc_a + tc_b + 2 * tc_ab
    out["crosstalk"] = dict(mean_at=0.0, var_at=x_at + tc, mean_off=0.0, var_off=x_off + tc)
    # other tokens: test's other tokens read through the informative memory (L - 1 copies of a
    # cross-talk sum, and a spike of size ~1 when Pi(x_t) = k) + the memory's other tokens
    ot_mean = (L - 1) / V
    ot_var = (L - 1) * (x_off + f * q * q / V) - ot_mean ** 2
    om_mean = L * (L - 1) / V
    om_var = ((L - 1) ** 2 * cn / V ** 2 * (L * L + L * (V + L) / d) - om_mean ** 2
              + L * (L - 1) * (q + (V - 1) / d) * (q + V / d) / N)
    # their covariance: both read the test's other tokens e_{x_t} with the weights (V n_i/N) C_ki
    o_cov = (L - 1) ** 2 * f * (L / (V * d) + 1 / d ** 2)
    o_var = ot_var + om_var + 2 * o_cov
    out["other_tokens"] = dict(mean_at=ot_mean + om_mean, var_at=o_var,
                               mean_off=ot_mean + om_mean, var_off=o_var)
    # trigger: V |z|^2 (u_k . u_n)
    tr_var = q * cn - 1.0
    out["trigger"] = dict(mean_at=1.0, var_at=tr_var, mean_off=1.0, var_off=tr_var)
    # -u_bar part: -V L^2 (u_k . u_bar)(obar . o),  obar . o ~ 1/L^2 + 1/V + fluctuations
    m_oo = 1 + L * L / V                                   # L^2 E[obar . o]
    v_oo = 2 / d + L * (1 + (L - 1) / V) / d + L * L / (V * d) + L ** 3 / (V * d)   # L^4 Var
    ub_var = cu * (m_oo ** 2 + v_oo) - m_oo ** 2
    out["ubar"] = dict(mean_at=-m_oo, var_at=ub_var, mean_off=-m_oo, var_off=ub_var)
    # trigger + ubar = V |z|^2 u_k . (u_n - u_bar) - V L^2 (u_k . u_bar)(obar . o - |z|^2/L^2): the
    # |z|^2 parts cancel up to the label-frequency fluctuation n_i/N - 1/V
    sh_var = q * (V - 1) * cu / N + cu * (L ** 4 / V ** 2 + v_oo - 2 / d) - L ** 4 / V ** 2
    out["trigger+ubar"] = dict(mean_at=-L * L / V, var_at=sh_var, mean_off=-L * L / V, var_off=sh_var)
    return out


def step1_bag_accuracy(L: int, V: int) -> float:
    """Accuracy of the model after step 1 alone, to first order in L^2/V (orthogonal embeddings,
    N -> infinity). Its logits rank the labels Pi(j) by the count c_j of token j in the sequence
    (chapter 4), so it predicts the sequence's most repeated token: with all L tokens distinct the
    informative one wins with probability 1/L; it wins outright when it appears again (probability
    about (L-1)/V) and loses when another token repeats (about (L-1)(L-2)/(2V)):
        acc1 = (1/L)(1 - L(L-1)/(2V)) + (L-1)/V.
    """
    L, V = check_int("L", L, 1), check_int("V", V, 2)
    return (1 - L * (L - 1) / (2 * V)) / L + (L - 1) / V


def step1_trigger_key(L: int, V: int, z2: float = 1.0) -> float:
    """Leading order of z_trig . k (the step-2 direction's trigger component) from the signal term:
    (|z|^2 / L) (1 - 1/L)(1 - 1/V) / (V L). Only the signal term contributes at this order (chapter 4)."""
    L, V = check_int("L", L, 1), check_int("V", V, 2)
    if not (z2 > 0 and math.isfinite(z2)):
        raise ValueError(f"z2 must be a positive finite number, got {z2!r}")
    return z2 * (1 - 1 / L) * (1 - 1 / V) / (V * L * L)


def coverage_mean(N: int, V: int) -> float:
    """Expected number of the V tokens seen at least once as informative in N samples:
    V (1 - (1 - 1/V)^N)."""
    N, V = check_int("N", N, 0), check_int("V", V, 1)
    return V * (1 - (1 - 1 / V) ** N)


def coverage_var(N: int, V: int) -> float:
    """Variance of that number: V p1 (1 - p1) + V (V - 1) ((1 - 2/V)^N - p1^2), p1 = (1 - 1/V)^N."""
    N, V = check_int("N", N, 0), check_int("V", V, 1)
    p1, p2 = (1 - 1 / V) ** N, (1 - 2 / V) ** N
    return max(V * p1 * (1 - p1) + V * (V - 1) * (p2 - p1 * p1), 0.0)


def coupon_collector(V: int) -> tuple[float, float]:
    """Mean and standard deviation of the number of samples until every token has been the
    informative one at least once: V H_V ~ V (log V + 0.577) and sqrt(V^2 sum 1/i^2 - V H_V)."""
    V = check_int("V", V, 1)
    H = sum(1.0 / i for i in range(1, V + 1))
    H2 = sum(1.0 / (i * i) for i in range(1, V + 1))
    return V * H, math.sqrt(max(V * V * H2 - V * H, 0.0))
