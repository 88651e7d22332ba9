"""The numba loops of lib.fast.native against the torch primitives they replace, loop by loop and through the
routes that use them (lib.fast.counts), in float32 and float64; the torch route when they are off, and the
one warning when numba is missing or fails."""
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as Fn

import lib
from lib.fast import native
from lib.fast.counts import count_gradients
from lib.fast.limit import attended_groups, limit_attn
from conftest import small_cfg, rel, random_params

try:
    import numba
except ImportError:                                                    # the torch route is tested without it
    numba = None
needs_native = pytest.mark.skipif(not native.available(), reason="no numba: lib.fast.native is off")


def test_native_loads_where_numba_is_installed():
    """With numba installed the loops must compile and load (else the speed is lost, with a warning)."""
    if numba is None:
        pytest.skip("numba is not installed")
    assert native.available(), f"lib.fast.native did not load: {native._state.get('error')!r}"


def test_without_the_loops_every_route_still_runs():
    """RECALL_NATIVE=0 turns them off in a fresh process, and the routes give the torch route's numbers."""
    code = ("import lib, lib.fast.native as n; assert not n.available();"
            "cfg = lib.TaskConfig(V=8, d=8, L=4, device='cpu', dtype='float64'); p = lib.make_problem(cfg, 0);"
            "b = lib.sample_batch(p, 300, 0); g = lib.fast.limit.limit_attn(p, b); print(float(g[1].norm()))")
    env = dict(os.environ, RECALL_NATIVE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    cfg = small_cfg(V=8, d=8, L=4)
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 300, 0)
    with native.disabled():
        k = limit_attn(problem, batch)[1]
    assert float(out.stdout) == pytest.approx(float(k.norm()), rel=1e-12)


@pytest.mark.parametrize("how", ["no numba", "failed compile"])
def test_without_numba_the_routes_warn_once_and_give_the_torch_numbers(how, monkeypatch):
    """numba missing (its import fails) or failing to compile the loops: one RuntimeWarning naming the
    torch route, available() False with the error kept, and the routes give the torch route's numbers
    without warning again."""
    cfg = small_cfg(V=8, d=8, L=4)
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 300, 0)
    params = random_params(cfg, 1, 0.5)
    with native.disabled():
        want = limit_attn(problem, batch), count_gradients(problem, params, batch, tables=True)
    saved = dict(native._state)
    try:
        native._state.clear()
        if how == "no numba":
            monkeypatch.setitem(sys.modules, "numba", None)            # `import numba` raises ImportError
        else:
            def fail(loops):
                raise RuntimeError("simulated compile failure")
            monkeypatch.setattr(native, "_warm", fail)
        with pytest.warns(RuntimeWarning, match="slower torch route") as caught:
            assert not native.available()
        assert len([w for w in caught if "torch route" in str(w.message)]) == 1
        assert isinstance(native._state.get("error"), ImportError if how == "no numba" else RuntimeError)
        with warnings.catch_warnings():
            warnings.simplefilter("error")                             # once: no second warning
            assert not native.available()
            got = limit_attn(problem, batch), count_gradients(problem, params, batch, tables=True)
    finally:
        native._state.clear()
        native._state.update(saved)
    assert all(torch.equal(x, y) for x, y in zip(got[0], want[0]))
    assert got[1].loss == want[1].loss and got[1].correct == want[1].correct
    assert torch.equal(got[1].W_V, want[1].W_V) and torch.equal(got[1].W_KQ, want[1].W_KQ)


def _tokens(N, L, V_in, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V_in, (N, L), generator=g, dtype=torch.int32), g


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("V,L,N", [(256, 16, 300), (250, 7, 257), (40, 1, 3), (1024, 64, 70), (200, 5, 1)])
def test_forward_and_reverse_bags_equal_embedding_bag(dtype, V, L, N):
    """Column blocks of 8 vectors and the narrower last block (V = 250, 40, 200), padded rows."""
    V_in = V + 3
    tokens, g = _tokens(N, L, V_in, 0)
    table = torch.randn(V_in, V, generator=g, dtype=dtype)
    a = torch.rand(N, L, generator=g, dtype=dtype)
    want = Fn.embedding_bag(tokens, table, mode="sum", per_sample_weights=a)
    padded = native.padded(V_in, V, dtype).copy_(table)
    got = native.forward_bag(tokens, a, padded, torch.empty(N, V, dtype=dtype))
    tol = 1e-5 if dtype == torch.float32 else 1e-13
    assert rel(got, want) < tol
    # reverse: P[j] = sum over positions holding j of a err_n, against a written-out sum
    err = native.padded(N, V, dtype).copy_(torch.randn(N, V, generator=g, dtype=dtype))
    ids = tokens.reshape(-1)
    order = torch.argsort(ids, stable=True).to(torch.int32)
    counts = torch.bincount(ids, minlength=V_in)
    offsets = (counts.cumsum(0) - counts).to(torch.int32)
    P = torch.ones(V_in, V, dtype=dtype)                               # it adds to what is there
    work = (torch.empty(N * L, dtype=torch.int32), torch.empty(N * L, dtype=dtype))
    native.reverse_bag(order, offsets, a, err, P, work)
    want = torch.ones(V_in, V, dtype=dtype).index_add_(0, ids.long(), (a.reshape(-1, 1) * err.repeat_interleave(L, 0)))
    assert rel(P, want) < tol


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eos", [False, True])
@pytest.mark.parametrize("split", [False, True])
def test_attention_weights_equal_torch_softmax(dtype, eos, split):
    N, L, V_in = 300, 9, 40
    tokens, g = _tokens(N, L, V_in, 7)
    pos = torch.randint(0, L, (N,), generator=g)
    S = 3 * torch.randn(V_in, generator=g, dtype=dtype)
    bonus, s_eos = 2.5, 0.7
    a_bag, a_l, rest = torch.empty(N, L, dtype=dtype), torch.empty(N, dtype=dtype), torch.empty(N, dtype=dtype)
    a_eos = torch.empty(N, dtype=dtype) if eos else None
    native.attention(tokens, pos, S, bonus, s_eos if eos else None, split, a_bag, a_l, a_eos, rest)
    sc = S[tokens.long()] + bonus * Fn.one_hot(pos, L).to(dtype)
    if eos:
        sc = torch.cat([sc, torch.full((N, 1), s_eos, dtype=dtype)], 1)
    a = torch.softmax(sc, 1)
    tol = 1e-6 if dtype == torch.float32 else 1e-14
    want_bag = a[:, :L].clone()
    want_l = want_bag.gather(1, pos[:, None])[:, 0]
    if split:
        want_bag.scatter_(1, pos[:, None], 0.0)
    assert rel(a_bag, want_bag) < tol and rel(a_l, want_l) < tol
    assert rel(rest, a.sum(1) - want_l) < tol
    if eos:
        assert rel(a_eos, a[:, L]) < tol


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("split,tiv,eos", [(True, 1.0, True), (False, 1.0, False), (True, 0.0, False),
                                           (False, 0.0, True)])
def test_softmax_rows_equal_torch(dtype, split, tiv, eos):
    """Logits, error, loss, hits (ties included: the first maximum wins), and the sums of both
    gradients, against the formulas written out in torch."""
    N, V, V_in, L = 97, 70, 73, 5
    g = torch.Generator().manual_seed(1)
    xi_rest = 4 * torch.randn(N, V, generator=g, dtype=dtype)
    table = native.padded(V_in, V, dtype).copy_(torch.randn(V_in, V, generator=g, dtype=dtype))
    inf = torch.randint(0, V_in, (N,), generator=g)
    tokens = torch.randint(0, V_in, (N, L), generator=g, dtype=torch.int32)
    a_bag, rest = torch.rand(N, L, generator=g, dtype=dtype), torch.rand(N, generator=g, dtype=dtype)
    a_l = torch.rand(N, generator=g, dtype=dtype)
    a_eos = torch.rand(N, generator=g, dtype=dtype) if eos else None
    ce = a_eos if eos else torch.zeros(N, dtype=dtype)
    xi_z, xi_q = torch.randn(V, generator=g, dtype=dtype), torch.randn(V, generator=g, dtype=dtype)
    labels = torch.randint(0, V, (N,), generator=g)
    # ties: in rows 0-2 (a_l = a_eos = 0 there, so that the logits are xi_rest exactly in both) the label's
    # logit equals the maximum, held by an earlier entry (row 0: the label is not first), a later one, or both
    a_l[:3] = 0
    ce[:3] = 0
    for n, others in ((0, (0,)), (1, (V - 1,)), (2, (3, V - 2))):
        j = labels[n].item()
        for k in others:
            k = k if k != j else (j + 1) % V
            xi_rest[n, k] = xi_rest[n].max() + 1.0
        xi_rest[n, j] = xi_rest[n].max()
    xi = xi_rest + split * a_l[:, None] * table[inf] + tiv * a_l[:, None] * xi_z + ce[:, None] * xi_q
    err = native.padded(N, V, dtype)
    acc = native.RowSums(V, V_in, sums=True, ds=split)
    native.softmax_rows(xi_rest, table, inf, a_l, xi_z, split, tiv, a_eos, xi_q, labels, err, acc, tokens, a_bag, rest)
    loss, hits, sums, ds = acc.totals()
    want_err = torch.softmax(xi, 1) - Fn.one_hot(labels, V).to(dtype)
    tol = 2e-6 if dtype == torch.float32 else 1e-13
    assert rel(err, want_err) < tol
    assert loss == pytest.approx(float(Fn.cross_entropy(xi.double(), labels, reduction="sum")), rel=tol)
    assert hits == int((xi.argmax(1) == labels).sum())
    assert rel(sums[0], (tiv * a_l @ want_err).double()) < tol if tiv else sums[0].abs().max() == 0
    assert rel(sums[1], (ce @ want_err).double()) < tol if eos else sums[1].abs().max() == 0
    if split:
        r_rest = (want_err * (xi_rest + ce[:, None] * xi_q)).sum(1)
        r_l = (want_err * (table[inf] + tiv * xi_z)).sum(1)
        beta = r_rest + a_l * r_l
        ds_l = a_l * (rest * r_l - r_rest)
        want = torch.zeros(V_in + 2, dtype=torch.float64)
        want.index_add_(0, inf, ds_l.double()).index_add_(0, tokens.reshape(-1).long(),
                                                          -(a_bag * beta[:, None]).reshape(-1).double())
        want[V_in] = ds_l.sum()
        want[V_in + 1] = (ce * (want_err @ xi_q - beta)).sum()
        assert rel(ds, want) < 50 * tol
    else:
        assert acc.ds is None


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eos", [False, True])
def test_limit_passes_equal_torch(dtype, eos):
    """The count table, beta's weighted sum and hard attention (with forced ties of every kind)."""
    cfg = small_cfg(V=30, d=12, L=9, eos_key=eos, dtype="float32" if dtype == torch.float32 else "float64")
    problem = lib.make_problem(cfg, 2)
    batch = lib.sample_batch(problem, 2000, 3)
    A = native.pair_count(batch.tokens, batch.informative, cfg.V, cfg.V_in)
    pairs = batch.informative[:, None] * cfg.V_in + batch.tokens.long()
    assert torch.equal(A.view(-1), torch.bincount(pairs.view(-1), minlength=cfg.V * cfg.V_in))
    g = torch.Generator().manual_seed(4)
    D = torch.randn(cfg.V, cfg.V_in, generator=g, dtype=dtype)
    s_w = torch.randn(cfg.V, generator=g, dtype=dtype)
    counts, total = native.beta_counts(batch.tokens, batch.informative, D, s_w, cfg.n_keys)
    beta = (D.double()[batch.informative[:, None], batch.tokens.long()].sum(1) + s_w.double()[batch.informative]) / cfg.n_keys
    want = torch.zeros(cfg.V_in, dtype=torch.float64).index_add_(0, batch.tokens.reshape(-1).long(),
                                                                 beta.repeat_interleave(cfg.L))
    assert rel(counts, want) < 1e-12 and total == pytest.approx(float(beta.sum()), rel=1e-12)
    # scores with repeats (ties between positions), a bonus that ties the trigger with others, EOS ties
    S = torch.randint(0, 6, (cfg.V_in,), generator=g).to(dtype)
    for bonus, s_eos in ((0.0, 5.0), (1.0, 2.0), (-1.0, 7.0), (3.0, 0.5)):
        ids = native.attend(batch.tokens, batch.pos, batch.informative, S, bonus, s_eos if eos else None, cfg.V)
        group = attended_groups(problem, batch, S, torch.tensor(bonus, dtype=dtype), torch.tensor(s_eos, dtype=dtype))
        assert torch.equal(ids, batch.informative + group * cfg.V)


@needs_native
@pytest.mark.parametrize("tiv,eos", [(True, False), (False, True), (True, True)])
def test_routes_with_and_without_the_loops_agree(tiv, eos):
    """table_gradients (all need_V / need_W), limit_attn and finite mode: numba loops against torch, float64."""
    cfg = small_cfg(V=70, d=24, L=9, trigger_in_value=tiv, eos_key=eos)
    problem = lib.make_problem(cfg, 5)
    batch = lib.sample_batch(problem, 3000, 6)
    params = random_params(cfg, 7, 0.8)
    for need_V, need_W in ((True, True), (True, False), (False, True)):
        a = count_gradients(problem, params, batch, need_V=need_V, need_W=need_W, tables=True)
        with native.disabled():
            b = count_gradients(problem, params, batch, need_V=need_V, need_W=need_W, tables=True)
        assert a.correct == b.correct and a.loss == pytest.approx(b.loss, rel=1e-12)
        assert rel(a.W_V, b.W_V) < 1e-12 if need_V else a.W_V.abs().max() == 0
        assert rel(a.W_KQ, b.W_KQ) < 1e-12 if need_W else a.W_KQ.abs().max() == 0
    got = limit_attn(problem, batch)
    with native.disabled():
        want = limit_attn(problem, batch)
    assert all(rel(x, y) < 1e-12 for x, y in zip(got, want))
    got = lib.three_steps(problem, batch, "finite")
    with native.disabled():
        want = lib.three_steps(problem, batch, "finite")
    assert rel(got.params.W_V, want.params.W_V) < 1e-10 and rel(got.params.W_KQ, want.params.W_KQ) < 1e-10


@needs_native
def test_the_loops_do_not_depend_on_the_thread_count_beyond_rounding():
    cfg = small_cfg(V=64, d=16, L=8)
    problem = lib.make_problem(cfg, 1)
    batch = lib.sample_batch(problem, 999, 2)
    params = random_params(cfg, 3, 0.8)
    before = torch.get_num_threads()
    try:
        out = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            out.append(count_gradients(problem, params, batch, tables=True))
    finally:
        torch.set_num_threads(before)
    for o in out[1:]:
        assert o.correct == out[0].correct and rel(o.W_V, out[0].W_V) < 1e-12 and rel(o.W_KQ, out[0].W_KQ) < 1e-12


@needs_native
def test_loading_the_loops_leaves_torchs_thread_count_alone():
    """Launching numba's OpenMP pool with NUMBA_NUM_THREADS=1 set the count torch reads to 1 (measured):
    lib.fast.native puts torch's count back."""
    code = ("import torch; torch.set_num_threads(2); from lib.fast import native; assert native.available();"
            "print(torch.get_num_threads())")
    env = dict(os.environ, OMP_NUM_THREADS="2", NUMBA_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2"]


@needs_native
def test_numba_follows_torchs_thread_count_and_its_own_does_not_matter():
    """numba runs a call on min(torch's threads, NUMBA_NUM_THREADS) threads; the parts (and so the
    numbers) follow torch's count alone: numba's own count changes no digit."""
    cfg = small_cfg(V=64, d=16, L=8)
    problem = lib.make_problem(cfg, 1)
    batch = lib.sample_batch(problem, 999, 2)
    params = random_params(cfg, 3, 0.8)
    before = torch.get_num_threads()
    top = numba.config.NUMBA_NUM_THREADS
    try:
        torch.set_num_threads(2)
        want = count_gradients(problem, params, batch, tables=True)
        assert numba.get_num_threads() == min(2, top)
        with pytest.MonkeyPatch.context() as mp:                       # numba on one thread, torch's 2 parts
            mp.setattr(native, "_threads", lambda parts: numba.set_num_threads(1))
            got = count_gradients(problem, params, batch, tables=True)
            assert numba.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert got.loss == want.loss and torch.equal(got.W_V, want.W_V) and torch.equal(got.W_KQ, want.W_KQ)


@needs_native
@pytest.mark.parametrize("where", ["W_V", "W_KQ"])
def test_non_finite_parameters_take_the_torch_route(where, monkeypatch):
    """The loops assume finite tables (their softmax rows): with an infinite or NaN parameter the step
    runs on torch's route, and gives what it gives."""
    cfg = small_cfg(V=9, d=6, L=4)
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 50, 0)
    params = random_params(cfg, 1, 0.5)
    bad = params.W_V.clone() if where == "W_V" else params.W_KQ.clone()
    bad[0, 0] = float("nan") if where == "W_V" else float("inf")
    params = lib.core.models.Params(bad, params.W_KQ) if where == "W_V" else lib.core.models.Params(params.W_V, bad)
    calls = []
    torch_loop = lib.fast.counts._table_sums_torch
    monkeypatch.setattr(lib.fast.counts, "_table_sums_torch", lambda *a: calls.append(1) or torch_loop(*a))
    # behind the public check (which refuses them): training steps reach the route unchecked
    a = lib.fast.counts._count_gradients(problem, params, batch, tables=True)
    assert calls, "the native loops ran on non-finite tables"
    with native.disabled():
        b = lib.fast.counts._count_gradients(problem, params, batch, tables=True)
    assert (a.loss == b.loss) or (a.loss != a.loss and b.loss != b.loss)


@needs_native
@pytest.mark.parametrize("tiv,eos,noise,L", [(True, False, None, 9), (False, True, 3, 1), (True, True, 4, 3)])
def test_many_chunks_threads_and_float32_agree_with_torch(tiv, eos, noise, L, monkeypatch):
    """Chunks of 37 samples (the chunk offsets into the token index), 1 to 3 threads, float32 and
    float64, a noise vocabulary, L = 1; int32 and strided positions and labels."""
    monkeypatch.setattr(lib.fast.counts, "TABLE_ELEMENTS", 37 * 130)
    before = torch.get_num_threads()
    try:
        for dtype in ("float64", "float32"):
            cfg = small_cfg(V=130, d=16, L=L, trigger_in_value=tiv, eos_key=eos, noise_vocab=noise, dtype=dtype)
            problem = lib.make_problem(cfg, 1)
            batch = lib.sample_batch(problem, 400, 2)
            assert lib.fast.counts.table_chunk_size(problem) < 40
            params = random_params(cfg, 3, 0.8)
            params = lib.core.models.Params(params.W_V.to(problem.E.dtype), params.W_KQ.to(problem.E.dtype))
            odd = lib.Batch(batch.tokens, torch.stack([batch.pos, batch.pos], 1)[:, 0].int(),
                            torch.stack([batch.labels, batch.labels], 1)[:, 1])   # int32, strided
            with native.disabled():
                want = count_gradients(problem, params, batch, tables=True)
            tol = 1e-12 if dtype == "float64" else 2e-4
            for threads in (1, 2, 3):
                torch.set_num_threads(threads)
                for b in (batch, odd):
                    got = count_gradients(problem, params, b, tables=True)
                    assert got.correct == want.correct and got.loss == pytest.approx(want.loss, rel=tol)
                    assert rel(got.W_V, want.W_V) < tol and rel(got.W_KQ, want.W_KQ) < tol
    finally:
        torch.set_num_threads(before)


@needs_native
def test_the_loops_leave_subnormals_to_torch():
    """The loops leave the floating-point mode as they found it (no process-wide flush to zero, as a
    fast-math runtime would set): afterwards torch keeps subnormals, on the calling thread and on its
    pool's threads."""
    cfg = small_cfg(V=64, d=16, L=8, dtype="float32")
    problem = lib.make_problem(cfg, 1)
    batch = lib.sample_batch(problem, 2000, 2)
    params = random_params(cfg, 3, 0.8)
    count_gradients(problem, lib.core.models.Params(params.W_V.float(), params.W_KQ.float()), batch, tables=True)
    limit_attn(problem, batch)
    tiny = torch.full((1 << 20,), 1e-40, dtype=torch.float32)
    assert bool(((tiny * 1.0) > 0).all())                              # a parallel op: every thread
    assert float(torch.tensor(1e-40) * 1.0) > 0


@needs_native
def test_ids_out_of_range_never_reach_the_loops():
    """Positions, labels or informative tokens out of range: the public functions say which field;
    the count route itself leaves them to torch's route, which raises, instead of reading past memory."""
    cfg = small_cfg(V=9, d=6, L=4, noise_vocab=3)
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 50, 0)
    params = random_params(cfg, 1, 0.5)
    labels = batch.labels.clone()
    labels[3] = cfg.V
    bad_pos = batch.pos.clone()
    bad_pos[0] = cfg.L
    noise_at_l = batch.tokens.clone()
    noise_at_l[0, batch.pos[0]] = cfg.V                                # a noise token as the informative one
    for b, field in ((lib.Batch(batch.tokens, batch.pos, labels), "labels"), (lib.Batch(batch.tokens, bad_pos, batch.labels), "pos"),
                     (lib.Batch(noise_at_l, batch.pos, batch.labels), "informative")):
        with pytest.raises(ValueError, match=field):
            lib.fast.counts.gradients(problem, params, b)
        assert not native.ids_in_range(b, cfg.V, cfg.V_in, cfg.L)
    with pytest.raises(ValueError, match="labels"):
        count_gradients(problem, params, lib.Batch(batch.tokens, batch.pos, labels), tables=True)
    with pytest.raises((RuntimeError, IndexError)):                   # the route behind the check
        lib.fast.counts._count_gradients(problem, params, lib.Batch(batch.tokens, batch.pos, labels), tables=True)


@needs_native
def test_the_loops_refuse_ids_they_would_misread():
    a = torch.rand(4, 3)
    table = torch.rand(5, 6)
    with pytest.raises(ValueError, match="tokens must be a contiguous int32"):
        native.forward_bag(torch.zeros(4, 3, dtype=torch.long), a, table, torch.empty(4, 6))
    with pytest.raises(ValueError, match="tokens must be a contiguous int32"):
        native.forward_bag(torch.zeros(3, 4, dtype=torch.int32).T, a, table, torch.empty(4, 6))
    with pytest.raises(ValueError, match="order must be"):
        native.reverse_bag(torch.zeros(12, dtype=torch.long), torch.zeros(5, dtype=torch.int32), a, torch.rand(4, 6),
                           torch.zeros(5, 6), (torch.empty(12, dtype=torch.int32), torch.empty(12)))
    with pytest.raises(TypeError, match="float32 or float64"):
        native.forward_bag(torch.zeros(4, 3, dtype=torch.int32), a.half(), table.half(), torch.empty(4, 6).half())
