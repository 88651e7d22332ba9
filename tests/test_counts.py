"""The count-table route equals the direct route (same V1, W1, V2) in float64."""
import itertools

import pytest
import torch

import lib
from conftest import small_cfg, rel

CASES = list(itertools.product(["attn", "mlp"], [True, False], [False, True], [None, 3], ["limit", "finite"]))


@pytest.mark.parametrize("model,tiv,eos,noise,mode", CASES)
def test_counts_equal_direct(model, tiv, eos, noise, mode):
    cfg = small_cfg(V=9, d=6, L=5, model=model, trigger_in_value=tiv, eos_key=eos, noise_vocab=noise)
    problem = lib.make_problem(cfg, 11)
    batch = lib.sample_batch(problem, 300, 12)
    a = lib.three_steps(problem, batch, mode, route="direct")
    b = lib.three_steps(problem, batch, mode, route="counts")
    for x, y in [(a.V1, b.V1), (a.W1, b.W1), (a.V2, b.V2), (a.k, b.k)]:
        assert rel(y, x) < 1e-10
    if mode == "finite":
        assert a.gamma_W == pytest.approx(b.gamma_W, rel=1e-10)


@pytest.mark.parametrize("V,d,L", [(2, 1, 1), (2, 3, 1), (3, 2, 2), (40, 8, 12)])
def test_counts_equal_direct_edge_sizes(V, d, L):
    for model in ["attn", "mlp"]:
        cfg = small_cfg(V=V, d=d, L=L, model=model, m=1 if model == "mlp" else None)
        problem = lib.make_problem(cfg, V)
        batch = lib.sample_batch(problem, 64, L)
        for mode in ["limit", "finite"]:
            a = lib.three_steps(problem, batch, mode, route="direct")
            b = lib.three_steps(problem, batch, mode, route="counts")
            for x, y in [(a.V1, b.V1), (a.V2, b.V2)]:
                assert rel(y, x) < 1e-10
            assert float((a.W1 - b.W1).abs().max()) <= 1e-10 * max(1.0, float(a.W1.abs().max()))


def test_counts_route_chunks_agree_with_one_chunk(monkeypatch):
    """Chunked accumulation gives the same numbers as a single chunk."""
    import lib.fast.counts as counts
    cfg = small_cfg(V=11, d=7, L=6)
    problem = lib.make_problem(cfg, 1)
    batch = lib.sample_batch(problem, 500, 1)
    one = lib.three_steps(problem, batch, "finite")
    monkeypatch.setattr(lib.fast.tokens, "CHUNK_ELEMENTS", 64)       # chunks of a few samples
    many = lib.three_steps(problem, batch, "finite")
    assert rel(many.V2, one.V2) < 1e-12 and rel(many.W1, one.W1) < 1e-12
    lim1 = lib.three_steps(problem, batch, "limit")
    assert rel(lim1.V2, lib.three_steps(problem, batch, "limit", route="direct").V2) < 1e-12


def test_evaluate_matches_direct_forward():
    cfg = small_cfg(V=12, d=6, L=5, model="mlp", eos_key=True, trigger_in_value=False)
    problem = lib.make_problem(cfg, 4)
    train = lib.sample_batch(problem, 200, 4)
    test = lib.sample_batch(problem, 300, 4, "test")
    for mode in ["finite", "limit"]:
        params = lib.three_steps(problem, train, mode).params
        direct = lib.forward(problem, params, test).logits.argmax(1)
        assert torch.equal(lib.predict(problem, params, test), direct)
