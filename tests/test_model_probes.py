"""Chapter 3's probes of the models (lib.analysis.model_probes), the closed-form gradients' distance
from autograd on one configuration (lib.core.gradients.autograd_discrepancy), and the c_1 figure."""

import numpy as np
import pytest

import lib
from lib.analysis.model_probes import attention_gradient_sweep, linear_coefficient
from lib.core.gradients import autograd_discrepancy


def test_autograd_discrepancy_is_rounding_and_refuses_bad_arguments():
    for model, m in (("attn", None), ("mlp", 5)):
        cfg = lib.TaskConfig(V=6, d=4, L=3, model=model, m=m, mlp_input="raw", dtype="float64", device="cpu")
        err_V, err_W = autograd_discrepancy(cfg, seed=2)
        assert 0 <= err_V < 1e-10 and 0 <= err_W < 1e-10
    one = lib.TaskConfig(V=3, d=2, L=1, eos_key=False, dtype="float64", device="cpu")   # one key: no attention gradient
    assert autograd_discrepancy(one, seed=0)[1] == 0.0
    with pytest.raises(ValueError, match="cfg"):
        autograd_discrepancy(lib.TaskConfig(V=6, d=4, L=3, dtype="float32", device="cpu"), seed=0)
    with pytest.raises(ValueError, match="N"):
        autograd_discrepancy(one, seed=0, N=0)


def _c1_from_the_definition(mlp_input, attention, V, d, L, m, N, seed=0):
    """(s, c_1, s.e.) rebuilt in NumPy from the problem's raw tensors: o = e_{x_l} + z_trig (focused) or
    the mean over the L positions of e_{x_t} + 1[t = l] z_trig (uniform; the trigger rides in the value
    path, no EOS key), pre-activations p = F o / s_in (s_in = |o| for the unit input, 1 for the raw
    one), sigma = He_3 / sqrt 6, and c_1 = mean over the m units of sigma(p) p / s with s = |o| (raw)
    or 1 (unit); its standard error is the units' sample SD / sqrt(m)."""
    cfg = lib.TaskConfig(V=V, d=d, L=L, model="mlp", m=m, mlp_input=mlp_input, dtype="float64", device="cpu")
    prob = lib.make_problem(cfg, seed)
    b = lib.sample_batch(prob, N, seed)
    E, z, F = prob.E.numpy(), prob.z_trig.numpy(), prob.F.numpy()
    tokens, pos = b.tokens.numpy(), b.pos.numpy()
    vals = E[tokens] + (np.arange(L)[None, :] == pos[:, None])[:, :, None] * z       # (N, L, d)
    o = vals.mean(1) if attention == "uniform" else vals[np.arange(N), pos]
    norm = np.linalg.norm(o, axis=1)
    p = o @ F.T / (norm[:, None] if mlp_input == "unit" else 1.0)
    s = norm if mlp_input == "raw" else np.ones(N)
    prod = (p ** 3 - 3 * p) / 6 ** 0.5 * p / s[:, None]
    return s, prod.mean(1), prod.std(1, ddof=1) / m ** 0.5


@pytest.mark.parametrize("mlp_input,attention", [("unit", "uniform"), ("unit", "focused"), ("raw", "focused"),
                                                 ("raw", "uniform")])
def test_linear_coefficient_is_its_definition_and_follows_the_hermite_curve(mlp_input, attention):
    """Two checks per input map and attention (V = 16, d = 8, L = 4, m = 2048, 16 samples; ~0.1 s each).
    (1) Against the definition rebuilt in NumPy: float64 sums over m = 2048 units agree to ~1e-13
    relative, so rtol 1e-9. The per-sample estimates are nonzero draws even where c_1 = 0 (the unit
    input), so a sign flip, a factor 2, a missing sqrt(m) or a wrong scale s fails here.
    (2) Against E_{g ~ N(0, s^2)}[He_3(g) g] / (sqrt(6) s) = 3 s (s^2 - 1) / sqrt 6 (0 for the unit
    input, s = 1): each sample's z = (c_1 - curve) / s.e. is about N(0, 1), so 16 z^2 is about chi^2
    with up to 16 degrees of freedom (fewer when samples repeat a token or through the shared units F):
    RMS(z) < 2.5 fails with probability P(chi^2_k > 6.25 k) < 2e-6 for k >= 6 (4e-8 for k >= 8).
    For the raw input the curve is far from 0 (RMS of curve / s.e. 9.4 focused, 38 uniform): a sign
    flip gives RMS(z) ~ 18 and ~ 75, a factor 2 ~ 10 and ~ 38."""
    s, c1, se = linear_coefficient(mlp_input, attention, V=16, d=8, L=4, m=2048, N=16)
    s_ref, c1_ref, se_ref = _c1_from_the_definition(mlp_input, attention, V=16, d=8, L=4, m=2048, N=16)
    np.testing.assert_allclose(s, s_ref, rtol=1e-9)
    np.testing.assert_allclose(c1, c1_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(se, se_ref, rtol=1e-9)
    curve = 3 * s_ref * (s_ref ** 2 - 1) / 6 ** 0.5
    assert np.sqrt(np.mean(((c1 - curve) / se) ** 2)) < 2.5
    if mlp_input == "raw":      # the curve is away from 0: RMS(curve / s.e.) > 5 makes (2) catch a sign flip
        assert np.sqrt(np.mean((curve / se) ** 2)) > 5           # (RMS z ~ 10) and a factor 2 (RMS z ~ 5)


def test_linear_coefficient_refuses_bad_arguments():
    with pytest.raises(ValueError, match="attention"):
        linear_coefficient("raw", "peaked")
    with pytest.raises(ValueError, match="mlp_input"):
        linear_coefficient("cube", "uniform")
    with pytest.raises(ValueError, match="N"):
        linear_coefficient("raw", "uniform", N=0)


def test_attention_gradient_sweep_is_proportional_to_eta_while_the_softmax_is_uniform():
    etas = np.geomspace(1e-5, 1e-3, 3)
    g, p_max, drop, direction = attention_gradient_sweep("mlp", etas, 2, V=8, d=6, L=4, m=16, N=64)
    assert g.shape == p_max.shape == (3,) and drop.shape == direction.shape == (2,)
    assert (g > 0).all() and g.max() / g.min() - 1 < 1e-2                # |grad| / eta constant
    assert np.allclose(p_max, 1 / 8, atol=1e-3)
    assert np.allclose(drop, 1, atol=1e-2) and np.allclose(direction, 1, atol=1e-4)
    for args, name in ((("rnn", etas, 2), "model"), (("attn", etas, 0), "problems"),
                       (("attn", [1e-3], 2), "etas"), (("attn", [-1.0, 1.0], 2), "etas")):
        with pytest.raises(ValueError, match=name):
            attention_gradient_sweep(*args)


def test_attention_gradient_sweep_refuses_a_zero_step():
    """The step sizes must be positive: a zero among them is refused, naming etas."""
    with pytest.raises(ValueError, match="etas"):
        attention_gradient_sweep("attn", [0.0, 1e-3], 2)


def test_linear_coefficient_figure_draws_the_curve_and_every_series():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from lib.plotting import linear_coefficient_figure
    meas = {("raw", "uniform"): (np.array([0.4, 0.5]), np.array([-0.4, -0.5]), np.array([0.01, 0.01])),
            ("unit", "focused"): (np.ones(2), np.zeros(2), np.array([0.01, 0.01]))}
    linear_coefficient_figure(meas, lambda s: 3 * s * (s ** 2 - 1) / 6 ** 0.5)
    ax = plt.gcf().axes[0]
    assert len(ax.get_lines()) == 4                                    # the curve, two series, the zero line
    assert list(ax.get_lines()[1].get_ydata()) == [-0.4, -0.5]
    plt.close("all")
