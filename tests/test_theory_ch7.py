"""Chapter 7's capacity law and fits in lib.theory: the attention requirement solves the corrected
signal-to-noise condition, the law is the larger requirement and infinite past the memory wall, the
t quantiles are right, and the per-problem power-law interval has its nominal coverage."""
import math

import numpy as np
import pytest
import torch

from lib.theory import (attention_nstar, attention_snr, capacity_law, critical_snr, fit_power_law_ci,
                        imbalance_noise, refined_memory_nstar, t_quantile, trigger_self_bias)


@pytest.mark.parametrize("V,d,L,c", [(32, 64, 128, 1.0), (64, 256, 64, 0.2), (128, 96, 32, 3.0)])
def test_attention_nstar_solves_the_corrected_snr_condition(V, d, L, c):
    N = attention_nstar(V, d, L, c_noise=c)
    beta = trigger_self_bias(V, d, L)
    r = 1 / math.sqrt(1 / d + c * imbalance_noise(V, d, L) / (N + beta) ** 2)
    assert N > 1
    assert r == pytest.approx(critical_snr(L), rel=1e-9)
    if c == 1.0:                                   # chapter 5's ratio itself
        assert float(attention_snr(N, V, d, L)) == pytest.approx(critical_snr(L), rel=1e-9)


def test_attention_nstar_scales_with_the_square_root_of_the_noise_constant():
    V, d, L = 32, 128, 256
    beta = trigger_self_bias(V, d, L)
    a, b = attention_nstar(V, d, L, c_noise=1.0), attention_nstar(V, d, L, c_noise=0.25)
    assert (b + beta) == pytest.approx(0.5 * (a + beta), rel=1e-12)


def test_attention_fails_at_any_n_below_the_population_wall():
    L = 64
    d = int(critical_snr(L) ** 2)                 # d <= r*(L)^2
    assert math.isinf(attention_nstar(32, d, L))
    assert math.isfinite(attention_nstar(32, d + 8, L))


def test_capacity_law_is_the_larger_requirement_and_names_it():
    att = capacity_law(128, 128, 256, 0.0)        # long sequences: attention binds
    assert att["law"] == max(att["mem"], att["att"]) and att["bottleneck"] == "attention"
    mem = capacity_law(64, 128, 16, 0.0)          # short sequences: the memory binds
    assert mem["law"] == mem["mem"] == refined_memory_nstar(64, 128, 0.0) and mem["bottleneck"] == "memory"


def test_capacity_law_is_infinite_past_the_memory_wall_and_with_a_low_plateau():
    wall = capacity_law(128, 32, 16, 0.0)         # 128 facts do not fit a one-step memory in d = 32
    assert math.isinf(wall["law"]) and wall["bottleneck"] == "none"
    assert math.isinf(capacity_law(64, 64, 16, s2=1.0)["law"])     # trigger in value path: plateau < 0.99
    assert math.isfinite(capacity_law(64, 128, 16, s2=1.0)["law"])


def test_t_quantile_matches_tabulated_values():
    for dof, q in ((1, 12.7062), (3, 3.1824), (7, 2.3646), (9, 2.2622), (30, 2.0423)):
        assert t_quantile(0.975, dof) == pytest.approx(q, abs=2e-4)
    assert t_quantile(0.5, 5) == pytest.approx(0.0, abs=1e-9)


def test_power_law_fit_is_exact_on_exact_power_laws():
    x = np.array([64.0, 128.0, 256.0])
    Y = np.array([c * x ** 1.7 for c in (1.0, 2.0, 5.0)])
    fit = fit_power_law_ci(x, Y)
    assert fit["slope"] == pytest.approx(1.7, abs=1e-12)
    assert fit["half"] == pytest.approx(0.0, abs=1e-9)
    assert fit["c"] == pytest.approx(10 ** (1 / 3), rel=1e-9)     # geometric mean of the prefactors


def test_power_law_interval_has_its_nominal_coverage():
    g = torch.Generator().manual_seed(7)
    x = np.array([16.0, 32.0, 64.0, 128.0])
    hits, trials = 0, 600
    for _ in range(trials):
        slopes = 2.0 + 0.3 * torch.randn(10, 1, generator=g, dtype=torch.float64).numpy()
        noise = 0.2 * torch.randn(10, 4, generator=g, dtype=torch.float64).numpy()
        Y = np.exp(slopes * np.log(x) + noise)
        fit = fit_power_law_ci(x, Y)
        assert fit["slope"] == pytest.approx(fit["slopes"].mean(), abs=1e-12)
        hits += abs(fit["slope"] - 2.0) <= fit["half"]
    assert 0.92 < hits / trials < 0.98


@pytest.mark.parametrize("call,name", [
    (lambda: attention_nstar(1, 64, 16), "V"),
    (lambda: attention_nstar(32, 0, 16), "d"),
    (lambda: attention_nstar(32, 64, 1), "L"),
    (lambda: attention_nstar(32, 64, 16, c_noise=0.0), "c_noise"),
    (lambda: capacity_law(32, 64, 16, s2=-1.0), "s2"),
    (lambda: t_quantile(0.2, 5), "p"),
    (lambda: t_quantile(0.975, 0), "dof"),
    (lambda: fit_power_law_ci([1, 2], [[1, 2]]), "2 problems"),
    (lambda: fit_power_law_ci([1, 2], [[1, 2], [1, float("nan")]]), "positive and finite"),
    (lambda: fit_power_law_ci([1, 2], [[1, 2], [2, 3]], level=1.5), "level"),
])
def test_arguments_are_validated_with_a_named_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_t_quantile_matches_closed_forms():
    for p in (0.9, 0.975, 0.995):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-6)   # Cauchy
        a = 2 * p - 1
        assert t_quantile(p, 2) == pytest.approx(a * math.sqrt(2 / (1 - a * a)), rel=1e-6)
    assert t_quantile(0.975, 10 ** 5) == pytest.approx(1.959964, abs=1e-4)                # Gaussian limit
    with pytest.raises(ValueError, match="dof"):
        t_quantile(0.975, 0)
    with pytest.raises(ValueError, match="p must"):
        t_quantile(0.4, 3)


def test_t_interval_against_a_direct_computation():
    from lib.theory import geometric_interval, t_interval, t_quantile
    rng = np.random.default_rng(0)
    X = rng.normal(size=(7, 3))
    m, h = t_interval(X)                                      # over the 7 problems (axis 0)
    assert np.allclose(m, X.mean(0)) and np.allclose(h, 2.446912 * X.std(0, ddof=1) / 7 ** 0.5, rtol=1e-5)
    m1, h1 = t_interval(X.T, axis=1)
    assert np.allclose(m1, m) and np.allclose(h1, h)
    assert np.isclose(t_interval(X[:, 0], level=0.9)[1], t_quantile(0.95, 6) * X[:, 0].std(ddof=1) / 7 ** 0.5)
    v = np.exp(X[:, 0])
    g, lo, hi = geometric_interval(v)
    assert np.isclose(g, np.exp(X[:, 0].mean())) and np.isclose(np.log(hi / g), h[0]) and np.isclose(np.log(g / lo), h[0])
    with pytest.raises(ValueError, match="at least 2 problems"):
        t_interval([1.0])
    with pytest.raises(ValueError, match="positive and finite"):
        geometric_interval([1.0, 0.0, 2.0])
    with pytest.raises(ValueError, match="positive and finite"):
        geometric_interval([1.0, np.inf])

