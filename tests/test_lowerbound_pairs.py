"""Chapter 9's pair-statistic bound: the learners' directions equal their pair sums, the bound's quadratic is
the three steps' exact excess noise at their weights and below every member's, simulated noise sits above the
floor, and the shipped grid is whole and recomputes."""
import math

import numpy as np
import pytest
import torch

import lib
from lib.analysis import k_noise
from lib.analysis import lowerbound_beyond as lb2
from lib.analysis import lowerbound_pairs as lp
from lib.core.task import Batch


@pytest.mark.parametrize("tin", [True, False])
def test_directions_are_their_pair_sums(tin):
    cfg = lib.TaskConfig(V=64, d=16, L=8, trigger_in_value=tin, dtype="float64", device="cpu")
    p = lib.make_problem(cfg, 3)
    n = 37
    b = lib.sample_batch(p, n, 3)
    got = lp.learner_directions(p, b, n)
    assert torch.allclose(got["three"], lp.learner_directions(p, b, n, lp.self_terms(p, b, cumulative=True))["three"])
    I, J = (t.reshape(-1) for t in torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij"))
    K, _ = k_noise.pair_kernel(p, Batch(b.tokens[I], b.pos[I], b.labels[I]), Batch(b.tokens[J], b.pos[J], b.labels[J]))
    K = K.reshape(n, n, -1)
    diag = torch.stack([K[i, i] for i in range(n)]).sum(0)
    want = {"three": K.sum((0, 1)), "no_self": K.sum((0, 1)) - diag, "split": K[n // 2:, : n // 2].sum((0, 1))}
    for key, w in want.items():
        assert float((got[key] - w).norm() / w.norm()) < 1e-12, key
    m = lp.pair_moments(p, 500)
    _, B = lp.pair_noise_floor(m, n)
    best = lp.best_direction(m, n, got, diag)               # even weights at the floor's self-pair share
    w = (1 - (1 + m["beta"]) * B) / (n * (n - 1)) * (K.sum((0, 1)) - diag) + B / n * diag
    assert float((best - w).norm() / w.norm()) < 1e-12
    k3 = lib.three_steps(p, b, mode="limit").k
    assert float(k3 @ got["three"] / (k3.norm() * got["three"].norm())) > 1 - 1e-12


@pytest.fixture(scope="module")
def moments():
    p = lib.make_problem(lib.TaskConfig(V=128, d=32, L=16), 7)
    return p, lp.pair_moments(p, 4000)


def test_the_three_steps_weights_give_chapter_5s_formula(moments):
    p, m = moments
    km = k_noise.k_noise_moments(p, samples=4000, seed=1)
    C1, C0 = k_noise.mean_coefficients(p)
    beta = m["beta"]
    for N in (2, 16, 300):
        want = k_noise.k_noise_variance(km, N)["perp"] * N ** 2 / (N + beta) ** 2 + (C1 * N + C0) / (N + beta) ** 2
        got = lp.member_noise(m, N, N * (N - 1), N)
        assert abs(got / want - 1) < 1e-6, (N, got, want)


def test_the_floor_is_the_minimum_and_falls_with_N(moments):
    _, m = moments
    rng = np.random.default_rng(0)
    prev = math.inf
    for N in (1, 2, 5, 40, 1000, 10 ** 5):
        X, B = lp.pair_noise_floor(m, N)
        assert X <= prev + 1e-12
        prev = X
        if N == 1:                 # one sample has no pairs: A = 0, so B = 1 / (1 + beta) and X is that member's noise
            assert abs(B * (1 + m["beta"]) - 1) < 1e-12
            assert abs(lp.member_noise(m, 1, 0.0, 1.0) - X) < 1e-9 * max(1, abs(X))
        if N > 1:
            A = 1 - (1 + m["beta"]) * B
            assert abs(lp.member_noise(m, N, A, B) - X) < 1e-9 * max(1, abs(X))
            for A_, B_ in rng.normal(size=(50, 2)):
                if abs(A_ + (1 + m["beta"]) * B_) > 1e-3:
                    assert lp.member_noise(m, N, A_, B_) >= X - 1e-9 * max(1, abs(X))
    assert lp.pair_ceiling(m, 10 ** 5) >= lp.pair_ceiling(m, 10)


def test_simulated_noise_is_above_the_floor(moments):
    p, m = moments
    E, z = p.E[: p.cfg.V].double(), p.z_trig.double()
    zz = float(z @ z)
    kinf = lib.analysis.margins.k_population(p).double()
    D = lib.analysis.margins.k_self_term(p).double()
    N, h = 64, 32
    floor, B_best = lp.pair_noise_floor(m, N)
    tot = {"three": (N * (N - 1), N), "no_self": (N * (N - 1), 0), "split": (h * (N - h), 0),
           "best": (1 - (1 + m["beta"]) * B_best, B_best)}
    ks = {k: [] for k in tot}
    for s in range(40):
        b = lib.sample_batch(p, N, 100 + s)
        d = lp.learner_directions(p, b, N)
        d["best"] = lp.best_direction(m, N, d, lp.self_terms(p, b))
        for k in tot:
            ks[k].append(d[k].double())
    for k, (A, B) in tot.items():
        Ek = A * kinf + B * D
        fl = np.mean([float((E @ (u - Ek - ((u - Ek) @ z) * z / zz)).var(correction=0)) for u in ks[k]])
        X = zz * (float((E @ Ek).var(correction=0)) + fl) / float(z @ Ek) ** 2 - m["inv_r2"]
        assert X > 0.9 * floor, (k, X, floor)           # 40 batches: the estimate's spread is about 10 %
        q = lp.member_noise(m, N, A, B)
        if k == "split":                                # uneven row and column sums: above its totals' quadratic
            assert X > 1.2 * q, (X, q)
        else:                                           # evenly spread weights: the quadratic is exact
            assert abs(X / q - 1) < 0.2, (k, X, q)
    assert lp.member_noise(m, N, *tot["best"]) == pytest.approx(floor, rel=1e-9)   # the best member attains it


def test_even_members_totals_count_their_pairs():
    """EVEN's totals (A, B) are the pair counts of its members' V-statistics, counted over the ordered pairs
    (n, m) of N samples: the three steps take all of them (A distinct pairs, B = N self-pairs), no_self the
    distinct ones only."""
    import itertools
    for N in (2, 5, 37):
        pairs = list(itertools.product(range(N), repeat=2))
        distinct, own = sum(n != m for n, m in pairs), sum(n == m for n, m in pairs)
        assert lp.EVEN["three"](N) == (distinct, own) and lp.EVEN["no_self"](N) == (distinct, 0)


def test_a_negative_total_is_the_negation(moments):
    _, m = moments
    for N, A, B in ((16, 3.0, 0.5), (200, 1.0, 0.0), (5, 0.0, 2.0)):
        assert lp.member_noise(m, N, -A, -B) == pytest.approx(lp.member_noise(m, N, A, B), rel=1e-12)
    with pytest.raises(ValueError, match="nonzero"):
        lp.member_noise(m, 10, 1 + m["beta"], -1.0)


def test_bad_arguments_name_the_parameter(moments):
    p, m = moments
    with pytest.raises(ValueError, match="threshold"):
        lp.pair_nstar(m, 1.0)
    with pytest.raises(ValueError, match="ms"):
        lp.pair_nstar([])
    with pytest.raises(ValueError, match="m must"):
        lp.pair_ceiling({"psi": 1.0}, 3)
    with pytest.raises(ValueError, match="A must be 0"):
        lp.member_noise(m, 1, 1.0, 0.0)
    with pytest.raises(ValueError, match="N must"):
        lp.learner_directions(p, lib.sample_batch(p, 8, 0), 9)
    with pytest.raises(ValueError, match="problems"):
        lp.pair_lower_bound(64, 16, 8, problems=0)
    with pytest.raises(ValueError, match="self_cumsum"):
        lp.learner_directions(p, lib.sample_batch(p, 8, 0), 8, torch.zeros(3, 2))


@pytest.mark.slow
def test_the_shipped_grid_is_whole_and_recomputes():
    import importlib.util
    import os
    rows = lp.shipped_pair_rows()
    keys = {(r["V"], r["d"], r["L"], r["trigger_in_value"]) for r in rows}
    assert len(keys) == 40 and len(rows) == 40 * 6
    spec = importlib.util.spec_from_file_location(
        "grid", os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "pair_bound_grid.py"))
    grid = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(grid)
    row = next(r for r in rows if (r["d"], r["L"], r["trigger_in_value"]) == (128, 8, False))
    new = grid.one((row["V"], row["d"], row["L"], row["trigger_in_value"], row["seed"], row["Ns"][-1], 8000))
    for k in (*lp.LEARNERS, lp.BEST):
        assert np.abs(np.array(new[k]) - row[k]).max() < 1e-3, k
    for k in ("psi", "self", "pair", "beta", "m2", "inv_r2"):
        assert abs(new["moments"][k] / row["moments"][k] - 1) < 1e-3, k


def test_model_table_is_the_gaussian_model_at_each_members_exact_noise():
    """model_table: for the three steps and the member without self-pairs, the N from which the mean over a point's
    problems of A(r) at their exact excess noise stays >= 0.99, within a grid step of an integer bisection done here."""
    from lib.analysis.lowerbound_attention import gaussian_mixture_accuracy
    rows = [r for r in lp.shipped_pair_rows() if (r["d"], r["L"]) == (64, 32)]
    table = lp.model_table(rows)
    assert len(table) == 2 and {t["trigger_in_value"] for t in table} == {True, False}
    totals = {"three": lambda N: (N * (N - 1), N), "no_self": lambda N: (N * (N - 1), 0)}
    for t in table:
        ms = [r["moments"] for r in rows if r["trigger_in_value"] == t["trigger_in_value"]]
        for k, tot in totals.items():
            def mean_acc(N):
                xs = [m["inv_r2"] + lp.member_noise(m, N, *tot(N)) for m in ms]
                return np.mean([gaussian_mixture_accuracy(math.sqrt(m["zz"] / x), 256, 32) for m, x in zip(ms, xs)])
            lo, hi = 2, 2 ** 15
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if mean_acc(mid) < 0.99 else (lo, mid)
            assert hi / 2 ** 0.25 <= t[k + "_model"] <= hi * 2 ** 0.25, (k, t[k + "_model"], hi)
    with_trigger = next(t for t in table if t["trigger_in_value"])
    assert with_trigger["no_self_model"] > 1.3 * with_trigger["three_model"]     # the self-pairs matter with the trigger in
    with pytest.raises(ValueError, match="rows"):
        lp.model_table(rows[:1])


@pytest.mark.parametrize("tin", [True, False])
def test_learners_beyond_the_class_are_step_2_with_their_memory(tin):
    """Each memory learner outside the class is step 2's gradient (the model's closed form, and autograd at a small
    value matrix) with the value matrix its permutation writes (the read-out learner, which no value matrix gives:
    a direct sum over the samples); with d >= V and many samples the assignment recovers Pi*,
    and the assigned memory is then the memory written with Pi*."""
    from lib.analysis.lowerbound import _dU, assigned_labels, cooccurrence, g1_from_counts, inversion_scores
    from lib.core.gradients import autograd_gradients, direct_gradients
    from lib.core.models import Params
    from lib.core.steps import direction
    cfg = lib.TaskConfig(V=48, d=16, L=6, trigger_in_value=tin, dtype="float64", device="cpu")
    p = lib.make_problem(cfg, 5)
    n = 300
    b = lib.sample_batch(p, n, 5)
    got = lb2.assigned_directions(p, b, n)
    C = cooccurrence(p, b)[0]
    pi = assigned_labels(p, inversion_scores(p, g1_from_counts(p, C, n)))
    assert got["recovered"] == float((pi == p.perm).double().mean())
    dU, q = _dU(p), p.z_eos
    E = p.E[: cfg.V].double()
    pi_c = assigned_labels(p, C - C.mean(0, keepdim=True))             # the table with column means removed
    assert got["recovered_decoded"] == float((pi_c == p.perm).double().mean())
    shifted = C + 3 * torch.arange(cfg.V, dtype=C.dtype)[None, :]        # a constant per column: G1 is unchanged
    assert torch.allclose(g1_from_counts(p, shifted, n), g1_from_counts(p, C, n), rtol=0, atol=1e-12)
    centred = shifted - shifted.mean(0, keepdim=True)                  # ... and so is what the decoded learner reads
    assert torch.allclose(centred, C - C.mean(0, keepdim=True), rtol=0, atol=1e-9)
    for key, labels in (("assigned_memory", pi), ("decoded", pi_c), ("told", p.perm)):
        M = dU[labels].T @ E                                           # sum_j a_{labels(j)} e_j^T
        zero = torch.zeros(cfg.d, cfg.d, dtype=torch.float64)
        g = direct_gradients(p, Params(M, zero), b, need_V=False, uniform_error=True).W_KQ
        want = -direction(g, q) * n
        assert float((got[key] - want).norm() / want.norm()) < 1e-12, key
        eps = 1e-7                                                     # the output error at a tiny memory is uniform's
        ga = autograd_gradients(p, Params(eps * M, zero), b).W_KQ
        assert float((got[key] + direction(ga, q) * n / eps).norm() / want.norm()) < 1e-4, key
    named = torch.empty(cfg.V, dtype=torch.long)
    named[pi] = torch.arange(cfg.V)
    # the read-out learner: read-out e_{named(y)} for label y; a sample's scores e_{x_t} . e_{named(y_n)}
    x, l = b.tokens.long(), b.pos.long()
    want = torch.zeros(cfg.d, dtype=torch.float64)
    for i in range(n):
        keys = E[x[i]].clone()
        keys[l[i]] += p.z_trig
        vals = keys if tin else E[x[i]]
        s = vals @ E[named[p.perm[x[i, l[i]]]]]
        want += ((s - s.mean())[:, None] * keys).mean(0)
    assert float((got["assigned_readout"] - want).norm() / want.norm()) < 1e-12
    big = lib.TaskConfig(V=16, d=32, L=4, trigger_in_value=tin, dtype="float64", device="cpu")
    pb = lib.make_problem(big, 1)
    bb = lib.sample_batch(pb, 3000, 1)
    full = lb2.assigned_directions(pb, bb, 3000)
    assert full["recovered"] == 1.0 and full["recovered_decoded"] == 1.0
    assert float((full["assigned_memory"] - full["told"]).norm() / full["told"].norm()) < 1e-12
    assert float((full["decoded"] - full["told"]).norm() / full["told"].norm()) < 1e-12
    Eb = pb.E[: big.V].double()                                        # recovered: read-out e_{x*} of the true token
    want = lp._step2(Eb, pb.z_trig.double(), bb.tokens.long(), bb.pos.long(), Eb, tin)
    assert float((full["assigned_readout"] - want).norm() / want.norm()) < 1e-12
    with pytest.raises(ValueError, match="counts"):
        lb2.assigned_directions(p, b, n, counts=C[:3])
    with pytest.raises(ValueError, match="N must"):
        lb2.assigned_directions(p, b, n + 1)


def test_beyond_table_reads_each_learner_and_the_bound_of_the_same_problems():
    cfg = lib.TaskConfig(V=64, d=32, L=8)
    rows = [lb2.beyond_row(cfg, s, 2 ** 9) for s in (0, 1)]
    pair = [{"V": 64, "d": 32, "L": 8, "trigger_in_value": True, "seed": s,
             "moments": lp.pair_moments(lib.make_problem(cfg, s), 400)} for s in (0, 1)]
    (t,) = lb2.beyond_table(rows, pair)
    assert t["bound"] == lp.pair_nstar([r["moments"] for r in pair])
    for k in lb2.BEYOND:
        assert t[k + "_lo"] <= t[k] <= t[k + "_hi"]
    assert t["told"] <= t["assigned_memory"]                           # told the permutation, it needs no more
    Ns = rows[0]["Ns"]
    i = max(j for j, N in enumerate(Ns) if N <= t["bound"])
    assert t["recovered_at_bound"] == pytest.approx(np.mean([r["recovered"][i] for r in rows]))
    with pytest.raises(ValueError, match="missing seeds"):
        lb2.beyond_table(rows, pair[:1])


@pytest.mark.slow
def test_the_shipped_beyond_grid_is_whole_and_recomputes():
    """The learners outside the class were run on exactly the pair grid's problems, and one row recomputes."""
    rows, pair = lb2.shipped_beyond_rows(), lp.shipped_pair_rows()
    key = lambda r: (r["V"], r["d"], r["L"], r["trigger_in_value"], r["seed"])    # noqa: E731
    assert sorted(map(key, rows)) == sorted(map(key, pair)) and len(rows) == 240
    assert all(r["Ns"] == p["Ns"] for r, p in zip(sorted(rows, key=key), sorted(pair, key=key)))
    row = next(r for r in rows if (r["d"], r["L"], r["trigger_in_value"]) == (48, 16, True))
    new = lb2.beyond_row(lib.TaskConfig(V=256, d=48, L=16, trigger_in_value=True), row["seed"], row["Ns"][-1])
    for k in (*lb2.BEYOND, "recovered", "recovered_decoded"):
        assert np.abs(np.array(new[k]) - row[k]).max() < 1e-3, k
