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
