"""Paired randomness: one named stream per random object, data nested in N, and the embeddings'
distribution (E|e|^2 = 1, overlaps of variance 1/d)."""
import pytest
import torch

import lib
from lib.core.task import SAMPLE_BLOCK
from conftest import small_cfg

OBJECTS = ("E", "U", "z_trig", "z_eos", "perm", "F")


def same(p1, p2, names):
    return {n: torch.equal(getattr(p1, n), getattr(p2, n)) for n in names}


@pytest.mark.parametrize("embedding", ["gaussian", "sphere", "orthogonal"])
def test_toggling_tied_changes_only_U(embedding):
    base = dict(V=6, d=20, L=4, model="mlp", m=5, embedding=embedding)
    untied, tied = lib.make_problem(small_cfg(**base), 3), lib.make_problem(small_cfg(tied=True, **base), 3)
    assert all(same(untied, tied, ("E", "z_trig", "z_eos", "perm", "F")).values())
    assert torch.equal(tied.U, tied.E) and not torch.equal(untied.U, untied.E)


@pytest.mark.parametrize("change", [dict(trigger_in_value=False), dict(eos_key=True), dict(activation="relu"),
                                    dict(mlp_input="raw"), dict(m=9), dict(dtype="float64")])
def test_switches_leave_every_random_object_identical(change):
    base = dict(V=7, d=9, L=5, model="mlp", m=5, dtype="float64")
    a = lib.make_problem(small_cfg(**base), 1)
    b = lib.make_problem(small_cfg(**{**base, **change}), 1)
    names = ("E", "U", "z_trig", "z_eos", "perm") + (("F",) if "m" not in change else ())
    for n in names:
        assert torch.equal(getattr(a, n).double(), getattr(b, n).double()), n
    ba, bb = lib.sample_batch(a, 300, 2), lib.sample_batch(b, 300, 2)
    assert torch.equal(ba.tokens, bb.tokens) and torch.equal(ba.labels, bb.labels)


def test_tau_scales_only_the_trigger_and_the_model_switch_adds_only_F():
    a = lib.make_problem(small_cfg(V=7, d=9, L=5), 2)
    b = lib.make_problem(small_cfg(V=7, d=9, L=5, tau=3.0, model="mlp", m=4), 2)
    assert all(same(a, b, ("E", "U", "z_eos", "perm")).values())
    assert torch.allclose(b.z_trig, 3.0 * a.z_trig, rtol=1e-15) and a.F is None and b.F is not None


def test_noise_vocabulary_leaves_the_content_embeddings_identical():
    a = lib.make_problem(small_cfg(V=7, d=9, L=5), 4)
    b = lib.make_problem(small_cfg(V=7, d=9, L=5, noise_vocab=3), 4)
    assert torch.equal(a.E, b.E[:7]) and all(same(a, b, ("U", "z_trig", "z_eos", "perm")).values())


@pytest.mark.parametrize("noise", [None, 4])
def test_samples_are_nested_in_N(noise):
    problem = lib.make_problem(small_cfg(V=9, d=4, L=6, noise_vocab=noise), 0)
    big = lib.sample_batch(problem, 2 * SAMPLE_BLOCK + 100, 5)
    for N in (1, 37, SAMPLE_BLOCK, SAMPLE_BLOCK + 1, 2 * SAMPLE_BLOCK + 3):
        small = lib.sample_batch(problem, N, 5)
        for name in ("tokens", "pos", "labels", "informative"):
            assert torch.equal(getattr(small, name), getattr(big, name)[:N]), (N, name)
    # ... and the streams of different seeds and splits differ
    assert not torch.equal(lib.sample_batch(problem, 50, 6).tokens, big.tokens[:50])
    assert not torch.equal(lib.sample_batch(problem, 50, 5, "test").tokens, big.tokens[:50])


def test_nested_data_make_the_training_signal_nested():
    """G1 on N samples is the count-weighted prefix of G1 on more samples (paired, not re-drawn)."""
    problem = lib.make_problem(small_cfg(V=9, d=6, L=4), 0)
    big = lib.sample_batch(problem, 600, 1)
    g_small = lib.three_steps(problem, big.slice(0, 200)).G1
    assert torch.allclose(g_small, lib.three_steps(problem, lib.sample_batch(problem, 200, 1)).G1, rtol=1e-14)


@pytest.mark.parametrize("embedding", ["gaussian", "sphere"])
def test_embedding_distribution(embedding):
    """E|e|^2 = 1 and <e_i, e_j> has mean 0 and variance 1/d (i != j), for E, U and the trigger."""
    V, d = 3000, 32
    p = lib.make_problem(lib.TaskConfig(V=V, d=d, L=2, embedding=embedding, dtype="float64", device="cpu"), 0)
    for X in (p.E, p.U):
        sq = (X * X).sum(1)
        assert abs(float(sq.mean()) - 1) < 0.02      # std of the mean: sqrt(2/d/V) ~ 0.005
        if embedding == "sphere":
            assert float((sq - 1).abs().max()) < 1e-12
        G = X[:1000] @ X[1000:2000].T                 # 10^6 overlaps of independent vectors
        assert abs(float(G.mean())) < 0.002
        assert float(G.var()) == pytest.approx(1 / d, rel=0.03)
    zs = torch.stack([lib.make_problem(lib.TaskConfig(V=2, d=d, L=2, embedding=embedding, dtype="float64",
                                                      device="cpu"), s).z_trig for s in range(400)])
    assert float((zs * zs).sum(1).mean()) == pytest.approx(1.0, abs=0.05)


def test_orthogonal_embeddings_are_orthonormal():
    cfg = lib.TaskConfig(V=5, d=16, L=2, embedding="orthogonal", noise_vocab=2, dtype="float64", device="cpu")
    p = lib.make_problem(cfg, 0)
    X = torch.cat([p.E, p.U, p.z_trig[None], p.z_eos[None]])
    assert float((X @ X.T - torch.eye(len(X), dtype=torch.float64)).abs().max()) < 1e-12
