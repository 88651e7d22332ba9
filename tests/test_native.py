"""The numba loops of lib.fast.native against the torch primitives they replace, loop by loop and through the
route that uses them (lib.fast.limit), in float32 and float64; the torch route when they are off, and the
one warning when numba is missing or fails."""
import contextlib
import os
import subprocess
import sys
import warnings

import pytest
import torch

import lib
from lib.fast import native
from lib.fast.counts import count_gradients
from lib.fast.limit import attended_groups, count_tables, limit_attn, native_applies
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


@pytest.mark.slow
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
@pytest.mark.parametrize("tiv,eos,noise,L", [(True, False, None, 9), (False, True, 3, 1), (True, True, 4, 3)])
def test_routes_with_and_without_the_loops_agree(tiv, eos, noise, L):
    """limit_attn and the finite mode (its step 1): numba loops against torch, float64 and float32, a
    noise vocabulary, L = 1, 1 to 3 threads, int32 and strided positions and labels."""
    before = torch.get_num_threads()
    try:
        for dtype in ("float64", "float32"):
            cfg = small_cfg(V=70, d=24, L=L, trigger_in_value=tiv, eos_key=eos, noise_vocab=noise, dtype=dtype)
            problem = lib.make_problem(cfg, 5)
            batch = lib.sample_batch(problem, 3000, 6)
            odd = lib.Batch(batch.tokens, torch.stack([batch.pos, batch.pos], 1)[:, 0].int(),
                            torch.stack([batch.labels, batch.labels], 1)[:, 1])   # int32, strided
            with native.disabled():
                want = limit_attn(problem, batch)
                want_f = lib.three_steps(problem, batch, "finite")
            tol = 1e-12 if dtype == "float64" else 2e-5
            for threads in (1, 2, 3):
                torch.set_num_threads(threads)
                for b in (batch, odd):
                    assert all(rel(x, y) < tol for x, y in zip(limit_attn(problem, b), want))
            got_f = lib.three_steps(problem, batch, "finite")
            assert rel(got_f.params.W_V, want_f.params.W_V) < 100 * tol
            assert rel(got_f.params.W_KQ, want_f.params.W_KQ) < 100 * tol
    finally:
        torch.set_num_threads(before)


@needs_native
def test_the_loops_do_not_depend_on_the_thread_count_beyond_rounding():
    cfg = small_cfg(V=64, d=16, L=8)
    problem = lib.make_problem(cfg, 1)
    batch = lib.sample_batch(problem, 999, 2)
    before = torch.get_num_threads()
    try:
        out = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            out.append(limit_attn(problem, batch))
    finally:
        torch.set_num_threads(before)
    for o in out[1:]:
        assert all(rel(x, y) < 1e-12 for x, y in zip(o, out[0]))


@pytest.mark.slow
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
    before = torch.get_num_threads()
    top = numba.config.NUMBA_NUM_THREADS
    try:
        torch.set_num_threads(2)
        want = limit_attn(problem, batch)
        assert numba.get_num_threads() == min(2, top)
        with pytest.MonkeyPatch.context() as mp:                       # numba on one thread, torch's 2 parts
            mp.setattr(native, "_threads", lambda parts: numba.set_num_threads(1))
            got = limit_attn(problem, batch)
            assert numba.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(x, y) for x, y in zip(got, want))


@needs_native
def test_the_loops_leave_subnormals_to_torch():
    """The loops leave the floating-point mode as they found it (no process-wide flush to zero, as a
    fast-math runtime would set): afterwards torch keeps subnormals, on the calling thread and on its
    pool's threads."""
    cfg = small_cfg(V=64, d=16, L=8, dtype="float32")
    problem = lib.make_problem(cfg, 1)
    batch = lib.sample_batch(problem, 2000, 2)
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
    inf = torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="tokens must be a contiguous int32"):
        native.pair_count(torch.zeros(4, 3, dtype=torch.long), inf, 5, 5)
    with pytest.raises(ValueError, match="tokens must be a contiguous int32"):
        native.pair_count(torch.zeros(3, 4, dtype=torch.int32).T, inf, 5, 5)
    with pytest.raises(ValueError, match="pos must"):
        native.attend(torch.zeros(4, 3, dtype=torch.int32), torch.zeros(4), inf, torch.rand(5), 1.0, None, 5)
    with pytest.raises(TypeError, match="float32 or float64"):
        native.beta_counts(torch.zeros(4, 3, dtype=torch.int32), inf, torch.rand(5, 5).half(), torch.rand(5).half(), 3)


@needs_native
def test_no_samples_the_loops_give_torchs_empty_results_and_the_routes_refuse_N_0():
    """N = 0: each loop returns what its torch primitive gives on no ids (an all-zero count table, zero
    beta sums, no attended ids); a route (the count tables, the limit mode, the three steps) refuses the
    empty batch with a ValueError naming N, with the loops on and off, before any pass."""
    cfg = small_cfg(V=9, d=6, L=4, noise_vocab=3)
    problem = lib.make_problem(cfg, 0)
    tok = torch.zeros(0, cfg.L, dtype=torch.int32)
    none = torch.zeros(0, dtype=torch.long)
    A = native.pair_count(tok, none, cfg.V, cfg.V_in)
    assert torch.equal(A, torch.bincount(none, minlength=cfg.V * cfg.V_in).view(cfg.V, cfg.V_in))
    g = torch.Generator().manual_seed(0)
    D = torch.randn(cfg.V, cfg.V_in, generator=g, dtype=torch.float64)
    s_w = torch.randn(cfg.V, generator=g, dtype=torch.float64)
    counts, total = native.beta_counts(tok, none, D, s_w, cfg.n_keys)
    assert torch.equal(counts, torch.zeros(cfg.V_in, dtype=torch.float64)) and total == 0.0
    S = torch.randn(cfg.V_in, generator=g, dtype=torch.float64)
    ids = native.attend(tok, none, none, S, 1.0, None, cfg.V)
    assert ids.shape == (0,) and ids.dtype == torch.long
    empty = lib.Batch(tok, none, none)
    routes = (lambda b: count_tables(problem, b, fused=True), lambda b: count_tables(problem, b, fused=False),
              lambda b: limit_attn(problem, b), lambda b: lib.three_steps(problem, b, "limit"))
    for off in (False, True):
        with native.disabled() if off else contextlib.nullcontext():
            for route in routes:
                with pytest.raises(ValueError, match="N must be a positive integer"):
                    route(empty)


def _last_ids_batch(problem, seed):
    """A batch whose ids reach the top of every range: row 0 all V_in - 1 (the last noise token, or
    V - 1 without a noise vocabulary) around the informative token V - 1 (every score tied when the
    vocabulary is shared); row 1 the token whose label is V - 1 at position L - 1 among V_in - 1; then
    sampled rows (ties against the trigger and EOS come from the loops' rule, tested above)."""
    cfg = problem.cfg
    rest = lib.sample_batch(problem, 6, seed)
    tokens = torch.cat([torch.full((2, cfg.L), cfg.V_in - 1, dtype=torch.int32), rest.tokens])
    pos = torch.cat([torch.tensor([0, cfg.L - 1]), rest.pos])
    tokens[0, 0] = cfg.V - 1
    tokens[1, cfg.L - 1] = int(torch.argsort(problem.perm)[cfg.V - 1])      # Pi^-1(V - 1): label V - 1
    inf = tokens.gather(1, pos[:, None])[:, 0].long()
    batch = lib.Batch(tokens.contiguous(), pos, problem.perm[inf])
    assert int(batch.labels.max()) == cfg.V - 1 and int(batch.tokens.max()) == cfg.V_in - 1
    return batch


@needs_native
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kw", [dict(), dict(noise_vocab=3, eos_key=True),
                                dict(trigger_in_value=False, L=1)])
def test_one_sample_and_the_last_token_ids_equal_torch(dtype, kw):
    """N = 1 (one part, whatever the thread count) and ids V - 1, V_in - 1 and label V - 1 (the last row of
    every table the loops index without bounds checks): each loop against its torch primitive, exactly
    for the integer ones (pair counts, attended ids), and the limit mode's (G1, k, G3) with the loops on
    against off, to 1e-12 (float64) or 2e-5 (float32) relative: the tolerances of the route tests above
    (the loops add in another order; float32 carries 24 bits over sums of up to (V_in + 2) L terms)."""
    cfg = small_cfg(V=9, d=6, **({"L": 5} | kw), dtype=dtype)
    problem = lib.make_problem(cfg, 3)
    tol = 1e-12 if dtype == "float64" else 2e-5
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        last = _last_ids_batch(problem, 4)
        for batch in (lib.sample_batch(problem, 1, 4), last, last.slice(0, 1), last.slice(1, 2)):
            A = native.pair_count(batch.tokens, batch.informative, cfg.V, cfg.V_in)
            pairs = batch.informative[:, None] * cfg.V_in + batch.tokens.long()
            assert torch.equal(A.view(-1), torch.bincount(pairs.view(-1), minlength=cfg.V * cfg.V_in))
            g = torch.Generator().manual_seed(5)
            D = torch.randn(cfg.V, cfg.V_in, generator=g, dtype=problem.E.dtype)
            s_w = torch.randn(cfg.V, generator=g, dtype=problem.E.dtype)
            counts, total = native.beta_counts(batch.tokens, batch.informative, D, s_w, cfg.n_keys)
            beta = (D.double()[batch.informative[:, None], batch.tokens.long()].sum(1)
                    + s_w.double()[batch.informative]) / cfg.n_keys
            want = torch.zeros(cfg.V_in, dtype=torch.float64).index_add_(0, batch.tokens.reshape(-1).long(),
                                                                         beta.repeat_interleave(cfg.L))
            assert rel(counts, want) < 1e-12 and total == pytest.approx(float(beta.sum()), rel=1e-12)
            S = torch.randn(cfg.V_in, generator=g, dtype=problem.E.dtype)
            for bonus, s_eos in ((0.5, 0.0), (-5.0, 9.0), (float(S.max() - S[-1]), float(S.max()))):
                ids = native.attend(batch.tokens, batch.pos, batch.informative, S, bonus,
                                    s_eos if cfg.eos_key else None, cfg.V)
                group = attended_groups(problem, batch, S, torch.tensor(bonus, dtype=S.dtype),
                                        torch.tensor(s_eos, dtype=S.dtype))
                assert torch.equal(ids, batch.informative + group * cfg.V)
            assert native_applies(problem, batch)                     # the route below takes the loops
            with native.disabled():
                want = limit_attn(problem, batch)
            got = limit_attn(problem, batch)
            # (k is exactly 0 with one key: equal, where rel's float32 quotient 0 / 0 would be NaN)
            assert all(torch.equal(x, y) or rel(x, y) < tol for x, y in zip(got, want)), \
                [rel(x, y) for x, y in zip(got, want)]
    finally:
        torch.set_num_threads(before)
