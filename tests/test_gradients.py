"""Closed-form gradients (lib.gradients) equal torch autograd in float64."""
import itertools

import pytest
import torch

import lib
from conftest import small_cfg, rel, random_params


def autograd(problem, params, batch):
    g = lib.autograd_gradients(problem, params, batch)
    return g.W_V, g.W_KQ


SIZES = [(2, 1, 1, 1), (2, 3, 1, 2), (3, 1, 4, 1), (7, 5, 4, 6), (10, 3, 6, 9), (16, 8, 5, 1)]
SWITCHES = list(itertools.product(["attn", "mlp"], [True, False], [False, True]))


@pytest.mark.parametrize("V,d,L,m", SIZES)
@pytest.mark.parametrize("model,trig_in_value,eos_key", SWITCHES)
def test_closed_form_equals_autograd(V, d, L, m, model, trig_in_value, eos_key):
    cfg = small_cfg(V=V, d=d, L=L, model=model, m=m if model == "mlp" else None,
                    trigger_in_value=trig_in_value, eos_key=eos_key)
    problem = lib.make_problem(cfg, seed=V + d + L)
    batch = lib.sample_batch(problem, 37, seed=1)
    params = random_params(cfg, seed=V * d)
    closed = lib.gradients(problem, params, batch)
    gV, gW = autograd(problem, params, batch)
    assert rel(closed.W_V, gV) < 1e-8
    if float(gW.norm()) > 1e-14:       # L = 1 without EOS: attention is constant, gradient 0
        assert rel(closed.W_KQ, gW) < 1e-8
    else:
        assert float(closed.W_KQ.norm()) < 1e-12


@pytest.mark.parametrize("activation", ["he2", "he3", "he4", "relu", "centred_relu"])
@pytest.mark.parametrize("embedding,tied,noise_vocab", [("gaussian", False, None), ("sphere", True, 4),
                                                         ("orthogonal", False, None)])
def test_closed_form_all_activations_and_embeddings(activation, embedding, tied, noise_vocab):
    cfg = small_cfg(V=5, d=16, L=3, model="mlp", m=7, activation=activation, embedding=embedding,
                    tied=tied, noise_vocab=noise_vocab, tau=0.7)
    problem = lib.make_problem(cfg, 3)
    batch = lib.sample_batch(problem, 29, 4)
    params = random_params(cfg, 5)
    closed = lib.gradients(problem, params, batch)
    gV, gW = autograd(problem, params, batch)
    assert rel(closed.W_V, gV) < 1e-8 and rel(closed.W_KQ, gW) < 1e-8


@pytest.mark.parametrize("model", ["attn", "mlp"])
def test_attention_gradient_vanishes_at_zero_value_matrix(model):
    cfg = small_cfg(model=model)
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 50, 0)
    p = random_params(cfg, 1)
    g = lib.gradients(problem, lib.Params(torch.zeros_like(p.W_V), p.W_KQ), batch)
    assert float(g.W_KQ.abs().max()) == 0.0
    assert float(g.W_V.norm()) > 0.0
    # and at W_V = 0 the output error is u_bar - u_y exactly
    gy = lib.gradients(problem, lib.zero_params(cfg), batch)
    obar = lib.keys_values(problem, batch)[1].mean(1)
    expected = (problem.u_bar - problem.U[batch.labels]).T @ lib.features(problem, obar) / batch.N
    assert rel(gy.W_V, expected) < 1e-12


def test_gradient_moves_W_KQ_only_along_k_qT():
    cfg = small_cfg(V=9, d=6, L=5)
    problem = lib.make_problem(cfg, 2)
    batch = lib.sample_batch(problem, 40, 2)
    gW = lib.gradients(problem, random_params(cfg, 3), batch).W_KQ
    s = torch.linalg.svdvals(gW)
    assert float(s[1] / s[0]) < 1e-12          # rank one
    q = problem.z_eos
    assert rel(gW, torch.outer(gW @ q / q.dot(q), q)) < 1e-12   # gW = k q^T
