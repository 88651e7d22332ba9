"""The generic count-route step (lib.counts.gradients) equals the direct closed forms and autograd
in float64 at any (W_V, W_KQ), for both models and both MLP input normalisations; full-batch GD
on it equals the autograd trainer step by step."""
import itertools

import pytest
import torch

import lib
from lib.trainer import TrainConfig, gd_counts, train_transformer
from conftest import small_cfg, rel, random_params


CASES = list(itertools.product(["attn", "mlp"], ["unit", "raw"], [True, False], [False, True], [None, 3]))
CASES = [c for c in CASES if c[0] == "mlp" or c[1] == "unit"]


@pytest.mark.parametrize("model,mlp_input,tiv,eos,noise", CASES)
def test_count_gradients_equal_direct_and_autograd(model, mlp_input, tiv, eos, noise):
    cfg = small_cfg(V=9, d=6, L=5, model=model, mlp_input=mlp_input, trigger_in_value=tiv, eos_key=eos,
                    noise_vocab=noise)
    problem = lib.make_problem(cfg, 3)
    batch = lib.sample_batch(problem, 57, 4)
    params = random_params(cfg, 5, 0.7)
    counts = lib.counts.gradients(problem, params, batch)
    direct = lib.gradients(problem, params, batch)
    auto = lib.autograd_gradients(problem, params, batch)
    for g in (direct, auto):
        assert rel(counts.W_V, g.W_V) < 1e-10 and rel(counts.W_KQ, g.W_KQ) < 1e-10
        assert counts.loss == pytest.approx(g.loss, rel=1e-12)
    # W_KQ enters only through W_KQ q: its gradient is rank one along q
    q = problem.z_eos
    assert rel(counts.W_KQ, torch.outer(counts.W_KQ @ q / q.dot(q), q)) < 1e-12


@pytest.mark.parametrize("activation", ["he2", "he3", "he4", "relu", "centred_relu"])
@pytest.mark.parametrize("mlp_input", ["unit", "raw"])
def test_mlp_feature_map_vjp_equals_autograd(activation, mlp_input):
    cfg = small_cfg(V=5, d=7, L=3, model="mlp", m=11, activation=activation, mlp_input=mlp_input)
    problem = lib.make_problem(cfg, 1)
    g = torch.Generator().manual_seed(2)
    o = (3.0 * torch.randn(13, 7, generator=g, dtype=torch.float64)).requires_grad_(True)
    r = torch.randn(13, 11, generator=g, dtype=torch.float64)
    (lib.features(problem, o) * r).sum().backward()
    assert rel(lib.models.feature_jacobian_T(problem, o.detach(), r), o.grad) < 1e-12


def test_unit_input_makes_mlp_features_scale_free():
    """mlp_input="unit": phi(s o) = phi(o) for every s > 0; "raw" changes with the scale."""
    for mlp_input, same in (("unit", True), ("raw", False)):
        cfg = small_cfg(V=5, d=7, L=3, model="mlp", m=11, mlp_input=mlp_input)
        problem = lib.make_problem(cfg, 0)
        o = torch.randn(4, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        assert torch.allclose(lib.features(problem, 10 * o), lib.features(problem, o), atol=1e-12) == same


def test_gd_on_the_count_route_equals_the_autograd_trainer():
    """20 full-batch GD steps in float64: count-route closed forms vs autograd, relative 1e-10."""
    for model in ("attn", "mlp"):
        cfg = small_cfg(V=9, d=6, L=4, model=model, m=8 if model == "mlp" else None)
        problem = lib.make_problem(cfg, 7)
        batch = lib.sample_batch(problem, 150, 7)
        init = random_params(cfg, 8, 0.3)
        a, hist_a = gd_counts(problem, batch, steps=20, lr=0.5, init=init)
        b, hist_b = train_transformer(problem, batch, TrainConfig(steps=20, lr=0.5), init=init)
        assert rel(a.W_V, b.W_V) < 1e-10 and rel(a.W_KQ, b.W_KQ) < 1e-10
        assert hist_a.loss == pytest.approx(hist_b.loss, rel=1e-10)
        assert hist_a.acc == hist_b.acc
        assert hist_a.loss[-1] < hist_a.loss[0]                   # it is training


def test_limit_generic_schedule_equals_the_count_table_fast_path():
    """The attention-only limit mode has a dedicated count-table path; the generic step gives the same."""
    import lib.schedule as schedule
    for tiv, eos, noise in itertools.product([True, False], [False, True], [None, 3]):
        cfg = small_cfg(V=11, d=7, L=6, trigger_in_value=tiv, eos_key=eos, noise_vocab=noise)
        problem = lib.make_problem(cfg, 2)
        batch = lib.sample_batch(problem, 400, 2)
        fast = lib.three_steps(problem, batch)
        generic = schedule._limit(problem, batch, lib.counts.count_gradients, lib.StepSizes())
        for x, y in [(fast.G1, generic.G1), (fast.k, generic.k), (fast.G3, generic.G3)]:
            assert rel(x, y) < 1e-10
