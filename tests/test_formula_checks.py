"""Independent checks of formulas and the smallest arguments they accept, added where the mutation
check (`scripts/mutation_check.py --group theory`) found a change the suite did not notice. Each test
computes its reference another way (a distribution's known moments, a geometric midpoint, a limit)."""
import math

import numpy as np
import pytest
import scipy.stats
import torch

import lib
from lib import theory
from lib.analysis import attention_curve, k_noise, step2
from lib.core import grid


@pytest.mark.parametrize("d", [1, 2, 3, 8, 50])
def test_inner_product_fourth_moments_from_known_laws(d):
    """Uniform unit vectors: (x . y)^2 ~ Beta(1/2, (d - 1)/2), so E (x . y)^4 is that Beta's second moment.
    Gaussian N(0, I/d): given b, a . b ~ N(0, |b|^2 / d), so E (a . b)^4 = 3 E|b|^4 / d^2 with d |b|^2 ~ chi^2_d."""
    sphere = theory.inner_product_moments(d, "sphere")
    if d > 1:
        assert abs(sphere["m4"] - scipy.stats.beta(0.5, (d - 1) / 2).moment(2)) < 1e-12
    else:
        assert sphere["m4"] == 1.0                                         # d = 1: x . y = +-1
    gauss = theory.inner_product_moments(d, "gaussian")
    assert abs(gauss["m4"] - 3 * scipy.stats.chi2(d).moment(2) / d ** 2 / d ** 2) < 1e-12 * gauss["m4"]
    assert sphere["var"] == gauss["var"] == 1 / d


def test_attention_curve_crossing_is_the_geometric_interpolation():
    """Halfway in accuracy between N = 100 and N = 400 is N = 200 on the log scale; a threshold at or
    beyond the ends gives the ends; the requirement reads its N the same way."""
    mean, Ns = np.array([0.5, 1.0]), [100, 400]
    assert abs(grid.between(Ns, mean, 1, 0.75, log_x=True) - 200) < 1e-9
    assert abs(grid.between(Ns, mean, 1, 1.0, log_x=True) - 400) < 1e-9
    assert abs(grid.between(Ns, mean, 1, 0.5, log_x=True) - 100) < 1e-9
    assert abs(grid.between(Ns, mean, 1, 1.5, log_x=True) - 400) < 1e-9        # clamped to the interval
    assert grid.between(Ns, mean, 0, 0.75, log_x=True) == 100
    acc = np.array([[0.5, 0.95, 1.0], [0.5, 0.85, 1.0]])                       # mean 0.5, 0.9, 1.0
    req = attention_curve.requirement(acc, [100, 400, 1600], 0.95)
    assert abs(req["nstar"] - 800) < 1e-9                                       # halfway from 0.9 to 1 in log N


def test_smallest_arguments_are_accepted():
    """The least value each guard admits runs (the guards' bounds are part of the contract)."""
    assert 0 < step2.sampled_focus(2.0, 2, 1, 1, torch.Generator().manual_seed(0)) < 1
    assert theory.mlp_predicted_capacity(8, 16, v_max=2) in (0, 2)
    assert theory.mlp_predicted_capacity(2, 1, v_max=2) in (0, 2)             # d >= 2, as its accuracy needs
    with pytest.raises(ValueError, match="d must be an integer >= 2"):
        theory.mlp_predicted_capacity(1, 1, v_max=2)
    with pytest.raises(ValueError, match="v_max"):
        theory.mlp_predicted_capacity(8, 16, v_max=1)
    with pytest.raises(ValueError, match="L"):
        step2.sampled_focus(2.0, 1, 1, 1, torch.Generator().manual_seed(0))


@pytest.mark.slow
def test_k_noise_batch_check_takes_two_batches():
    """Two batches are the fewest that give a spread: accepted, one measurement per batch; one is refused."""
    p = lib.make_problem(lib.TaskConfig(V=16, d=16, L=4), 0)
    mo = k_noise.k_noise_moments(p, samples=2000)
    r = k_noise.batch_check(p, mo, 64, batches=2)
    assert r["measured"].shape == (2,) and math.isfinite(r["pred"]) and r["pred"] > 0
    with pytest.raises(ValueError, match="batches"):
        k_noise.batch_check(p, mo, 64, batches=1)
