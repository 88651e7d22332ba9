"""lib.analysis.step2 (the chapter 5 experiments as calls) and lib.plotting.attention_scores: checked
against the direct computation on small problems, and their argument checks."""
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


def test_population_helpers_match_the_direct_computation():
    pr = step2.problem(32, 16, 4, 3)
    k_inf = margins.k_population(pr)
    zz = float(pr.z_trig @ pr.z_trig)
    bonus = step2.population_bonus(32, 16, [4], seed=3)
    assert bonus[0] == float(pr.z_trig @ k_inf) / zz
    rows = step2.population_ratios([(32, 16, 4)], seeds=[3])
    assert rows.shape == (1, 6) and rows[0, 3] == pytest.approx(bonus[0] / theory.trigger_score_scale(32, 4), rel=1e-12)
    meas, pred = step2.population_accuracy(32, np.array([16]), 4, 2)
    assert meas.shape == pred.shape == (1, 2)
    p0 = step2.problem(32, 16, 4, 0)
    assert meas[0, 0] == margins.attention_accuracy(p0, margins.k_population(p0))
    assert pred[0, 0] == theory.gaussian_attention_accuracy(float(p0.z_trig.norm()) * 16 ** 0.5, 4)
    sb = step2.self_bias(32, 16, 4, seeds=[3])
    assert sb["beta"][0] == float(pr.z_trig @ margins.k_self_term(pr)) / float(pr.z_trig @ k_inf) - 1
    assert sb["mu_kappa"][0] == pytest.approx(rows[0, 3])


def test_noise_ratios_and_sampled_focus_draw_from_the_generator_in_order():
    a = step2.self_noise_ratios(32, 8, 3, torch.Generator().manual_seed(0))
    b = step2.self_noise_ratios(32, 8, 3, torch.Generator().manual_seed(0))
    assert a == b and len(set(a)) == 3
    f = step2.sampled_focus(3.0, 16, 64, 50_000, torch.Generator().manual_seed(1))
    assert abs(f - float(theory.softmax_focus(3.0, 16, 64))) < 0.05


def test_snr_rows_critical_n_fit_and_pool_shapes():
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


def test_nstar_fit_reports_the_exponents():
    x = np.array([48, 64, 96, 160])
    pred = np.array([theory.predicted_attention_nstar(128, 128, int(L)) for L in x])
    nstar = pred[:, None] * np.exp(np.random.default_rng(0).normal(0, 0.1, (4, 6)))
    v = step2.nstar_fit(128, "L", x, nstar, pred, d=128)
    assert abs(v["slope"] - v["derived"]) < 0.5 and v["lo"] < v["slope"] < v["hi"] and 0.7 < v["r"] < 1.4
    assert v["gap"] == abs(v["slope"] - v["derived"]) - v["half"]


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
