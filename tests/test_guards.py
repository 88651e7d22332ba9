"""Tests that guard what the library claims: an independent forward pass, the activations'
normalisation, float32 vs float64, the N* search, the cache key, the spread over seeds, att_acc
and oracle_acc, and that the count route never allocates an (N, L, d) tensor."""
import itertools
import math

import numpy as np
import pytest
import torch

import lib
from lib.experiments.store import canonical, point_prefix
from lib.core.featuremaps import ACTIVATION_MOMENTS, ACTIVATIONS
from lib.core.search import threshold_search
from conftest import small_cfg


def formula_logits(problem, W_V, W_KQ, batch):
    """The book's formulas (chapter 3), sample by sample in float64 numpy (independent of lib's forward passes)."""
    cfg = problem.cfg
    E, U, z, q = (t.double().numpy() for t in (problem.E, problem.U, problem.z_trig, problem.z_eos))
    W_V, W_KQ = W_V.double().numpy(), W_KQ.double().numpy()
    out = []
    for n in range(batch.N):
        toks, l = batch.tokens[n].tolist(), int(batch.pos[n])
        h = [E[x] + (z if t == l else 0) for t, x in enumerate(toks)]
        v = [E[x] + (z if (t == l and cfg.trigger_in_value) else 0) for t, x in enumerate(toks)]
        if cfg.eos_key:
            h.append(q), v.append(q)
        s = np.array([ht @ W_KQ @ q for ht in h])
        a = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        o = sum(at * vt for at, vt in zip(a, v))
        if cfg.model == "mlp":
            x = o / np.linalg.norm(o) if cfg.mlp_input == "unit" else o
            sigma = ACTIVATIONS[cfg.activation][0]
            o = sigma(torch.from_numpy(problem.F.double().numpy() @ x)).numpy() / math.sqrt(cfg.m)
        out.append(U @ (W_V @ o))
    return np.array(out)


@pytest.mark.parametrize("model,mlp_input,tiv,eos", [("attn", "unit", True, False), ("attn", "unit", False, True),
                                                      ("mlp", "unit", True, True), ("mlp", "raw", False, False)])
def test_both_forward_routes_equal_the_formulas(model, mlp_input, tiv, eos):
    cfg = small_cfg(V=8, d=5, L=4, model=model, mlp_input=mlp_input, trigger_in_value=tiv, eos_key=eos)
    problem = lib.make_problem(cfg, 2)
    batch = lib.sample_batch(problem, 30, 3)
    g = torch.Generator().manual_seed(4)
    W_V = torch.randn(cfg.d, cfg.width, generator=g, dtype=torch.float64)
    W_KQ = torch.randn(cfg.d, cfg.d, generator=g, dtype=torch.float64)
    ref = formula_logits(problem, W_V, W_KQ, batch)
    direct = lib.forward(problem, lib.Params(W_V, W_KQ), batch).logits.numpy()
    tokens = lib.fast.tokens.forward_chunk(problem, W_V, W_KQ @ problem.z_eos, batch).logits.numpy()
    assert np.abs(direct - ref).max() < 1e-12 * max(1, np.abs(ref).max())
    assert np.abs(tokens - ref).max() < 1e-12 * max(1, np.abs(ref).max())


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_gaussian_moments(name):
    """E sigma(g) and E sigma(g)^2 for g ~ N(0, 1) are what the library claims (Gauss-Hermite
    quadrature, exact for the polynomials; a fine grid for the ReLUs)."""
    sigma = ACTIVATIONS[name][0]
    x, w = np.polynomial.hermite_e.hermegauss(60)
    w = w / w.sum()
    if "relu" in name:
        x = np.linspace(-12, 12, 2_000_001)
        w = np.exp(-x * x / 2) / math.sqrt(2 * math.pi) * (x[1] - x[0])
    s = sigma(torch.from_numpy(x)).numpy()
    mean, second = ACTIVATION_MOMENTS[name]
    assert float((w * s).sum()) == pytest.approx(mean, abs=1e-6)
    assert float((w * s * s).sum()) == pytest.approx(second, abs=1e-6)
    if name.startswith("he"):
        assert (mean, second) == (0.0, 1.0)


@pytest.mark.parametrize("model", ["attn", "mlp"])
def test_float32_predicts_like_float64(model):
    preds = []
    for dtype in ("float32", "float64"):
        cfg = lib.TaskConfig(V=32, d=16, L=6, model=model, m=48 if model == "mlp" else None, dtype=dtype, device="cpu")
        problem = lib.make_problem(cfg, 0)
        res = lib.three_steps(problem, lib.sample_batch(problem, 3000, 0), "finite")
        preds.append(lib.predict(problem, res, lib.sample_batch(problem, 4000, 0, "test")))
    assert float((preds[0] == preds[1]).double().mean()) >= 0.995


@pytest.mark.parametrize("true_from,resolution", [(1, 0.05), (2, 0.05), (37, 0.05), (1000, 0.02), (777, 0.3)])
def test_threshold_search_brackets_the_switch(true_from, resolution):
    b = threshold_search(lambda n: n >= true_from, 8, 4096, resolution)
    assert b.first_true >= true_from and (b.last_false is None or b.last_false < true_from)
    assert b.first_true - (b.last_false or 0) <= max(1, resolution * b.first_true)     # the stopping rule
    assert [n for n, ok in b.evaluated if ok] and all(ok == (n >= true_from) for n, ok in b.evaluated)
    falses = [n for n, ok in b.evaluated if not ok]                      # the bracket is what was seen
    assert b.last_false == (max(falses) if falses else None) and b.first_true == min(n for n, ok in b.evaluated if ok)
    assert threshold_search(lambda n: False, 8, 100, 0.05).first_true is None


def test_nstar_passes_and_a_resolution_below_fails():
    cfg = lib.TaskConfig(V=16, d=32, L=4, device="cpu")
    res = lib.experiments.capacity.nstar(cfg, 0.9, seeds=2, n_test=1024, resolution=0.1)
    assert res.nstar is not None
    at = {p.N: p.acc for p in res.points}
    assert at[res.nstar] >= 0.9
    # the search stops only once a failure lies within the resolution below N*
    fails = [N for N, a in at.items() if a < 0.9 and res.nstar * (1 - 0.1) <= N < res.nstar]
    assert fails, res.points
    assert lib.run(cfg, max(fails), seeds=2, n_test=1024).acc < 0.9          # and it is a real failure


def cache_key(cfg, N, seeds, seed, mode, n_test, step_sizes):
    """The store's key of one evaluated point (lib.experiments.store: prefix + N)."""
    prefix = point_prefix(cfg, seeds=seeds, seed=seed, mode=mode, n_test=n_test, step_sizes=step_sizes)
    return canonical({**prefix, "N": N})


def test_cache_key_depends_on_every_field():
    cfg = lib.TaskConfig(V=8, d=4, L=3, device="cpu")
    base = (cfg, 100, 3, 0, "limit", 512, lib.StepSizes())
    key = cache_key(*base)
    changes = [dict(V=9), dict(d=5), dict(L=4), dict(model="mlp", m=3), dict(m=3), dict(activation="relu"),
               dict(mlp_input="raw"), dict(embedding="sphere"), dict(tied=True), dict(tau=2.0),
               dict(trigger_in_value=False), dict(eos_key=True), dict(noise_vocab=2), dict(dtype="float64")]
    assert len({cache_key(cfg.with_(**c), *base[1:]) for c in changes} | {key}) == len(changes) + 1
    for i, other in ((1, 101), (2, 2), (3, 1), (4, "finite"), (5, 513)):
        assert cache_key(*base[:i], other, *base[i + 1:]) != key
    for s in (dict(eta=0.02), dict(gamma_W=1.0), dict(gamma_V=5.0), dict(attn_scale=3.0)):
        assert cache_key(*base[:6], lib.StepSizes(**s)) != key
    assert cache_key(cfg.with_(device="cpu"), *base[1:]) == key


def test_run_reports_mean_and_population_spread_over_seeds():
    cfg = lib.TaskConfig(V=16, d=8, L=4, device="cpu")
    res = lib.run(cfg, 200, seeds=4, n_test=512)
    for k in ("acc", "att_acc", "oracle_acc"):
        v = np.array(res.per_seed[k])
        assert getattr(res, k) == pytest.approx(v.mean(), abs=1e-15)
        assert getattr(res, k + "_std") == pytest.approx(v.std(ddof=0), abs=1e-15)
    assert res.acc_std > 0
    one = [lib.run(cfg, 200, seeds=1, seed=s, n_test=512).acc for s in range(4)]
    assert res.per_seed["acc"] == one
    two = lib.run(cfg, 200, seeds=2, n_test=512)                           # two seeds have a spread too
    assert two.acc_std == pytest.approx(abs(one[0] - one[1]) / 2, abs=1e-15) and two.acc_std > 0
    assert lib.run(cfg, 200, seeds=1, n_test=512).acc_std == 0.0


def test_att_acc_and_oracle_acc_against_a_direct_computation():
    cfg = small_cfg(V=20, d=12, L=6, model="mlp", m=16, eos_key=True)
    problem = lib.make_problem(cfg, 1)
    res = lib.three_steps(problem, lib.sample_batch(problem, 2000, 1), "finite", step_sizes=lib.StepSizes(attn_scale=2.0))
    test = lib.sample_batch(problem, 500, 1, "test")
    acc = lib.evaluate(problem, res, batch=test)
    f = lib.forward(problem, res.params, test)
    assert acc.acc == float((f.logits.argmax(1) == test.labels).double().mean())
    assert acc.att_acc == float((f.scores.argmax(1) == test.pos).double().mean())
    v_l = f.v[torch.arange(test.N), test.pos]                        # oracle attention: o = v_l
    oracle = lib.features(problem, v_l) @ res.params.W_V.T @ problem.U.T
    assert acc.oracle_acc == float((oracle.argmax(1) == test.labels).double().mean())
    assert 0 < acc.att_acc < 1                                       # a non-trivial case


def _peak_bytes(fn):
    """Peak resident memory added while fn runs (Linux: /proc/self/clear_refs resets VmHWM)."""
    def read(key):
        return int([x for x in open("/proc/self/status") if x.startswith(key)][0].split()[1]) * 1024
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = read("VmRSS")
    fn()
    return read("VmHWM") - before


@pytest.mark.slow
def test_count_route_never_allocates_an_N_L_d_tensor():
    cfg = lib.TaskConfig(V=64, d=128, L=32, model="mlp", m=64, device="cpu")
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 20000, 0)
    nld = batch.N * cfg.L * cfg.d * 4                                  # 328 MB in float32
    for mode in ("limit", "finite"):
        assert _peak_bytes(lambda: lib.three_steps(problem, batch, mode)) < nld / 2, mode
    attn = lib.make_problem(cfg.with_(model="attn", m=None), 0)
    for mode in ("limit", "finite"):
        assert _peak_bytes(lambda: lib.three_steps(attn, batch, mode)) < nld / 2, mode
    assert _peak_bytes(lambda: lib.fast.counts.gradients(problem, lib.zero_params(cfg), batch)) < nld / 2
    assert _peak_bytes(lambda: lib.keys_values(problem, batch)) > nld     # the measure can see one


def test_bayes_accuracy_without_trigger_equals_exact_enumeration():
    """Every sequence of a tiny task enumerated: the Bayes rule picks a most frequent token."""
    from lib.analysis.construct import bayes_accuracy_unmarked
    V, L = 3, 3
    tokens = torch.tensor(list(itertools.product(range(V), repeat=L)))
    exact = float(np.mean([max(np.bincount(t, minlength=V)) / L for t in tokens.numpy()]))
    # each sequence is equally likely under the sampler (uniform position, uniform tokens)
    batch = lib.Batch(tokens, torch.zeros(len(tokens), dtype=torch.long), torch.zeros(len(tokens), dtype=torch.long))
    assert bayes_accuracy_unmarked(batch, V) == pytest.approx(exact, abs=1e-15)
    assert exact == pytest.approx((3 * 1 + 18 * 2 / 3 + 6 * 1 / 3) / 27)
    sampled = lib.sample_batch(lib.make_problem(lib.TaskConfig(V=V, d=2, L=L, device="cpu"), 0), 100_000, 0)
    assert bayes_accuracy_unmarked(sampled, V) == pytest.approx(exact, abs=0.01)


def test_token_ids_are_stored_as_int32_and_give_the_int64_results():
    """sample_batch keeps token ids in int32 (half the memory); every torch route gives exactly what
    the same batch stored as int64 gives (int64 ids never take lib.fast.native's numba loops, which agree with
    the torch routes to rounding: tests/test_native.py)."""
    with lib.fast.native.disabled():
        _int32_equals_int64()


def _int32_equals_int64():
    for model in ("attn", "mlp"):
        cfg = small_cfg(model=model, **({"noise_vocab": 3} if model == "attn" else {}))
        problem = lib.make_problem(cfg, 0)
        batch = lib.sample_batch(problem, 300, 0)
        assert batch.tokens.dtype == torch.int32 and batch.informative.dtype == torch.long
        wide = lib.Batch(batch.tokens.long(), batch.pos, batch.labels)
        assert torch.equal(wide.informative, batch.informative)
        for mode in ("limit", "finite"):
            a, b = lib.three_steps(problem, batch, mode), lib.three_steps(problem, wide, mode)
            assert torch.equal(a.params.W_V, b.params.W_V) and torch.equal(a.params.W_KQ, b.params.W_KQ), (model, mode)
        params = lib.three_steps(problem, batch, "finite").params
        ga, gb = lib.fast.counts.gradients(problem, params, batch), lib.fast.counts.gradients(problem, params, wide)
        assert torch.equal(ga.W_V, gb.W_V) and torch.equal(ga.W_KQ, gb.W_KQ) and ga.loss == gb.loss
        assert torch.equal(lib.core.models.forward(problem, params, batch).logits, lib.core.models.forward(problem, params, wide).logits)


@pytest.mark.parametrize("last", [0, 1, 2, 3, 7, 8, 9, 1000, 12345])
def test_largest_true_is_exact(last):
    from lib.core.search import largest_true
    calls = []
    assert largest_true(lambda n: calls.append(n) or n <= last) == last
    assert len(calls) <= 2 * (last.bit_length() + 2)                 # doubling then bisection
    with pytest.raises(ValueError, match="n_max"):
        largest_true(lambda n: True, n_max=64)


def test_token_routes_refuse_ids_out_of_range():
    """informative_values and step2_direction read ids by indexing: a negative id would wrap silently."""
    import dataclasses
    from lib.analysis.lowerbound_attention import step2_direction
    from lib.fast.tokens import informative_values
    p = lib.make_problem(lib.TaskConfig(V=16, d=8, L=4), 0)
    b = lib.sample_batch(p, 10, 0)
    for field, value in (("tokens", -1), ("tokens", 16), ("labels", -1), ("pos", 4)):
        bad = dataclasses.replace(b, **{field: getattr(b, field).clone()})
        getattr(bad, field).view(-1)[0] = value
        for f in (informative_values, step2_direction):
            with pytest.raises(ValueError, match=f"batch.{field}"):
                f(p, bad)
