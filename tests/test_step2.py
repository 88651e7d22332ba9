"""lib.analysis.step2 (the chapter 5 experiments as calls) and lib.plotting.attention_scores: checked
against the direct computation on small problems, and their argument checks."""
import math

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

import lib
from lib import theory
from lib.analysis import margins, step2


def test_mean_ci_is_mean_standard_error_and_t_half_width():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    m, se, h = step2.mean_ci(x)
    assert m == x.mean() and se == pytest.approx(x.std(ddof=1) / 2)
    assert h == pytest.approx(theory.t_quantile(0.975, 3) * se)


def _population_k_by_sampling(pr, n, seed):
    """E[k] at N = infinity by Monte Carlo from the definition k = E_n[C_n G1^T a_n] (pairs of distinct
    samples; C_n = (1/L) sum_t h_t v_t^T - hbar vbar^T, a_n = u_{Pi x_n} - u_bar), with the first step's
    G1 = E[a_x obar^T] = (1/(L V)) sum_i a_i v_i^T taken exactly (E[obar | x] = (v_x + (L - 1) ebar) / L
    and sum_i a_i = 0). The trigger rides in the value path, so v = h = e_{x_t} + 1[t = l] z. Returns the
    per-sample vectors C_n G1^T a_n (n, d): their mean is unbiased for k_population."""
    V, L = pr.cfg.V, pr.cfg.L
    E, z, A = pr.E, pr.z_trig, pr.U_perm - pr.u_bar
    G1 = A.T @ (E[:V] + z) / (L * V)
    b = lib.sample_batch(pr, n, seed)
    H = E[b.tokens].clone()
    H[torch.arange(n), b.pos] += z
    w = A[b.informative] @ G1                                   # (n, d): G1^T a_n
    hb = H.mean(1)
    return (H * (H @ w[:, :, None])).mean(1) - hb * (hb * w).sum(1, keepdim=True)


def _gaussian_accuracy_by_hermite(r, L, nodes=200):
    """E[Phi(X + r)^(L - 1)], X ~ N(0, 1), by Gauss-Hermite quadrature (not lib's trapezoid grid)."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    Phi = np.array([0.5 * (1 + math.erf((xi + r) / 2 ** 0.5)) for xi in x])
    return float((w * Phi ** (L - 1)).sum() / (2 * math.pi) ** 0.5)


def test_population_helpers_match_the_direct_computation():
    """The step-2 helpers against computations from the definitions (~2 s):
    mu = z . E[k] and s = SD over tokens of e_j . E[k], by sampling 2^17 sequences of problem (32, 16, 4, 3):
    tolerance 4 standard errors (the per-sample SD / sqrt(n) for mu, its delta-method projection for s;
    relative 1 % and 1.4 % here: the wrong L moves mu by 30 %, |z| for |z|^2 by 28 %); the self-term z . D
    = E[|a_n|^2 z . C_n obar_n] the same way (relative SE 0.4 %); the exact attention accuracy by hard
    attention on 2^16 sampled test sequences (binomial tolerance 4 sqrt(p (1 - p) / n) = 0.003 at
    d = 8, where p = 0.96); its Gaussian prediction by a different quadrature (agreement 1e-7)."""
    V, d, L, n = 32, 16, 4, 2 ** 17
    pr = step2.problem(V, d, L, 3)
    z = pr.z_trig
    zz, kap = float(z @ z), theory.trigger_score_scale(V, L)
    Ck = _population_k_by_sampling(pr, n, 11)
    mu_s = Ck @ z
    mu, mu_se = float(mu_s.mean()), float(mu_s.std()) / n ** 0.5
    sig = pr.E[:V] @ Ck.mean(0)                                       # token scores along the sampled E[k]
    s_mc = float(sig.std(correction=0))
    grad = (pr.E[:V] - pr.E[:V].mean(0)).T @ (sig - sig.mean()) / (V * s_mc)   # ds / dk
    s_se = float((Ck @ grad).std()) / n ** 0.5
    bonus = step2.population_bonus(V, d, [L, 8], seed=3)
    assert abs(bonus[0] * zz - mu) < 4 * mu_se, (bonus[0] * zz, mu, mu_se)
    assert bonus[1] < 0.8 * bonus[0]        # a bonus per L: kappa ~ (L - 1) / L^3 gives L = 8 0.29 of L = 4
    rows = step2.population_ratios([(V, d, L)], seeds=[3])
    assert rows.shape == (1, 6) and tuple(rows[0, :3]) == (V, d, L)
    assert abs(rows[0, 3] * kap * zz - mu) < 4 * mu_se
    s_lib = rows[0, 4] * kap * zz ** 0.5 / d ** 0.5
    assert abs(s_lib - s_mc) < 4 * s_se, (s_lib, s_mc, s_se)
    assert rows[0, 5] == pytest.approx((rows[0, 3] / rows[0, 4]) ** 2 * zz, rel=1e-12)  # r = mu / s, r^2 / d
    sb = step2.self_bias(V, d, L, seeds=[3])
    b = lib.sample_batch(pr, n, 12)
    H = pr.E[b.tokens].clone()
    H[torch.arange(n), b.pos] += z
    ob = H.mean(1)
    zCo = ((H @ z) * (H @ ob[:, :, None])[..., 0]).mean(1) - (ob @ z) * (ob * ob).sum(1)   # z . C_n obar_n
    zD_s = (pr.U_perm - pr.u_bar)[b.informative].pow(2).sum(1) * zCo
    zD, zD_se = float(zD_s.mean()), float(zD_s.std()) / n ** 0.5
    assert abs((sb["beta"][0] + 1) * bonus[0] * zz - zD) < 4 * zD_se       # (1 + beta) mu = z . D
    assert abs(sb["mu_kappa"][0] * kap * zz - mu) < 4 * mu_se
    meas, pred = step2.population_accuracy(V, np.array([8, 16]), L, 2)
    assert meas.shape == pred.shape == (2, 2)
    p0 = step2.problem(V, 8, L, 0)
    k0 = margins.k_population(p0)
    test = lib.sample_batch(p0, 2 ** 16, 0, split="test")
    keys = p0.E[test.tokens].clone()
    keys[torch.arange(test.N), test.pos] += p0.z_trig
    hit = float(((keys @ k0).argmax(1) == test.pos).double().mean())
    assert abs(meas[0, 0] - hit) < 4 * (hit * (1 - hit) / test.N) ** 0.5, (meas[0, 0], hit)
    for i, dd in enumerate((8, 16)):
        r = float(step2.problem(V, dd, L, 0).z_trig.norm()) * dd ** 0.5
        assert abs(pred[i, 0] - _gaussian_accuracy_by_hermite(r, L)) < 1e-7


def test_noise_ratios_and_sampled_focus_draw_from_the_generator_in_order():
    a = step2.self_noise_ratios(32, 8, 3, torch.Generator().manual_seed(0))
    b = step2.self_noise_ratios(32, 8, 3, torch.Generator().manual_seed(0))
    assert a == b and len(set(a)) == 3
    f = step2.sampled_focus(3.0, 16, 64, 50_000, torch.Generator().manual_seed(1))
    assert abs(f - float(theory.softmax_focus(3.0, 16, 64))) < 0.05


def test_snr_rows_critical_n_fit_and_pool_shapes(capsys):
    rows = [(16, 4, 32), (16, 4, 64)]
    snr = step2.snr_rows(rows, 32, 2, 1, [True, False])
    assert snr.shape == (2, 2, 3) and np.isfinite(snr[0, 0]).all() and np.isnan(snr[1, :, 2]).all() and np.isnan(snr[0, 1, 2])
    pr = step2.problem(32, 16, 4, 1)
    r_inf = margins.score_stats(pr, margins.k_population(pr))["r"]
    assert snr[0, 1, 1] == step2.excess_noise_of(pr, margins.k_mean(pr, 32), r_inf)
    out = step2.critical_n(32, [(16, 4), (16, 4)], [0, 1], [4, 8, 16, 32])
    assert list(out) == [(16, 4)] and out[16, 4].shape == (2,)
    pool = step2.accuracy_pool(lib.TaskConfig(V=32, d=16, L=4, device="cpu"), (8, 64), range(2))
    assert pool.shape == (2, 2) and ((0 <= pool) & (pool <= 1)).all()
    # the table prints a row per (d, L, N), "-" where no batch was measured; a snr of another shape is refused
    step2.snr_table(rows, snr, [0.9, 0.95], [1.0, 1.0], 1)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 + len(rows) and printed[-1].split("|")[0].split() == ["16", "4", "64"]
    assert printed[-1].rstrip().endswith("-") and not printed[-2].rstrip().endswith("-")
    for bad in (snr[0], snr[:1], snr[..., None]):
        with pytest.raises(ValueError, match="snr must be"):
            step2.snr_table(rows, bad, [0.9, 0.95], [1.0, 1.0], 1)


def test_nstar_fit_reports_the_exponents():
    x = np.array([48, 64, 96, 160])
    pred = np.array([theory.predicted_attention_nstar(128, 128, int(L)) for L in x])
    nstar = pred[:, None] * np.exp(np.random.default_rng(0).normal(0, 0.1, (4, 6)))
    v = step2.nstar_fit(128, "L", x, nstar, pred, d=128)
    assert abs(v["slope"] - v["derived"]) < 0.5 and v["lo"] < v["slope"] < v["hi"] and 0.7 < v["r"] < 1.4
    assert v["gap"] == abs(v["slope"] - v["derived"]) - v["half"]
    assert v["kept"].all()


def test_nstar_fit_leaves_out_problems_that_never_reach():
    x = np.array([48, 64, 96, 160])
    pred = np.array([theory.predicted_attention_nstar(128, 128, int(L)) for L in x])
    nstar = pred[:, None] * np.exp(np.random.default_rng(1).normal(0, 0.1, (4, 6)))
    censored = nstar.copy()
    censored[3, 2] = np.inf                                     # problem 2 never reaches at L = 160
    v, ref = step2.nstar_fit(128, "L", x, censored, pred, d=128), step2.nstar_fit(128, "L", x, np.delete(nstar, 2, 1), pred, d=128)
    assert v["kept"].tolist() == [True, True, False, True, True, True]
    assert v["slope"] == ref["slope"] and v["half"] == ref["half"] and np.allclose(v["gm"], ref["gm"])
    with pytest.raises(ValueError, match="nstar"):
        step2.nstar_fit(128, "L", x, np.full((4, 6), np.inf), pred, d=128)


def test_nstar_fit_range_includes_its_boundary():
    """The fit range is where pred >= beta/2, the boundary included. beta = V (1 + (L - 1)/d) - 1 by hand
    at V = 64, L = 8: 91, 77, 70, 66.5, 64.75 at d = 16, 32, 64, 128, 256 (exact in binary). pred sits
    exactly on beta/2 at d = 16 (in the range) and just below it at d = 256 (out of it)."""
    x = np.array([16.0, 32.0, 64.0, 128.0, 256.0])
    pred = np.array([91 / 2, 500.0, 250.0, 125.0, 64.75 / 2 - 1e-9])
    nstar = pred[:, None] * np.exp(np.random.default_rng(2).normal(0, 0.1, (5, 4)))
    v = step2.nstar_fit(64, "d", x, nstar, pred, L=8)
    assert v["fit"].tolist() == [True, True, True, True, False]


def test_finite_sweeps_run():
    pr = lib.make_problem(lib.TaskConfig(V=16, d=32, L=4, device="cpu"), 0)
    bat, test = lib.sample_batch(pr, 256, 0), lib.sample_batch(pr, 64, 0, "test")
    a, acc = step2.scale_sweep(pr, bat, test, [1.0, 30.0])
    assert len(a) == len(acc) == 2 and a[1] > a[0]
    assert len(step2.eta_sweep(pr, bat, test, [0.01])) == 1
    a_pool, z, rows = step2.finite_step_pool(lib.TaskConfig(V=16, d=32, L=4, device="cpu"), [1.0], 2, 1, (0.01,))
    assert np.array(a_pool).shape == (2, 1) and len(z) == 2 and rows.shape == (1, 3)


@pytest.mark.parametrize("call, name", [
    (lambda: step2.population_ratios([], [0]), "sizes"),
    (lambda: step2.population_ratios([(8, 8, 4)], []), "seeds"),
    (lambda: step2.population_bonus(8, 8, [4], seed=-1), "seed"),
    (lambda: step2.population_accuracy(8, [8], 4, 0), "problems"),
    (lambda: step2.population_accuracy(8, [8], 4, 2, tau=0), "tau"),
    (lambda: step2.self_noise_ratios(8, 8, 0, torch.Generator()), "draws"),
    (lambda: step2.snr_rows([(8, 4, 16)], 8, 2, 3, [True]), "batched_problems"),
    (lambda: step2.snr_rows([(8, 4, 16)], 8, 2, 1, []), "batched"),
    (lambda: step2.critical_n(8, [(8, 4)], [0], [4]), "n_grid"),
    (lambda: step2.nstar_fit(8, "V", np.array([1, 2]), np.ones((2, 2)), np.ones(2)), "name"),
    (lambda: step2.nstar_fit(8, "d", np.array([1, 2]), np.full((2, 3), np.nan), np.ones(2)), "nstar"),
    (lambda: step2.accuracy_pool(lib.TaskConfig(V=8, d=8, L=4, device="cpu"), (0,), [0]), "Ns"),
    (lambda: step2.scale_sweep(None, None, None, []), "lams"),
    (lambda: step2.eta_sweep(None, None, None, []), "etas"),
    (lambda: step2.finite_step_pool(lib.TaskConfig(V=8, d=8, L=4, device="cpu"), [1.0], 0, 0, ()), "problems"),
    (lambda: step2.sampled_focus(1.0, 1, 8, 10, torch.Generator()), "L"),
    (lambda: step2.excess_noise_of(None, None, 0.0), "r_inf"),
])
def test_bad_arguments_name_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_attention_scores_draws_one_row_per_sequence():
    import matplotlib.pyplot as plt

    pr = lib.make_problem(lib.TaskConfig(V=16, d=16, L=6, device="cpu"), 0)
    test = lib.sample_batch(pr, 5, 0, "test")
    k = lib.three_steps(pr, lib.sample_batch(pr, 256, 0), mode="limit").k
    _, ax = plt.subplots()
    lib.plotting.attention_scores(ax, pr, test, k, "title")
    assert ax.get_images()[0].get_array().shape == (5, 6) and len(ax.patches) == 5 and ax.get_title() == "title"
    plt.close("all")


def test_nstar_fit_reads_a_known_power_law():
    """Synthetic N* = 2 x pred(x) for every problem, pred a power law of slope -1 in d (beta small against
    it, so the whole grid is the fit range): the fitted slope is the derived one, the ratio N*/pred is 2 at
    every x and its interval closes on 2."""
    x = np.array([16.0, 32.0, 64.0, 128.0])
    pred = 4.0e5 / x
    nstar = np.repeat((2 * pred)[:, None], 5, axis=1)
    v = step2.nstar_fit(64, "d", x, nstar, pred, L=8)
    assert v["fit"].all() and v["kept"].all()
    assert abs(v["slope"] + 1) < 1e-9 and abs(v["derived"] + 1) < 1e-9
    assert np.allclose(v["ratio"], 2.0) and abs(v["r"] - 2) < 1e-9


@pytest.mark.slow
def test_finite_step_pool_cosines_are_cosines():
    """The finite steps' k against the limit's: a cosine (at most 1 up to float32 rounding), near 1 at a
    small step size, and both accuracies in [0, 1]."""
    _, _, rows = step2.finite_step_pool(lib.TaskConfig(V=16, d=16, L=4), [1.0], 1, 1, [1e-3, 1.0])
    acc_lim, acc1, cos1, acc2, cos2 = rows[0]
    assert all(0 <= a <= 1 for a in (acc_lim, acc1, acc2))
    assert all(abs(c) <= 1 + 1e-5 for c in (cos1, cos2)) and cos1 > 0.99


def test_softmax_focus_is_the_mean_field_weight_by_quadrature():
    """The heuristic replaces sum_t exp(lam X_t) by its mean (L - 1) E exp(lam X), X ~ N(0, 1/d); that mean by
    Gauss-Hermite quadrature (60 nodes: exact to rounding for these lam^2/d) gives the same weight."""
    x, w = np.polynomial.hermite_e.hermegauss(60)
    w = w / w.sum()
    for lam, L, d in ((0.5, 2, 1), (3.0, 16, 64), (7.0, 256, 20), (12.0, 5, 300)):
        mean_exp = float((w * np.exp(lam * x / math.sqrt(d))).sum())
        want = 1 / (1 + (L - 1) * math.exp(-lam) * mean_exp)
        assert float(theory.softmax_focus(lam, L, d)) == pytest.approx(want, rel=1e-10)


def test_self_noise_ratios_take_the_smallest_sizes_and_refuse_one_below():
    out = step2.self_noise_ratios(2, 1, 1, torch.Generator().manual_seed(0))
    assert len(out) == 1 and math.isfinite(out[0]) and out[0] >= 0
    for args, name in (((1, 1, 1), "V"), ((2, 0, 1), "d"), ((2, 1, 0), "draws")):
        with pytest.raises(ValueError, match=f"^{name} must be"):
            step2.self_noise_ratios(*args, torch.Generator().manual_seed(0))


def test_snr_table_prints_the_ratios(capsys):
    """snr_table's columns, recomputed from made-up arrays: the mean of r, the geometric mean of
    X / X_der and of X realised / X of E[k] (over the first `batched_problems` problems)."""
    rows = [(16, 4, 64), (32, 8, 128)]
    snr = np.empty((2, 3, 3))
    snr[:, :, 0] = [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]
    snr[:, :, 1] = [[2.0, 8.0, 4.0], [1.0, 1.0, 8.0]]
    snr[:, :, 2] = [[6.0, 8.0, 0.0], [3.0, 9.0, 0.0]]
    step2.snr_table(rows, snr, [0.15, 0.45], [2.0, 4.0], batched_problems=2)
    lines = [l for l in capsys.readouterr().out.splitlines() if "|" in l][1:]
    assert len(lines) == 2
    cols = [[float(t) for t in l.replace("|", " ").split()[3:]] for l in lines]
    # row 1: mean r 0.2; X/X_der = 1, 4, 2 -> geometric mean 2; realised/X = 3, 1 -> sqrt 3
    assert cols[0] == pytest.approx([0.2, 0.15, 2.0, math.sqrt(3)], abs=6e-3)
    # row 2: mean r 0.5; X/X_der = 1/4, 1/4, 2 -> (1/8)^(1/3) = 0.5; realised/X = 3, 9 -> 5.196
    assert cols[1] == pytest.approx([0.5, 0.45, 0.5, math.sqrt(27)], abs=6e-3)


def test_population_accuracy_at_one_dimension():
    # one d is a grid too (shape (1, problems)); none is refused, naming ds
    meas, pred = step2.population_accuracy(32, [16], 4, problems=2)
    assert meas.shape == pred.shape == (1, 2) and ((0 < meas) & (meas <= 1)).all() and ((0 < pred) & (pred <= 1)).all()
    with pytest.raises(ValueError, match="ds"):
        step2.population_accuracy(32, [], 4, problems=2)
