"""Chapter 8 (the MLP memory), part 1: Hermite coefficients of the activations, the MLP kernel and
its expansion around a shared component, and the random-feature variances at finite width.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..core.config import check_choice, check_int


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
    """sigma as a sympy function of x for the Hermite activations (the same functions as
    lib.core.featuremaps.ACTIVATIONS)."""
    import sympy as sp

    if activation == "he2":
        return lambda x: (x ** 2 - 1) / sp.sqrt(2)
    if activation == "he3":
        return lambda x: (x ** 3 - 3 * x) / sp.sqrt(6)
    if activation == "he4":
        return lambda x: (x ** 4 - 6 * x ** 2 + 3) / sp.sqrt(24)
    # the ReLUs are not here: hermite_coefficients integrates them exactly as R = Max(x, 0) on x > 0
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
        sigma = None if relu else _sym_activation(activation)
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
    from ..core.featuremaps import ACTIVATION_MOMENTS
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
    from ..core.featuremaps import ACTIVATIONS
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
