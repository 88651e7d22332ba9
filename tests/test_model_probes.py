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


def test_linear_coefficient_vanishes_for_the_unit_input_and_follows_the_curve_for_the_raw_one():
    s, c1, se = linear_coefficient("unit", "uniform", V=16, d=8, L=4, m=2048, N=16)
    assert s.shape == c1.shape == se.shape == (16,) and (s == 1.0).all()
    assert np.sqrt(np.mean((c1 / se) ** 2)) < 2.5                        # zero up to Monte Carlo noise
    s, c1, se = linear_coefficient("raw", "focused", V=16, d=8, L=4, m=2048, N=16)
    curve = 3 * s * (s ** 2 - 1) / 6 ** 0.5
    assert np.sqrt(np.mean(((c1 - curve) / se) ** 2)) < 2.5
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
