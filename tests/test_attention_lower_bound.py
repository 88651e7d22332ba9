"""The attention lower bound N_lower(V, d, L, t) (lib.analysis.lowerbound_attention, re-exported by
lib.lowerbound; the theorem of chapter 9): validation, the root it computes, monotonicity in t, N,
d and L, the Gaussian accuracy against simulation, the theorem's steps checked on the three steps' own k
(rotation equivariance, theta = 0 best, the reduction's noise floors below the exact moments), and the bound
below measured three-step critical N and its ceiling above measured mean accuracies."""
import dataclasses
import math

import numpy as np
import pytest
import torch

import lib
from lib import lowerbound as lb
from lib.analysis import lowerbound_attention as la
from lib.analysis.margins import attention_accuracy, measured_attention_nstar


@pytest.mark.parametrize("kwargs, name", [
    (dict(V=1, d=32, L=16), "V"), (dict(V=64.5, d=32, L=16), "V"), (dict(V="64", d=32, L=16), "V"),
    (dict(V=64, d=0, L=16), "d"), (dict(V=64, d=None, L=16), "d"), (dict(V=64, d=-3, L=16), "d"),
    (dict(V=64, d=32, L=1), "L"), (dict(V=64, d=32, L=True), "L"), (dict(V=64, d=32, L=10 ** 9), "L"),
    (dict(V=64, d=32, L=16, threshold=1.0), "threshold"), (dict(V=64, d=32, L=16, threshold=0.0), "threshold"),
    (dict(V=64, d=32, L=16, threshold=float("nan")), "threshold"), (dict(V=64, d=32, L=16, threshold="0.9"), "threshold"),
    (dict(V=64, d=32, L=16, threshold=True), "threshold"),
])
def test_validation_names_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        lb.attention_lower_bound(**kwargs)


def test_other_entry_points_validate():
    with pytest.raises(ValueError, match="N"):
        la.excess_noise_floor(0, 128, 32, 16)
    with pytest.raises(ValueError, match="N"):
        la.accuracy_ceiling([4, float("inf")], 128, 32, 16)
    with pytest.raises(ValueError, match="r"):
        la.gaussian_mixture_accuracy(float("nan"), 128, 16)
    with pytest.raises(ValueError, match="L"):
        la.distinct_law(128, 10 ** 7)


@pytest.mark.slow
def test_reexported_float_and_large_sizes_cheap():
    assert lb.attention_lower_bound is la.attention_lower_bound
    v = lb.attention_lower_bound(128, 32, 16)
    assert isinstance(v, float) and 1 < v < 100
    # huge V and d allocate nothing of their size; the largest allowed L stays cheap
    assert math.isfinite(lb.attention_lower_bound(10 ** 9, 10 ** 6, 64))
    assert lb.attention_lower_bound(4096, 256, la.L_MAX) > lb.attention_lower_bound(4096, 256, 64)


def test_distinct_law_against_enumeration():
    import itertools
    V, L = 5, 4
    counts = np.zeros(L)
    for x in range(V):
        for others in itertools.product(range(V), repeat=L - 1):
            counts[len(set(others) - {x})] += 1
    assert np.allclose(la.distinct_law(V, L), counts / counts.sum(), atol=1e-12)


def test_least_sizes_are_accepted_and_exact():
    """The guards' least values V = 2, L = 2 (L = 1 for the rival law) run and give the hand-derived law:
    one other token, which differs from the informative one with probability 1/2, so P(K = 0) = P(K = 1) = 1/2 and
    A(r) = 1/2 + 1/2 P(X0 + r > X1) = 1/2 + Phi(r / sqrt 2) / 2 (exact at the table's nodes, within its
    linear interpolation between them). One below each least value is refused, naming it."""
    assert np.allclose(la.distinct_law(2, 2), [0.5, 0.5], atol=1e-15)
    assert la.distinct_law(5, 1).tolist() == [1.0]                     # L = 1: no other token, K = 0
    with pytest.raises(ValueError, match="L"):
        la.distinct_law(5, 0)
    phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))                 # noqa: E731
    for r in (-2.0, 0.0, 0.5, 1.0, 3.0, 0.37, -1.3):
        assert abs(la.gaussian_mixture_accuracy(r, 2, 2) - (0.5 + 0.5 * phi(r / math.sqrt(2)))) < 1e-5, r
    assert 0 < lb.attention_lower_bound(2, 64, 2) < math.inf
    for V, L, name in ((1, 2, "V"), (2, 1, "L")):
        with pytest.raises(ValueError, match=name):
            la.gaussian_mixture_accuracy(0.0, V, L)


@pytest.mark.slow
def test_gaussian_mixture_accuracy_against_simulation():
    """A(r) = E_K g_K(r): simulate K from the token draws and Gaussian scores."""
    g = np.random.default_rng(0)
    V, L, n = 32, 16, 200_000
    for r in (1.0, 3.0):
        tok = g.integers(0, V, size=(n, L))
        K = np.array([len(set(row[1:]) - {row[0]}) for row in tok])
        X0 = g.standard_normal(n) + r
        best = np.full(n, -np.inf)
        for k in range(1, L):
            best = np.where(K >= k, np.maximum(best, g.standard_normal(n)), best)
        sim = float((X0 > best).mean())
        assert abs(sim - la.gaussian_mixture_accuracy(r, V, L)) < 4 * math.sqrt(sim * (1 - sim) / n) + 2e-4


def test_root_and_ceiling():
    V, d, L, t = 128, 32, 16, 0.99
    N = lb.attention_lower_bound(V, d, L, t)
    q = 1 / la.critical_ratio(V, L, t) ** 2 - 1 / d
    assert abs(la.excess_noise_floor(N, V, d, L) / q - 1) < 1e-8
    assert abs(la.accuracy_ceiling(N, V, d, L) - t) < 1e-4
    assert la.accuracy_ceiling(0.8 * N, V, d, L) < t - 1e-3
    # the ceiling rises with N, and the critical ratio with the threshold
    c = la.accuracy_ceiling(np.geomspace(0.5, 4096, 40), V, d, L)
    assert np.all(np.diff(c) >= 0) and c[0] < 0.9
    assert la.critical_ratio(V, L, 0.9) < la.critical_ratio(V, L, 0.99) < la.critical_ratio(V, L, 0.999)


@pytest.mark.slow
def test_monotone_and_moves_with_L_and_d():
    vals = [lb.attention_lower_bound(128, 32, 16, t) for t in (0.5, 0.8, 0.9, 0.99)]
    assert all(a < b for a, b in zip(vals, vals[1:]))
    along_L = [lb.attention_lower_bound(128, 32, L) for L in (8, 16, 32, 64)]
    along_d = [lb.attention_lower_bound(128, d, 16) for d in (24, 32, 48, 64, 96)]
    assert all(b > 2 * a for a, b in zip(along_L, along_L[1:]))       # grows with L
    assert all(a > b for a, b in zip(along_d, along_d[1:]))           # falls with d
    assert lb.attention_lower_bound(128, 48, 32) < lb.attention_lower_bound(128, 32, 32)
    assert math.isinf(lb.attention_lower_bound(128, 16, 16))          # the population wall d < r_t^2
    assert lb.attention_lower_bound(256, 32, 16) != lb.attention_lower_bound(128, 32, 16)


def _problem(V, d, L, seed):
    return lib.make_problem(lib.TaskConfig(V=V, d=d, L=L), seed)


def test_step_i_the_step2_direction_is_rotation_equivariant():
    """Premise of step (i): k(R E, R z) = R k(E, z) on the same batch (the class's reduction is exact)."""
    p = _problem(64, 16, 8, 3)
    b = lib.sample_batch(p, 32, 3)
    R, _ = torch.linalg.qr(torch.randn(16, 16, generator=torch.Generator().manual_seed(5), dtype=p.E.dtype))
    k = lib.three_steps(p, b, mode="limit").k
    kr = lib.three_steps(dataclasses.replace(p, E=p.E @ R.T, z_trig=R @ p.z_trig), b, mode="limit").k
    assert float((kr - R @ k).norm() / k.norm()) < 1e-5
    assert float((kr - k).norm() / k.norm()) > 0.1                   # the rotation did move k


def test_step_ii_theta_zero_is_best_on_the_three_steps_k():
    """Mixing a uniform direction orthogonal to Y into k_hat = Y lowers the mean attention accuracy."""
    thetas = (0.0, 0.3, 0.6, 1.2)
    acc = np.zeros((6, len(thetas)))
    for s in range(6):
        p = _problem(128, 32, 16, s)
        Y = lib.three_steps(p, lib.sample_batch(p, 16, s), mode="limit").k
        y = Y / Y.norm()
        g = torch.Generator().manual_seed(s)
        for i, th in enumerate(thetas):
            vals = []
            for _ in range(4):
                w = torch.randn(32, generator=g, dtype=Y.dtype)
                w = w - (w @ y) * y
                vals.append(attention_accuracy(p, math.cos(th) * y + math.sin(th) * w / w.norm()))
            acc[s, i] = np.mean(vals)
    m = acc.mean(0)
    assert all(a > b for a, b in zip(m, m[1:])), m


def test_step_iii_floors_below_exact_moments():
    """Q_lo <= Q[s] (the self-pair's token-score noise, exact moment) and B_lo <= the exact bias, per problem."""
    from lib.analysis import k_noise as kn
    from lib.analysis import margins as mg
    for (V, d, L, s) in ((128, 32, 16, 0), (64, 32, 8, 1)):
        p = _problem(V, d, L, s)
        m = kn.k_noise_moments(p, samples=2000, seed=1)["perp"]
        assert m["self"] > 1.5 * la.self_pair_floor(V, d, L)
        z = p.z_trig
        D = mg.k_self_term(p)
        Dp = D - (D @ z) / (z @ z) * z
        Bx = float((p.E @ Dp).var(correction=0)) / float(z @ mg.k_population(p)) ** 2 * float(z @ z)
        assert Bx > la.bias_floor(V, d, L)


@pytest.mark.parametrize("V, d, L", [(128, 32, 16), (128, 32, 32), (64, 32, 8)])
def test_bound_below_measured_three_step_nstar(V, d, L):
    ns = [measured_attention_nstar(lib.TaskConfig(V=V, d=d, L=L), seed=s, n_min=1, n_max=2 ** 12) for s in range(3)]
    gm = float(np.exp(np.mean(np.log(ns))))
    nl = lb.attention_lower_bound(V, d, L)
    print(f"\n(V, d, L) = {(V, d, L)}: three-step N* {ns}, geo-mean {gm:.1f}, N_lower {nl:.2f}, ratio {gm / nl:.2f}")
    assert nl <= gm <= 16 * nl


def test_ceiling_above_measured_mean_accuracy():
    V, d, L, P = 128, 32, 32, 8
    for N in (16, 64):
        accs = []
        for s in range(P):
            p = _problem(V, d, L, s)
            accs.append(attention_accuracy(p, lib.three_steps(p, lib.sample_batch(p, N, s), mode="limit").k))
        assert np.mean(accs) < la.accuracy_ceiling(N, V, d, L)


@pytest.mark.parametrize("V, d, L, N, seed", [(64, 16, 8, 32, 5), (32, 48, 12, 7, 1)])
def test_step2_direction_is_the_three_steps_k_and_rotation_equivariant(V, d, L, N, seed):
    p = lib.make_problem(lib.TaskConfig(V=V, d=d, L=L, dtype="float64", device="cpu"), seed)
    b = lib.sample_batch(p, N, seed)
    k, Y = lib.three_steps(p, b, mode="limit").k, lb.step2_direction(p, b)
    assert float(k @ Y / (k.norm() * Y.norm())) > 1 - 1e-12          # same direction, positive factor
    R, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    pr = dataclasses.replace(p, E=p.E @ R.T, z_trig=R @ p.z_trig)
    assert float((lb.step2_direction(pr, b) - R @ Y).norm() / Y.norm()) < 1e-12


def test_step2_direction_refuses_the_trigger_out_of_the_value_path():
    p = lib.make_problem(lib.TaskConfig(V=32, d=16, L=8, trigger_in_value=False, dtype="float64", device="cpu"), 0)
    with pytest.raises(ValueError, match="trigger_in_value"):
        lb.step2_direction(p, lib.sample_batch(p, 4, 0))


# ----------------------------------------------------------------------------- the measured sides of part (ii)

def test_class_accuracy_path_is_the_three_steps_accuracy_along_nested_batches():
    from lib.analysis.margins import attention_accuracy
    cfg = lib.TaskConfig(V=32, d=8, L=6, dtype="float64", device="cpu")
    Ns = [1, 2, 7, 40, 300, 2100]
    out = lb.class_accuracy_path(cfg, 4, Ns)
    p = lib.make_problem(cfg, 4)
    b = lib.sample_batch(p, Ns[-1], 4)
    assert out["N"] == Ns
    for i, N in enumerate(Ns):
        Y = lb.step2_direction(p, b.slice(0, N))
        k = lib.three_steps(p, b.slice(0, N), mode="limit").k
        assert out["acc"][i] == attention_accuracy(p, Y) == attention_accuracy(p, k)
        assert bool(out["negative"][i]) == bool(float(p.z_trig @ Y) < 0)
        assert out["best"][i] == (1.0 if out["negative"][i] else out["acc"][i])


def test_class_accuracy_path_best_is_one_exactly_where_y_points_away():
    cfg = lib.TaskConfig(V=64, d=16, L=32, dtype="float64", device="cpu")
    negs = 0
    for s in range(6):
        out = lb.class_accuracy_path(cfg, s, [1, 2, 3, 4, 6, 8])
        assert ((out["best"] == 1.0) | ~out["negative"]).all() and (out["best"] >= out["acc"]).all()
        negs += int(out["negative"].sum())
    assert negs > 0                                  # at N of a few samples z . Y < 0 does happen


@pytest.mark.parametrize("kwargs, match", [
    (dict(cfg="V=32"), "cfg"),
    (dict(cfg=lib.TaskConfig(V=32, d=8, L=6, trigger_in_value=False)), "trigger_in_value"),
    (dict(cfg=lib.TaskConfig(V=32, d=8, L=6), Ns=[4, 2]), "Ns"),
    (dict(cfg=lib.TaskConfig(V=32, d=8, L=6), Ns=[2, 2, 3]), "Ns"),          # a repeated N: not strictly increasing
    (dict(cfg=lib.TaskConfig(V=32, d=8, L=6), Ns=[]), "Ns"),
    (dict(cfg=lib.TaskConfig(V=32, d=8, L=6), Ns=[0, 3]), "Ns"),
    (dict(cfg=lib.TaskConfig(V=32, d=8, L=6), Ns="123"), "Ns"),
    (dict(cfg=lib.TaskConfig(V=32, d=8, L=6), Ns=[10 ** 12]), "Ns"),
    (dict(cfg=lib.TaskConfig(V=32, d=8, L=6), seed=-1), "seed"),
])
def test_class_accuracy_path_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        lb.class_accuracy_path(**kwargs)


def test_reduction_constants_are_the_exact_moments_over_the_floors():
    from lib.analysis import k_noise
    cfg = lib.TaskConfig(V=64, d=16, L=8)
    r = lb.reduction_constants(cfg, 2, samples=2000)
    p = lib.make_problem(cfg, 2)
    m = k_noise.k_noise_moments(p, samples=2000, seed=1)["perp"]
    assert r["self"] == pytest.approx(m["self"] / la.self_pair_floor(64, 16, 8), rel=1e-12)
    assert r["pair"] == m["pair"] >= 0 and r["bias"] > 0
    assert r["dropped"] == pytest.approx(m["pair"] + 2 * m["cross"], rel=1e-12)
    with pytest.raises(ValueError, match="samples"):
        lb.reduction_constants(cfg, 0, samples=2)
    with pytest.raises(ValueError, match="trigger"):
        lb.reduction_constants(lib.TaskConfig(V=64, d=16, L=8, trigger_in_value=False), 0)


def test_reduction_bias_is_the_perp_form_of_the_self_pair_mean():
    """"bias" times its floor is B_exact, the spread over the tokens of e_j . D_perp in units mu_inf^2 / |z|^2:
    the same through k_noise's token-score form 'perp' (D projected off z, scores centred over the tokens),
    with mu_inf = z . k_inf."""
    from lib.analysis import k_noise, margins
    cfg = lib.TaskConfig(V=64, d=16, L=8)
    r = lb.reduction_constants(cfg, 2, samples=8)
    p = lib.make_problem(cfg, 2)
    D, z = margins.k_self_term(p), p.z_trig
    want = k_noise._forms(p)["perp"](D[None], D[None]) * float(z @ z) / float(z @ margins.k_population(p)) ** 2
    assert r["bias"] * la.bias_floor(64, 16, 8) == pytest.approx(want, rel=1e-5)     # float32 problem


def test_theta_scan_rules_are_unit_vectors_at_angle_theta_from_y(monkeypatch):
    """Each randomised rule k_hat = cos(theta) Y/|Y| + sin(theta) W (W a unit vector orthogonal to Y) the scan
    scores is a unit vector whose component along Y/|Y| is cos(theta): read from the directions it hands to
    attention_accuracy, Y the three steps' k of the same batch."""
    import lib.analysis.margins as margins
    cfg = lib.TaskConfig(V=64, d=16, L=8)
    p = lib.make_problem(cfg, 1)
    Y = lib.three_steps(p, lib.sample_batch(p, 32, 1), mode="limit").k.double()
    assert abs(float(Y.norm()) - 1) > 0.1                                # not a unit vector already
    seen = []
    monkeypatch.setattr(margins, "attention_accuracy", lambda prob, k: seen.append(k.double()) or 0.5)
    thetas = (0.0, 0.3, 1.2, math.pi / 2)
    lb.theta_scan(cfg, 32, 1, thetas=thetas, draws=2)
    assert len(seen) == 1 + 2 * 3
    for k, th in zip(seen, (0.0, 0.3, 0.3, 1.2, 1.2, math.pi / 2, math.pi / 2)):
        assert abs(float(k.norm()) - 1) < 1e-5 and abs(float(k @ Y / Y.norm()) - math.cos(th)) < 1e-5, th


# (1, 0, 1): N = 1, seed 0 and one draw, the smallest arguments theta_scan allows
@pytest.mark.parametrize("N, seed, draws", [(32, 1, 3), (1, 0, 1)])
def test_theta_scan_ends_are_y_and_minus_y(N, seed, draws):
    from lib.analysis.margins import attention_accuracy
    cfg = lib.TaskConfig(V=64, d=16, L=8)
    acc = lb.theta_scan(cfg, N, seed, thetas=(0.0, 0.3, math.pi), draws=draws)
    p = lib.make_problem(cfg, seed)
    k = lib.three_steps(p, lib.sample_batch(p, N, seed), mode="limit").k
    assert acc[0] == pytest.approx(attention_accuracy(p, k / k.norm()), abs=1e-12)
    assert acc[2] == pytest.approx(attention_accuracy(p, -k / k.norm()), abs=1e-12)
    assert 0 <= acc[1] <= 1
    for bad, match in ((dict(thetas=(4.0,)), "thetas"), (dict(thetas=()), "thetas"), (dict(draws=0), "draws"), (dict(N=0), "N")):
        kw = dict(cfg=cfg, N=32, seed=0) | bad
        with pytest.raises(ValueError, match=match):
            lb.theta_scan(**kw)


@pytest.mark.parametrize("change, match", [(dict(tied=True), "tied"), (dict(embedding="sphere"), "embedding"),
                                           (dict(trigger_in_value=False), "trigger_in_value")])
def test_the_class_functions_refuse_settings_outside_the_theorem(change, match):
    cfg = lib.TaskConfig(V=32, d=8, L=6, **change)
    p = lib.make_problem(cfg, 0)
    for call in (lambda: lb.class_accuracy_path(cfg, 0, [1, 2]), lambda: lb.reduction_constants(cfg, 0),
                 lambda: lb.theta_scan(cfg, 4, 0), lambda: lb.step2_direction(p, lib.sample_batch(p, 4, 0))):
        with pytest.raises(ValueError, match=match):
            call()


@pytest.mark.parametrize("threshold", [0.9, 0.99])
def test_measured_attention_nstar_on_one_point_per_octave(threshold):
    # the coarsest grid (one point per doubling) is allowed, and the bisection's answer is bracketed there:
    # reached at N, not at N / 2 (the same problem and nested batches as attention_accuracy_at)
    from lib.analysis.margins import attention_accuracy_at
    cfg = lib.TaskConfig(V=16, d=16, L=4)
    n = measured_attention_nstar(cfg, threshold=threshold, n_min=1, n_max=2 ** 10, points_per_octave=1)
    assert math.isfinite(n) and n == 2 ** round(math.log2(n)) and n > 1
    assert attention_accuracy_at(cfg, int(n)) >= threshold > attention_accuracy_at(cfg, int(n) // 2)
