"""A lower bound on N for every pair statistic of the batch (chapter 9, the theorem "Attention lower bound for
pair statistics": the book's own derivation). Re-exported by `lib.analysis.lowerbound`.

The class.  Step 2's direction is a V-statistic, k = (1/N^2) sum_{n,m} K(X_n, X_m) with the pair kernel
K(x, y) = (a_x . a_y) C_x obar_y of `lib.analysis.k_noise` (x the sample whose key covariance enters, y the
sample of the first gradient). A member of the class P_N reweights the pairs:

    k_hat = sum_{n != m} w_nm K(X_n, X_m) + sum_n v_n K(X_n, X_n),

with real weights fixed before the batch is drawn (any signs, any asymmetry). The three steps are the member
w = v = 1/N^2; "Y without self-pairs" is v = 0; the split-batch steps (first gradient on one half, second on
the other) are w_nm = 1 for n in one half and m in the other, 0 elsewhere, v = 0; every fixed reweighting of
samples or pairs is a member.

The theorem (chapter 9).  Write A = sum_{n != m} w_nm, B = sum_n v_n and s = A + (1 + beta) B (beta =
`k_noise.k_self_beta`), nonzero; k_hat / s has mean trigger score mu = z . k_inf, so divide the weights by s
(then A + (1 + beta) B = 1; with s < 0 this is the member's negation, which under the model of part (b)
attends at least as well as the member). In the units
of chapter 5's excess noise (|z|^2 / mu^2 times a token-score variance), the token-score noise of every
member, averaged over batches, obeys

    X(k_hat) >= X_P(N) = min over A + (1 + beta) B = 1 of
                         X_mean(B) + (psi A^2 + 2 cross A B + self B^2) / N + (pair - psi) A^2 / (N (N - 1)),

with psi = Q[g + g'], self = Q[s], cross = Q[g + g', s], pair = Q[K] + Q[K, K^swap] (`k_noise.k_noise_moments`,
form 'perp') and X_mean(B) = B^2 Var_j(e_j . (Delta - beta k_inf)) + 2 B Cov_j(e_j . k_inf, e_j . Delta - beta e_j . k_inf)
(in the same units; Delta = D - k_inf, D = `margins.k_self_term`) the mean's own excess over the population.
Proof: Hoeffding's decomposition is orthogonal, so the fluctuation's variance is the sum of the variances
of its first-order and second-order parts. The first-order part of sample n is R_n g + S_n g' + v_n s
(R_n, S_n the row and column sums of w off the diagonal); the sum over n of the quadratic form is at least
N times its value at the means (Jensen), and both sums of R and S are A. The second-order part of the pair
{n, m} has variance (w_nm^2 + w_mn^2) a + 2 w_nm w_mn b with a = Q[K_deg], |b| <= a, at least (a + b)(w_nm + w_mn)^2 / 2,
and a + b = pair - psi; Cauchy-Schwarz over the N (N - 1) / 2 pairs gives the last term. The mean is
(A + B) k_inf + B Delta exactly. The minimum over B of the resulting quadratic is in closed form.
Under Gaussian scores (the same model as chapter 7's derived requirement and chapter 9's part (ii)), a member's
mean attention accuracy is then at most A(r), 1/r^2 = 1/r_inf^2 + X_P(N) / |z|^2 (`gaussian_mixture_accuracy`),
and reaching mean accuracy t needs N >= N_P: the smallest N with A(r) >= t.

Every constant is a moment of the problem (exact expectations, evaluated on `samples` fresh sequences); none
is fitted to an accuracy or an N*.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.config import check_int
from .lowerbound_attention import _threshold, gaussian_mixture_accuracy

N_MAX = 2 ** 40                                     # the root search stops here: beyond it the bound is inf


def pair_moments(problem, samples: int = 4000, seed: int = 1) -> dict:
    """The constants of the pair-statistic bound for one problem (trigger in or out of the value path,
    attention-only model, shared vocabulary, no EOS key): psi, cross, self, pair (`k_noise.k_noise_moments`,
    form 'perp', on `samples` sequences from `seed`), beta (`k_noise.k_self_beta`), m2 and m1 (the mean's
    excess X_mean(B) = m2 B^2 + m1 B), inv_r2 = |z|^2 / r_inf^2 (the population's token-score spread in the
    same units), zz = |z|^2 and V, L. All in units of mu_inf^2 / |z|^2, as chapter 5's excess noise."""
    from . import k_noise
    from .margins import _check_population, k_population, k_self_term
    _check_population(problem, "pair_moments")
    samples, seed = check_int("samples", samples, 4), check_int("seed", seed, 0)
    m = k_noise.k_noise_moments(problem, samples=samples, seed=seed)["perp"]
    E, z = problem.E[: problem.cfg.V].double(), problem.z_trig.double()
    k_inf = k_population(problem).double()
    delta = k_self_term(problem).double() - k_inf
    a, b = E @ k_inf, E @ delta
    a, b = a - a.mean(), b - b.mean()
    mu, zz = float(z @ k_inf), float(z @ z)
    beta = float(z @ delta) / mu
    c = b - beta * a                                   # the mean's token scores beyond the population, per unit B
    unit = zz / mu ** 2
    return {"psi": m["psi"], "cross": m["cross"], "self": m["self"], "pair": m["pair"], "beta": beta,
            "m2": float((c * c).mean()) * unit, "m1": 2 * float((a * c).mean()) * unit,
            "inv_r2": float((a * a).mean()) * unit, "zz": zz, "V": problem.cfg.V, "L": problem.cfg.L}


def _check_moments(m) -> dict:
    keys = ("psi", "cross", "self", "pair", "beta", "m2", "m1", "inv_r2", "zz", "V", "L")
    if not isinstance(m, dict) or any(k not in m for k in keys):
        raise ValueError(f"m must be a dict from pair_moments with keys {', '.join(keys)}")
    if not all(math.isfinite(float(m[k])) for k in keys):
        raise ValueError("m must hold finite values")
    return m


def member_noise(m: dict, N: int, A: float, B: float) -> float:
    """The bound's quadratic at weights with these totals: X_mean(B) + first- and second-order parts, for the
    member whose weights are spread evenly (equal row and column sums, equal pair weights), rescaled by
    s = A + (1 + beta) B (any sign, nonzero): the excess noise of k_hat / s, whose mean trigger score is mu_inf
    (with s < 0 that is the member's negation). For the three steps (A = N (N - 1), B = N) it is their exact
    excess noise (chapter 5's formula); for every other member with these totals it is a lower bound."""
    m, N = _check_moments(m), check_int("N", N, 1)
    A, B = float(A), float(B)
    s = A + (1 + m["beta"]) * B
    if not (math.isfinite(s) and s != 0):
        raise ValueError(f"A + (1 + beta) B must be finite and nonzero, got {s!r}")
    if N == 1 and A != 0:
        raise ValueError("A must be 0 at N = 1 (one sample has no pairs)")
    A, B = A / s, B / s
    out = m["m2"] * B * B + m["m1"] * B + (m["psi"] * A * A + 2 * m["cross"] * A * B + m["self"] * B * B) / N
    if N > 1:
        out += max(m["pair"] - m["psi"], 0.0) * A * A / (N * (N - 1))
    return out


def pair_noise_floor(m: dict, N: int) -> tuple[float, float]:
    """(X_P(N), B*): the smallest excess noise of any member of the class at N samples (the theorem) and the
    self-pair total B* that attains it (A* = 1 - (1 + beta) B*). The pair moment is floored at psi (a
    variance: an estimate below it counts as psi, which only lowers the bound)."""
    m, N = _check_moments(m), check_int("N", N, 1)
    b1 = 1 + m["beta"]
    if N == 1:
        B = 1 / b1
        return m["m2"] * B * B + m["m1"] * B + m["self"] * B * B, B
    P = max(m["pair"] - m["psi"], 0.0) / (N * (N - 1))
    psi, cr, se = m["psi"] / N, m["cross"] / N, m["self"] / N
    # X(B) = a2 B^2 + a1 B + a0 with A = 1 - b1 B
    a2 = psi * b1 * b1 - 2 * cr * b1 + se + P * b1 * b1 + m["m2"]
    a1 = -2 * psi * b1 + 2 * cr - 2 * P * b1 + m["m1"]
    a0 = psi + P
    if not a2 > 0:                                    # never for a problem's moments (a2 is a sum of variances)
        raise ValueError("m gives a quadratic without a minimum (a2 <= 0)")
    B = -a1 / (2 * a2)
    return a0 - a1 * a1 / (4 * a2), B


def pair_ceiling(m: dict, N: int) -> float:
    """A(r), |z|^2 / r^2 = inv_r2 + X_P(N): under Gaussian scores, the highest mean attention accuracy over
    batches of N samples that any member of the class reaches on this problem (the theorem)."""
    m = _check_moments(m)
    return _model_accuracy(m, pair_noise_floor(m, N)[0])


def _model_accuracy(m: dict, excess: float) -> float:
    """Part (b)'s model: the mean attention accuracy A(r) of Gaussian scores with |z|^2 / r^2 = inv_r2 + excess."""
    x = m["inv_r2"] + excess
    if x <= 0:
        return 1.0
    return float(gaussian_mixture_accuracy(math.sqrt(m["zz"] / x), int(m["V"]), int(m["L"])))


def pair_nstar(ms, threshold: float = 0.99) -> float:
    """N_P: the smallest integer N at which the mean over the problems of `pair_ceiling` reaches `threshold`
    (`ms`: one dict of `pair_moments` per problem, or a single dict); inf if it does not by 2^40. The ceiling
    never falls as N grows (each term of the quadratic falls with N at fixed weights), so the root is found by
    the library's one monotone search (`core.search.smallest_true`)."""
    t = _threshold(threshold)
    ms = [ms] if isinstance(ms, dict) else list(ms)
    if not ms:
        raise ValueError("ms must hold at least one problem's moments")
    ms = [_check_moments(m) for m in ms]
    from ..core.search import smallest_true
    try:
        return float(smallest_true(lambda n: np.mean([pair_ceiling(m, n) for m in ms]) >= t, 1, N_MAX))
    except ValueError:                                  # still below t at N_MAX
        return math.inf


def pair_lower_bound(V: int, d: int, L: int, threshold: float = 0.99, problems: int = 4, samples: int = 4000,
                     seed: int = 0, trigger_in_value: bool = True) -> float:
    """N_P(V, d, L, t) for the mean over `problems` problems (seeds seed, seed + 1, ...) of the default task:
    no member of the pair-statistic class reaches mean attention accuracy t with fewer samples, under Gaussian
    scores (chapter 9). The moments are measured on `samples` sequences per problem."""
    from ..core.config import TaskConfig
    from ..core.embeddings import make_problem
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 2)
    problems, seed = check_int("problems", problems, 1), check_int("seed", seed, 0)
    if problems > 64:
        raise ValueError(f"problems must be <= 64, got {problems}")
    cfg = TaskConfig(V=V, d=d, L=L, trigger_in_value=trigger_in_value)
    return pair_nstar([pair_moments(make_problem(cfg, seed + i), samples) for i in range(problems)], threshold)


LEARNERS = ("three", "no_self", "split")
BEST = "best"          # the member that attains the noise floor (`best_direction`); rows of pair_row carry it too


def learner_directions(problem, batch, N: int, self_cumsum=None) -> dict:
    """The key directions of three members of the class on the first N samples of `batch` (limit mode):
    "three": the three steps' k, sum over all pairs (n, m) including n = m;
    "no_self": the same sum without the N self-pairs;
    "split": the split-batch steps, the first gradient from the first N // 2 samples and the second step on the
    others (pairs n in the second half, m in the first).
    Each is a sum of K(X_n, X_m) = (a_n . a_m) C_n obar_m over its pairs (up to a positive factor); every token
    score is a look-up in the (V, V) table E W^T, so a call costs O(N L + V^2 d) besides the self-pairs' O(N L d);
    `self_cumsum` ((>= N, d): the running sums of `self_terms(problem, batch, cumulative=True)`) saves those
    along a nested grid."""
    import torch

    from ..core.task import check_batch
    from .margins import _check_population
    _check_population(problem, "learner_directions")
    check_batch(problem, batch)
    cfg = problem.cfg
    N = check_int("N", N, 2)
    if self_cumsum is not None and (not isinstance(self_cumsum, torch.Tensor) or self_cumsum.ndim != 2
                                    or self_cumsum.shape[0] < N or self_cumsum.shape[1] != cfg.d):
        raise ValueError(f"self_cumsum must be a ({N} or more, {cfg.d}) tensor from self_terms(..., cumulative=True)")
    if N > batch.N:
        raise ValueError(f"N must be <= the batch's {batch.N} samples, got {N}")
    f64 = torch.float64
    E, z = problem.E[: cfg.V].to(f64), problem.z_trig.to(f64)
    a = (problem.U_perm - problem.u_bar).to(f64)                      # (V, d): a_i of informative token i
    V, L = cfg.V, cfg.L
    tin = cfg.trigger_in_value
    x, l = batch.tokens[:N].long(), batch.pos[:N].long()
    inf = x[torch.arange(N), l]                                       # informative tokens

    def obar_sum(idx):                                                # sum of obar_m over samples idx, per informative token
        cnt = torch.zeros(V, V, dtype=f64)
        cnt.index_put_((inf[idx][:, None].expand(-1, L).reshape(-1), x[idx].reshape(-1)),
                       torch.ones(idx.numel() * L, dtype=f64), accumulate=True)
        T = cnt @ E / L                                                # (V, d): row i = sum of e-means of samples with x* = i
        if tin:
            T = T + torch.bincount(inf[idx], minlength=V).to(f64)[:, None] * z / L
        return T

    def apply(idx, Wrows):                                            # sum over n in idx of C_n W_{x*_n}
        return _step2(E, z, x[idx], l[idx], Wrows, tin)

    AA = a @ a.T
    allidx = torch.arange(N)
    Y = apply(allidx, AA @ obar_sum(allidx))
    selfsum = (self_terms(problem, batch.slice(0, N)) if self_cumsum is None else self_cumsum[N - 1].to(f64))
    half = N // 2
    right, left = torch.arange(half), torch.arange(half, N)
    S = apply(left, AA @ obar_sum(right))
    dt = problem.E.dtype
    return {"three": Y.to(dt), "no_self": (Y - selfsum).to(dt), "split": S.to(dt)}


def _step2(E, z, x, l, W, tin: bool):
    """Step 2's direction for the samples with tokens x (n, L) and informative positions l (n,), when the value
    read-out for a sample whose informative token is i is the row W_i of W (V, d): sum over n of C_n W_{x*_n}
    up to the factor 1/L, C_n the key covariance of sample n (keys e_x, plus z at the informative position;
    the value of that position also holds z when `tin`). float64 in, (d,) out."""
    import torch
    n, L = x.shape
    ar = torch.arange(n)
    inf = x[ar, l]
    s = (E @ W.T)[x, inf[:, None]]                                    # (n, L): e_{x_nt} . W_{x*_n}
    if tin:
        s[ar, l] += (W @ z)[inf]
    c = s.mean(1)
    u = torch.bincount(x.reshape(-1), weights=(s - c[:, None]).reshape(-1), minlength=E.shape[0])
    return (E.T @ u + z * float((s[ar, l] - c).sum())) / L


def best_direction(m: dict, N: int, dirs: dict, self_sum):
    """The member of the class that attains the noise floor at N samples (`pair_noise_floor`): weights spread
    evenly at the best self-pair share, k_hat = A* / (N (N - 1)) sum_{n != m} K(X_n, X_m) + B* / N sum_n K(X_n, X_n)
    with A* = 1 - (1 + beta) B* (mean trigger score mu_inf). Its weights depend on the problem's moments `m`,
    fixed before the batch, not on the batch. `dirs`: `learner_directions` at N; `self_sum`: the N self-pairs'
    sum ((d,), `self_terms`). Returns (d,) float64."""
    import torch
    N = check_int("N", N, 2)
    _, B = pair_noise_floor(m, N)
    A = 1.0 - (1.0 + m["beta"]) * B
    return A / (N * (N - 1)) * dirs["no_self"].to(torch.float64) + B / N * self_sum.to(torch.float64)


def self_terms(problem, batch, cumulative: bool = False):
    """The sum over the samples of `batch` of their self-pairs K(X_n, X_n) = |a_n|^2 C_n obar_n, (d,) in float64;
    with cumulative=True the (N, d) running sums instead."""
    import torch

    from ..core.task import check_batch
    from .margins import _check_population
    _check_population(problem, "self_terms")
    check_batch(problem, batch)
    cfg = problem.cfg
    f64 = torch.float64
    E, z = problem.E[: cfg.V].to(f64), problem.z_trig.to(f64)
    a = (problem.U_perm - problem.u_bar).to(f64)
    out = []
    for i in range(0, batch.N, 2048):
        part = batch.slice(i, min(batch.N, i + 2048))
        xs, ls = part.tokens.long(), part.pos.long()
        keys = E[xs]
        keys[torch.arange(part.N), ls] += z
        vals = keys if cfg.trigger_in_value else E[xs]
        ob = vals.mean(1)
        w = (a[part.informative] ** 2).sum(1)
        proj = (vals @ ob[:, :, None])[..., 0]                        # (n, L): v_t . obar
        out.append(w[:, None] * ((keys * proj[..., None]).mean(1) - keys.mean(1) * (ob * ob).sum(1, keepdim=True)))
    terms = torch.cat(out)
    return terms.cumsum(0) if cumulative else terms.sum(0)


PAIRS_FILE = "ch09_pairs.jsonl"


def shipped_pair_rows() -> list:
    """The rows shipped with the book (`scripts/pair_bound_grid.py`, draw 0): one dict per (V, d, L, trigger
    setting, problem) with the problem's `pair_moments`, the grid Ns and the exact accuracies of LEARNERS and BEST."""
    import json
    import os
    from .attention_curve import CURVES_DIR
    with open(os.path.join(CURVES_DIR, PAIRS_FILE)) as f:
        return [json.loads(line) for line in f if line.strip()]


POINT = ("V", "d", "L", "trigger_in_value")          # what makes a point of the grid


def _points(rows):
    """(key, the point's rows, its grid Ns) per point of `rows`, in sorted order; a point needs >= 2 problems
    on one grid."""
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in POINT), []).append(r)
    for key in sorted(groups):
        g = groups[key]
        Ns = g[0]["Ns"]
        if len(g) < 2 or any(r["Ns"] != Ns for r in g):
            raise ValueError(f"rows must hold >= 2 problems on one grid per point, not so at {key}")
        yield key, g, Ns


def pair_table(rows, threshold: float = 0.99) -> list:
    """One dict per (V, d, L, trigger setting) of `rows` (dicts as `shipped_pair_rows` gives, >= 2 problems per
    point, one grid per point): "bound" (`pair_nstar` of the point's problems), "bound_each" (each problem's own),
    and for each learner of LEARNERS (and BEST, where every row has it): "<learner>" the requirement of the mean curve over the problems
    (`attention_curve.requirement`: the N from which the mean stays >= threshold, log-interpolated; inf: not
    reached), "<learner>_lo" / "<learner>_hi" the same for the ends of the mean's 95 % t-interval and
    "<learner>_each" each problem's first N from which its own accuracy stays >= threshold (inf: not reached)."""
    from .attention_curve import requirement
    from ..core.grid import stays_from
    t = _threshold(threshold)
    out = []
    for key, g, Ns in _points(rows):
        row = dict(zip(POINT, key), problems=len(g),
                   bound=pair_nstar([r["moments"] for r in g], t),
                   bound_each=[pair_nstar(r["moments"], t) for r in g])
        for k in (*LEARNERS, BEST) if all(BEST in r for r in g) else LEARNERS:
            acc = np.array([r[k] for r in g])
            req = requirement(acc, Ns, t)
            row[k], row[k + "_lo"], row[k + "_hi"] = req["nstar"], req["lo"], req["hi"]
            each = [stays_from(a >= t) for a in acc]
            row[k + "_each"] = [math.inf if i is None else float(Ns[i]) for i in each]
        out.append(row)
    return out


EVEN = {"three": lambda N: (N * (N - 1), N), "no_self": lambda N: (N * (N - 1), 0)}   # totals (A, B) at N


def model_table(rows, threshold: float = 0.99) -> list:
    """Part (b)'s model where no bound enters: for the members of EVEN, whose weights are spread evenly so that
    `member_noise` is their exact excess noise, one dict per point of `rows` (as `pair_table`) with "<learner>_model",
    the requirement (`attention_curve.requirement`, on the rows' grid) of the mean over the problems of the model's
    accuracy at that exact noise. Measured over model is then the model's own error for that member."""
    from .attention_curve import requirement
    t = _threshold(threshold)
    out = []
    for key, g, Ns in _points(rows):
        if min(Ns) < 2:
            raise ValueError(f"rows must hold a grid of N >= 2 (a pair needs two samples), not so at {key}")
        row = dict(zip(POINT, key))
        for k, totals in EVEN.items():
            acc = [[_model_accuracy(m, member_noise(m, N, *totals(N))) for N in Ns] for m in (r["moments"] for r in g)]
            row[k + "_model"] = requirement(np.array(acc), Ns, t)["nstar"]
        out.append(row)
    return out


def nested_row(cfg, seed: int, n_max: int):
    """What a row of chapter 9's grids is measured on: problem `seed` of `cfg`, one batch of n_max samples from
    the same seed (every smaller batch is a prefix), the grid `n_grid(2, n_max)` and the row's identifying fields
    (V, d, L, trigger setting, seed, Ns). Shared by `pair_row` and `lowerbound_beyond.beyond_row`."""
    from ..core.config import TaskConfig
    from ..core.embeddings import make_problem
    from ..core.task import check_batch_memory, sample_batch
    from .lowerbound_attention import n_grid
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    seed, n_max = check_int("seed", seed, 0), check_int("n_max", n_max, 2)
    check_batch_memory(cfg, n_max, "n_max")
    p = make_problem(cfg, seed)
    Ns = n_grid(2, n_max)
    head = {"V": cfg.V, "d": cfg.d, "L": cfg.L, "trigger_in_value": cfg.trigger_in_value, "seed": seed, "Ns": Ns}
    return p, sample_batch(p, n_max, seed), Ns, head


def pair_row(cfg, seed: int, n_max: int = 2 ** 15, samples: int = 8000) -> dict:
    """One row of the pair-statistic grid (`scripts/pair_bound_grid.py`, chapter 9): problem `seed` of `cfg`, its
    `pair_moments` (`samples` sequences) and the exact attention accuracy of each of LEARNERS and of the member
    that attains the noise floor (BEST, `best_direction`, from these moments) on the first N samples of one batch
    of n_max, at every N of `n_grid(2, n_max)` (nested)."""
    from .margins import attention_accuracy
    p, b, Ns, head = nested_row(cfg, seed, n_max)
    m = pair_moments(p, samples)
    acc = {k: [] for k in (*LEARNERS, BEST)}
    cum = self_terms(p, b, cumulative=True)
    for N in Ns:
        dirs = learner_directions(p, b, N, cum)
        for k, v in dirs.items():
            acc[k].append(attention_accuracy(p, v))
        acc[BEST].append(attention_accuracy(p, best_direction(m, N, dirs, cum[N - 1]).to(p.E.dtype)))
    return {**head, "moments": m, **acc}

