"""Chapter 9's pair-statistic bound: the learners' directions equal their pair sums, the bound's quadratic is
the three steps' exact excess noise at their weights and below every member's, simulated noise sits above the
floor, and the shipped grid is whole and recomputes."""
import math

import numpy as np
import pytest
import torch

import lib
from lib.analysis import k_noise
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
