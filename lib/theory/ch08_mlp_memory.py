"""Chapter 8 (the MLP memory), part 2: the one-step MLP memory's signal and noise terms, its
predicted accuracy, capacity, minimal width and N*, and the coverage bound. The kernels these use are
in `lib.theory.ch08_kernels`.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..core.config import check_choice, check_int
from ..core.search import first_true_real, smallest_true
from ..core.seed import torch_generator
from .ch08_kernels import (_second_moment, hermite_coefficients, mlp_kernel_crosstalk, mlp_rf_common,
                           mlp_rf_variance, shifted_kernel_coefficients)


# ---- chapter 8: the MLP (continued; the derivation is outlined at the top of ch08_kernels.py)

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

    from ..core.featuremaps import ACTIVATIONS

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
    d, m, v_max = check_int("d", d, 2), check_int("m", m, 1), check_int("v_max", v_max, 2)
    if not (isinstance(threshold, float) and 0.0 < threshold < 1.0):
        raise ValueError(f"threshold must be a float in (0, 1), got {threshold!r}")
    ok = lambda V: mlp_predicted_accuracy(V, d, m, math.inf, activation,
                                          kappa_fluctuation=kappa_fluctuation) >= threshold
    if not ok(2):
        return 0
    if ok(v_max):
        return v_max
    return smallest_true(lambda V: not ok(V), 2, v_max) - 1


def mlp_predicted_min_width(V: int, d: int, activation: str = "he3", threshold: float = 0.99,
                            m_max: int = 2 ** 24, N: float = math.inf) -> float:
    """Random-feature boundary: the smallest m at which `mlp_predicted_accuracy` (every count exact,
    N = infinity, unless N is given) reaches the threshold; inf if even m_max does not (the kernel's
    cross-talk or the readout alone is too large). Multiply by d for the boundary in m d."""
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    ok = lambda m: mlp_predicted_accuracy(V, d, max(1, round(m)), N, activation) >= threshold
    return first_true_real(ok, 1.0, float(check_int("m_max", m_max, 1)), 0.01)


def mlp_predicted_nstar(V: int, d: int, m: int, activation: str = "he3", threshold: float = 0.99,
                        drop: tuple = (), n_max: float = 2.0 ** 30, rel: float = 0.01) -> float:
    """Smallest N at which `mlp_predicted_accuracy` reaches the threshold (inf if never; found to
    relative precision rel): with drop=("mean_bias",) the finite-sample boundary, with
    drop=("finite",) the mean-bias boundary."""
    ok = lambda N: mlp_predicted_accuracy(V, d, m, N, activation, drop=drop) >= threshold
    return first_true_real(ok, float(V), n_max, rel)


def coverage_vlog(V: int, threshold: float = 0.99) -> float:
    """V ln(1 / (1 - threshold)), the familiar form of the coverage requirement: with fewer samples more
    than 1 - threshold of the test tokens were never seen in training ((1 - 1/V)^N ~ e^(-N/V)), whatever
    the memory. A heuristic (it drops the guess among unseen labels); the coverage bound itself, which
    keeps it, is `lib.analysis.lowerbound.coverage_nstar` (smaller)."""
    V = check_int("V", V, 2)
    if not (isinstance(threshold, float) and 0.0 < threshold < 1.0):
        raise ValueError(f"threshold must be a float in (0, 1), got {threshold!r}")
    return V * math.log(1 / (1 - threshold))
