"""Step 2's direction k on a finite batch: its exact mean factor along the trigger and its
batch-to-batch variance (the book's derivation, chapter 5).

k is a V-statistic of the N samples: k = (1/N^2) sum_{n,m} K(n, m), K(x, y) = (a_x . a_y) C_x obar_y
(a_x = u_{Pi* x*} - u_bar, C_x the within-sequence covariance, obar_y the uniform average of the
values). For independent samples X, Y let

    g(x) = E[K(x, Y)] = C_x w_{x*},  w_i = G1_inf^T a_i      (first projection, left index)
    g'(y) = E[K(X, y)] = M_{y*} obar_y, M_j = (1/V) sum_i (a_i . a_j) E[C | i]   (right index)
    psi = g + g',  s(x) = K(x, x)  (the self-term; E s = D of `margins.k_self_term`).

For any bilinear form Q, with dk = k - E[k] over batches (Hoeffding's decomposition, exact):

    N^3 E Q(dk, dk) = (N-1)(N-2) Q[psi] + (N-1) (Q[K] + Q[K, K^swap]) + Q[s] + 2 (N-1) Q[psi, s]

where Q[X] = E Q(X - EX, X - EX), Q[X, Y] the centred cross moment and K^swap = K(Y, X). The
leading term is Q[psi] / N: the batch-to-batch fluctuation falls like 1/N in variance, the self-term's
noise in the mean like 1/N^2. The one- and two-sample moments are exact expectations; here they are
evaluated by averaging over `samples` freshly drawn sequences (unbiased; no batch is simulated).

Two forms matter for hard attention along k (chapter 5): the trigger component z . dk (the bonus mu
moves) and the token-score noise Var_j(e_j . dk_perp), dk_perp = dk minus its part along z (a part
along z rescales mu and every token's trigger score alike and leaves the ratio r = mu / s unchanged).
Both are returned in the units of chapter 5's excess noise X = |z|^2 (1/r^2 - 1/r_inf^2), i.e.
divided by mu_inf^2 / |z|^2 with mu_inf = z . k_inf.

k_trigger_factor     z . E[k | N] / z . k_inf = 1 + beta_exact / N, exactly
k_self_beta          beta_exact = z . D / z . k_inf - 1 (N-independent)
k_noise_moments      the moments Q[psi], Q[K] + Q[K, K^swap], Q[s], Q[psi, s] for both forms
k_noise_variance     E Q(dk, dk) at N from those moments (both forms)
excess_noise_mean    X of E[k | N] alone (the self-term's noise, chapter 5's B/(N+beta)^2, exactly)
fluctuation_coefficients  (F1, F2): N^2 Var = F1 N + F2 + O(1/N)
mean_coefficients    (C1, C0): the mean's excess noise X_mean(N) = (C1 N + C0) / (N + beta)^2, exactly
batch_check          the token-score noise over simulated batches against the formula (chapter 5's check)
"""

from __future__ import annotations

import torch

from ..core.config import check_int
from ..core.embeddings import Problem
from ..core.task import Batch, check_batch, sample_batch
from .margins import _check_population, _values, k_mean, k_population, k_self_term, score_stats

FORMS = ("trigger", "perp")


def k_self_beta(problem: Problem) -> float:
    """beta_exact = z . D / z . k_inf - 1, so that z . E[k | N] = z . k_inf (1 + beta_exact / N) exactly.
    On average over problems it is `lib.theory.trigger_self_bias` = V (1 + (L - 1)/d) - 1 (chapter 5)."""
    _check_population(problem, "k_self_beta")
    z = problem.z_trig
    return float(z @ k_self_term(problem)) / float(z @ k_population(problem)) - 1.0


def k_trigger_factor(problem: Problem, N: int) -> float:
    """z . E[k | N] / z . k_inf = 1 + beta_exact / N, exactly (the finite-N factor of the trigger's
    bonus, of which chapters 4 and 5's 1 + beta/N is the average over problems)."""
    N = check_int("N", N, 1)
    z = problem.z_trig
    return float(z @ k_mean(problem, N)) / float(z @ k_population(problem))


def _sample_parts(problem: Problem, b: Batch):
    """(h, v, obar, a) for the samples of b: keys (B, L, d), values (B, L, d: the keys, or the keys
    without z_trig when the trigger is out of the value path), uniform averages of the values (B, d),
    a_{x*} (B, d)."""
    v = problem.E[b.tokens.long()]
    h = v.clone()
    h[torch.arange(b.N), b.pos] += problem.z_trig
    if problem.cfg.trigger_in_value:
        v = h
    return h, v, v.mean(1), (problem.U_perm - problem.u_bar)[b.informative]


def _cov_apply(h: torch.Tensor, v: torch.Tensor, ob: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """C_x x for each sample: (1/L) sum_t h_t (v_t . x) - hbar (obar . x), C the within-sequence
    covariance of keys h and values v (obar the values' average)."""
    return (h * (v @ x[:, :, None])).mean(1) - h.mean(1) * (ob * x).sum(1, keepdim=True)


def first_projection(problem: Problem, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(psi, s) per sample of b, each (B, d): psi = g + g' (uncentred; E psi = 2 k_inf) and s = K(x, x)."""
    _check_population(problem, "first_projection")
    check_batch(problem, b)
    V, L = problem.cfg.V, problem.cfg.L
    E, z = problem.E, problem.z_trig
    A = problem.U_perm - problem.u_bar
    H = _values(problem)
    eb = E.mean(0)
    h, v, ob, a = _sample_parts(problem, b)
    y = b.informative
    w = (A @ (A.T @ H / (L * V)))[y]                                 # w_{x*} = G1_inf^T a_{x*}
    g = _cov_apply(h, v, ob, w)
    c = (A @ A.T)[:, y].T                                            # (B, V): a_i . a_{x*}
    Hob = ob @ H.T                                                   # (B, V): v_i . obar
    # M_j obar with E[C | i] of margins.k_population; its S and ebar ebar^T parts vanish as sum_i a_i = 0
    gp = (L - 1) / (L ** 2 * V) * ((c * Hob) @ H - (c @ H) * (ob @ eb)[:, None]
                                   - eb[None, :] * (c * Hob).sum(1, keepdim=True))
    if not problem.cfg.trigger_in_value:                             # the keys' z_trig (e_i - ebar)^T part
        gp = gp + (L - 1) / (L ** 2 * V) * (c * (ob @ E.T)).sum(1, keepdim=True) * z
    s = (a * a).sum(1, keepdim=True) * _cov_apply(h, v, ob, ob)
    return g + gp, s


def pair_kernel(problem: Problem, b1: Batch, b2: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(K(x, y), K(y, x)) for the sample pairs (b1[n], b2[n]), each (B, d)."""
    _check_population(problem, "pair_kernel")
    check_batch(problem, b1)
    check_batch(problem, b2)
    if b1.N != b2.N:
        raise ValueError(f"b2 must have as many samples as b1 ({b1.N}), got {b2.N}")
    h1, v1, o1, a1 = _sample_parts(problem, b1)
    h2, v2, o2, a2 = _sample_parts(problem, b2)
    aa = (a1 * a2).sum(1, keepdim=True)
    return aa * _cov_apply(h1, v1, o1, o2), aa * _cov_apply(h2, v2, o2, o1)


def _forms(problem: Problem):
    z, E = problem.z_trig, problem.E[: problem.cfg.V]

    def trig(u, v):
        return float(((u @ z) * (v @ z)).mean())

    def perp(u, v):
        zz = z @ z
        up = (u - (u @ z)[:, None] * z / zz) @ E.T
        vp = (v - (v @ z)[:, None] * z / zz) @ E.T
        up, vp = up - up.mean(1, keepdim=True), vp - vp.mean(1, keepdim=True)
        return float((up * vp).mean())

    return {"trigger": trig, "perp": perp}


def k_noise_moments(problem: Problem, samples: int = 20000, seed: int = 0, chunk: int = 1000) -> dict:
    """The one- and two-sample moments of the variance formula, for both forms, in units of
    mu_inf^2 / |z|^2: {form: {"psi": Q[psi], "pair": Q[K] + Q[K, K^swap], "self": Q[s], "cross": Q[psi, s]}}.
    Evaluated on `samples` fresh sequences (the pairs: consecutive halves of each chunk)."""
    _check_population(problem, "k_noise_moments")
    samples = check_int("samples", samples, 4)
    seed = check_int("seed", seed, 0)
    chunk = check_int("chunk", chunk, 2)
    b = sample_batch(problem, samples, seed, "k-noise")
    psi, s, K, Ks = [], [], [], []
    for i in range(0, samples, chunk):
        part = b.slice(i, min(samples, i + chunk))
        p_, s_ = first_projection(problem, part)
        psi.append(p_), s.append(s_)
        half = part.N // 2
        k1, k2 = pair_kernel(problem, part.slice(0, half), part.slice(half, 2 * half))
        K.append(k1), Ks.append(k2)
    psi, s, K, Ks = (torch.cat(x) for x in (psi, s, K, Ks))
    k_inf = k_population(problem)
    z = problem.z_trig
    unit = float(z @ z) / float(z @ k_inf) ** 2
    pc, sc, Kc, Ksc = psi - psi.mean(0), s - s.mean(0), K - k_inf, Ks - k_inf
    out = {}
    for name, Q in _forms(problem).items():
        out[name] = {"psi": Q(pc, pc) * unit, "pair": (Q(Kc, Kc) + Q(Kc, Ksc)) * unit,
                     "self": Q(sc, sc) * unit, "cross": Q(pc, sc) * unit}
    return out


def k_noise_variance(moments: dict, N: int) -> dict:
    """E Q(dk, dk) over batches of N samples, for each form of `moments` (k_noise_moments), in its units:
    [(N-1)(N-2) psi + (N-1) pair + self + 2 (N-1) cross] / N^3; also the leading term psi / N."""
    N = check_int("N", N, 1)
    out = {}
    for name, m in moments.items():
        out[name] = ((N - 1) * (N - 2) * m["psi"] + (N - 1) * m["pair"] + m["self"] + 2 * (N - 1) * m["cross"]) / N ** 3
        out[name + "_leading"] = m["psi"] / N
    return out


def excess_noise_mean(problem: Problem, N: int) -> float:
    """X of E[k | N]: |z|^2 (1/r(E[k])^2 - 1/r_inf^2), the self-term's part of the excess noise, exactly
    (chapter 5 approximates it by B / (N + beta)^2)."""
    N = check_int("N", N, 1)
    zz = float(problem.z_trig @ problem.z_trig)
    r_inf = score_stats(problem, k_population(problem))["r"]
    return zz * (1 / score_stats(problem, k_mean(problem, N))["r"] ** 2 - 1 / r_inf ** 2)


def mean_coefficients(problem: Problem) -> tuple[float, float]:
    """(C1, C0) with X_mean(N) = excess_noise_mean(problem, N) = (C1 N + C0) / (N + beta)^2 exactly
    (beta = k_self_beta). With Delta = D - k_inf (E[k | N] = k_inf + Delta / N), s^2 = Var_j(e_j . k_inf),
    c = Cov_j(e_j . k_inf, e_j . Delta), v = Var_j(e_j . Delta) and mu = z . k_inf:
    C1 = |z|^2 (2c - 2 s^2 beta) / mu^2 and C0 = |z|^2 (v - s^2 beta^2) / mu^2 (units of excess_noise)."""
    _check_population(problem, "mean_coefficients")
    k_inf = k_population(problem)
    delta = k_self_term(problem) - k_inf
    E, z = problem.E[: problem.cfg.V], problem.z_trig
    a, b = E @ k_inf, E @ delta
    a, b = a - a.mean(), b - b.mean()
    s2, c, v = float((a * a).mean()), float((a * b).mean()), float((b * b).mean())
    mu, zz = float(z @ k_inf), float(z @ z)
    beta = float(z @ delta) / mu
    return zz * (2 * c - 2 * s2 * beta) / mu ** 2, zz * (v - s2 * beta ** 2) / mu ** 2


def fluctuation_coefficients(moments: dict, form: str = "perp") -> tuple[float, float]:
    """(F1, F2) with N^2 E Q(dk, dk) = F1 N + F2 + O(1/N) for the form (`k_noise_moments`'s units):
    F1 = Q[psi], F2 = Q[K] + Q[K, K^swap] - 3 Q[psi] + 2 Q[psi, s] (the whole 1/N^2 coefficient of the
    variance formula, not only the pair moments)."""
    if form not in moments:
        raise ValueError(f"form must be one of {', '.join(moments)}, got {form!r}")
    m = moments[form]
    return m["psi"], m["pair"] - 3 * m["psi"] + 2 * m["cross"]


def batch_check(problem: Problem, moments: dict, N: int, batches: int = 40, seed: int = 0) -> dict:
    """The token-score noise of k over `batches` independent batches of N samples (limit mode), against
    the formula: {"pred": k_noise_variance(moments, N)["perp"], "measured": array of Var_j(e_j . dk_perp)
    per batch (dk from the exact mean `margins.k_mean`), "share": the part psi/N of pred, "vs_self":
    (F1 N + F2) / B with `fluctuation_coefficients`, the fluctuation against chapter 5's self-term noise B};
    units of mu_inf^2 / |z|^2."""
    import numpy as np
    from ..learning.schedule import three_steps
    from ..theory import imbalance_noise
    N, batches, seed = check_int("N", N, 1), check_int("batches", batches, 2), check_int("seed", seed, 0)
    perp = _forms(problem)["perp"]
    z = problem.z_trig
    unit = float(z @ z) / float(z @ k_population(problem)) ** 2
    k_m = k_mean(problem, N)
    measured = np.array([perp(dk[None], dk[None]) * unit for dk in
                         (three_steps(problem, sample_batch(problem, N, seed + b), mode="limit").k - k_m for b in range(batches))])
    pred = k_noise_variance(moments, N)
    cfg = problem.cfg
    F1, F2 = fluctuation_coefficients(moments)
    return {"pred": pred["perp"], "measured": measured, "share": pred["perp_leading"] / pred["perp"],
            "vs_self": (F1 * N + F2) / imbalance_noise(cfg.V, cfg.d, cfg.L)}
