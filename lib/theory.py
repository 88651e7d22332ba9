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


# -------------------------------------------------------------------------------------------------
# The one-step (Hebbian) memory with its O(1/d) terms (chapter 2, the book's own derivation)
#
# W = sum_x u_{Pi x} e_x^T with n pairs, e, u ~ N(0, I/d) independent. The score of label k for
# input x is s_k = u_k^T W e_x. The correct label's score is ||u_y||^2 ||e_x||^2 plus the cross-talk
# of the n - 1 other pairs; a wrong label k = Pi x'' collects (u_k.u_y) ||e_x||^2, ||u_k||^2 (e_x''.e_x)
# and the cross-talk of the n - 2 others. All these terms are uncorrelated, which gives the
# variances below; the accuracy model treats the scores as independent Gaussians.
# -------------------------------------------------------------------------------------------------

def hebbian_score_moments(n: int, d: int) -> dict:
    """Mean and variance of the correct label's score and of a wrong label's score in a Hebbian
    memory of n pairs in dimension d (Gaussian embeddings):

        correct: mean 1, Var = (1 + 2/d)^2 - 1 + (n - 1)/d^2 = 4/d + 4/d^2 + (n - 1)/d^2
        wrong:   mean 0, Var = 2 (1 + 2/d)/d + (n - 2)/d^2
        margin s_y - s_k: the two are uncorrelated, Var = 6/d + (2n + 5)/d^2.
    """
    n, d = check_int("n", n, 1), check_int("d", d, 1)
    m4 = 1.0 + 2.0 / d                                         # E||e||^4
    correct = m4 * m4 - 1.0 + (n - 1) / d ** 2
    wrong = 2.0 * m4 / d + max(n - 2, 0) / d ** 2
    return {"correct_mean": 1.0, "correct_var": correct, "wrong_mean": 0.0, "wrong_var": wrong,
            "margin_var": correct + wrong}


def hebbian_conditional_moments(n: int, d: int, a, b) -> tuple:
    """Given the norms a = ||e_x||^2 and b = ||u_y||^2 of the queried pair, the Gaussian model of a
    Hebbian memory's scores (n pairs, dimension d): the correct score has mean a b and variance
    a b (n - 1)/d^2; each wrong score has mean 0 and variance a^2 b/d + (1 + 2/d) a/d + a (n - 2)/d^2.
    Averaged over a, b ~ chi^2_d / d these give back `hebbian_score_moments`. Returns
    (mean_y, var_y, var_w), broadcasting over arrays a, b."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    var_y = a * b * (n - 1) / d ** 2
    var_w = a * a * b / d + (1 + 2 / d) * a / d + a * max(n - 2, 0) / d ** 2
    return a * b, var_y, var_w


def hebbian_predicted_accuracy(n: int, d: int, nodes: int = 32, bias_var: float = 0.0) -> float:
    """Recall accuracy of a Hebbian memory predicted by the book's heuristic: given the two norms
    a = ||e_x||^2, b = ||u_y||^2, the correct score and the n - 1 wrong scores are independent
    Gaussians (`hebbian_conditional_moments`), so the pair is recalled with probability
    E[Phi(s_y / sd_w)^(n - 1)]; a and b (chi^2_d / d, Wilson-Hilferty) and s_y are integrated by
    Gauss-Hermite quadrature. Conditioning on the norms matters: they move the correct and the
    wrong scores together, and ignoring that overestimates the error several times at d = 64.
    `bias_var` adds an independent Gaussian bias of that variance to every score (chapter 1: the
    trigger's per-label bias u_k^T W z_trig when the trigger is in the value path)."""
    import torch

    n, d = check_int("n", n, 1), check_int("d", d, 1)
    nodes = check_int("nodes", nodes, 8)
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    za, zb, zs = np.meshgrid(z, z, z, indexing="ij")
    weight = w[:, None, None] * w[None, :, None] * w[None, None, :]
    chi2_over_d = lambda g: np.clip(1 - 2 / (9 * d) + g * math.sqrt(2 / (9 * d)), 1e-6, None) ** 3
    if not (bias_var >= 0.0 and math.isfinite(bias_var)):
        raise ValueError(f"bias_var must be a finite number >= 0, got {bias_var}")
    mean_y, var_y, var_w = hebbian_conditional_moments(n, d, chi2_over_d(za), chi2_over_d(zb))
    var_y, var_w = var_y + bias_var, var_w + bias_var
    s_y = mean_y + np.sqrt(var_y) * zs
    log_phi = torch.special.log_ndtr(torch.as_tensor(s_y / np.sqrt(var_w), dtype=torch.float64))
    return float((weight * torch.exp((n - 1) * log_phi).numpy()).sum())


def hebbian_predicted_capacity(d: int, threshold: float = 0.99) -> int:
    """Largest n whose predicted accuracy (`hebbian_predicted_accuracy`) is >= threshold; the
    accuracy falls with n, so doubling then bisection finds it exactly."""
    d = check_int("d", d, 1)
    if not (0.0 < threshold < 1.0):
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    ok = lambda n: hebbian_predicted_accuracy(n, d) >= threshold
    if not ok(1):
        return 0
    lo = 1
    while ok(2 * lo):
        lo *= 2
    hi = 2 * lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def trigger_bias_var(V: int, d: int) -> float:
    """E[b_k^2] for the per-label bias b_k = u_k^T W_V z_trig of the memory W_V = sum_j u_{Pi j} e_j^T
    with V Gaussian pairs and a Gaussian trigger (chapter 1, derived in its exercise): (d + V + 1)/d^2."""
    V, d = check_int("V", V, 1), check_int("d", d, 1)
    return (d + V + 1) / d ** 2

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


def step1_trigger_key(L: int, V: int, z2: float = 1.0, N: int | None = None) -> float:
    """Leading order of z_trig . k (the step-2 direction's trigger component) from the signal term:
    |z|^2 f (1 - 1/L)(1 - 1/V) / (V L^2), with f = 1 + (V - 1)/N the self-count factor (each sample's
    informative token is counted in its own n_{x*}, so the sample average of n_{x*}/N is f/V in
    expectation); N=None gives the N -> infinity limit f = 1. Only the signal term contributes at this
    order (chapter 4)."""
    L, V = check_int("L", L, 1), check_int("V", V, 2)
    if not (z2 > 0 and math.isfinite(z2)):
        raise ValueError(f"z2 must be a positive finite number, got {z2!r}")
    f = 1.0 if N is None else 1.0 + (V - 1) / check_int("N", N, 1)
    return z2 * f * (1 - 1 / L) * (1 - 1 / V) / (V * L * L)


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

# ---- chapter 6: step 3

def refined_memory_moments(V: int, d: int, N: int, s2: float = 1.0) -> dict:
    """Predicted moments of the terms of the final logit after step 3 (chapter 6, the book's own).

    With attention on the informative token (oracle attention in training and test), the memory is
    G3 = sum_i f_i (u_{Pi i} - u_bar)(e_i + s)^T, f_i = n_i / N, and the logit of label k at input x
    splits into (a_ki = u_k . (u_{Pi i} - u_bar), nu = sum_i (f_i - 1/V) u_{Pi i}):

      signal         1[k = y] (1/V) |u_y|^2 |e_x|^2
      finite_sample  1[k = y] (f_x - 1/V) |u_y|^2 |e_x|^2
      crosstalk      sum_i f_i a_ki (e_i . e_x)  minus the two terms above
      trigger_key    sum_i f_i a_ki (e_i . s)            (the trigger read as a key: shared by inputs)
      mean_bias      (u_k . nu)(|s|^2 + s . e_x)          (label frequencies: shared by inputs)

    For Gaussian embeddings N(0, I/d), to leading order in 1/d and 1/V, with q = (V - 1)/(V^2 N) the
    variance of f_i and r = 1 + (V - 1)/N = V^2 E[f_i^2]:

      signal_mean   1/V;     signal_var  2/(d V^2)   (the |u_y|^2 fluctuation; |e_x|^2 scales
                                                      every label's i = x term alike and is left out)
      crosstalk_y   r (V - 1) / (V^2 d^2)            (at the correct label)
      crosstalk     r (2 (1 + 2/d)/d + (V - 2)/d^2) / V^2   (at a wrong label: its own key and the
                                                      output overlap u_k . u_y give 2/d)
      trigger_key   r s2 ((1 + 2/d)/d + (V - 1)/d^2) / V^2
      mean_bias     q (1 + (V + 1)/d) (s2^2 + s2/d)
      finite_sample q (1 + 2/d)^2                    (at the correct label)

    s2 = |s|^2 (tau^2 |z|^2 with the trigger in the value path, 0 without). Returns these as a dict.
    """
    V, d, N = check_int("V", V, 2), check_int("d", d, 1), check_int("N", N, 1)
    s2 = _check_s2(s2)
    q, r = (V - 1) / (V * V * N), 1 + (V - 1) / N
    return {
        "signal_mean": 1 / V,
        "signal_var": 2 / (d * V * V),
        "crosstalk_y": r * (V - 1) / (V * V * d * d),
        "crosstalk": r * (2 * (1 + 2 / d) / d + (V - 2) / d ** 2) / V ** 2,
        "trigger_key": r * s2 * ((1 + 2 / d) / d + (V - 1) / d ** 2) / V ** 2,
        "mean_bias": q * (1 + (V + 1) / d) * (s2 * s2 + s2 / d),
        "finite_sample": q * (1 + 2 / d) ** 2,
    }


def _check_s2(s2, name: str = "s2") -> float:
    from .config import check_float
    return check_float(name, s2, 0.0)


def refined_memory_accuracy(V: int, d: int, N: float, s2: float = 1.0) -> float:
    """Predicted recall accuracy of the step-3 memory with perfect attention (chapter 6).

    Margin model built on `refined_memory_moments`: a token seen n times as informative has the
    correct logit (n/N)|u_y|^2 + noise, i.e. V xi_y ~ N(nV/N, (nV/N)^2 2/d + V^2 (crosstalk_y +
    shared)), and each of the V - 1 wrong labels an independent N(0, crosstalk + shared) (shared =
    trigger_key + mean_bias), so P(correct | n) = E_Z[Phi((V xi_y) / (V sigma_off))^(V - 1)], averaged
    over n ~ Binomial(N, 1/V) exactly (n = 0: nothing stored, the token is not recalled). This keeps
    the skewed lower tail of n, which sets N* when coverage is the bottleneck. N = math.inf gives the
    plateau: crosstalk and trigger_key remain, mean_bias and the count fluctuations vanish.
    """
    import torch
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    if isinstance(N, bool) or not isinstance(N, (int, float)) or not N >= 1:
        raise ValueError(f"N must be a number >= 1 (or math.inf), got {N!r}")
    s2 = _check_s2(s2)
    z = torch.linspace(-10, 10, 1001, dtype=torch.float64)
    w = torch.exp(-z * z / 2) * (z[1] - z[0]) / math.sqrt(2 * math.pi)
    if math.isinf(N):
        m = refined_memory_moments(V, d, 2 ** 62, s2)
        m["mean_bias"] = 0.0
        sig, p = torch.ones(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    else:
        N = int(N)
        m = refined_memory_moments(V, d, N, s2)
        lam = N / V
        n = torch.arange(max(0, int(lam - 10 * math.sqrt(lam) - 5)), min(N, int(lam + 10 * math.sqrt(lam) + 10)) + 1,
                         dtype=torch.float64)
        logp = (math.lgamma(N + 1) - torch.lgamma(n + 1) - torch.lgamma(N - n + 1)
                + n * math.log(1 / V) + (N - n) * math.log1p(-1 / V))
        sig, p = n * V / N, torch.exp(logp)
    shared = m["trigger_key"] + m["mean_bias"]
    sig_off = math.sqrt(m["crosstalk"] + shared) * V
    sig_y = torch.sqrt(sig ** 2 * 2 / d + (m["crosstalk_y"] + shared) * V * V)
    P = (w * torch.special.ndtr((sig[:, None] + sig_y[:, None] * z) / sig_off) ** (V - 1)).sum(1)
    return float((p * P).sum())


def refined_memory_nstar(V: int, d: int, s2: float = 1.0, threshold: float = 0.99,
                         n_max: int = 2 ** 40) -> int | None:
    """Smallest N whose predicted step-3 accuracy (`refined_memory_accuracy`) reaches `threshold`;
    None when even the plateau (N -> infinity) stays below it: the memory term alone then rules out
    any finite N* (chapter 6). Bisection on N to 1 %."""
    from .config import check_float
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    n_max = check_int("n_max", n_max, 1)
    if refined_memory_accuracy(V, d, math.inf, s2) < threshold:
        return None
    lo, hi = 1, 1
    while refined_memory_accuracy(V, d, hi, s2) < threshold:
        if hi >= n_max:
            return None
        lo, hi = hi, min(2 * hi, n_max)
    while hi - lo > max(1, hi // 100):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if refined_memory_accuracy(V, d, mid, s2) >= threshold else (mid, hi)
    return hi


def orthogonal_recall(counts, tau2: float, trigger_in_value: bool = True):
    """Which informative tokens the step-3 memory recalls with exactly orthogonal embeddings.

    With e, u, z orthonormal and perfect attention the logit gap is
    xi_y - xi_k = f_x (1 + tau^2) - tau^2 g_k  (g_k = label frequency of k, f_x = g_y), so token x is
    recalled iff (1 + tau^2) n_x > tau^2 max_{j != x} n_j: the label-frequency term (g_k - 1/V) is
    shared by all inputs and survives orthogonality. Without the trigger in the value path: iff n_x > 0.
    `counts` (V,): how often each token was informative in training. Returns a (V,) bool tensor.
    """
    import torch
    n = torch.as_tensor(counts, dtype=torch.float64)
    if n.ndim != 1 or n.numel() < 2 or bool((n < 0).any()):
        raise ValueError("counts must be a 1-d tensor of V >= 2 non-negative counts")
    tau2 = _check_s2(tau2, "tau2") if trigger_in_value else 0.0
    if tau2 == 0.0:
        return n > 0
    top2 = torch.topk(n, 2).values
    other_max = torch.where(n == top2[0], top2[1], top2[0])    # max over j != x
    return (1 + tau2) * n > tau2 * other_max
