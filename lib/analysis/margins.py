"""Step 2 diagnostics: where the attention direction k points, and whether it finds the trigger (chapter 5).

After step 2 the attention logits are s_t = |q|^2 (h_t . k) x (step sizes), so in limit mode (hard
attention) only the direction k matters. With h_t = e_{x_t} + 1[t = l] z_trig the score of position t
is a table lookup:

    informative position:  mu + sigma_{x_l},   mu = z_trig . k   (the trigger's bonus)
    any other position:    sigma_{x_t},        sigma_j = e_j . k  (the token's score)

so attention lands on the informative token iff mu + sigma_{x_l} > max_{t != l} sigma_{x_t}, or on a tie
when every tying position comes after l (the book's one rule, `lib.core.models.hard_attention`: the
first maximum wins).

score_table           (mu, sigma) for a direction k
attention_accuracy    the exact expected attention accuracy over fresh samples, from the table alone:
                      (1/V) sum_i F(mu + sigma_i)^(L-1), F the CDF of sigma over uniform tokens (with
                      ties, the average over the informative position: see the function)
margins               per-sample margin mu + sigma_{x_l} - max_{t != l} sigma_{x_t} on a batch (a tie that
                      hard attention decides for l: the smallest positive float)
k_population          E[k] in the limit N -> infinity (the book's derivation, chapter 5), exactly
k_self_term           D = E[|a|^2 C o] for one sample paired with itself, exactly (chapter 5)
k_mean                E[k | problem, N] = (1 - 1/N) k_population + D / N, exactly
score_stats           mu, the spread of sigma across tokens, and their ratio (the signal-to-noise ratio)
"""

from __future__ import annotations

import math

import torch

from ..core.search import first_true_on_grid
from ..fast.tokens import chunk_size, chunks, position_scores
from ..core.embeddings import Problem, check_problem
from ..core.task import Batch, check_batch


def _check(problem: Problem, k: torch.Tensor) -> torch.Tensor:
    check_problem(problem)
    if not isinstance(k, torch.Tensor) or k.shape != (problem.cfg.d,):
        raise ValueError(f"k must be a tensor of shape (d={problem.cfg.d},), got "
                         f"{tuple(k.shape) if isinstance(k, torch.Tensor) else type(k).__name__}")
    if not bool(torch.isfinite(k).all()):
        raise ValueError("k must be finite (got NaN or inf entries)")
    return k.to(device=problem.E.device, dtype=problem.E.dtype)


def score_table(problem: Problem, k: torch.Tensor) -> tuple[float, torch.Tensor]:
    """(mu, sigma): the trigger's bonus z_trig . k and the token scores sigma_j = e_j . k (V_in,)."""
    k = _check(problem, k)
    return float(problem.z_trig @ k), problem.E @ k


def attention_accuracy(problem: Problem, k: torch.Tensor) -> float:
    """Exact probability, over a fresh sample, that argmax_t h_t . k is the informative position.

    The informative token i is uniform over the V content tokens, its position uniform over the L, the
    L - 1 others i.i.d. uniform over the noise vocabulary (the content tokens unless `noise_vocab`), so
        P = (1/V) sum_i F(s_i)^(L-1) [x 1(s_i >= z_EOS . k) with an EOS key],   s_i = mu + sigma_i,
    with F(x) = P(sigma_x < x) when no noise token ties s_i. Ties follow the book's one rule
    (`lib.core.models.hard_attention`: the first maximum wins; the EOS key is the last position): at
    position p the informative token wins iff the p positions before it score below s_i and the
    L - 1 - p after it at most s_i, so F^(L-1) becomes (1/L) sum_p F^p G^(L-1-p) = (G^L - F^L) / (L (G - F)),
    G(x) = P(sigma_x <= x). Ties have probability zero for continuous embeddings, but not at k = 0
    (every score 0: the first position wins, P = 1/L).
    """
    mu, sigma = score_table(problem, k)
    cfg = problem.cfg
    L = cfg.L
    signal = mu + sigma[: cfg.V]                                    # (V,) scores of the informative token
    noise = torch.sort(sigma[cfg.V:] if cfg.noise_vocab else sigma[: cfg.V]).values
    F = torch.searchsorted(noise, signal, side="left").to(torch.float64) / noise.numel()    # below
    G = torch.searchsorted(noise, signal, side="right").to(torch.float64) / noise.numel()   # at most
    tie = G > F
    p = torch.where(tie, (G ** L - F ** L) / (L * torch.where(tie, G - F, 1.0)), F ** (L - 1))
    if cfg.eos_key:
        p = p * (signal >= float(problem.z_eos @ k.to(problem.E.dtype))).to(torch.float64)
    return float(p.mean())


def margins(problem: Problem, batch: Batch, k: torch.Tensor) -> torch.Tensor:
    """(N,) margin of each sample: score of the informative position minus the best other score.

    Positive iff hard attention along k lands on the informative token (the EOS key, if any, counts
    as another position, the last). A tie is decided by the book's one rule (`lib.core.models.
    hard_attention`: the first maximum wins): a tie the informative position wins (every tying position
    comes after it) gives the smallest positive float instead of 0, one it loses 0. For L = 1 (no
    other position) the margin is +inf."""
    k = _check(problem, k)
    check_batch(problem, batch)
    out = []
    for b in chunks(batch, chunk_size(problem)):
        s = position_scores(problem, b, k)                           # (B, K)
        own = s.gather(1, b.pos[:, None])[:, 0]
        others = s.scatter(1, b.pos[:, None], float("-inf"))
        m = own - others.max(1).values
        before = torch.arange(s.shape[1], device=s.device)[None, :] < b.pos[:, None]
        wins = own > s.masked_fill(~before, float("-inf")).max(1).values      # no earlier position ties it
        out.append(torch.where((m == 0) & wins, torch.full_like(m, torch.finfo(m.dtype).tiny), m))
    return torch.cat(out)


def score_stats(problem: Problem, k: torch.Tensor) -> dict:
    """mu = z_trig . k, s = standard deviation of sigma_j = e_j . k over the V content tokens, r = mu / s."""
    mu, sigma = score_table(problem, k)
    s = float(sigma[: problem.cfg.V].std(correction=0))
    return {"mu": mu, "s": s, "r": mu / s if s > 0 else float("inf")}


def k_population(problem: Problem) -> torch.Tensor:
    """E[k] as N -> infinity for the attention-only model, limit mode (the book's derivation, chapter 5).

    With a_i = u_{Pi* i} - u_bar, keys h_i = e_i + z_trig and values v_i (= h_i with the trigger in the
    value path, = e_i without), the batch average G1 tends to G1_inf = (1/(L V)) sum_i a_i v_i^T and
    k = (1/N) sum_n C_n G1^T a_{x*_n} (C_n = (1/L) sum_t h_t v_t^T - hbar vbar^T, the within-sequence
    covariance of keys and values) to (1/V) sum_i E[C | i] w_i with w_i = G1_inf^T a_i and
      E[C | i] = (L-1)/L^2 [v_i v_i^T - v_i ebar^T - ebar v_i^T - (L-2) ebar ebar^T] + (L-1)^2/L^2 S
                 + (L-1)/L^2 (h_i - v_i)(e_i - ebar)^T,
    S = (1/V) sum_j e_j e_j^T, ebar = (1/V) sum_j e_j; the last term is z_trig (e_i - ebar)^T (L-1)/L^2
    without the trigger in the value path and 0 with it. Since sum_i a_i = 0, sum_i w_i = 0 and the S and
    ebar ebar^T parts drop out. Shared vocabulary, no EOS key; the trigger in or out of the value path.
    """
    _check_population(problem, "k_population")
    V, L = problem.cfg.V, problem.cfg.L
    E, z = problem.E, problem.z_trig
    a = problem.U_perm - problem.u_bar                               # (V, d)
    H = _values(problem)                                             # (V, d): v_i
    W = a @ (a.T @ H / (L * V))                                      # (V, d): rows w_i
    ebar = E.mean(0)
    hw = (H * W).sum(1)                                              # (V,): v_i . w_i
    k = (L - 1) / L ** 2 * (H.T @ hw - H.T @ (W @ ebar) - ebar * hw.sum()) / V
    if not problem.cfg.trigger_in_value:                             # keys differ from values by z at l
        k = k + (L - 1) / (L ** 2 * V) * float((E * W).sum()) * z
    return k


def _values(problem: Problem) -> torch.Tensor:
    """(V, d) the value vector of each token when it is the informative one: e_i + z_trig with the
    trigger in the value path, e_i without."""
    E = problem.E[: problem.cfg.V]
    return E + problem.z_trig if problem.cfg.trigger_in_value else E


def _check_population(problem: Problem, name: str):
    check_problem(problem)
    cfg = problem.cfg
    if cfg.model != "attn" or cfg.noise_vocab or cfg.eos_key:
        raise ValueError(f"{name} needs model='attn', no noise_vocab, eos_key=False")


def k_self_term(problem: Problem) -> torch.Tensor:
    """D = (1/V) sum_i |a_i|^2 E[C o_bar | i]: the mean of one sample's pairing with itself in
    k = (1/N^2) sum_{n,m} (a_n . a_m) C_n o_bar_m (the book's derivation, chapter 5), exactly.

    With v = v_i the informative value (e_i + z_trig, or e_i without the trigger in the value path), the
    m = L - 1 other tokens i.i.d. uniform, s = L o_bar = v + X:
      E[(1/L) sum_t v_t (v_t . o_bar)] = [v|v|^2 + m v (v.ebar) + m S v + m T + m(m-1) S ebar] / L^2,
      E[s |s|^2] = v|v|^2 + 2m v(v.ebar) + v(m tr S + m(m-1)|ebar|^2) + m ebar |v|^2 + 2m S v
                   + 2m(m-1) ebar (ebar.v) + m T + 2m(m-1) S ebar + m(m-1) ebar tr S
                   + m(m-1)(m-2) ebar |ebar|^2,
    and E[C_vv o_bar | i] = first - E[s|s|^2] / L^3; S = (1/V) sum_j e_j e_j^T, ebar = mean e_j,
    T = (1/V) sum_j e_j |e_j|^2 (the third moment of a uniform token). Without the trigger in the value
    path the keys add (z_trig / L)(e_i - o_bar) . o_bar, whose mean is
      (z_trig / L) [(|e_i|^2 + m e_i.ebar) / L - (|e_i|^2 + 2m e_i.ebar + m tr S + m(m-1)|ebar|^2) / L^2].
    Shared vocabulary, no EOS key, as k_population.
    """
    _check_population(problem, "k_self_term")
    L = problem.cfg.L
    m = L - 1
    E, z = problem.E[: problem.cfg.V], problem.z_trig
    A = problem.U_perm - problem.u_bar
    alpha = A.pow(2).sum(1)                                          # (V,) |a_i|^2
    H = _values(problem)                                             # (V, d) rows v_i
    eb = E.mean(0)
    S = E.T @ E / E.shape[0]
    T = (E * E.pow(2).sum(1, keepdim=True)).mean(0)
    trS, ebeb = float(torch.trace(S)), float(eb @ eb)
    Seb = S @ eb
    hh, heb = H.pow(2).sum(1), H @ eb                                # (V,)
    w = alpha / alpha.numel()                                        # weights |a_i|^2 / V
    wh = w @ H                                                       # sum_i w_i v_i
    whh = (w * hh) @ H                                               # sum_i w_i v_i |v_i|^2
    wheb = (w * heb) @ H                                             # sum_i w_i v_i (v_i . ebar)
    Swh = S @ wh
    W, Whh, Wheb = float(w.sum()), float(w @ hh), float(w @ heb)
    first = (whh + m * wheb + m * Swh + W * (m * T + m * (m - 1) * Seb)) / L ** 2
    cube = (whh + 2 * m * wheb + wh * (m * trS + m * (m - 1) * ebeb) + m * eb * Whh + 2 * m * Swh
            + 2 * m * (m - 1) * eb * Wheb
            + W * (m * T + 2 * m * (m - 1) * Seb + m * (m - 1) * eb * trS + m * (m - 1) * (m - 2) * eb * ebeb))
    D = first - cube / L ** 3
    if not problem.cfg.trigger_in_value:
        ee, eeb = E.pow(2).sum(1), E @ eb
        extra = (ee + m * eeb) / L - (ee + 2 * m * eeb + m * trS + m * (m - 1) * ebeb) / L ** 2
        D = D + float(w @ extra) / L * z
    return D


def k_mean(problem: Problem, N: int) -> torch.Tensor:
    """E[k | problem, N] over batches of N samples: (1 - 1/N) k_population + k_self_term / N, exactly.

    The pairs n != m of the double sum are independent samples and average to k_population; the N
    pairs n = m average to D = k_self_term."""
    from ..core.config import check_int
    N = check_int("N", N, 1)
    return (1 - 1 / N) * k_population(problem) + k_self_term(problem) / N


def attention_accuracy_at(cfg, N: int, seed: int = 0) -> float:
    """Exact attention accuracy after the three steps (limit mode) on N samples; problem and data from `seed`."""
    from ..core.embeddings import make_problem
    from ..learning.schedule import three_steps
    from ..core.task import sample_batch
    problem = make_problem(cfg, seed)
    res = three_steps(problem, sample_batch(problem, N, seed), mode="limit")
    return attention_accuracy(problem, res.k)


def measured_attention_nstar(cfg, seed: int = 0, threshold: float = 0.99, n_min: int = 16, n_max: int = 2 ** 16,
                             points_per_octave: int = 4) -> float:
    """Critical N for attention: the smallest N on a geometric grid (n_min..n_max, `points_per_octave`
    points per doubling) with attention_accuracy_at >= threshold, by bisection (accuracy is taken to
    rise with N; it does up to seed noise). Returns inf when n_max does not reach the threshold.
    The problem is made once and the batch drawn once at n_max: batches are nested in N
    (`lib.core.task.sample_batch`), so its first N samples are the batch `attention_accuracy_at` would draw."""
    import numpy as np

    from ..core.config import check_int
    from ..core.embeddings import make_problem
    from ..learning.schedule import three_steps
    from ..core.task import sample_batch
    n_min, n_max = check_int("n_min", n_min, 1), check_int("n_max", n_max, 1)
    points_per_octave = check_int("points_per_octave", points_per_octave, 1)
    if not (isinstance(threshold, float) and 0.0 < threshold < 1.0):
        raise ValueError(f"threshold must be a float in (0, 1), got {threshold!r}")
    if n_max < n_min:
        raise ValueError(f"n_max must be >= n_min={n_min}, got {n_max}")
    octaves = math.log2(n_max / n_min)
    grid = np.unique(np.round(n_min * 2.0 ** (np.arange(int(octaves * points_per_octave) + 1) / points_per_octave)))
    grid = [int(n) for n in grid] + ([n_max] if grid[-1] < n_max else [])
    problem = make_problem(cfg, seed)
    batch = sample_batch(problem, grid[-1], seed)                   # every smaller batch is a prefix of it

    def ok(i: int) -> bool:
        k = three_steps(problem, batch.slice(0, grid[i]), mode="limit").k
        return attention_accuracy(problem, k) >= threshold

    i = first_true_on_grid(ok, len(grid))      # bisection of the grid's indices, no doubling (see there)
    return math.inf if i is None else float(grid[i])
