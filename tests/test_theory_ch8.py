"""Chapter 8: the MLP memory. Gradients at the chosen normalisation, the infinite-width (kernel)
limit, the sympy Hermite coefficients and the heuristic's building blocks."""
import math

import numpy as np
import pytest
import sympy as sp
import torch

import lib
import lib.analysis.mlp_budget
from lib import theory as T
from conftest import small_cfg, rel, random_params


@pytest.mark.parametrize("mlp_input", ["unit", "raw"])
@pytest.mark.parametrize("activation", ["he3", "relu"])
@pytest.mark.parametrize("trigger_in_value,tau", [(True, 0.6), (False, 1.0)])
def test_mlp_closed_form_gradients_equal_autograd_at_each_normalisation(mlp_input, activation, trigger_in_value, tau):
    cfg = small_cfg(V=9, d=6, L=5, model="mlp", m=11, activation=activation, mlp_input=mlp_input,
                    trigger_in_value=trigger_in_value, tau=tau)
    problem = lib.make_problem(cfg, 7)
    batch = lib.sample_batch(problem, 41, 7)
    params = random_params(cfg, 8)
    closed = lib.gradients(problem, params, batch)
    ref = lib.autograd_gradients(problem, params, batch)
    assert rel(closed.W_V, ref.W_V) < 1e-10 and rel(closed.W_KQ, ref.W_KQ) < 1e-10
    fast = lib.fast.counts.gradients(problem, params, batch)             # the count route too
    assert rel(fast.W_V, ref.W_V) < 1e-10 and rel(fast.W_KQ, ref.W_KQ) < 1e-10


def _kernel_gap(activation, m, V=48, d=16):
    cfg = small_cfg(V=V, d=d, L=2, model="mlp", m=m, activation=activation)
    problem = lib.make_problem(cfg, 0)
    phi = lib.features(problem, problem.E[:V])
    e_hat = problem.E[:V] / problem.E[:V].norm(dim=1, keepdim=True)
    K = torch.as_tensor(T.mlp_kernel(activation, (e_hat @ e_hat.T).clamp(-1, 1).numpy()))
    off = ~torch.eye(V, dtype=torch.bool)
    return problem, phi, K, float((phi @ phi.T - K)[off].pow(2).mean().sqrt())


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["he2", "he3", "relu", "centred_relu"])
def test_random_features_approach_the_kernel_like_one_over_sqrt_m(activation):
    for m in (256, 4096, 16384):
        _, _, _, gap = _kernel_gap(activation, m, d=64)
        # the predicted standard deviation sqrt(Var_F / m), Var_F averaged over the pairs' cosines, within 12 %
        pred = math.sqrt(T.mlp_rf_variance(activation, 0.0, 64) / m)
        assert 0.88 * pred < gap < 1.12 * pred, (m, gap, pred)


def test_rf_variance_averaged_over_pairs_adds_the_rho_squared_term():
    # He3: E[sigma^2 sigma'^2] = 1 + 18 rho^2 + 54 rho^4 + 20 rho^6 and K = rho^3, so the pair average
    # is 1 + 18/d + 162/(d(d+2)) + 300/(d(d+2)(d+4)) - 15/(d(d+2)(d+4)) exactly
    for d in (16, 64):
        e2, e4, e6 = 1 / d, 3 / (d * (d + 2)), 15 / (d * (d + 2) * (d + 4))
        assert abs(T.mlp_rf_variance("he3", 0.0, d) - (1 + 18 * e2 + 54 * e4 + 20 * e6 - e6)) < 1e-9
    assert abs(T.mlp_rf_variance("he3", 0.0) - 1.0) < 1e-12                 # at rho = 0 exactly


def test_rf_common_part_is_the_mean_times_the_variance():
    a0 = 1 / math.sqrt(2 * math.pi)
    assert abs(T.mlp_rf_common("relu") - a0 ** 2 * (0.5 - a0 ** 2)) < 2e-3   # kink: quadrature to ~1e-3
    for act in ("he3", "centred_relu"):
        assert abs(T.mlp_rf_common(act)) < 1e-9


@pytest.mark.parametrize("activation,m,N,seeds", [("relu", 256, 512, 6), ("he3", 512, math.inf, 2), ("centred_relu", 512, 1024, 2)])
def test_each_budget_term_matches_its_direct_simulation(activation, m, N, seeds):
    # V = 128, d = 64: at smaller sizes He3's heavy-tailed kappa_xx makes a few problems' moments noisy;
    # the mean bias is one random vector per problem (relative spread ~ sqrt(2/V + 1/d) = 18 %): 6 problems
    cfg = lib.TaskConfig(V=128, d=64, L=2, model="mlp", m=m, activation=activation, trigger_in_value=False,
                         device="cpu", dtype="float64")
    meas = lib.analysis.mlp_budget.measured_term_moments(cfg, N, seeds=seeds)
    pred = T.mlp_term_moments(128, 64, m, N, activation)
    for name in lib.analysis.mlp_budget.TERMS:
        if pred[name] > 1e-3:                                                # the terms large enough to measure
            assert 0.75 < meas[name] / pred[name] < 1.33, (name, meas[name], pred[name])
    assert meas["rest"] < 0.05 and abs(meas["signal"] - 1) < 0.08


def test_own_pair_carries_the_kernel_constant():
    # readout is 1/d whatever b0; the mean bias vanishes with exact counts and for centred activations
    t = T.mlp_noise_terms(128, 64, 512, 1024, "relu")
    assert t["readout"] == 1 / 64 and t["mean_bias"] > 0
    assert T.mlp_noise_terms(128, 64, 512, 1024, "centred_relu")["mean_bias"] == 0
    assert T.mlp_noise_terms(128, 64, 512, math.inf, "relu")["mean_bias"] == 0
    # a rarely seen token loses its signal faster with an uncentred activation (nu K1 - b0)
    assert T.mlp_predicted_accuracy(64, 64, 512, 512, "relu") < T.mlp_predicted_accuracy(64, 64, 512, 512, "centred_relu")


def test_one_step_memory_logits_approach_the_kernel_memory_as_m_grows():
    errs = []
    for m in (256, 4096, 65536):
        problem, phi, K, _ = _kernel_gap("he3", m, V=32, d=12)
        A = problem.U @ (problem.U_perm - problem.u_bar).T / 32           # (V, V): u_k . (u_{Pi j} - u_bar) / V
        finite = A @ (phi @ phi.T)                                         # xi_k(x) with the random features
        kernel = A @ K                                                     # the infinite-width memory
        errs.append(rel(finite, kernel))
    assert errs[0] > errs[1] > errs[2] and errs[2] < 0.08
    assert errs[0] / errs[2] > 0.25 * math.sqrt(65536 / 256)              # about 1/sqrt(m)


def test_hermite_coefficients_match_closed_forms():
    a = [float(c) for c in T.hermite_coefficients("relu", kmax=4)]
    assert abs(a[0] - 1 / math.sqrt(2 * math.pi)) < 1e-15 and a[1] == 0.5 and a[3] == 0.0
    assert abs(a[2] - 1 / (2 * math.sqrt(math.pi))) < 1e-15
    s = sp.Symbol("s", positive=True)
    he3 = T.hermite_coefficients("he3", scale=s, kmax=3)
    assert sp.simplify(he3[1] - 3 * s * (s ** 2 - 1) / sp.sqrt(6)) == 0 and sp.simplify(he3[3] - s ** 3) == 0
    shifted = T.hermite_coefficients("he3", shift=0.7, kmax=3)            # He3(x + b) = He3 + 3b He2 + 3b^2 x + b^3
    assert abs(float(shifted[1]) - 3 * 0.49 / math.sqrt(6)) < 1e-12
    for act in ("he2", "he3", "he4", "centred_relu"):
        tot = sum(float(c) ** 2 for c in T.hermite_coefficients(act, kmax=12))
        assert abs(tot - lib.core.featuremaps.ACTIVATION_MOMENTS[act][1]) < 2e-3


def test_hermite_coefficients_agree_with_monte_carlo():
    g = torch.randn(1_000_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    sigma = lib.core.featuremaps.ACTIVATIONS["centred_relu"][0]
    for k, c in enumerate(T.hermite_coefficients("centred_relu", kmax=4)):
        he = torch.as_tensor(np.polynomial.hermite_e.hermeval(g.numpy(), [0] * k + [1]))
        est = sigma(g) * he / math.sqrt(math.factorial(k))
        assert abs(float(est.mean()) - float(c)) < 5 * float(est.std()) / 1000


def test_shifted_kernel_coefficients_reassemble_the_kernel():
    for act in ("he3", "relu"):
        for beta in (0.0, 0.3, 0.5):
            b = T.shifted_kernel_coefficients(act, beta)
            for delta in (-0.4, 0.2, 1.0):
                assert abs(np.polyval(b[::-1], delta) - float(T.mlp_kernel(act, beta + (1 - beta) * delta))) < 5e-3
    assert np.allclose(T.shifted_kernel_coefficients("he3", 0.5)[:4], [1 / 8, 3 / 8, 3 / 8, 1 / 8])


def test_sphere_cosine_nodes_at_their_least_arguments():
    """d = 2 and nodes = 8, the least each guard admits: on the circle delta = cos(theta), theta uniform on
    [0, pi], so E delta = 0 and E delta^2 = 1/d = 1/2 (uniform directions in R^d); one below each least
    value is refused, naming it."""
    delta, w = T.sphere_cosine_nodes(2, 8)
    assert delta.shape == w.shape == (8,) and abs(w.sum() - 1) < 1e-12
    assert abs((w * delta).sum()) < 1e-12 and abs((w * delta ** 2).sum() - 0.5) < 1e-9
    for args, name in (((1, 8), "d"), ((2, 7), "nodes")):
        with pytest.raises(ValueError, match=name):
            T.sphere_cosine_nodes(*args)


def test_relu_kernel_is_the_arc_cosine_kernel_within_its_truncation():
    """E[relu(g) relu(g')] for correlation rho is the arc-cosine kernel (Cho and Saul 2009),
    (sqrt(1 - rho^2) + (pi - arccos rho) rho) / (2 pi): 1/2 at rho = 1 and 0 at rho = -1. mlp_kernel
    keeps the Hermite series to k = 12 and puts the rest, tail = E sigma^2 - sum_k a_k^2 (about 1e-3), on
    rho^14; relu's a_k vanish for odd k > 1, so its error is at most tail rho^14 and none at rho = +-1.
    The centred ReLU's kernel is the same less the squared mean 1/(2 pi)."""
    rho = np.array([-1.0, -0.9, -0.5, 0.0, 0.3, 0.7, 0.95, 1.0])
    arc = (np.sqrt(1 - rho ** 2) + (math.pi - np.arccos(rho)) * rho) / (2 * math.pi)
    tail = 0.5 - sum(float(a) ** 2 for a in T.hermite_coefficients("relu", kmax=12))
    assert 0 < tail < 2e-3
    for act, ref in (("relu", arc), ("centred_relu", arc - 1 / (2 * math.pi))):
        assert np.all(np.abs(T.mlp_kernel(act, rho) - ref) <= tail * rho ** 14 + 1e-12), act
    assert abs(float(T.mlp_kernel("relu", 1.0)) - 0.5) < 1e-12 and abs(float(T.mlp_kernel("relu", -1.0))) < 1e-12


def test_shifted_kernel_coefficients_default_to_mlp_kernels_truncation():
    """j = 0..kmax with the default kmax = 12 of `mlp_kernel`: 13 coefficients, the same as asking for
    kmax = 12."""
    for act in ("he3", "relu"):
        b = T.shifted_kernel_coefficients(act, 0.3)
        assert b.shape == (13,) and np.array_equal(b, T.shifted_kernel_coefficients(act, 0.3, kmax=12))


def test_signal_variance_of_he2_is_14_over_m():
    for m in (1, 10, 300):
        assert abs(T.mlp_signal_variance(m, "he2") - 14 / m) < 1e-9


def test_predicted_accuracy_grows_with_width_and_samples_and_respects_coverage():
    acc_m = [T.mlp_predicted_accuracy(128, 64, m, 4096, "he3") for m in (64, 256, 1024)]
    acc_N = [T.mlp_predicted_accuracy(128, 64, 1024, N, "he3") for N in (256, 1024, 8192)]
    assert acc_m[0] < acc_m[1] < acc_m[2] and acc_N[0] < acc_N[1] < acc_N[2]
    assert acc_N[0] <= 1 - math.exp(-256 / 128) + 1e-9                 # never beats coverage
    assert abs(T.coverage_vlog(100, 0.99) - 100 * math.log(100)) < 1e-9
    assert T.mlp_predicted_nstar(128, 64, 1024) < T.mlp_predicted_nstar(128, 64, 512)
    assert math.isinf(T.mlp_predicted_min_width(128, 64, "relu"))        # ReLU: no width reaches 0.99
    assert 100 < T.mlp_predicted_min_width(128, 64, "he3") < 2000


def test_min_width_searches_down_to_a_single_unit():
    """m_max = 1, the least it admits: the search is over the one width m = 1, so the answer is 1 where
    the predicted accuracy at m = 1 reaches the threshold and inf where it does not; m_max = 0 is
    refused, naming it."""
    for V, t in ((8, 0.99), (2, 0.4)):
        reach = T.mlp_predicted_accuracy(V, 8, 1, math.inf, "he3") >= t
        assert T.mlp_predicted_min_width(V, 8, threshold=t, m_max=1) == (1.0 if reach else math.inf)
    with pytest.raises(ValueError, match="m_max"):
        T.mlp_predicted_min_width(8, 8, m_max=0)


def test_population_recall_is_exact_for_orthogonal_embeddings_and_fails_for_small_d():
    orth = lib.TaskConfig(V=10, d=24, L=3, embedding="orthogonal", trigger_in_value=False, device="cpu")
    assert lib.experiments.memory_capacity.population_recall(orth, 0) == 1.0
    tiny = lib.TaskConfig(V=200, d=4, L=3, model="mlp", m=16, trigger_in_value=False, device="cpu")
    assert lib.experiments.memory_capacity.population_recall(tiny, 0) < 0.5
    assert lib.experiments.memory_capacity.population_capacity(tiny.with_(d=32, m=512), seeds=1) > 20


def test_fit_power_law_interval_recovers_an_exact_slope():
    x = np.array([1.0, 2.0, 4.0, 8.0])
    s, lo, hi = T.fit_power_law_interval(x, 3 * x ** 1.5)
    assert abs(s - 1.5) < 1e-12 and hi - lo < 1e-9
    s, lo, hi = T.fit_power_law_interval(x, x * np.array([1.0, 1.2, 0.9, 1.1]))
    assert lo < s < hi


def test_fit_power_law_interval_is_the_textbook_standard_error():
    """The slope's standard error is sqrt(sum of squared residuals / (n - 2) / sum (lx - mean lx)^2), written
    out here on random data and several k: the interval is slope -+ k se, to rounding."""
    rng = np.random.default_rng(4)
    for n in (3, 5, 18):
        x = np.exp(rng.uniform(0, 5, n))
        y = np.exp(0.7 * np.log(x) + rng.normal(0, 0.3, n))
        lx, ly = np.log(x), np.log(y)
        b = ((lx - lx.mean()) * (ly - ly.mean())).sum() / ((lx - lx.mean()) ** 2).sum()
        resid = ly - ly.mean() - b * (lx - lx.mean())
        se = np.sqrt((resid ** 2).sum() / (n - 2) / ((lx - lx.mean()) ** 2).sum())
        for k in (1.0, 2.0, 4.3):
            s, lo, hi = T.fit_power_law_interval(x, y, k=k)
            assert abs(s - b) < 1e-12 and abs(s - lo - k * se) < 1e-12 and abs(hi - s - k * se) < 1e-12


@pytest.mark.parametrize("call", [
    lambda: T.hermite_coefficients("tanh"),
    lambda: T.hermite_coefficients("he3", scale=0),
    lambda: T.hermite_coefficients("relu", shift=0.5),
    lambda: T.mlp_kernel("he3", 1.5),
    lambda: T.shifted_kernel_coefficients("he3", 1.0),
    lambda: T.mlp_noise_terms(128, 64, 0, 100),
    lambda: T.mlp_noise_terms(128, 64, 10, -1),
    lambda: T.mlp_noise_terms(128, 64, 10, 100, tau=-1.0),
    lambda: T.mlp_predicted_accuracy(128, 64, 10, 100, drop=("nonsense",)),
    lambda: T.coverage_vlog(100, 1.5),
    lambda: lib.experiments.memory_capacity.population_recall("cfg"),
    lambda: T.fit_power_law_interval([1, 2], [1, 2]),
])
def test_chapter8_functions_reject_bad_arguments(call):
    with pytest.raises(ValueError):
        call()


def test_mlp_signal_quantiles_mean_one_at_a_width_between_chunks():
    """kappa_xx / K1 is a mean of m i.i.d. sigma(g)^2 / K1, so its mean is 1 at any m, also at m = 300,
    which the sampler draws as 256 + 44 units: the quantiles' mean within 0.05 of 1 (the sample mean's
    sd is sqrt(92 / (m draws)) = 0.009 for He3)."""
    q = T.mlp_signal_quantiles(300, "he3")
    assert abs(q.mean() - 1) < 0.05


def test_mlp_signal_quantiles_true_law():
    # the sampled true law of kappa_xx / K1: mean 1, variance 92 / m (He3) once the upper tail is
    # resolved, and a lower tail far lighter than the Gamma stand-in's at small m
    from statistics import NormalDist
    q = T.mlp_signal_quantiles(512, "he3")
    assert abs(q.mean() - 1) < 0.02 and abs(q.var() / T.mlp_signal_variance(512, "he3") - 1) < 0.1
    q128 = T.mlp_signal_quantiles(128, "he3")
    gamma_1pc = float(T._gamma_nodes(T.mlp_signal_variance(128, "he3"), NormalDist().inv_cdf(0.01)))
    assert np.quantile(q128, 0.01) > 5 * gamma_1pc
    assert (np.diff(q128) >= 0).all() and (q128 > 0).all()
    # the budget with the true law: no less capacity than with the Gamma, no more than with kappa fixed
    c_s = T.mlp_predicted_capacity(64, 256, "he3", kappa_fluctuation="sampled")
    assert T.mlp_predicted_capacity(64, 256, "he3") < c_s <= T.mlp_predicted_capacity(64, 256, "he3", kappa_fluctuation=False)
    with pytest.raises(ValueError):
        T.mlp_predicted_accuracy(64, 64, 256, math.inf, "he3", kappa_fluctuation="gamma")


@pytest.mark.parametrize("activation,trigger_in_value", [("relu", True), ("relu", False)])
def test_readout_moment_by_direct_sampling(activation, trigger_in_value):
    # the readout term of mlp_term_moments sampled from its definition, (u_k . u_y)^2 (nu kappa_xx - b_0)^2 / S^2:
    # u_k, u_y independent N(0, I/d), nu = n / lambda with n ~ Poisson(N / V), kappa_xx a mean of m sigma(g)^2.
    # At V / N = 2 and m = 4 the count factor (1 + V/N = 3), the kernel's spread (1 + v) and -2 K1 b0 each move it
    # by far more than the sampling error; the tolerance is 4 standard errors of the sampled mean. The trigger in
    # the value path changes b_0 = K(beta) (0.30 against 0.16), not the input's own kernel value
    from lib.core.featuremaps import ACTIVATIONS
    V, d, m, N, n = 64, 16, 4, 32, 600_000
    p = T.mlp_signal_parts(activation, 1.0, trigger_in_value)
    g = torch.Generator().manual_seed(20261205)
    uk, uy = (torch.randn(n, d, generator=g, dtype=torch.float64) / math.sqrt(d) for _ in range(2))
    nu = torch.poisson(torch.full((n,), N / V, dtype=torch.float64), generator=g) / (N / V)
    z = torch.randn(n, m, generator=g, dtype=torch.float64)       # w . o_x for a unit input, whatever the trigger
    kappa = ACTIVATIONS[activation][0](z).pow(2).mean(1)          # (the trigger moves b_0 only)
    x = ((uk * uy).sum(1) * (nu * kappa - p["b0"]) / p["S"]) ** 2
    mean, se = float(x.mean()), float(x.std() / math.sqrt(n))
    pred = T.mlp_term_moments(V, d, m, N, activation, trigger_in_value=trigger_in_value)["readout"]
    assert abs(mean - pred) < 4 * se, (mean, pred, se)
    assert se < 0.02 * pred                              # the sampling resolves it to 2 %


def test_centred_relu_coefficients_by_quadrature():
    """The centred ReLU's Hermite coefficients against 200-node Gauss-Hermite quadrature of
    max(x, 0) - 1/sqrt(2 pi), a route that shares nothing with sympy's: a_0 = 0 (centred), and every
    a_k equal to the ReLU's for k >= 1 (a constant moves only a_0)."""
    x, w = np.polynomial.hermite_e.hermegauss(200)
    w = w / w.sum()
    f = np.maximum(x, 0.0) - 1.0 / math.sqrt(2 * math.pi)
    a = [float(v) for v in T.hermite_coefficients("centred_relu", kmax=4)]
    r = [float(v) for v in T.hermite_coefficients("relu", kmax=4)]
    for k in range(5):
        he = np.polynomial.hermite_e.hermeval(x, [0] * k + [1])
        assert a[k] == pytest.approx(float((w * f * he).sum()) / math.sqrt(math.factorial(k)), abs=2e-3)
    assert a[0] == pytest.approx(0.0, abs=1e-12)
    assert a[1:] == pytest.approx(r[1:], abs=1e-12)
    assert r[0] == pytest.approx(1.0 / math.sqrt(2 * math.pi), abs=1e-12)


def test_mlp_rf_common_on_its_fewest_nodes():
    # nodes = 8 (the smallest allowed) already gives the common part to within 3 % of 200 nodes (ReLU, beta 0.3)
    coarse, fine = T.mlp_rf_common("relu", 0.3, nodes=8), T.mlp_rf_common("relu", 0.3, nodes=200)
    assert coarse == pytest.approx(fine, rel=0.03) and coarse != fine


@pytest.mark.parametrize("activation", ["he3", "relu"])
def test_a_trigger_of_scale_zero_in_the_value_path_is_no_trigger(activation):
    # tau = 0 is allowed (the trigger's scale may vanish) and then beta = 0: the same signal as the trigger out
    on, off = T.mlp_signal_parts(activation, 0.0, True), T.mlp_signal_parts(activation, 0.0, False)
    assert on == off and on["beta"] == 0.0
    assert T.mlp_signal_parts(activation, 0.5, True)["beta"] == pytest.approx(0.25 / 1.25)
