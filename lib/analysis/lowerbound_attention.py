"""A lower bound on N for locating the trigger with an embedding-blind function of the step-2 direction
(chapter 9, the theorem "Attention lower bound for embedding-blind learners": the book's own
derivation, for the class defined there). Re-exported by `lib.analysis.lowerbound`.

The class.  After the first step V^1 = eta G1 the attention gradient at W_KQ = 0 is rank one along the
step-2 direction Y = k (one batch of N samples: the three steps' own k, chapter 5). A learner of the class
outputs k_hat = f(Y, S, omega): f any measurable map, S any side information that is a function of the
output side (the output embeddings, drawn independently of E and z, and Pi*) and of the batch's token ids,
positions and labels; omega independent randomness; f does not read the input embeddings E or the trigger z (embedding-blind). It
attends by hard attention argmax_t h_t . k_hat (limit mode); the risk is the mean attention accuracy over
problems (E, z i.i.d. N(0, I/d)), batches and omega.

The theorem (chapter 9).  (i) Proved, exactly: every rule of the class has
the accuracy of a rotation-equivariant randomised rule k_hat = cos(theta) Y/|Y| + sin(theta) W, W uniform
on the unit sphere orthogonal to Y, theta a function of (|Y|, S, omega). (ii) Proved under Gaussian scores:
theta = 0 is optimal up to P(z . Y < 0): no rule of the class beats k_hat = Y by more than that chance.
(iii) Under the reduction (assumed; its constants tuned on measurements at V = 64 and 128): the noise-to-signal ratio of the token scores along Y is at least

    1/r(N)^2 = 1/d + X_lo(N),   X_lo(N) = (B_lo + Q_lo / N) / (N + beta)^2,

with B_lo = imbalance_noise(V, d, L) / 4 (the self-term's bias across the trigger, chapter 5, at a quarter
of its leading order: `bias_floor`), Q_lo = L^2 rho (1 + rho), rho = V/d (the single sample's self-pair
noise, leading order of its token-embedding part: `self_pair_floor`) and beta = trigger_self_bias (chapter
5). Its accuracy is then at most A(r) = E_K g_K(r) (`gaussian_mixture_accuracy`), g_K(r) =
int phi(x) Phi(x + r)^K dx and K the number of distinct rival tokens (`distinct_law`). Hence accuracy
>= t needs X_lo(N) <= 1/r_t^2 - 1/d, r_t the root of A(r) = t (`critical_ratio`):

    N >= N_lower(V, d, L, t) = the root of (B_lo + Q_lo / N) / (N + beta)^2 = 1/r_t^2 - 1/d,

infinite when 1/r_t^2 <= 1/d (the population wall). For beta >> N it reads N_lower ~ Q_lo / (beta^2 q) ~
L^2 rho (1 + rho) d^2 / (V^2 (d + L)^2 q): N, d and L together.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..core.config import check_float, check_int

_X = np.linspace(-12.0, 12.0, 1601)                       # quadrature nodes in x for g_K
_PHI_X = np.exp(-_X * _X / 2) / math.sqrt(2 * math.pi)
_R = np.linspace(-15.0, 15.0, 1201)                       # r grid of the tabulated mixture


L_MAX = 4096                                              # the K-mixture costs O(L^2); larger L is refused


def _sizes(V, d, L):
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 2)
    if L > L_MAX:
        raise ValueError(f"L must be <= {L_MAX} (the rival-count mixture costs O(L^2)), got {L}")
    return V, d, L


def _threshold(threshold) -> float:
    if isinstance(threshold, bool):
        raise ValueError(f"threshold must be a float in (0, 1), got {threshold!r}")
    t = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    if t == 1.0:
        raise ValueError("threshold must be < 1, got 1.0")
    return t


def distinct_law(V: int, L: int) -> np.ndarray:
    """(L,) P(K = k), k = 0..L-1: K the number of distinct values among the L - 1 other tokens of a
    sequence that differ from the informative token (each other token uniform over V, independent):
    the chain s -> s + 1 with probability (V - 1 - s)/V, once per other token."""
    V, L = check_int("V", V, 2), check_int("L", L, 1)
    if L > L_MAX:
        raise ValueError(f"L must be <= {L_MAX}, got {L}")
    p = np.zeros(L)
    p[0] = 1.0
    s = np.arange(L)
    up = np.clip((V - 1 - s) / V, 0.0, 1.0)
    for _ in range(L - 1):
        q = p * (1 - up)
        q[1:] += p[:-1] * up[:-1]
        p = q
    return p


def _g_mix(r: np.ndarray, pK: np.ndarray) -> np.ndarray:
    """sum_K pK[K] g_K(r), g_K(r) = int phi(x) Phi(x + r)^K dx (trapezoid in x); the mass of the K with
    pK < 1e-15 is added as if g = 1 there, so the result never falls below the exact mixture."""
    from ..theory import _normal_cdf
    logF = np.log(np.maximum(_normal_cdf(_X[None, :] + r[:, None]), 1e-300))     # (R, X)
    out = np.zeros(r.size)
    for K in np.nonzero(pK >= 1e-15)[0]:
        out += pK[K] * np.trapezoid(_PHI_X * np.exp(K * logF), _X, axis=1)
    return np.minimum(out + pK[pK < 1e-15].sum(), 1.0)


@functools.lru_cache(maxsize=64)
def _g_table(V: int, L: int) -> np.ndarray:
    """sum_K P(K) g_K(r) on the grid _R (nondecreasing in r; cached)."""
    return np.maximum.accumulate(_g_mix(_R, distinct_law(V, L)))


def gaussian_mixture_accuracy(r, V: int, L: int):
    """A(r) = E_K g_K(r): the attention accuracy when the informative position's score exceeds the token
    scores' common mean by r standard deviations and all scores are independent Gaussians (chapter 5's
    Gaussian accuracy with the number of distinct rivals K of `distinct_law`). Accepts an array of r."""
    V, _, L = _sizes(V, 1, L)
    r = np.asarray(r, float)
    if np.isnan(r).any():
        raise ValueError("r must not be NaN")
    out = np.interp(np.clip(r, _R[0], _R[-1]), _R, _g_table(V, L))
    return float(out) if out.ndim == 0 else out


def critical_ratio(V: int, L: int, threshold: float = 0.99) -> float:
    """r_t: the smallest r with gaussian_mixture_accuracy(r, V, L) >= threshold (on the tabulated grid,
    linear interpolation between its nodes)."""
    V, _, L = _sizes(V, 1, L)
    t = _threshold(threshold)
    G = _g_table(V, L)
    if G[-1] < t:                                  # unreachable on |r| <= 15 (never for t < 1 - 1e-12)
        return math.inf
    i = int(np.argmax(G >= t))
    if i == 0:
        return float(_R[0])
    return float(np.interp(t, [G[i - 1], G[i]], [_R[i - 1], _R[i]]))


def bias_floor(V: int, d: int, L: int) -> float:
    """B_lo = B / 4, B = lib.theory.imbalance_noise(V, d, L) = L^2 (L-2)^2 rho (rho^2 + 3 rho + 1) / V^2:
    the squared token-score spread of the self-term's bias D_perp (chapter 5), in units of mu_inf^2, at a
    quarter of its leading order (the exact per-problem value scatters: at least 0.21 B on 60 problems at V = 64 and
    128 measured with exact moments, at least 0.26 B on all of them but one configuration)."""
    from ..theory import imbalance_noise
    V, d, L = _sizes(V, d, L)
    return imbalance_noise(V, d, L) / 4.0


def self_pair_floor(V: int, d: int, L: int) -> float:
    """Q_lo = L^2 rho (1 + rho), rho = V/d: the leading order of the token-score noise Q[s] of one sample
    paired with itself (its L - 1 token embeddings weighted by their in-sequence overlaps), in units of
    mu_inf^2; the exact Q[s] (`lib.analysis.k_noise.k_noise_moments`, 'perp', 'self') was at least 1.88 times
    it (row means 3.0 to 6.7) on the same 60 problems."""
    V, d, L = _sizes(V, d, L)
    rho = V / d
    return L * L * rho * (1 + rho)


def excess_noise_floor(N, V: int, d: int, L: int):
    """X_lo(N) = (B_lo + Q_lo / N) / (N + beta)^2 (beta = lib.theory.trigger_self_bias): the lower estimate
    of the excess noise-to-signal of one batch's k (the bias and the diagonal variance of the V-statistic;
    the pair, first-projection and cross moments are left out). Accepts an array of N (N > 0)."""
    from ..theory import trigger_self_bias
    V, d, L = _sizes(V, d, L)
    N = np.asarray(N, float)
    if not (np.isfinite(N) & (N > 0)).all():
        raise ValueError(f"N must be positive and finite, got {N!r}")
    out = (bias_floor(V, d, L) + self_pair_floor(V, d, L) / N) / (N + trigger_self_bias(V, d, L)) ** 2
    return float(out) if out.ndim == 0 else out


def accuracy_ceiling(N, V: int, d: int, L: int):
    """A(r(N)), 1/r(N)^2 = 1/d + X_lo(N): the theorem's ceiling on the mean attention accuracy of the class
    on N samples (chapter 9's theorem, part iii). Accepts an array of N."""
    V, d, L = _sizes(V, d, L)
    r = 1.0 / np.sqrt(1.0 / d + np.asarray(excess_noise_floor(N, V, d, L)))
    return gaussian_mixture_accuracy(r, V, L)


def attention_lower_bound(V: int, d: int, L: int, threshold: float = 0.99) -> float:
    """N_lower(V, d, L, t): below it the three steps' direction k of N samples does not attend to the
    informative position with mean accuracy >= t (hard attention), and no embedding-blind function of k does
    so with mean accuracy >= t + P(z . k < 0) (chapter 9's theorem: proved up to the reduction (R1)-(R3) stated there). The root of
    X_lo(N) = 1/r_t^2 - 1/d (`excess_noise_floor`, `critical_ratio`), by bisection in log N to 1e-10
    relative; inf at and beyond the population wall 1/r_t^2 <= 1/d. A float, possibly below 1."""
    V, d, L = _sizes(V, d, L)
    t = _threshold(threshold)
    q = 1.0 / critical_ratio(V, L, t) ** 2 - 1.0 / d
    if not q > 0:
        return math.inf
    X = lambda n: excess_noise_floor(n, V, d, L)                     # noqa: E731  (decreasing in n)
    lo, hi = 1e-12, 1.0
    while X(hi) > q:
        lo, hi = hi, hi * 2.0
    if X(lo) <= q:
        return lo
    while hi / lo > 1 + 1e-10:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if X(mid) > q else (lo, mid)
    return hi


def step2_direction(problem, batch) -> "torch.Tensor":
    """(d,) the step-2 direction of one batch, Y = (1/N^2) sum_{n,m} (a_{y_n} . a_{y_m}) C_n obar_m (chapter 9's
    class): a = u - u_bar, obar_n the mean of sample n's keys h_{n,t} = e_{x_{n,t}} + 1[t = l_n] z_trig, C_n their
    covariance within the sample. It is the three steps' key direction k (limit mode) up to a positive factor.
    Only for the trigger in the value path (the chapter's setting: there the values' mean is obar_n)."""
    import torch
    if not problem.cfg.trigger_in_value:
        raise ValueError("step2_direction needs the trigger in the value path (TaskConfig.trigger_in_value=True)")
    if problem.cfg.model != "attn":
        raise ValueError(f"step2_direction is for the attention-only model, got model={problem.cfg.model!r}")
    N, L = batch.tokens.shape
    h = problem.E[batch.tokens.long()].clone()
    h[torch.arange(N), batch.pos.long()] += problem.z_trig
    ob = h.mean(1)
    C = torch.einsum("ntd,nte->nde", h, h) / L - torch.einsum("nd,ne->nde", ob, ob)
    a = problem.U[batch.labels.long()] - problem.U.mean(0)
    return torch.einsum("nm,nde,me->d", a @ a.T, C, ob) / N ** 2
