"""Step 2 measured (chapter 5): the experiments behind the attention direction k, each one call.

Every problem here is made in float64 on the CPU (`problem`), from its own seed, so that a grid of
calls draws exactly what a loop over the same configurations and seeds would draw:

  mean_ci               mean over problems, its standard error and its 95 % Student-t half-width
  population_ratios     mu, s and r^2 of k_inf against their leading orders, over sizes and seeds
  population_bonus      the trigger's bonus mu_inf / |z|^2 along a grid of L
  population_accuracy   exact attention accuracy of k_inf and its Gaussian prediction, along d
  self_bias             beta (the self-term's bonus) and mu_inf / (kappa |z|^2) per problem
  self_noise_ratios     the variance of e.(S ebar - ebar/V) over random embeddings, measured / derived
  excess_noise_of       the excess noise-to-signal X = |z|^2 (1/r^2 - 1/r_inf^2) of a direction k
  snr_rows, snr_table   r and X of E[k | N] (and of realised batches) per problem, and their table
  critical_n            the critical N of attention per problem, for a list of (d, L)
  nstar_fit             the exponent of the critical N along d or L, against the derived one
  accuracy_pool         exact attention accuracy after step 2 at several N, per problem
  scale_sweep, eta_sweep, finite_step_pool   the finite steps against the limit: lambda and eta
  sampled_focus         the mean softmax weight of a logit lam against L - 1 logits lam N(0, 1/d)
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.config import TaskConfig, check_float, check_int
from ..core.embeddings import Problem, make_problem
from ..core.steps import StepSizes
from ..core.task import Batch, sample_batch
from ..fast.tokens import position_scores
from ..learning.evaluate import evaluate
from ..learning.schedule import three_steps
from .. import theory
from . import margins


def mean_ci(x, axis: int = 0):
    """Mean over independent problems (along `axis`), its standard error, and the half-width of its
    95 % Student-t interval."""
    x = np.asarray(x, float)
    mean, half = theory.t_interval(x, axis)
    return mean, x.std(axis, ddof=1) / x.shape[axis] ** 0.5, half


def problem(V: int, d: int, L: int, seed: int, tau: float = 1.0) -> Problem:
    """One problem of size (V, d, L) (trigger scale `tau`), float64 on the CPU, from `seed`."""
    return make_problem(TaskConfig(V=V, d=d, L=L, tau=tau, dtype="float64", device="cpu"), seed)


def _seeds(seeds) -> list:
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must name at least one problem")
    return [check_int("seeds", s, 0) for s in seeds]


def population_ratios(sizes, seeds) -> np.ndarray:
    """For every (V, d, L) of `sizes` and every seed: the bonus mu, the token-score spread s and the
    squared signal-to-noise ratio r^2 of k_inf against their leading orders kappa |z|^2,
    kappa |z| / sqrt d and d. Returns (len(sizes) * len(seeds), 6): V, d, L, and the three ratios."""
    sizes, seeds = list(sizes), _seeds(seeds)
    if not sizes:
        raise ValueError("sizes must hold at least one (V, d, L)")
    rows = []
    for V, d, L in sizes:
        for seed in seeds:
            pr = problem(V, d, L, seed)
            st = margins.score_stats(pr, margins.k_population(pr))
            zz = float(pr.z_trig @ pr.z_trig)
            kap = theory.trigger_score_scale(V, L)
            rows.append((V, d, L, st["mu"] / (kap * zz), st["s"] / (kap * zz ** 0.5 / d ** 0.5), st["r"] ** 2 / d))
    return np.array(rows)


def population_bonus(V: int, d: int, Ls, seed: int) -> np.ndarray:
    """The trigger's bonus mu_inf / |z|^2 of the population direction on one problem per L of `Ls`."""
    seed = check_int("seed", seed, 0)
    if len(Ls) == 0:
        raise ValueError("Ls must hold at least one sequence length")
    mus = []
    for L in Ls:
        pr = problem(V, d, int(L), seed)
        mus.append(margins.score_stats(pr, margins.k_population(pr))["mu"] / float(pr.z_trig @ pr.z_trig))
    return np.array(mus)


def population_accuracy(V: int, ds, L: int, problems: int, tau: float = 1.0):
    """Exact attention accuracy of k_inf (N = infinity) and its Gaussian prediction
    int phi(x) Phi(x + |z| sqrt d)^(L-1) dx, on problems 0..problems-1 at every d of `ds`.
    Returns (measured, predicted), each (len(ds), problems)."""
    problems = check_int("problems", problems, 1)
    tau = check_float("tau", tau, 0.0, strict_min=True)
    if len(ds) == 0:
        raise ValueError("ds must hold at least one embedding dimension")
    meas, pred = [], []
    for d in ds:
        probs = [problem(V, int(d), L, s, tau) for s in range(problems)]
        meas.append([margins.attention_accuracy(p, margins.k_population(p)) for p in probs])
        pred.append([theory.gaussian_attention_accuracy(float(p.z_trig.norm()) * d ** 0.5, L) for p in probs])
    return np.array(meas), np.array(pred)


def self_bias(V: int, d: int, L: int, seeds) -> dict:
    """Per problem: beta = z.D / z.k_inf - 1 from the exact self-term D (`margins.k_self_term`), and
    mu_inf / (kappa |z|^2). Returns {"beta": array, "mu_kappa": array}."""
    beta, mu_kappa = [], []
    for s in _seeds(seeds):
        pr = problem(V, d, L, s)
        mu_inf = float(pr.z_trig @ margins.k_population(pr))
        beta.append(float(pr.z_trig @ margins.k_self_term(pr)) / mu_inf - 1)
        mu_kappa.append(mu_inf / (theory.trigger_score_scale(V, L) * float(pr.z_trig @ pr.z_trig)))
    return {"beta": np.array(beta), "mu_kappa": np.array(mu_kappa)}


def self_noise_ratios(V: int, d: int, draws: int, gen: torch.Generator) -> list:
    """The variance over tokens of e_j.(S ebar - ebar/V) on `draws` random embeddings N(0, I/d) drawn
    from `gen`, each divided by `theory.self_term_noise_variance(V, d)`."""
    V, d, draws = check_int("V", V, 2), check_int("d", d, 1), check_int("draws", draws, 1)
    v = []
    for _ in range(draws):
        E = torch.randn(V, d, generator=gen, dtype=torch.float64) / d ** 0.5
        eb = E.mean(0)
        v.append(float((E @ (E.T @ E / V @ eb - eb / V)).var(correction=0)) / theory.self_term_noise_variance(V, d))
    return v


def excess_noise_of(pr: Problem, k: torch.Tensor, r_inf: float) -> float:
    """The excess noise-to-signal 1/r^2 - 1/r_inf^2 of direction `k`, in units where |z| = 1."""
    if not r_inf > 0:
        raise ValueError(f"r_inf must be positive, got {r_inf!r}")
    return float(pr.z_trig @ pr.z_trig) * (1 / margins.score_stats(pr, k)["r"] ** 2 - 1 / r_inf ** 2)


def snr_rows(rows, V: int, problems: int, batched_problems: int, batched) -> np.ndarray:
    """For each (d, L, N) of `rows` and problems 0..problems-1: r(E[k | N]) / r_inf and the excess
    noise X of E[k | N]; on the rows where `batched` is true, also the mean X of two realised batches
    for the first `batched_problems` problems (NaN elsewhere). Returns (len(rows), problems, 3)."""
    problems = check_int("problems", problems, 1)
    batched_problems = check_int("batched_problems", batched_problems, 0)
    if batched_problems > problems:
        raise ValueError(f"batched_problems must be <= problems ({problems}), got {batched_problems}")
    if len(batched) != len(rows):
        raise ValueError(f"batched must have one entry per row ({len(rows)}), got {len(batched)}")
    snr = np.full((len(rows), problems, 3), np.nan)
    for i, (d, L, N) in enumerate(rows):
        for s in range(problems):
            pr = problem(V, d, L, s)
            r_inf = margins.score_stats(pr, margins.k_population(pr))["r"]
            k_m = margins.k_mean(pr, N)
            snr[i, s, :2] = margins.score_stats(pr, k_m)["r"] / r_inf, excess_noise_of(pr, k_m, r_inf)
            if s < batched_problems and batched[i]:        # each problem its own batches
                snr[i, s, 2] = np.mean([excess_noise_of(pr, three_steps(pr, sample_batch(pr, N, 1000 + 2 * s + b), mode="limit").k, r_inf)
                                        for b in range(2)])
    return snr


def snr_table(rows, snr: np.ndarray, r_der, X_der, batched_problems: int) -> None:
    """Print, per (d, L, N): the mean r(E[k]) / r_inf beside the derived r(N) / sqrt d, the geometric
    mean of X(E[k]) / the derived B/(N+beta)^2, and of X realised / X(E[k]) ("-" where not measured)."""
    snr = np.asarray(snr, float)
    if snr.ndim != 3 or snr.shape[0] != len(rows):
        raise ValueError(f"snr must be (len(rows), problems, 3), got shape {snr.shape}")
    n_x = snr.shape[1]
    x_log = np.log(snr[:, :, 1] / np.asarray(X_der)[:, None])
    fl_log = np.log(snr[:, :batched_problems, 2] / snr[:, :batched_problems, 1])
    print(f"means over {n_x} problems; geometric means over {n_x} and (last column) {batched_problems} problems")
    print(" d   L     N | r(E[k])/r_inf derived | X of E[k] / derived B/(N+beta)^2 | X realised / X of E[k]")
    for (d, L, N), r_m, rd, xl, fl in zip(rows, snr[:, :, 0].mean(1), r_der, x_log.mean(1), fl_log.mean(1)):
        print(f"{d:3d} {L:3d} {N:5d} |   {r_m:.3f}      {rd:.3f} |   {np.exp(xl):8.2f}                        |   " + ("-" if np.isnan(fl) else f"{np.exp(fl):.2f}"))


def critical_n(V: int, pairs, seeds, n_grid) -> dict:
    """The critical N (attention accuracy 0.99, `margins.measured_attention_nstar` on the half-octave grid
    n_grid[0]..n_grid[-1]) of every seed, for each (d, L) of `pairs`; a pair listed twice is computed
    once. Returns {(d, L): array over seeds}."""
    seeds = _seeds(seeds)
    if len(n_grid) < 2:
        raise ValueError("n_grid must hold at least two sample sizes")
    out = {}
    for d, L in pairs:
        if (d, L) not in out:
            cfg = TaskConfig(V=V, d=int(d), L=int(L), device="cpu")
            out[d, L] = np.array([margins.measured_attention_nstar(cfg, s, threshold=0.99, n_min=int(n_grid[0]), n_max=int(n_grid[-1]),
                                                          points_per_octave=2) for s in seeds])
    return out


def nstar_fit(V: int, name: str, x, nstar, pred, **fixed) -> dict:
    """The critical N along `name` ("d" or "L", the other fixed by `fixed`) at the values `x`:
    nstar (len(x), problems) measured, pred (len(x)) derived. The fit range is where pred >= beta/2.
    Returns slope, half, lo, hi (the measured exponent and its 95 % t-interval over problems),
    derived (the derived exponent), ratio (geometric-mean / derived N* per x), fit, x, r, r_lo, r_hi
    (measured / derived N* on the fit range, per problem, with its interval), log_r_out (per problem,
    outside the fit range), gap (distance of the derived exponent outside the interval) and gm.
    A problem whose N* is infinite at some x (it never reached the threshold on the grid) is left
    out of every statistic; `kept` (bool, per problem) says which were used."""
    if name not in ("d", "L"):
        raise ValueError(f"name must be 'd' or 'L', got {name!r}")
    nstar = np.asarray(nstar, float)
    if nstar.ndim != 2 or nstar.shape[0] != len(x) or len(pred) != len(x):
        raise ValueError(f"nstar must be (len(x), problems) and pred len(x); got {nstar.shape} and {len(pred)}")
    if np.isnan(nstar).any() or (nstar <= 0).any():
        raise ValueError("nstar must be positive (inf for a problem that never reached the threshold), not nan")
    kept = np.isfinite(nstar).all(0)
    if kept.sum() < 3:
        raise ValueError(f"nstar: fewer than 3 problems with a finite N* at every x ({int(kept.sum())})")
    nstar = nstar[:, kept]
    beta_x = np.array([theory.trigger_self_bias(V, **({"d": int(v)} if name == "d" else {"L": int(v)}), **fixed) for v in x])
    fit = pred >= beta_x / 2                                   # the fit range: derived N* not small against beta
    gm = np.exp(np.log(nstar).mean(1))
    ci = theory.fit_power_law_ci(x[fit], nstar[fit].T)        # one slope per problem, 95 % t-interval over problems
    derived = np.polyfit(np.log(x[fit]), np.log(pred[fit]), 1)[0]
    log_r = np.log(nstar / pred[:, None])                      # (rows, problems): log(measured / derived N*)
    r_m, r_se, r_h = mean_ci(log_r[fit].mean(0))               # per problem, averaged over the fit range
    v = dict(slope=ci["slope"], half=ci["half"], lo=ci["slope"] - ci["half"], hi=ci["slope"] + ci["half"],
             derived=derived, ratio=gm / pred, fit=fit, x=x, r=np.exp(r_m), r_lo=np.exp(r_m - r_h),
             r_hi=np.exp(r_m + r_h), log_r_out=log_r[~fit].mean(0))
    v["gap"] = abs(v["slope"] - v["derived"]) - v["half"]
    v["gm"] = gm
    v["kept"] = kept
    return v


def accuracy_pool(cfg: TaskConfig, Ns, seeds) -> np.ndarray:
    """Exact attention accuracy after step 2 (limit mode) on problem s of `cfg` with a batch of N
    samples (seed s) for every N of `Ns`: (len(seeds), len(Ns))."""
    Ns = [check_int("Ns", N, 1) for N in Ns]
    return np.array([[margins.attention_accuracy(p_, three_steps(p_, sample_batch(p_, N, s_), mode="limit").k) for N in Ns]
                     for s_, p_ in ((s_, make_problem(cfg, s_)) for s_ in _seeds(seeds))])


def scale_sweep(pr: Problem, bat: Batch, test: Batch, lams):
    """The finite steps at attention logit scales `lams` (`StepSizes(attn_scale=...)`): the mean
    attention weight on the informative position of `test` and the test accuracy after step 3.
    Returns (weights, accuracies), lists over `lams`."""
    if len(lams) == 0:
        raise ValueError("lams must hold at least one scale")
    a_meas, acc = [], []
    for lam in lams:
        fin = three_steps(pr, bat, "finite", step_sizes=StepSizes(attn_scale=float(lam)))
        a = torch.softmax(position_scores(pr, test, fin.W1 @ pr.z_eos), 1)
        a_meas.append(float(a.gather(1, test.pos[:, None]).mean()))
        acc.append(evaluate(pr, fin.params, batch=test).acc)
    return a_meas, acc


def eta_sweep(pr: Problem, bat: Batch, test: Batch, etas) -> list:
    """Test accuracy of the finite steps at first step sizes `etas`."""
    if len(etas) == 0:
        raise ValueError("etas must hold at least one step size")
    return [evaluate(pr, three_steps(pr, bat, "finite", step_sizes=StepSizes(eta=float(e))).params, batch=test).acc for e in etas]


def finite_step_pool(cfg: TaskConfig, lams, problems: int, eta_problems: int, etas):
    """On problems 0..problems-1 of `cfg` (16384 samples, 4096 test samples, seed s): the mean softmax
    weight on the informative position with logits lam * h_t.k_hat along the limit direction, for every
    lam of `lams`, and |z_trig|; on the first `eta_problems`, a row: the limit accuracy, then per eta
    of `etas` the finite steps' accuracy and the cosine of their k with the limit's.
    Returns (weights (problems, len(lams)) list, |z| list, rows array)."""
    problems, eta_problems = check_int("problems", problems, 1), check_int("eta_problems", eta_problems, 0)
    a_pool, z_norm, eta_pool = [], [], []
    for s in range(problems):
        pr = make_problem(cfg, s)
        bat, test = sample_batch(pr, 16384, s), sample_batch(pr, 4096, s, "test")
        lim = three_steps(pr, bat, "limit")
        k_hat = lim.k / lim.k.norm()
        a_pool.append([float(torch.softmax(position_scores(pr, test, float(lam) * k_hat), 1).gather(1, test.pos[:, None]).mean())
                       for lam in lams])
        z_norm.append(float(pr.z_trig.norm()))
        if s < eta_problems:
            row = [evaluate(pr, lim.params, batch=test).acc]
            for e in etas:
                fin = three_steps(pr, bat, "finite", step_sizes=StepSizes(eta=e))
                row += [evaluate(pr, fin.params, batch=test).acc, float(fin.k @ lim.k / (fin.k.norm() * lim.k.norm()))]
            eta_pool.append(row)
    return a_pool, z_norm, np.array(eta_pool)


def sampled_focus(lam: float, L: int, d: int, n: int, gen: torch.Generator) -> float:
    """Monte Carlo mean softmax weight of a logit `lam` against L - 1 logits lam * N(0, 1/d), over n
    draws from `gen`."""
    L, d, n = check_int("L", L, 2), check_int("d", d, 1), check_int("n", n, 1)
    X = torch.randn(n, L - 1, generator=gen, dtype=torch.float64) / d ** 0.5
    logits = torch.cat([torch.full((n, 1), lam, dtype=torch.float64), lam * X], 1)
    return float(torch.softmax(logits, 1)[:, 0].mean())
