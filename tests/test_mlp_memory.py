"""lib.analysis.mlp_memory (chapter 8's per-problem measurements) and lib.plotting.measured_with_interval."""
import math

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

import lib
from lib import theory
from lib.analysis import mlp_memory


def _cfg(**kw):
    base = dict(V=32, d=16, L=4, model="mlp", m=256, activation="he3", trigger_in_value=False, dtype="float64", device="cpu")
    base.update(kw)
    return lib.TaskConfig(**base)


def test_rf_kernel_gap_is_the_rms_of_kappa_minus_k_and_shrinks_with_width():
    cfg = _cfg()
    pr = lib.make_problem(cfg, seed=1)
    phi = lib.features(pr, pr.E[:32])
    E_hat = pr.E[:32] / pr.E[:32].norm(dim=1, keepdim=True)
    K = torch.as_tensor(theory.mlp_kernel("he3", (E_hat @ E_hat.T).clamp(-1, 1).numpy()))
    off = ~torch.eye(32, dtype=torch.bool)
    assert mlp_memory.rf_kernel_gap(cfg, 1) == float((phi @ phi.T - K)[off].pow(2).mean().sqrt())
    wide = np.mean([mlp_memory.rf_kernel_gap(_cfg(m=4096), s) for s in range(3)])
    narrow = np.mean([mlp_memory.rf_kernel_gap(_cfg(m=64), s) for s in range(3)])
    assert wide < narrow / 4                                 # 1/sqrt(m): a factor 8 expected


def test_capacity_brackets_the_switch_of_the_recall():
    cfg = _cfg(m=512)
    v_star = mlp_memory.capacity(cfg, 0, start=32, threshold=0.9, resolution=0.25)
    assert lib.experiments.memory_capacity.population_recall(cfg.with_(V=int(v_star / 1.3)), 0) >= 0.9
    assert lib.experiments.memory_capacity.population_recall(cfg.with_(V=int(math.ceil(v_star * 1.3))), 0) < 0.9


@pytest.mark.parametrize("call, name", [
    (lambda: mlp_memory.rf_kernel_gap(_cfg(model="attn"), 0), "cfg"),
    (lambda: mlp_memory.rf_kernel_gap(_cfg(), -1), "seed"),
    (lambda: mlp_memory.capacity(_cfg(), 0, start=0, threshold=0.9, resolution=0.25), "start"),
    (lambda: mlp_memory.capacity(_cfg(), 0, start=8, threshold=1.5, resolution=0.25), "threshold"),
    (lambda: mlp_memory.capacity(_cfg(), 0, start=8, threshold=0.9, resolution=0), "resolution"),
])
def test_bad_arguments_name_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_measured_with_interval_draws_mean_interval_and_prediction():
    import matplotlib.pyplot as plt

    x = [1, 2, 3]
    per = np.array([[0.1, 0.5, 0.9], [0.3, 0.7, 0.9], [0.2, 0.6, 1.0]])
    _, ax = plt.subplots()
    mean, half = lib.plotting.measured_with_interval(ax, x, per, [0.2, 0.6, 0.9], "acc", "measured", "predicted", "--")
    m_, h_ = theory.t_interval(per)
    assert np.array_equal(mean, m_) and np.array_equal(half, h_)
    lines = ax.get_lines()
    assert [l.get_label() for l in lines[:2]] == ["measured", "predicted"] and lines[1].get_linestyle() == "--"
    assert lines[1].get_color() == lib.plotting.COLORS["acc"]          # the prediction in the measurements' colour
    _, ax = plt.subplots()
    lib.plotting.measured_with_interval(ax, x, per, [0.2, 0.6, 0.9], "acc", "m", "p", theory_color="theory")
    assert ax.get_lines()[1].get_color() == lib.plotting.COLORS["theory"]
    plt.close("all")
    with pytest.raises(ValueError, match="problems"):
        lib.plotting.measured_with_interval(ax, x, per[:1], [0, 0, 0], "acc", "m", "p")

