"""The generic count-route step (lib.fast.counts.gradients) equals the direct closed forms and autograd
in float64 at any (W_V, W_KQ), for both models and both MLP input normalisations; full-batch GD
on it equals the autograd trainer step by step."""
import itertools

import pytest
import torch

import lib
from lib.learning.trainer import TrainConfig, gd_counts, train_transformer
from conftest import small_cfg, rel, random_params


CASES = list(itertools.product(["attn", "mlp"], ["unit", "raw"], [True, False], [False, True], [None, 3],
                               [True, False]))
CASES = [c for c in CASES if (c[0] == "mlp" and not c[5]) or (c[0] == "attn" and c[1] == "unit")]


@pytest.mark.parametrize("model,mlp_input,tiv,eos,noise,tables", CASES)
def test_count_gradients_equal_direct_and_autograd(model, mlp_input, tiv, eos, noise, tables):
    """Both count routes (logit tables for the linear feature map, features otherwise) against the
    direct closed forms and autograd."""
    cfg = small_cfg(V=9, d=6, L=5, model=model, mlp_input=mlp_input, trigger_in_value=tiv, eos_key=eos,
                    noise_vocab=noise)
    problem = lib.make_problem(cfg, 3)
    batch = lib.sample_batch(problem, 57, 4)
    params = random_params(cfg, 5, 0.7)
    assert lib.fast.counts.uses_tables(problem, params) == (model == "attn")
    counts = lib.fast.counts.count_gradients(problem, params, batch, tables=tables)
    assert counts.correct == lib.fast.counts.gradients(problem, params, batch).correct
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
    assert rel(lib.core.models.feature_jacobian_T(problem, o.detach(), r), o.grad) < 1e-12


def test_unit_input_makes_mlp_features_scale_free():
    """mlp_input="unit": phi(s o) = phi(o) for every s > 0; "raw" changes with the scale."""
    for mlp_input, same in (("unit", True), ("raw", False)):
        cfg = small_cfg(V=5, d=7, L=3, model="mlp", m=11, mlp_input=mlp_input)
        problem = lib.make_problem(cfg, 0)
        o = torch.randn(4, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        assert torch.allclose(lib.features(problem, 10 * o), lib.features(problem, o), atol=1e-12) == same


@pytest.mark.slow
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
    import lib.learning.schedule as schedule
    for tiv, eos, noise in itertools.product([True, False], [False, True], [None, 3]):
        cfg = small_cfg(V=11, d=7, L=6, trigger_in_value=tiv, eos_key=eos, noise_vocab=noise)
        problem = lib.make_problem(cfg, 2)
        batch = lib.sample_batch(problem, 400, 2)
        fast = lib.three_steps(problem, batch)
        generic = schedule._limit(problem, batch, lib.fast.counts.count_gradients, lib.StepSizes())
        for x, y in [(fast.G1, generic.G1), (fast.k, generic.k), (fast.G3, generic.G3)]:
            assert rel(x, y) < 1e-10


def _dense_bag_reverse(tokens, X, a, V_in):
    """sum_{n,t} a[n, t] 1[x_{n,t} = j] X[n], written out (the reference for TokenIndex)."""
    out = torch.zeros(V_in, X.shape[1], dtype=X.dtype)
    for n in range(tokens.shape[0]):
        for t in range(tokens.shape[1]):
            out[int(tokens[n, t])] += a[n, t] * X[n]
    return out


def test_token_index_reverses_the_bag_chunk_by_chunk():
    cfg = small_cfg(V=7, d=5, L=4, noise_vocab=3)
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 23, 1)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(23, 6, generator=g, dtype=torch.float64)
    a = torch.rand(23, 4, generator=g, dtype=torch.float64)
    index = lib.fast.tokens.token_index(problem, batch, 5)
    assert lib.fast.tokens.token_index(problem, batch, 5) is index            # built once, kept on the batch
    for c, start in enumerate(range(0, 23, 5)):
        sl = slice(start, start + 5)
        got = index.scatter_rows(c, start, 4, X[sl], a[sl])
        assert rel(got, _dense_bag_reverse(batch.tokens[sl], X[sl], a[sl], cfg.V_in)) < 1e-14
        got = index.scatter_informative(c, start, X[sl], a[sl, 0])
        want = _dense_bag_reverse(batch.informative[sl, None], X[sl], a[sl, :1], cfg.V_in)
        assert rel(got, want) < 1e-14
    other = lib.fast.tokens.token_index(problem, batch, 7)                     # another chunk size: rebuilt
    assert other.size == 7 and other.offsets.shape == (4, cfg.V_in)


def test_hits_is_argmax_with_ties():
    """The amax-based count equals (argmax == label), the first maximum winning a tie."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 4, (400, 6), generator=g).double()              # many ties
    x[:50] = 0.0                                                          # constant rows: argmax is 0
    labels = torch.randint(0, 6, (400,), generator=g)
    x_y = x.gather(1, labels[:, None])[:, 0]
    want = int((x.argmax(1) == labels).sum())
    before = x.clone()
    n, row_max = lib.fast.counts.hits_and_max(x, x_y, labels)
    assert n == want and torch.equal(row_max, before.amax(1))
    assert torch.equal(x, before)                                         # the logits are restored
    y = torch.randn(300, 9, generator=g)
    lab = torch.randint(0, 9, (300,), generator=g)
    assert lib.fast.counts.hits_and_max(y, y.gather(1, lab[:, None])[:, 0], lab)[0] == int((y.argmax(1) == lab).sum())


def test_cross_entropy_of_survives_underflow():
    """Rows whose label probability underflows in float32 still give the exact, finite loss."""
    x = torch.tensor([[0.0, 200.0, -5.0], [1.0, 2.0, 3.0], [-300.0, 0.0, 0.0]], dtype=torch.float32)
    y = torch.tensor([0, 2, 0])
    got = lib.fast.counts.cross_entropy_of(x.amax(1), x.gather(1, y[:, None])[:, 0], torch.softmax(x, 1))
    want = torch.nn.functional.cross_entropy(x.double(), y, reduction="sum")
    assert torch.isfinite(got) and float(got) == pytest.approx(float(want), rel=1e-6)


@pytest.mark.parametrize("tiv,eos", [(True, False), (False, True)])
def test_table_route_corner_cases(tiv, eos):
    """Skipped blocks are zero and the other one unchanged; zero parameters (all logits tie, uniform
    attention) and one key (L = 1: no attention gradient) agree with the feature route."""
    for L in (5, 1):
        if L == 1 and eos:
            continue
        cfg = small_cfg(V=8, d=6, L=L, trigger_in_value=tiv, eos_key=eos)
        problem = lib.make_problem(cfg, 1)
        batch = lib.sample_batch(problem, 40, 2)
        for params in (random_params(cfg, 3, 0.5), lib.zero_params(cfg)):
            ref = lib.fast.counts.count_gradients(problem, params, batch, tables=False)
            got = lib.fast.counts.count_gradients(problem, params, batch, tables=True)
            assert got.correct == ref.correct and got.loss == pytest.approx(ref.loss, rel=1e-12)
            assert rel(got.W_V, ref.W_V) < 1e-10
            assert float((got.W_KQ - ref.W_KQ).norm()) <= 1e-10 * max(1.0, float(ref.W_KQ.norm()))
            only_V = lib.fast.counts.count_gradients(problem, params, batch, need_W=False, tables=True)
            only_W = lib.fast.counts.count_gradients(problem, params, batch, need_V=False, tables=True)
            assert rel(only_V.W_V, ref.W_V) < 1e-10 and not bool(only_V.W_KQ.any())
            assert torch.equal(only_W.W_KQ, got.W_KQ) and not bool(only_W.W_V.any())


def test_tables_need_the_linear_feature_map():
    cfg = small_cfg(V=8, d=6, L=3, model="mlp", m=5)
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 10, 0)
    with pytest.raises(ValueError, match="tables"):
        lib.fast.counts.count_gradients(problem, random_params(cfg, 0), batch, tables=True)


def test_finite_fast_path_equals_the_generic_schedule_on_the_feature_route():
    import lib.learning.schedule as schedule
    feature_route = lambda *a, **k: lib.fast.counts.count_gradients(*a, **k, tables=False)
    for tiv, eos, noise in itertools.product([True, False], [False, True], [None, 3]):
        cfg = small_cfg(V=11, d=7, L=6, trigger_in_value=tiv, eos_key=eos, noise_vocab=noise)
        problem = lib.make_problem(cfg, 2)
        batch = lib.sample_batch(problem, 300, 2)
        s = lib.StepSizes(eta=0.5, gamma_W=None, attn_scale=3.0, gamma_V=2.0)
        fast = lib.three_steps(problem, batch, "finite", step_sizes=s)
        generic = schedule._finite(problem, batch, feature_route, s)
        assert fast.gamma_W == pytest.approx(generic.gamma_W, rel=1e-10)
        for x, y in [(fast.V1, generic.V1), (fast.W1, generic.W1), (fast.V2, generic.V2)]:
            assert rel(x, y) < 1e-10


def test_token_index_follows_changes_of_the_batch():
    """A batch whose tokens change in place, or are replaced, gets a new index (no stale gradients)."""
    cfg = small_cfg(V=8, d=6, L=4)
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 30, 0)
    params = random_params(cfg, 1, 0.5)
    lib.fast.counts.count_gradients(problem, params, batch, tables=True)            # builds and keeps an index
    first = batch._index
    flip = batch.tokens[:, 1].clone()
    batch.tokens[:, 1] = (flip + 1) % cfg.V                                     # in place
    batch._informative = None
    got = lib.fast.counts.count_gradients(problem, params, batch, tables=True)
    ref = lib.fast.counts.count_gradients(problem, params, batch, tables=False)
    assert batch._index is not first and rel(got.W_V, ref.W_V) < 1e-10 and rel(got.W_KQ, ref.W_KQ) < 1e-10
    swapped = lib.Batch(batch.tokens.flip(0), batch.pos.flip(0), batch.labels.flip(0))
    swapped._index = batch._index                                              # another batch's index
    got = lib.fast.counts.count_gradients(problem, params, swapped, tables=True)
    ref = lib.fast.counts.count_gradients(problem, params, swapped, tables=False)
    assert rel(got.W_V, ref.W_V) < 1e-10 and rel(got.W_KQ, ref.W_KQ) < 1e-10


@pytest.mark.parametrize("tiv,eos", [(True, False), (False, False), (True, True)])
def test_table_route_keeps_the_saturated_attention_gradient_in_float32(tiv, eos):
    """With attention on the trigger (mean weight 1 - 2e-5), the attention gradient is small; the table
    route forms the trigger's ds without a difference of large terms and keeps its digits in float32
    (measured: relative error ~1e-6, where the feature route's difference leaves 6e-4 to 1.5e-3)."""
    out = {}
    for dtype in ("float32", "float64"):
        cfg = lib.TaskConfig(V=32, d=24, L=8, trigger_in_value=tiv, eos_key=eos, dtype=dtype, device="cpu")
        problem = lib.make_problem(cfg, 4)
        batch = lib.sample_batch(problem, 3000, 4)
        g = torch.Generator().manual_seed(5)
        z, q = problem.z_trig, problem.z_eos
        W_V = (3.0 * torch.randn(24, 24, generator=g, dtype=torch.float64)).to(z.dtype)
        W_KQ = torch.outer(30.0 * z / z.dot(z), q / q.dot(q))                    # the trigger's bonus is 30
        out[dtype] = lib.fast.counts.count_gradients(problem, lib.Params(W_V, W_KQ), batch, tables=True)
    lo, hi = out["float32"], out["float64"]
    assert rel(lo.W_KQ.double(), hi.W_KQ) < 2e-5 and rel(lo.W_V.double(), hi.W_V) < 2e-5


@pytest.mark.parametrize("eos,L", [(False, 5), (True, 5), (False, 1), (True, 1)])
def test_attended_groups_from_ranks_equal_argmax_with_ties(eos, L):
    """Hard attention's reading from score ranks (amax) equals argmax's first maximal position, also
    when the trigger ties another position (integer scores and bonuses force exact ties), when EOS
    ties or wins, and when scores repeat (the ranks are then refused)."""
    cfg = small_cfg(V=6, d=5, L=L, eos_key=eos, noise_vocab=2)
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 400, 0)
    b = lib.Batch(batch.tokens, batch.pos, batch.labels)
    g = torch.Generator().manual_seed(0)
    distinct = torch.randperm(cfg.V_in, generator=g).double()
    repeated = torch.randint(0, 3, (cfg.V_in,), generator=g).double()
    n_tied = 0
    for S in (distinct, repeated):
        ranks = lib.fast.limit.ScoreRanks(S)
        assert ranks.ok == (S is distinct)
        for bonus in (0.0, 1.0, 2.0, -1.0, 0.5):
            for s_eos in (-100.0, float(S.max()) + bonus, float(S.max()) + 3.0):
                bonus_t, eos_t = torch.tensor(bonus, dtype=S.dtype), torch.tensor(s_eos, dtype=S.dtype)
                fast = lib.fast.limit.attended_groups(problem, b, S, bonus_t, eos_t, ranks)
                slow = lib.fast.limit.attended_groups(problem, b, S, bonus_t, eos_t, None)
                assert torch.equal(fast, slow)
                n_tied += int((S[b.informative] + bonus == S[b.tokens.long()].masked_fill(
                    torch.nn.functional.one_hot(b.pos, L).bool(), -1e9).amax(1)).sum()) if L > 1 else 0
    assert L == 1 or n_tied > 0                                           # the tie branch was exercised


@pytest.mark.parametrize("n", [7, 2 ** 15 + 5])
def test_score_ranks_invert_the_order(n):
    """rank[order[r]] = r for every rank r, also past 2^15 scores (an int16 rank would wrap there)."""
    g = torch.Generator().manual_seed(n)
    S = torch.randn(n, generator=g, dtype=torch.float64)
    ranks = lib.fast.limit.ScoreRanks(S)
    assert ranks.ok and torch.equal(ranks.rank[ranks.order].long(), torch.arange(n))
    assert torch.equal(S[ranks.order], S.sort().values)
    assert not lib.fast.limit.ScoreRanks(torch.tensor([1.0, 2.0, 1.0])).ok
    assert not lib.fast.limit.ScoreRanks(torch.tensor([1.0, float("nan"), 0.0])).ok
