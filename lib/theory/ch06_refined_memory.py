"""Chapter 6 (the refined memory, step 3): the final logit's moments, its predicted accuracy and
N*, and recall with orthogonal embeddings.
"""

from __future__ import annotations

import math

from ..core.config import check_int
from ..core.search import threshold_search


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

    s2 = |s|^2 (tau^2 |z|^2 with the trigger in the value path, 0 without). N = math.inf gives the
    limit (q = 0, r = 1). Returns these as a dict.
    """
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    N = math.inf if isinstance(N, float) and math.isinf(N) and N > 0 else check_int("N", N, 1)
    s2 = _check_s2(s2)
    q, r = (0.0, 1.0) if math.isinf(N) else ((V - 1) / (V * V * N), 1 + (V - 1) / N)
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
    from ..core.config import check_float
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
        rho, p = torch.ones(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    else:
        N = int(N)
        rho, p = _binned_counts(N, V)
        keep = p > _NEGLIGIBLE
        rho, p = rho[keep], p[keep]
    m = {k: V * V * v for k, v in refined_memory_moments(V, d, N, s2).items()}   # every term times V^2
    rho, a, b = rho[:, None, None, None], a[None, :, None, None], b[None, None, :, None]
    # the mean bias given a = |e_x|^2 (its factor s2^2 + s2/d becomes s2^2 + s2 a/d), at a wrong label, and
    # the part of it at the correct label not carried by the input's own count
    mb_off = m["mean_bias"] * ((s2 * s2 + s2 * a / d) / (s2 * s2 + s2 / d) if s2 > 0 else torch.zeros_like(a))
    mb_y = mb_off * ((V + 1) / d) / (1 + (V + 1) / d)
    mu = b * (rho * a + (rho - 1) * s2)
    var_y = m["crosstalk_y"] * a + m["trigger_key"] + mb_y
    # the wrong-label cross-talk given a: its moment less the output overlap u_k . u_y |e_x|^2 (half of its
    # 2 (1 + 2/d)/d), which enters through xi_y below; the rest is the correct label's (V - 2)/(V - 1) share
    ct_perp = (m["crosstalk"] + m["crosstalk_y"] * (V - 2) / (V - 1)) / 2
    var_perp = ct_perp * a + m["trigger_key"] + mb_off
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
    from ..core.config import check_float
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    n_max = check_int("n_max", n_max, 1)
    if refined_memory_accuracy(V, d, math.inf, s2) < threshold:
        return None
    return threshold_search(lambda n: refined_memory_accuracy(V, d, n, s2) >= threshold, 1, n_max, 0.01).first_true


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
