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
from ..core.search import first_true_real

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


def n_grid(n_min: int, n_max: int, per_octave: int = 4) -> list[int]:
    """Geometric grid of sample sizes from n_min to n_max, `per_octave` points per doubling."""
    n_min, n_max = check_int("n_min", n_min, 1), check_int("n_max", n_max, 1)
    per_octave = check_int("per_octave", per_octave, 1)
    if n_min > n_max:
        raise ValueError(f"n_min must be <= n_max, got n_min={n_min}, n_max={n_max}")
    k = math.ceil(per_octave * math.log2(n_max / n_min) - 1e-9)
    return sorted({min(n_max, round(n_min * 2 ** (i / per_octave))) for i in range(k + 1)})


def _check_class_cfg(cfg, name: str) -> None:
    """The theorem's setting: the attention-only model, the trigger in the value path, Gaussian input embeddings
    (their law is rotation-invariant) and output embeddings drawn apart from them (untied: with u = e the side
    information would reveal the embeddings)."""
    if not cfg.trigger_in_value or cfg.model != "attn":
        raise ValueError(f"{name} needs the attention-only model with the trigger in the value path "
                         "(cfg.trigger_in_value=True, cfg.model='attn')")
    if cfg.tied:
        raise ValueError(f"{name} needs untied output embeddings (cfg.tied=False): tied ones reveal the input embeddings")
    if cfg.embedding != "gaussian":
        raise ValueError(f"{name} needs Gaussian embeddings (cfg.embedding='gaussian'), got {cfg.embedding!r}")


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
    # X_lo decreases in N to 0: the root lies below 2^500 (and its square stays finite)
    return first_true_real(lambda n: excess_noise_floor(n, V, d, L) <= q, 1e-12, 2.0 ** 500, 1e-10, grow=True)


def step2_direction(problem, batch) -> "torch.Tensor":
    """(d,) the step-2 direction of one batch, Y = (1/N^2) sum_{n,m} (a_{y_n} . a_{y_m}) C_n obar_m (chapter 9's
    class): a = u - u_bar, obar_n the mean of sample n's keys h_{n,t} = e_{x_{n,t}} + 1[t = l_n] z_trig, C_n their
    covariance within the sample. It is the three steps' key direction k (limit mode) up to a positive factor.
    Only for the trigger in the value path (the chapter's setting: there the values' mean is obar_n)."""
    import torch
    from ..core.task import check_batch
    check_batch(problem, batch)                       # ids out of range raise, naming the field
    _check_class_cfg(problem.cfg, "step2_direction")
    N, L = batch.tokens.shape
    h = problem.E[batch.tokens.long()].clone()
    h[torch.arange(N), batch.pos.long()] += problem.z_trig
    ob = h.mean(1)
    C = torch.einsum("ntd,nte->nde", h, h) / L - torch.einsum("nd,ne->nde", ob, ob)
    a = problem.U[batch.labels.long()] - problem.U.mean(0)
    return torch.einsum("nm,nde,me->d", a @ a.T, C, ob) / N ** 2


def class_accuracy_path(cfg, seed: int = 0, Ns=None) -> dict:
    """The theorem's two measured sides along nested batches of problem `seed` (chapter 9, part ii).

    For each N of `Ns` (increasing positive ints; default `lib.analysis.lowerbound.n_grid(1, 2**15)`) and the
    first N samples of `sample_batch(problem, max(Ns), seed)`:
      "acc":  the exact attention accuracy of k_hat = Y (the three steps' direction, limit mode);
      "best": acc(Y) when z . Y >= 0, and 1 when z . Y < 0: under Gaussian scores (R2), an upper limit on the
              accuracy, given this batch, of part (i)'s symmetrised form of any rule of the class; its mean over
              problems and batches, E[acc(Y) 1{z . Y >= 0}] + P(z . Y < 0), bounds every rule's mean accuracy
              (the proof of part (ii));
      "negative": whether z . Y < 0.
    Y = (1/N^2) sum_n C_n W_{y_n}, W_y = sum_{y'} (a_y . a_y') T_y' and T_y the sum of the key means obar_n of
    the samples labelled y. With h_{n,t} = e_{x_{n,t}} + 1[t = l_n] z every product h . W_y is a look-up in the
    (V, V) table E W^T (plus z . W_y at the trigger), so each grid point costs O(N L + V^2 d), in float64. Only
    for the trigger in the value path and the attention-only model, as `step2_direction`; returns {"N": list, "acc", "best", "negative": (len(Ns),) arrays}."""
    import torch

    from ..core.config import TaskConfig
    from ..core.embeddings import make_problem
    from ..core.task import check_batch_memory, sample_batch
    from .margins import attention_accuracy
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    _check_class_cfg(cfg, "class_accuracy_path")
    if cfg.noise_vocab or cfg.eos_key:
        raise ValueError("class_accuracy_path is for the chapter's task: cfg.noise_vocab = 0 and no EOS key")
    seed = check_int("seed", seed, 0)
    Ns = n_grid(1, 2 ** 15) if Ns is None else Ns
    if isinstance(Ns, (str, bytes)) or not hasattr(Ns, "__iter__"):
        raise ValueError(f"Ns must be a list of increasing positive ints, got {Ns!r}")
    Ns = [check_int("Ns", n, 1) for n in Ns]
    if not Ns or any(b <= a for a, b in zip(Ns, Ns[1:])):
        raise ValueError(f"Ns must be a non-empty, strictly increasing list, got {Ns!r}")
    check_batch_memory(cfg, Ns[-1], "Ns")
    problem = make_problem(cfg, seed)
    batch = sample_batch(problem, Ns[-1], seed)
    f64 = torch.float64
    E, z = problem.E.to(f64), problem.z_trig.to(f64)
    a = (problem.U - problem.U.mean(0)).to(f64)                         # (V, d_out): a_y for each label y
    AA = a @ a.T
    V, d, L = cfg.V, cfg.d, cfg.L
    x_all, y_all, l_all = batch.tokens.long(), batch.labels.long(), batch.pos.long()
    cnt = torch.zeros(V * V, dtype=f64)                                 # cnt[y V + j]: token j in samples labelled y
    n_y = torch.zeros(V, dtype=f64)
    acc, best, neg = [], [], []
    start = 0
    for N in Ns:
        xs, ys = x_all[start:N], y_all[start:N]
        cnt.index_add_(0, (ys[:, None] * V + xs).reshape(-1), torch.ones(xs.numel(), dtype=f64))
        n_y.index_add_(0, ys, torch.ones(ys.numel(), dtype=f64))
        start = N
        T = (cnt.view(V, V) @ E + n_y[:, None] * z) / L                 # (V, d): sum of obar_n per label
        W = AA @ T                                                      # (V, d)
        x, y, l = x_all[:N], y_all[:N], l_all[:N]
        s = (E @ W.T)[x, y[:, None]]                                    # (N, L): e_{x_nt} . W_{y_n}
        s[torch.arange(N), l] += (W @ z)[y]                             # the trigger's part at position l_n
        c = s.sum(1) / L                                                # obar_n . W_{y_n}
        u = torch.bincount(x.reshape(-1), weights=(s - c[:, None]).reshape(-1), minlength=V)
        Y = (E.T @ u + z * float(s[torch.arange(N), l].sum() - c.sum())) / (L * N ** 2)
        a_Y = attention_accuracy(problem, Y.to(problem.E.dtype))
        negative = bool(float(z @ Y) < 0)
        acc.append(a_Y)
        best.append(1.0 if negative else a_Y)
        neg.append(negative)
    return {"N": Ns, "acc": np.array(acc), "best": np.array(best), "negative": np.array(neg)}


def reduction_constants(cfg, seed: int = 0, samples: int = 4000) -> dict:
    """(R1)'s two constants against their exact values for problem `seed` (chapter 5's exact pieces):
      "self": Q[s] / Q_lo, the self-pair's token-score noise (`lib.analysis.k_noise.k_noise_moments`, form
              'perp', on `samples` fresh sequences) over `self_pair_floor`;
      "bias": B_exact / B_lo, the variance over the tokens of e_j . D_perp (D the self-pair mean,
              `margins.k_self_term`, D_perp its part across z) in units mu_inf^2 / |z|^2, over `bias_floor`;
      "pair": Q[K] + Q[K, K^swap], a moment the floor drops (nonnegative by symmetry);
      "dropped": pair + 2 Q[psi, s], the smallest coefficient (at N = 2) of the 1/N^2-order terms the floor
              drops from the variance [(N-1)(N-2) psi + (N-1)(pair + 2 cross)] / N^3 (psi >= 0): if it is
              nonnegative, no dropped variance term is negative at any N.
    The floor keeps the first two: (R1) needs "self" >= 1 and "bias" >= 1 on average over problems."""
    from ..core.config import TaskConfig
    from ..core.embeddings import make_problem
    from . import k_noise, margins
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    _check_class_cfg(cfg, "reduction_constants")
    seed, samples = check_int("seed", seed, 0), check_int("samples", samples, 4)
    p = make_problem(cfg, seed)
    m = k_noise.k_noise_moments(p, samples=samples, seed=1)["perp"]
    z = p.z_trig
    mu = float(z @ margins.k_population(p))
    D = margins.k_self_term(p)
    Dp = D - (D @ z) / (z @ z) * z
    B_exact = float((p.E @ Dp).var(correction=0)) / mu ** 2 * float(z @ z)
    return {"self": m["self"] / self_pair_floor(cfg.V, cfg.d, cfg.L), "bias": B_exact / bias_floor(cfg.V, cfg.d, cfg.L),
            "pair": m["pair"], "dropped": m["pair"] + 2 * m["cross"]}


def theta_scan(cfg, N: int, seed: int = 0, thetas=(0.0, 0.1, 0.3, 0.5, 1.0, math.pi / 2), draws: int = 8) -> np.ndarray:
    """(len(thetas),) exact attention accuracy of the randomised rules k_hat = cos(theta) Y/|Y| + sin(theta) W of
    part (i) of chapter 9's theorem, W uniform on the unit sphere orthogonal to Y (mean over `draws` draws of W;
    one when sin(theta) = 0), for problem `seed` and its first N samples (Y: the three steps' k, limit mode).
    Part (ii) says theta = 0 is the best of them up to P(z . Y < 0), under Gaussian scores."""
    import torch

    from ..core.config import TaskConfig
    from ..core.embeddings import make_problem
    from ..core.seed import generator
    from ..core.task import sample_batch
    from ..learning.schedule import three_steps
    from .margins import attention_accuracy
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    _check_class_cfg(cfg, "theta_scan")
    N, seed, draws = check_int("N", N, 1), check_int("seed", seed, 0), check_int("draws", draws, 1)
    if isinstance(thetas, (str, bytes)) or not hasattr(thetas, "__iter__"):
        raise ValueError(f"thetas must be a list of angles in [0, pi], got {thetas!r}")
    thetas = [check_float("thetas", t, 0.0, math.pi) for t in thetas]
    if not thetas:
        raise ValueError("thetas must not be empty")
    p = make_problem(cfg, seed)
    Y = three_steps(p, sample_batch(p, N, seed), mode="limit").k
    y = Y / Y.norm()
    g = generator(seed, "theta-scan", N)
    out = []
    for th in thetas:
        acc = []
        for _ in range(draws if abs(math.sin(th)) > 1e-12 else 1):
            w = torch.randn(cfg.d, generator=g, dtype=torch.float64).to(y.dtype)
            w = w - (w @ y) * y
            acc.append(attention_accuracy(p, math.cos(th) * y + math.sin(th) * w / w.norm()))
        out.append(float(np.mean(acc)))
    return np.array(out)
