"""Closed-form predictions and fits that the chapters compare with measurements.

Everything here is the book's own derivation (chapters 2-3) unless a docstring cites a paper:
moments of inner products of random embeddings, the signal-to-noise heuristic for a Hebbian
memory, parameter counts, and least-squares power-law fits on log-log axes.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .core.config import check_choice, check_int
from .core.featuremaps import REGISTRY
from .core.seed import torch_generator


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


def fit_power_law_interval(x, y, k: float = 2.0) -> tuple[float, float, float]:
    """Least-squares slope of log y on log x with its standard error: (slope, slope - k se,
    slope + k se); k = 2 is an interval of about 95 % when the residuals are Gaussian (needs >= 3 points)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape or x.size < 3:
        raise ValueError("x and y must be arrays of the same length >= 3")
    if (x <= 0).any() or (y <= 0).any():
        raise ValueError("x and y must be positive for a log-log fit")
    lx, ly = np.log(x), np.log(y)
    slope, icpt = np.polyfit(lx, ly, 1)
    resid = ly - (slope * lx + icpt)
    se = math.sqrt((resid ** 2).sum() / (x.size - 2) / ((lx - lx.mean()) ** 2).sum())
    return float(slope), float(slope - k * se), float(slope + k * se)


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
    from .core.search import largest_true
    return largest_true(lambda n: hebbian_predicted_accuracy(n, d) >= threshold)


def trigger_bias_var(V: int, d: int) -> float:
    """E[b_k^2] for the per-label bias b_k = u_k^T W_V z_trig of the memory W_V = sum_j u_{Pi j} e_j^T
    with V Gaussian pairs and a Gaussian trigger (chapter 1, derived in its exercise): (d + V + 1)/d^2."""
    V, d = check_int("V", V, 1), check_int("d", d, 1)
    return (d + V + 1) / d ** 2

# ---- chapter 4: step 1
#
# The logits of the one-step memory V1 = eta G1 (uniform attention in the memory and in the test
# sample, trigger in the value path, Gaussian N(0, I/d) embeddings, one shared vocabulary), split as
# in `lib.analysis.decompose` (grouping "step1"). Moments are over everything random: embeddings, the training
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


def step1_bag_rule_accuracy(L: int, V: int, samples: int = 100_000, seed: int = 0) -> float:
    """The bag-of-tokens rule of `step1_bag_accuracy` without its expansion: Monte Carlo over `samples`
    sequences of L i.i.d. uniform tokens of the probability that the informative one (position 0, by
    exchangeability) is the sequence's most frequent token, ties broken uniformly. Exact up to
    sampling error (standard deviation <= 0.5 / sqrt(samples)) at every L."""
    import torch
    from .core.seed import generator
    L, V = check_int("L", L, 1), check_int("V", V, 2)
    n = check_int("samples", samples, 1)
    seq = torch.randint(V, (n, L), generator=generator(check_int("seed", seed, 0), "bag-rule", L, V))
    counts = torch.zeros(n, V, dtype=torch.int32).scatter_add_(1, seq, torch.ones(n, L, dtype=torch.int32))
    mx = counts.max(1).values
    c_inf = counts.gather(1, seq[:, :1])[:, 0]
    return float(((c_inf == mx).double() / (counts == mx[:, None]).sum(1)).mean())


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
    """beta = V (1 + L/d) - 1 (the book's derivation, chapter 5, leading order): the pairs of a sample
    with itself give E[k | N] a part (beta + 1)/N kappa z along the trigger, so the trigger's bonus is
    mu(N) ~ kappa |z|^2 (1 + beta/N). The same factor multiplies the trigger part of every token's
    score, so it does not change the signal-to-noise ratio by itself."""
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 1)
    return V * (1 + L / d) - 1


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
    from .core.config import check_float
    n_min = check_float("n_min", n_min, 0.0, strict_min=True)
    n_max = check_float("n_max", n_max, n_min, strict_min=True)
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

      signal_mean   1/V;     signal_var  2/(d V^2)   (the |u_y|^2 fluctuation alone; |e_x|^2 is
                                                      shared with the cross-talk of the same input, and
                                                      `refined_memory_accuracy` conditions on both)
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
    from .core.config import check_float
    return check_float(name, s2, 0.0)


def _ex_norm_grid(d: int, nodes: int = 48):
    """Quadrature for a = |e_x|^2 ~ chi^2_d / d: nodes on +-9 standard deviations with the exact
    Gamma(d/2, 2/d) density, weights normalised to sum 1."""
    import torch
    sd = math.sqrt(2 / d)
    a = torch.linspace(max(1e-6, 1 - 9 * sd), 1 + 12 * sd, nodes, dtype=torch.float64)
    k = d / 2
    logf = (k - 1) * torch.log(a) - k * a - math.lgamma(k) + k * math.log(k)
    w = torch.exp(logf)
    return a, w / w.sum()


# Quadrature nodes whose weight is below this are dropped: together they change a predicted accuracy
# (a probability) by less than their total weight, far below the 1 % resolution of every N* search.
_NEGLIGIBLE = 1e-13


def refined_memory_accuracy(V: int, d: int, N: float, s2: float = 1.0) -> float:
    """Predicted recall accuracy of the step-3 memory with perfect attention (chapter 6, the book's
    heuristic), conditioned on what the terms of one input share.

    Every logit is xi_k = u_k . m_x with m_x = G3 (e_x + s). Given the input's count n (rho = n V / N,
    exact Binomial(N, 1/V); rho = 1 at N = inf), its key norm a = |e_x|^2 and its label's norm
    b = |u_y|^2 (both chi^2_d / d, by quadrature), the correct logit is
      V xi_y ~ N(mu, V^2 (a crosstalk_y + trigger_key) + mb_rest),   mu = b (rho a + (rho - 1) s2):
    the count deviation enters with coefficient a + s2 (the mean bias at k = y carries (f_x - 1/V)|u_y|^2 s2),
    and mb_rest = V^2 q (V + 1)/d (s2^2 + s2 a/d) is the part of u_y . nu not carried by the own count.
    Split m_x along u_y: a wrong logit is (u_k . u_y / b) xi_y + u_k . m_perp, so given xi_y the V - 1
    wrong logits are independent N(0, sigma_perp^2 + (V xi_y)^2 / (b d)) with
      sigma_perp^2 = r((1 + 2/d) a/d + (V - 2) a/d^2) + V^2 (trigger_key + mean_bias(a)):
    the wrong-label spread grows with the realised correct logit (the two are correlated), and the
    cross-talk grows with a while the trigger key does not. P(correct | n, a, b) = E_Z[Phi(xi / sd(xi))^(V - 1)],
    averaged over n, a, b. Moments from `refined_memory_moments`; q = Var f_i, r = V^2 E f_i^2.
    """
    import torch
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    if isinstance(N, bool) or not isinstance(N, (int, float)) or not N >= 1:
        raise ValueError(f"N must be a number >= 1 (or math.inf), got {N!r}")
    s2 = _check_s2(s2)
    z = torch.linspace(-8, 8, 129, dtype=torch.float64)
    w = torch.exp(-z * z / 2)
    w = w / w.sum()
    a, wa = _ex_norm_grid(d, 16)
    keep = wa > _NEGLIGIBLE                # nodes that cannot move the accuracy (it is a probability)
    a, wa = a[keep], wa[keep]
    b, wb = a.clone(), wa.clone()                                          # b = |u_y|^2, same law
    if math.isinf(N):
        q, r = 0.0, 1.0
        rho, p = torch.ones(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    else:
        N = int(N)
        q, r = (V - 1) / (V * V * N), 1 + (V - 1) / N
        rho, p = _binned_counts(N, V)
        keep = p > _NEGLIGIBLE
        rho, p = rho[keep], p[keep]
    rho, a, b = rho[:, None, None, None], a[None, :, None, None], b[None, None, :, None]
    tk = r * s2 * ((1 + 2 / d) / d + (V - 1) / d ** 2)                     # V^2 trigger_key
    mb_off = V * V * q * (1 + (V + 1) / d) * (s2 * s2 + s2 * a / d)        # V^2 mean_bias at a wrong label
    mb_y = V * V * q * (V + 1) / d * (s2 * s2 + s2 * a / d)                # rest at the correct label
    mu = b * (rho * a + (rho - 1) * s2)
    var_y = r * (V - 1) / d ** 2 * a + tk + mb_y
    var_perp = r * ((1 + 2 / d) * a / d + (V - 2) * a / d ** 2) + tk + mb_off
    xi = mu + var_y.sqrt() * z                                             # V xi_y, (n, a, b, z)
    sd = (var_perp + xi * xi / (b * d)).sqrt()
    P = ((0.5 * torch.erfc(xi / (-math.sqrt(2.0) * sd))) ** (V - 1) * w).sum(-1)   # Phi(xi / sd)^(V-1), (n, a, b)
    return float((p * ((P * wb).sum(-1) * wa).sum(-1)).sum())


def _binned_counts(N: int, V: int, bins: int = 48):
    """Binomial(N, 1/V) law of a token's count as (rho = n V / N, probability), the support within
    +-10 sd grouped into at most `bins` bins at their probability-weighted mean."""
    import torch
    lam = N / V
    n = torch.arange(max(0, int(lam - 10 * math.sqrt(lam) - 5)), min(N, int(lam + 10 * math.sqrt(lam) + 10)) + 1,
                     dtype=torch.float64)
    logp = (math.lgamma(N + 1) - torch.lgamma(n + 1) - torch.lgamma(N - n + 1)
            + n * math.log(1 / V) + (N - n) * math.log1p(-1 / V))
    p = torch.exp(logp)
    if n.numel() > bins:
        idx = torch.div(torch.arange(n.numel()) * bins, n.numel(), rounding_mode="floor")
        pb = torch.zeros(bins, dtype=torch.float64).index_add_(0, idx, p)
        nb = torch.zeros(bins, dtype=torch.float64).index_add_(0, idx, p * n) / pb.clamp_min(1e-300)
        keep = pb > 0
        n, p = nb[keep], pb[keep]
    return n * V / N, p / p.sum()


def refined_memory_nstar(V: int, d: int, s2: float = 1.0, threshold: float = 0.99,
                         n_max: int = 2 ** 40) -> int | None:
    """Smallest N whose predicted step-3 accuracy (`refined_memory_accuracy`) reaches `threshold`;
    None when even the plateau (N -> infinity) stays below it: the memory term alone then rules out
    any finite N* (chapter 6). Bisection on N to 1 %."""
    from .core.config import check_float
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

# ---- chapter 7: the capacity law and fits with intervals
#
# The book's own law (chapter 7), assembled from the conditions of chapters 2, 4, 5 and 6: the final
# N* is the larger of what the memory needs (chapter 6: coverage, count fluctuations, mean bias;
# infinite past chapter 2's capacity wall) and what attention needs (chapter 5's signal-to-noise ratio
# r(N) = 1 / sqrt(1/d + c B / (N + beta)^2), with one measured noise constant c).


@functools.lru_cache(maxsize=None)
def _critical_snr_cached(L: int, threshold: float) -> float:
    return critical_snr(L, threshold)


@functools.lru_cache(maxsize=None)
def _memory_nstar_cached(V: int, d: int, s2: float, threshold: float):
    return refined_memory_nstar(V, d, s2, threshold)


def attention_nstar(V: int, d: int, L: int, threshold: float = 0.99, c_noise: float = 1.0) -> float:
    """Smallest N with 1 / sqrt(1/d + c_noise B / (N + beta)^2) >= r*(L) (chapter 5's `attention_snr`
    with its noise B scaled by c_noise, the one constant chapter 7 measures):
    N_att = sqrt(c_noise B / (1/r*^2 - 1/d)) - beta, at least 1; inf when d <= r*(L)^2 (attention
    fails even at N = infinity). B = imbalance_noise, beta = trigger_self_bias."""
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 2)
    from .core.config import check_float
    c_noise = check_float("c_noise", c_noise, 0.0, strict_min=True)
    rs = _critical_snr_cached(L, float(threshold))
    room = 1.0 / rs ** 2 - 1.0 / d
    if room <= 0:
        return math.inf
    return max(math.sqrt(c_noise * imbalance_noise(V, d, L) / room) - trigger_self_bias(V, d, L), 1.0)


def capacity_law(V: int, d: int, L: int, s2: float = 0.0, threshold: float = 0.99,
                 c_noise: float = 1.0) -> dict:
    """The book's capacity law (chapter 7): N* ~ max(N_mem, N_att).

    N_mem = refined_memory_nstar(V, d, s2, threshold) (chapter 6; None -> inf: V is past the memory
    wall of dimension d, or the trigger's plateau is below the threshold), N_att = attention_nstar.
    Returns {"mem", "att", "law", "bottleneck"} with bottleneck "memory", "attention" or "none"
    (both finite requirements absent: no N reaches the threshold)."""
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    n_mem = _memory_nstar_cached(V, d, _check_s2(s2), float(threshold))
    n_mem = math.inf if n_mem is None else float(n_mem)
    n_att = attention_nstar(V, d, L, threshold, c_noise)
    law = max(n_mem, n_att)
    neck = "none" if math.isinf(law) else ("attention" if n_att > n_mem else "memory")
    return {"mem": n_mem, "att": n_att, "law": law, "bottleneck": neck}


def t_quantile(p: float, dof: int) -> float:
    """Quantile of Student's t distribution with `dof` degrees of freedom (quadrature of its density,
    bisection; accurate to ~1e-6 for p in [0.5, 0.9995])."""
    from .core.config import check_float
    p = check_float("p", p, 0.5, 0.9995)
    dof = check_int("dof", dof, 1)
    logc = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)

    def cdf(t):                        # 1/2 + integral of the density from 0 to t
        x = np.linspace(0.0, t, 4001)
        f = np.exp(logc - (dof + 1) / 2 * np.log1p(x * x / dof))
        return 0.5 + float(np.trapezoid(f, x))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def fit_power_law_ci(x, Y, level: float = 0.95) -> dict:
    """Power-law fit with an interval over problems: Y is (problems, len(x)), each row one problem's
    measurements (e.g. its N* along x). Each row gets its own least-squares slope on log-log axes; the
    slope of the geometric-mean curve equals their mean (least squares is linear in log y), and the
    interval is mean +- t_{(1+level)/2, n-1} * sd / sqrt(n). Returns {"slope", "half", "c", "slopes"}
    (c: prefactor of the geometric-mean fit)."""
    x = np.asarray(x, float)
    Y = np.asarray(Y, float)
    if Y.ndim != 2 or Y.shape[1] != x.size or x.size < 2:
        raise ValueError("Y must be a 2-d array (problems, len(x)) and x have >= 2 points")
    if Y.shape[0] < 2:
        raise ValueError(f"Y must hold at least 2 problems (rows), got {Y.shape[0]}")
    if (x <= 0).any() or not (np.isfinite(Y).all() and (Y > 0).all()):
        raise ValueError("x and Y must be positive and finite for a log-log fit")
    from .core.config import check_float
    level = check_float("level", level, 0.0, 0.999, strict_min=True)
    slopes = np.array([np.polyfit(np.log(x), np.log(row), 1)[0] for row in Y])
    slope, logc = np.polyfit(np.log(x), np.log(Y).mean(0), 1)
    half = float(t_interval(slopes, level=level)[1])
    return {"slope": float(slope), "half": half, "c": float(math.exp(logc)), "slopes": slopes}


def t_interval(x, axis: int = 0, level: float = 0.95):
    """Mean over independent problems (along `axis`) and the half-width of its Student-t interval at
    `level`: t_{(1+level)/2, n-1} * sd / sqrt(n). The one interval the chapters report over problems."""
    from .core.config import check_float
    level = check_float("level", level, 0.0, 0.999, strict_min=True)
    x = np.asarray(x, float)
    if x.ndim == 0 or x.shape[axis] < 2:
        raise ValueError(f"x must hold at least 2 problems along axis {axis}, got shape {x.shape}")
    n = x.shape[axis]
    return x.mean(axis), t_quantile((1 + level) / 2, n - 1) * x.std(axis, ddof=1) / math.sqrt(n)


def geometric_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of positive values over problems and its Student-t interval, taken on the logs:
    (geometric mean, lower end, upper end). A zero, negative or non-finite value raises."""
    v = np.asarray(values, float)
    if not (np.isfinite(v).all() and (v > 0).all()):
        raise ValueError("values must be positive and finite")
    m, half = t_interval(np.log(v), level=level)
    return float(math.exp(m)), float(math.exp(m - half)), float(math.exp(m + half))


# ---- chapter 8: the MLP
#
# The book's own derivation (heuristic where stated). With oracle attention the limit-mode memory is
# G3 = sum_j (n_j / N) (u_{Pi j} - u_bar) phi(o_j)^T, so the score of label k for input x is
#     xi_k = sum_j (n_j / N) (u_k . (u_{Pi j} - u_bar)) kappa_jx,   kappa_jx = phi(o_j) . phi(o_x).
# With the unit input, kappa_jx -> K(rho_jx) as m -> infinity (the kernel, `mlp_kernel`), where
# rho_jx = cos(o_j, o_x) and K(rho) = sum_k a_k^2 rho^k (Mehler's formula) with a_k the normalised
# Hermite coefficients of sigma (`hermite_coefficients`). A component shared by all inputs (the
# trigger in the value path, scale tau) makes rho_jx = beta + (1 - beta) delta with
# beta = tau^2 / (1 + tau^2): expanding K around beta gives the kernel's coefficients in delta
# (`shifted_kernel_coefficients`), whose constant b_0 is the mean bias. `mlp_noise_terms` splits
# 1 / SNR^2 of the correct label against one wrong label into named terms; `mlp_predicted_accuracy`
# turns it into an accuracy (independent Gaussian wrong scores, Poisson counts).

_HERMITE_CACHE: dict = {}


def _sym_activation(activation: str):
    """sigma as a sympy function of x (the same functions as lib.core.featuremaps.ACTIVATIONS)."""
    import sympy as sp

    if activation == "he2":
        return lambda x: (x ** 2 - 1) / sp.sqrt(2)
    if activation == "he3":
        return lambda x: (x ** 3 - 3 * x) / sp.sqrt(6)
    if activation == "he4":
        return lambda x: (x ** 4 - 6 * x ** 2 + 3) / sp.sqrt(24)
    if activation == "relu":
        return lambda x: sp.Max(x, 0)
    if activation == "centred_relu":
        return lambda x: sp.Max(x, 0) - 1 / sp.sqrt(2 * sp.pi)
    raise ValueError(f"activation must be one of he2, he3, he4, relu, centred_relu; got {activation!r}")


def _gauss_moment(n: int, half: bool):
    """E[g^n] (half=False) or E[g^n 1[g > 0]] (half=True) for g ~ N(0, 1), exact (sympy)."""
    import sympy as sp

    if n % 2 == 0:
        full = sp.factorial2(n - 1) if n > 0 else sp.Integer(1)
        return full / 2 if half else full
    if not half:
        return sp.Integer(0)
    k = (n - 1) // 2
    return 2 ** k * sp.factorial(k) / sp.sqrt(2 * sp.pi)


def _gauss_expect(expr, x, R):
    """E[expr], g ~ N(0, 1), for expr a polynomial in x and R = Max(x, 0): every monomial
    x^n R^r (= x^(n + r) 1[x > 0] for r >= 1) is replaced by its exact Gaussian (half-)moment."""
    import sympy as sp

    total = sp.Integer(0)
    for (n, r), c in sp.Poly(sp.expand(expr), x, R).terms():
        total += c * (_gauss_moment(n + r, r > 0))      # x^n R^r = x^(n + r - 1) R for r >= 1
    return sp.nsimplify(sp.simplify(total)) if not total.free_symbols else sp.simplify(total)


def hermite_coefficients(activation: str, scale=1, shift=0, kmax: int = 4, squared: bool = False) -> list:
    """Normalised Hermite coefficients a_k = E[f(g) He_k(g)] / sqrt(k!), k = 0..kmax, of
    f(x) = sigma(scale x + shift) (or its square when `squared`), g ~ N(0, 1), computed exactly with
    sympy and returned as sympy numbers (`float()` them to plot). sum_k a_k^2 = E f(g)^2.
    `scale` may be a positive number or a sympy symbol (taken positive); `shift` a number (0 for
    the ReLUs, whose kink the exact moments need at the origin)."""
    import sympy as sp

    kmax = check_int("kmax", kmax, 0)
    for name, v in (("scale", scale), ("shift", shift)):
        if isinstance(v, bool) or not isinstance(v, (int, float, sp.Basic)):
            raise ValueError(f"{name} must be a number or a sympy expression, got {v!r}")
        if isinstance(v, (int, float)) and not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v!r}")
    if isinstance(scale, (int, float)) and scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    relu = activation in ("relu", "centred_relu")
    if relu and shift != 0:
        raise ValueError(f"shift must be 0 for {activation} (exact moments need the kink at 0), got {shift!r}")
    key = (activation, str(scale), str(shift), kmax, squared)
    if key not in _HERMITE_CACHE:
        sigma = _sym_activation(activation)
        x, R = sp.Symbol("x", real=True), sp.Symbol("R", nonnegative=True)
        s = sp.nsimplify(scale) if not isinstance(scale, sp.Basic) else scale
        b = sp.nsimplify(shift) if not isinstance(shift, sp.Basic) else shift
        if relu:               # sigma(s x) = s Max(x, 0) (- mean) for s > 0
            f = s * R - (1 / sp.sqrt(2 * sp.pi) if activation == "centred_relu" else 0)
        else:
            f = sigma(s * x + b)
        f = sp.expand(f ** 2 if squared else f)
        out = []
        for k in range(kmax + 1):
            term = sp.expand(f * sp.hermite_prob(k, x))
            out.append(sp.simplify(_gauss_expect(term, x, R) / sp.sqrt(sp.factorial(k))))
        _HERMITE_CACHE[key] = out
    return list(_HERMITE_CACHE[key])


def _second_moment(activation: str) -> float:
    from .core.featuremaps import ACTIVATION_MOMENTS
    check_choice("activation", activation, tuple(ACTIVATION_MOMENTS))
    return ACTIVATION_MOMENTS[activation][1]


def mlp_kernel(activation: str, rho, kmax: int = 12) -> np.ndarray:
    """K(rho) = E[sigma(g) sigma(g')] for standard Gaussians with correlation rho (the m -> infinity
    limit of phi(o) . phi(o') with the unit input, rho = cos(o, o')): sum_k a_k^2 rho^k (Mehler),
    exact for the Hermite activations; for ReLU the series is truncated at kmax and the tail
    E sigma^2 - sum_k a_k^2 is put on rho^(kmax + 2) (so K(1) = E sigma^2 exactly)."""
    rho = np.asarray(rho, float)
    if (np.abs(rho) > 1 + 1e-12).any():
        raise ValueError("rho must lie in [-1, 1]")
    a2 = np.array([float(a) ** 2 for a in hermite_coefficients(activation, kmax=kmax)])
    out = sum(c * rho ** k for k, c in enumerate(a2))
    tail = _second_moment(activation) - a2.sum()
    return out + max(tail, 0.0) * rho ** (kmax + 2)


def shifted_kernel_coefficients(activation: str, beta: float, kmax: int = 12) -> np.ndarray:
    """Coefficients b_j of K(beta + (1 - beta) delta) = sum_j b_j delta^j (j = 0..kmax): the kernel
    seen by inputs sharing a component, beta = tau^2 / (1 + tau^2) (0: nothing shared).
    b_j = sum_k a_k^2 C(k, j) beta^(k - j) (1 - beta)^j. b_0 = K(beta) is the mean bias."""
    if not (isinstance(beta, (int, float)) and not isinstance(beta, bool) and 0.0 <= beta < 1.0):
        raise ValueError(f"beta must be a number in [0, 1), got {beta!r}")
    a2 = [float(a) ** 2 for a in hermite_coefficients(activation, kmax=kmax)]
    b = np.zeros(kmax + 1)
    for k, c in enumerate(a2):
        for j in range(k + 1):
            b[j] += c * math.comb(k, j) * beta ** (k - j) * (1 - beta) ** j
    return b


@functools.lru_cache(maxsize=64)
def sphere_cosine_nodes(d: int, nodes: int = 96) -> tuple:
    """Quadrature for delta = cos of two independent uniform directions in R^d (density proportional
    to (1 - delta^2)^((d - 3) / 2)): delta = cos(theta), theta in [0, pi] with weight sin(theta)^(d - 2),
    Gauss-Legendre in theta. Returns (delta, weights) as numpy arrays, weights summing to 1."""
    d, nodes = check_int("d", d, 2), check_int("nodes", nodes, 8)
    x, w = np.polynomial.legendre.leggauss(nodes)
    theta = (x + 1) * math.pi / 2
    w = w * np.sin(theta) ** (d - 2)
    return np.cos(theta), w / w.sum()


def _check_beta(beta) -> float:
    if not (isinstance(beta, (int, float)) and not isinstance(beta, bool) and 0.0 <= beta < 1.0):
        raise ValueError(f"beta must be a number in [0, 1), got {beta!r}")
    return float(beta)


def mlp_rf_variance(activation: str, beta: float = 0.0, d: int | None = None, kmax: int = 12) -> float:
    """Var_F of one unit's product sigma(g) sigma(g') (g, g' standard Gaussians with correlation rho):
    E[sigma^2(g) sigma^2(g')] - K(rho)^2, with E[sigma^2 sigma'^2] = sum_k c_k^2 rho^k (Mehler) and c_k
    the Hermite coefficients of sigma^2. The random-feature kernel value kappa = phi(o) . phi(o') has
    variance mlp_rf_variance / m over F. d=None: at rho = beta (two inputs that share only the
    component beta); d given: averaged over rho = beta + (1 - beta) delta, delta the cosine of two
    independent uniform directions in R^d (the pairs of distinct tokens). For He3 at beta = 0 the
    average is 1 + 18/d + O(d^-2) times the value at rho = 0: the c_2^2 rho^2 term of sigma^2."""
    beta = _check_beta(beta)
    c2 = np.array([float(c) ** 2 for c in hermite_coefficients(activation, kmax=kmax, squared=True)])
    if d is None:
        rho = np.array([beta])
        w = np.array([1.0])
    else:
        delta, w = sphere_cosine_nodes(check_int("d", d, 2))
        rho = beta + (1 - beta) * delta
    e4 = sum(c * rho ** k for k, c in enumerate(c2))
    return float((w * (e4 - mlp_kernel(activation, rho, kmax) ** 2)).sum())


def mlp_rf_common(activation: str, beta: float = 0.0, nodes: int = 96) -> float:
    """Var_g(sigma(g) mu(g)), mu(g) = E[sigma(g') | g] = sum_k a_k beta^k He_k(g) / sqrt(k!) for g' of
    correlation beta with g: per unit, the part of the random-feature noise kappa_jx - K_jx that is
    the same for every token j paired with one input x (an offset of x's whole row of kernel values).
    The memory's centring removes it (sum_j f_j (u_{Pi j} - u_bar) = 0 with exact counts), so the
    random-feature noise the memory sees is (mlp_rf_variance - mlp_rf_common) / m. At beta = 0:
    a_0^2 (E sigma^2 - a_0^2), zero for the centred activations."""
    beta = _check_beta(beta)
    from .core.featuremaps import ACTIVATIONS
    a = [float(c) for c in hermite_coefficients(activation, kmax=12)]
    g, w = np.polynomial.hermite_e.hermegauss(check_int("nodes", nodes, 8))
    w = w / w.sum()
    mu = sum(c * beta ** k * np.polynomial.hermite_e.hermeval(g, [0] * k + [1]) / math.sqrt(math.factorial(k))
             for k, c in enumerate(a))
    import torch
    sig = ACTIVATIONS[activation][0](torch.as_tensor(g)).numpy()
    prod = sig * mu
    return float((w * prod ** 2).sum() - (w * prod).sum() ** 2)


def mlp_kernel_crosstalk(activation: str, beta: float, d: int, kmax: int = 12) -> float:
    """E[(K(rho) - b_0)^2] over rho = beta + (1 - beta) delta, delta the cosine of two independent
    uniform directions in R^d and b_0 = K(beta): the second moment of the kernel's non-constant part
    between two distinct tokens (all cross products b_i b_j E delta^(i + j) included; leading order
    sum_{j >= 1} b_j^2 E delta^(2j), with E delta^2 = 1/d)."""
    beta = _check_beta(beta)
    delta, w = sphere_cosine_nodes(check_int("d", d, 2))
    b0 = float(mlp_kernel(activation, beta, kmax))
    return float((w * (mlp_kernel(activation, beta + (1 - beta) * delta, kmax) - b0) ** 2).sum())


def _mlp_beta(tau, trigger_in_value) -> float:
    if not (isinstance(tau, (int, float)) and not isinstance(tau, bool) and tau >= 0 and math.isfinite(tau)):
        raise ValueError(f"tau must be a finite number >= 0, got {tau!r}")
    if not isinstance(trigger_in_value, bool):
        raise ValueError(f"trigger_in_value must be True or False, got {trigger_in_value!r}")
    return tau ** 2 / (1 + tau ** 2) if trigger_in_value else 0.0


def mlp_signal_parts(activation: str = "he3", tau: float = 1.0, trigger_in_value: bool = False) -> dict:
    """K1 = E sigma^2 (the kernel at rho = 1: a token with itself), b0 = K(beta) (the constant part of
    the kernel between distinct tokens) and the mean signal S = K1 - b0 (in units of 1 / V)."""
    beta = _mlp_beta(tau, trigger_in_value)
    K1 = _second_moment(activation)
    b0 = float(shifted_kernel_coefficients(activation, beta)[0])
    return {"beta": beta, "K1": K1, "b0": b0, "S": K1 - b0}


def mlp_noise_terms(V: int, d: int, m: int, N: float, activation: str = "he3", tau: float = 1.0,
                    trigger_in_value: bool = False) -> dict:
    """The book's heuristic (chapter 8, proposition prop-mlp-budget): 1 / SNR^2 of the one-step MLP
    memory (oracle attention, unit input), correct label against one wrong label, at the typical
    token (count N / V, kappa_xx = K1, |u_y| = 1), split into named terms (their sum is key "total").
    With f_j = nu_j / V (nu_j = n_j / lambda, lambda = N / V) and the memory's centring, the logit of
    label k is xi_k = (1/V) sum_j (u_k . u_{Pi j}) (nu_j kappa_jx - b_0) (up to O(1/V^2)), so in units
    of the mean signal S / V, S = K1 - b_0:

      readout      1 / d                                     the input's own pair, (u_k . u_y)(nu_x K1 - b_0)
      kernel       (V / d) E[(K(rho) - b_0)^2] / S^2          low-degree Hermite cross-talk, exact counts
      rf           (V / d) (E[Var_F] - common) / (S^2 m)      random-feature (MLP) noise, exact counts
      finite       (kernel + rf) V / N                        count fluctuations E(nu - 1)^2 = V / N
      mean_bias    (b_0 / S)^2 V^2 / (N d)                    the kernel's constant times nu_j - 1

    with b_0 = K(beta), beta = tau^2/(1+tau^2) when the trigger is in the value path (else 0), and
    the expectations over rho = beta + (1 - beta) delta, delta the cosine of two independent
    directions in R^d (`mlp_kernel_crosstalk`, `mlp_rf_variance`; `mlp_rf_common` is the part of the
    random-feature noise shared by all pairs of one input, which the centring removes). Given the
    input's own kernel value, the random-feature noise scales with kappa_xx / K1 (exactly so at
    beta = 0: Var_j(kappa_jx | phi(v_x)) = kappa_xx Var(sigma) / m). The wrong label's own pair
    (overlap |u_k|^2 instead of u_k . u_{Pi j}) multiplies the last four by 1 + d / V
    (`mlp_predicted_accuracy`). (The trigger's projections z . e_j are neglected.)"""
    V, d, m = check_int("V", V, 2), check_int("d", d, 2), check_int("m", m, 1)
    if not (isinstance(N, (int, float)) and not isinstance(N, bool) and N > 0):
        raise ValueError(f"N must be a positive number (math.inf: every count exact), got {N!r}")
    p = mlp_signal_parts(activation, tau, trigger_in_value)
    S, b0, beta = p["S"], p["b0"], p["beta"]
    kernel = (V / d) * mlp_kernel_crosstalk(activation, beta, d) / S ** 2
    rf = (V / d) * (mlp_rf_variance(activation, beta, d) - mlp_rf_common(activation, beta)) / (S ** 2 * m)
    out = {"readout": 1.0 / d, "kernel": kernel, "rf": rf, "finite": (kernel + rf) * V / N,
           "mean_bias": (b0 / S) ** 2 * V * V / (N * d)}
    out["total"] = sum(out.values())
    return out


def mlp_term_moments(V: int, d: int, m: int, N: float, activation: str = "he3", tau: float = 1.0,
                     trigger_in_value: bool = False) -> dict:
    """The second moment of each term of a wrong label's logit over everything random (tokens,
    labels k != y, counts, F), in units of (S / V)^2: what `lib.analysis.mlp_budget.measure_terms` measures.
    readout: (1/d) E[(nu kappa_xx - b_0)^2] / S^2 = (K1^2 (1 + V/N)(1 + v) - 2 K1 b_0 + b_0^2) / (d S^2)
    (v = `mlp_signal_variance`); the other four: their `mlp_noise_terms` value times 1 + d / V."""
    t = mlp_noise_terms(V, d, m, N, activation, tau, trigger_in_value)
    p = mlp_signal_parts(activation, tau, trigger_in_value)
    K1, b0, S = p["K1"], p["b0"], p["S"]
    v = mlp_signal_variance(m, activation)
    out = {"readout": (K1 ** 2 * (1 + V / N) * (1 + v) - 2 * K1 * b0 + b0 ** 2) / (d * S ** 2)}
    for name in ("kernel", "rf", "finite", "mean_bias"):
        out[name] = t[name] * (1 + d / V)
    return out


def mlp_signal_variance(m: int, activation: str = "he3") -> float:
    """Relative variance of the correct label's kernel value kappa_xx = |phi(o_x)|^2 over F:
    Var(sigma(g)^2) / (m (E sigma^2)^2), from the Hermite coefficients of sigma^2."""
    m = check_int("m", m, 1)
    e4 = sum(float(c) ** 2 for c in hermite_coefficients(activation, kmax=12, squared=True))
    K1 = _second_moment(activation)
    return (e4 - K1 ** 2) / (m * K1 ** 2)


def _gamma_nodes(v: float, z):
    """A Gamma variable with mean 1 and variance v at standard-normal nodes z (Wilson-Hilferty:
    X = (1 - v/9 + z sqrt(v/9))^3 with shape 1/v): right-skewed like a sum of squares, and never
    negative (a Gaussian with the same variance would put far too much weight near 0). A crude
    stand-in for kappa_xx / K1: the true law of a mean of m i.i.d. sigma(g)^2 has a much lighter lower
    tail at small m (He3, m = 128: 1 % quantile about 0.33, against 0.02 here)."""
    return np.clip(1 - v / 9 + np.asarray(z) * math.sqrt(v / 9), 0.0, None) ** 3


@functools.lru_cache(maxsize=64)
def mlp_signal_quantiles(m: int, activation: str = "he3", nodes: int = 200, draws: int = 4000,
                         seed: int = 0) -> np.ndarray:
    """kappa_xx / K1 (unit input) from its true law, a mean of m i.i.d. sigma(g)^2 / K1: `draws`
    samples (fixed seed), returned as their quantiles at the levels (k + 1/2) / nodes, k < nodes, to
    be weighted equally. The lower tail is resolved to about 1 / nodes in probability; the far upper
    tail is not (at m = 128 for He3 the nodes' variance is about 0.8 of the true one), which a
    capacity at accuracy 0.99 does not feel: it is set by the tokens with too little signal."""
    import torch

    from .core.featuremaps import ACTIVATIONS

    m, nodes, draws = check_int("m", m, 1), check_int("nodes", nodes, 2), check_int("draws", draws, nodes)
    check_choice("activation", activation, tuple(ACTIVATIONS))
    sigma = ACTIVATIONS[activation][0]
    gen = torch_generator(seed)
    tot = torch.zeros(draws, dtype=torch.float64)
    for i in range(0, m, 256):
        tot += sigma(torch.randn(draws, min(256, m - i), generator=gen, dtype=torch.float64)).pow(2).sum(1)
    sample = (tot / (m * _second_moment(activation))).numpy()
    return np.quantile(sample, (np.arange(nodes) + 0.5) / nodes)


def mlp_predicted_accuracy(V: int, d: int, m: int, N: float, activation: str = "he3", tau: float = 1.0,
                           trigger_in_value: bool = False, nodes: int = 12, drop: tuple = (),
                           kappa_fluctuation: bool = True) -> float:
    """Accuracy predicted by `mlp_noise_terms` (the book's heuristic). Token x's signal, in units of
    S / V, is w = (nu kappa_xx - b_0) |u_y|^2 / S with three random factors: nu = n / lambda, the
    count n ~ Poisson(N / V) (an unseen token is never recalled), kappa_xx / K1 (relative variance
    `mlp_signal_variance`) and |u_y|^2 ~ chi^2_d / d. Each of the V - 1 wrong labels has an independent
    Gaussian score of variance  w^2 readout / |u_y|^2 + (1 + d/V) C  (C = (kernel + rf kappa_xx / K1)
    (1 + V / N) + mean_bias, the cross-talk of the other pairs; 1 + d/V adds the wrong label's own
    pair), and the
    correct label carries the same cross-talk C: it is recalled with probability
    E_z Phi((w + sqrt(C) z) / sd_wrong)^(V - 1), z standard normal. kappa_xx / K1 is drawn from the
    Gamma stand-in `_gamma_nodes` (too heavy a lower tail at small m: pessimistic there; the
    capacity's growth with m it implies is not a prediction of the measured one). kappa_fluctuation=False fixes
    kappa_xx at its mean K1 (to show what the signal's own random-feature fluctuation costs);
    kappa_fluctuation="sampled" draws it from its true law instead (`mlp_signal_quantiles`)."""
    import torch

    t = mlp_noise_terms(V, d, m, N, activation, tau, trigger_in_value)
    for name in drop:
        if name not in t or name == "total":
            raise ValueError(f"drop must name terms of mlp_noise_terms, got {name!r}")
        t[name] = 0.0
    p = mlp_signal_parts(activation, tau, trigger_in_value)
    K1, b0, S = p["K1"], p["b0"], p["S"]
    nodes = check_int("nodes", nodes, 4)
    z, wq = np.polynomial.hermite_e.hermegauss(nodes)
    wq = wq / wq.sum()
    if kappa_fluctuation == "sampled":
        ka = mlp_signal_quantiles(m, activation)
        wa = np.full(len(ka), 1.0 / len(ka))
    elif isinstance(kappa_fluctuation, bool):
        ka = _gamma_nodes(mlp_signal_variance(m, activation), z) if kappa_fluctuation else np.ones_like(z)
        wa = wq
    else:
        raise ValueError(f"kappa_fluctuation must be True, False or 'sampled', got {kappa_fluctuation!r}")
    kap, zb, zc = np.meshgrid(ka, z, z, indexing="ij")
    weight = wa[:, None, None] * wq[None, :, None] * wq[None, None, :]
    unorm = _gamma_nodes(2 / d, zb)
    fin = V / N if "finite" not in drop else 0.0
    C = (t["kernel"] + t["rf"] * kap[None]) * (1 + fin) + t["mean_bias"]           # cross-talk, given kappa_xx
    lam = N / V
    if lam > 1e5:                      # counts exact to < 1 %: one node n / lambda = 1
        nu, p_n = np.array([1.0]), np.array([1.0])
    elif lam > 400:                    # Poisson ~ Gaussian: nodes nu = 1 + z / sqrt(lambda)
        nu, p_n = 1 + z / math.sqrt(lam), wq
    else:                              # n = 1 .. lambda + 12 sqrt(lambda) (n = 0: never recalled)
        n = np.arange(max(1, int(lam - 12 * math.sqrt(lam))), int(lam + 12 * math.sqrt(lam) + 20))
        nu = n / lam
        p_n = np.exp(-lam + n * math.log(lam) - np.array([math.lgamma(k + 1) for k in n]))
    w = (nu[:, None, None, None] * kap[None] * K1 - b0) / S * unorm[None]
    sd_wrong = np.sqrt(w ** 2 * t["readout"] / unorm[None] + C * (1 + d / V))
    arg = (w + np.sqrt(C) * zc[None]) / np.maximum(sd_wrong, 1e-300)
    log_phi = torch.special.log_ndtr(torch.as_tensor(arg, dtype=torch.float64)).numpy()
    per = (weight[None] * np.exp((V - 1) * log_phi)).sum((1, 2, 3))
    return float((p_n * per).sum())


def mlp_predicted_capacity(d: int, m: int, activation: str = "he3", threshold: float = 0.99,
                           v_max: int = 2 ** 16, kappa_fluctuation: bool = True) -> int:
    """Largest V whose memory (every count exact, N = infinity) `mlp_predicted_accuracy` puts at
    >= threshold: the heuristic capacity, found by doubling then bisection (0 if not even V = 2)."""
    d, m, v_max = check_int("d", d, 1), check_int("m", m, 1), check_int("v_max", v_max, 2)
    if not (isinstance(threshold, float) and 0.0 < threshold < 1.0):
        raise ValueError(f"threshold must be a float in (0, 1), got {threshold!r}")
    ok = lambda V: mlp_predicted_accuracy(V, d, m, math.inf, activation,
                                          kappa_fluctuation=kappa_fluctuation) >= threshold
    if not ok(2):
        return 0
    lo = 2
    while lo < v_max and ok(min(2 * lo, v_max)):
        lo = min(2 * lo, v_max)
    if lo == v_max:
        return lo
    hi = 2 * lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _first_true(ok, lo: float, hi: float, rel: float = 0.01) -> float:
    """Smallest x in [lo, hi] (geometric bisection to relative `rel`) with ok(x), for ok monotone
    False -> True; inf if not ok(hi)."""
    if not ok(hi):
        return math.inf
    if ok(lo):
        return lo
    while hi / lo > 1 + rel:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def mlp_predicted_min_width(V: int, d: int, activation: str = "he3", threshold: float = 0.99,
                            m_max: int = 2 ** 24, N: float = math.inf) -> float:
    """Random-feature boundary: the smallest m at which `mlp_predicted_accuracy` (every count exact,
    N = infinity, unless N is given) reaches the threshold; inf if even m_max does not (the kernel's
    cross-talk or the readout alone is too large). Multiply by d for the boundary in m d."""
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    ok = lambda m: mlp_predicted_accuracy(V, d, max(1, round(m)), N, activation) >= threshold
    return _first_true(ok, 1.0, float(check_int("m_max", m_max, 1)))


def mlp_predicted_nstar(V: int, d: int, m: int, activation: str = "he3", threshold: float = 0.99,
                        drop: tuple = (), n_max: float = 2.0 ** 30, rel: float = 0.01) -> float:
    """Smallest N at which `mlp_predicted_accuracy` reaches the threshold (inf if never; found to
    relative precision rel): with drop=("mean_bias",) the finite-sample boundary, with
    drop=("finite",) the mean-bias boundary."""
    ok = lambda N: mlp_predicted_accuracy(V, d, m, N, activation, drop=drop) >= threshold
    return _first_true(ok, float(V), n_max, rel)


def coverage_nstar(V: int, threshold: float = 0.99) -> float:
    """V ln(1 / (1 - threshold)): with fewer samples more than 1 - threshold of the test tokens were
    never seen in training ((1 - 1/V)^N ~ e^(-N/V)), whatever the memory."""
    V = check_int("V", V, 2)
    if not (isinstance(threshold, float) and 0.0 < threshold < 1.0):
        raise ValueError(f"threshold must be a float in (0, 1), got {threshold!r}")
    return V * math.log(1 / (1 - threshold))
