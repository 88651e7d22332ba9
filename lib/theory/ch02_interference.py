"""Chapter 2 (interference; also chapters 1 and 3): random embeddings and the one-step memory.

The book's own derivation (chapters 2-3) unless a docstring cites a paper: moments of inner products
of random embeddings, their coherence, the capacity d^2 = c n log n, and the signal-to-noise heuristic
for a Hebbian memory (its score moments, predicted accuracy and capacity, the trigger's bias).
"""

from __future__ import annotations

import math

import numpy as np

from ..core.config import check_choice, check_int
from ..core.search import first_true_real


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
    target = d * d / c                       # n log n is increasing on n > 1, and >= target at max(3, target)
    return first_true_real(lambda n: n * math.log(n) >= target, 1.0, max(3.0, target), 1e-15)


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
    from ..core.search import largest_true
    return largest_true(lambda n: hebbian_predicted_accuracy(n, d) >= threshold)


def trigger_bias_var(V: int, d: int) -> float:
    """E[b_k^2] for the per-label bias b_k = u_k^T W_V z_trig of the memory W_V = sum_j u_{Pi j} e_j^T
    with V Gaussian pairs and a Gaussian trigger (chapter 1, derived in its exercise): (d + V + 1)/d^2."""
    V, d = check_int("V", V, 1), check_int("d", d, 1)
    return (d + V + 1) / d ** 2
