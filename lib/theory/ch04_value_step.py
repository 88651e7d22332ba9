"""Chapter 4 (the value step, step 1): the one-step memory's logit terms, the bag-of-tokens
accuracies, the trigger's key, and coverage (coupon collector).
"""

from __future__ import annotations

import math

from ..core.config import check_int


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
    # at k = y both halves of the trigger's cross-talk hold the matched path V (n_x/N) |u_y|^2 (z . e_x):
    # their covariance there gains E[(V n/N)^2] E|u|^4 E(z . e)^2 = f q / d, twice
    m_at = 2 * f * q / d
    out["crosstalk"] = dict(mean_at=0.0, var_at=x_at + tc + m_at, mean_off=0.0, var_off=x_off + tc)
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
    from ..core.seed import generator
    L, V = check_int("L", L, 1), check_int("V", V, 2)
    n = check_int("samples", samples, 1)
    seq = torch.randint(V, (n, L), generator=generator(check_int("seed", seed, 0), "bag-rule", L, V))
    counts = torch.zeros(n, V, dtype=torch.int32).scatter_add_(1, seq, torch.ones(n, L, dtype=torch.int32))
    mx = counts.max(1).values
    c_inf = counts.gather(1, seq[:, :1])[:, 0]
    return float(((c_inf == mx).double() / (counts == mx[:, None]).sum(1)).mean())


def trigger_self_bias(V: int, d: int, L: int) -> float:
    """beta = V (1 + (L - 1)/d) - 1 (chapter 5): the pairs of a sample with itself give E[k | N] a part
    D/N whose trigger component is (1 + beta) mu_inf / N, so the trigger's bonus is mu(N) = mu_inf (1 + beta/N).
    The same factor multiplies the trigger part of every token's score, so it does not change the
    signal-to-noise ratio by itself. beta is defined against mu_inf = z . k_inf (z . D = (1 + beta) mu_inf).
    The book derives z . D ~ V (1 + L/d) kappa |z|^2 (leading order); mu_inf itself exceeds kappa |z|^2 by
    about 1 + 1/d, which leaves (L - 1)/d. Measured where it can be told apart from the scatter between
    problems (short L, small d): averaged over 800 problems the exact beta (from
    `lib.analysis.margins.k_self_term`) is within 2 standard errors of V (1 + (L - 1)/d) - 1 at
    (V, d, L) = (64, 16, 2) and (64, 8, 4), and 4.6 to 6.6 from (L - 2)/d and L/d. At d <= 4 terms of
    order V/d^2 show."""
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 2)
    return V * (1 + (L - 1) / d) - 1


def step1_trigger_key(L: int, V: int, z2: float = 1.0, N: int | None = None, d: int | None = None) -> float:
    """Leading order of z_trig . k (the step-2 direction's trigger component) from the signal term:
    |z|^2 (1 + beta/N) (1 - 1/L)(1 - 1/V) / (V L^2), with the finite-N factor of chapter 5,
    beta = trigger_self_bias(V, d, L) = V (1 + (L - 1)/d) - 1: the signal's self-count gives V - 1 (each
    sample's informative token is counted in its own n_{x*}), the other tokens' projections on z through
    the sample's own part of G_1 the rest. N=None gives the N -> infinity limit (then d is not needed);
    with N, d is required. Only the signal term contributes at leading order (chapter 4)."""
    L, V = check_int("L", L, 2), check_int("V", V, 2)
    if not (z2 > 0 and math.isfinite(z2)):
        raise ValueError(f"z2 must be a positive finite number, got {z2!r}")
    if N is None:
        f = 1.0
    else:
        N = check_int("N", N, 1)
        if d is None:
            raise ValueError("d is required with N: the finite-N factor 1 + beta/N depends on d")
        f = 1.0 + trigger_self_bias(V, check_int("d", d, 1), L) / N
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
