"""lib.lowerbound (chapter 9): every closed form against brute force or simulation."""

import itertools
import math

import numpy as np
import pytest
import torch

import lib
from lib import lowerbound as lb
from lib.theory import gaussian_attention_accuracy

from conftest import small_cfg


# ----------------------------------------------------------------------------- counting

@pytest.mark.parametrize("V", [3, 4, 5])
def test_counting_bits_is_a_valid_bound_and_tight_at_zero_errors(V):
    perms = np.array(list(itertools.permutations(range(V))))
    maps = np.array(list(itertools.product(range(V), repeat=V)))
    wrong = (maps[:, None, :] != perms[None, :, :]).sum(-1)
    for k in range(V + 1):
        exact = math.log2(len(perms) / (wrong <= k).sum(1).max())     # the exact covering bound
        t = 1 - k / V
        assert lb.counting_bits(V, t) <= exact + 1e-9
        if k in (0, V - 1, V):
            assert lb.counting_bits(V, t) == pytest.approx(exact, abs=1e-9)


def test_counting_bits_at_full_recall_is_log2_factorial():
    for V in (1, 2, 10, 57):
        assert lb.counting_bits(V) == pytest.approx(math.log2(math.factorial(V)), rel=1e-12, abs=1e-12)


def test_counting_capacity_is_the_largest_fitting_V():
    for params, bits, t in ((64, 1, 1.0), (100, 8, 0.9), (16 * 16, 32, 1.0), (3, 1, 1.0)):
        V = lb.counting_capacity(params, bits, t)
        assert lb.counting_bits(V, t) <= params * bits
        assert all(lb.counting_bits(W, t) > params * bits for W in range(V + 1, V + 40))


# ----------------------------------------------------------------------------- coverage

@pytest.mark.parametrize("N,V", [(0, 3), (1, 3), (4, 3), (5, 4), (6, 2)])
def test_seen_distribution_matches_enumeration(N, V):
    p = np.zeros(V + 1)
    for seq in itertools.product(range(V), repeat=N):
        p[len(set(seq))] += 1
    p /= V ** N
    assert np.allclose(lb.seen_distribution(N, V), p, atol=1e-12)


def test_coverage_accuracy_matches_the_lookup_estimator_exactly():
    # enumerate every training sequence of informative tokens and every permutation (V = 4, N = 3):
    # the look-up estimator guesses unseen tokens by a uniform bijection onto the unseen labels
    V, N = 4, 3
    total = 0.0
    for seq in itertools.product(range(V), repeat=N):
        S = len(set(seq))
        total += (S + (1.0 if S < V else 0.0)) / V               # expected correct tokens, over the guess
    assert lb.coverage_accuracy(N, V) == pytest.approx(total / V ** N, abs=1e-12)


def test_coverage_accuracy_matches_simulation():
    g = torch.Generator().manual_seed(0)
    V, N, reps = 16, 30, 20000
    seen = torch.zeros(reps, V).scatter_(1, torch.randint(V, (reps, N), generator=g), 1.0).sum(1)
    unseen = V - seen
    hits = torch.binomial(unseen, torch.where(unseen > 0, 1 / unseen.clamp_min(1), torch.zeros_like(unseen)),
                          generator=g)
    mc = float(((seen + hits) / V).mean())
    assert abs(mc - lb.coverage_accuracy(N, V)) < 4 * math.sqrt(0.25 / (reps * V)) + 1e-3


def test_coverage_nstar_solves_the_bound_and_lower_bounds_the_exact_one():
    for V, t in ((32, 0.99), (128, 0.9), (10, 0.95)):
        N = lb.coverage_nstar(V, t)
        assert 1 - (1 - 1 / V) ** N + 1 / V == pytest.approx(t, abs=1e-12)
        Ne = lb.coverage_exact_nstar(V, t)
        assert Ne >= N
        assert lb.coverage_accuracy(Ne, V) >= t > lb.coverage_accuracy(Ne - 1, V)
        assert lb.coverage_accuracy(math.floor(N), V) < t        # below the closed form: never enough
    assert lb.coverage_nstar(4, 0.2) == 0.0                       # t <= 1/V: nothing needed


def test_coverage_nstars_at_the_least_vocabulary():
    """V = 2, the least V the N* functions accept, by hand: the bound 1 - 2^-N + 1/2 = 0.99 at
    N = log2(1/0.51); exactly, N = 0 leaves accuracy 1/2 (a guess) and N = 1 gives 1 (one token seen,
    the other's label forced), so the exact N* is 1. V = 1 is refused, naming V."""
    assert lb.coverage_nstar(2, 0.99) == pytest.approx(math.log2(1 / 0.51), rel=1e-12)
    assert lb.coverage_exact_nstar(2, 0.99) == 1
    for f in (lb.coverage_nstar, lb.coverage_exact_nstar):
        with pytest.raises(ValueError, match="V"):
            f(1, 0.99)


def test_bayes_accuracy_of_seen_counts():
    assert lb.bayes_accuracy(torch.tensor([1.0, 0.0, 2.0, 0.0])) == pytest.approx(2 / 4 + 1 / 4)
    assert lb.bayes_accuracy(torch.tensor([1.0, 0.0, 2.0])) == 1.0   # V - 1 seen: the last label is forced
    assert lb.bayes_accuracy(torch.tensor([1.0, 3.0, 2.0])) == 1.0


# ----------------------------------------------------------------------------- first-gradient statistics

@pytest.mark.parametrize("tiv", [False, True])
def test_g1_from_counts_equals_the_first_step(tiv):
    cfg = small_cfg(V=9, d=6, L=5, trigger_in_value=tiv)
    p = lib.make_problem(cfg, 2)
    b = lib.sample_batch(p, 250, 2)
    C, n = lb.cooccurrence(p, b)
    G1 = lb.g1_from_counts(p, C, b.N)
    assert torch.allclose(G1, lib.three_steps(p, b).G1, rtol=1e-12, atol=1e-14)
    # and the definition: (1/N) sum_n (u_{y_n} - u_bar) obar_n^T on the direct route
    _, v = lib.keys_values(p, b)
    direct = (p.U[b.labels] - p.u_bar).T @ v.mean(1) / b.N
    assert torch.allclose(G1, direct, rtol=1e-12, atol=1e-14)
    assert torch.equal(n, torch.bincount(b.informative, minlength=cfg.V).double())


@pytest.mark.parametrize("tiv", [True, False])
def test_g1_from_counts_at_one_sample(tiv):
    """N = 1, the least N it accepts: one sample's G1 is (u_y - u_bar) obar^T, obar the mean of its
    values (its tokens' embeddings, and z / L with the trigger in the value path), as in the first
    step; N = 0 is refused, naming N."""
    cfg = small_cfg(V=9, d=6, L=5, trigger_in_value=tiv)
    p = lib.make_problem(cfg, 4)
    b = lib.sample_batch(p, 1, 4)
    C, _ = lb.cooccurrence(p, b)
    obar = p.E[b.tokens[0].long()].mean(0) + (p.z_trig / cfg.L if tiv else 0)
    direct = torch.outer(p.U[b.labels[0]] - p.u_bar, obar)
    assert torch.allclose(lb.g1_from_counts(p, C, 1), direct, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="N"):
        lb.g1_from_counts(p, C, 0)


def test_cooccurrence_forgets_positions():
    cfg = small_cfg(V=6, d=4, L=5)
    p = lib.make_problem(cfg, 0)
    b = lib.sample_batch(p, 200, 0)
    moved = lib.Batch(b.tokens, (b.pos + 2) % cfg.L, b.labels)       # same labels, triggers elsewhere
    assert torch.equal(lb.cooccurrence(p, b)[0], lb.cooccurrence(p, moved)[0])
    C, _ = lb.cooccurrence(p, b)
    assert torch.equal(C.sum(1), cfg.L * torch.bincount(b.labels, minlength=cfg.V).double())


def test_inversion_recovers_the_table_when_d_is_at_least_V():
    cfg = small_cfg(V=6, d=8, L=4, trigger_in_value=False)
    p = lib.make_problem(cfg, 1)
    b = lib.sample_batch(p, 300, 1)
    C, _ = lb.cooccurrence(p, b)
    N, L, V = b.N, cfg.L, cfg.V
    Ch = (C - C.mean(0, keepdim=True)) / (N * L)                     # (I - 11^T/V) C / (N L)
    want = Ch - (L - 1) / (L * V) * Ch.sum(1, keepdim=True)
    got = lb.inversion_scores(p, lb.g1_from_counts(p, C, N))
    assert torch.allclose(got, want, atol=1e-12)


def test_matched_scores_are_the_memory_written_at_known_positions():
    cfg = small_cfg(V=7, d=5, L=4, trigger_in_value=False)
    p = lib.make_problem(cfg, 4)
    b = lib.sample_batch(p, 120, 4)
    _, n = lb.cooccurrence(p, b)
    a = p.U - p.u_bar
    M = a[b.labels].T @ p.E[b.informative]                            # sum_n a_{y_n} e_{x*_n}^T
    assert torch.allclose(lb.matched_scores(p, n), a @ M @ p.E.T, atol=1e-12)
    assert torch.allclose(lb.readout_scores(p, M), a @ M @ p.E.T, atol=1e-12)


def test_token_accuracy_counts_correct_argmax():
    cfg = small_cfg(V=5, d=4, L=3)
    p = lib.make_problem(cfg, 0)
    S = torch.zeros(5, 5, dtype=torch.float64)
    S[p.perm, torch.arange(5)] = 1.0
    assert lb.token_accuracy(p, S) == 1.0
    S[:, :2] = 0
    S[(p.perm[:2] + 1) % 5, torch.arange(2)] = 1.0
    assert lb.token_accuracy(p, S) == pytest.approx(3 / 5)


def test_estimator_nstars_on_the_grid_match_direct_evaluation():
    cfg = lib.TaskConfig(V=8, d=16, L=4, trigger_in_value=False, device="cpu")
    Ns, accs = lb.accuracy_curves(cfg, seed=3, n_min=4, n_max=256)
    assert Ns == lb.n_grid(4, 256)
    p = lib.make_problem(cfg, 3)
    b = lib.sample_batch(p, 256, 3)
    for i in (0, len(Ns) // 2, len(Ns) - 1):
        N = Ns[i]
        C, n = lb.cooccurrence(p, b.slice(0, N))
        assert accs["bayes"][i] == lb.bayes_accuracy(n)
        assert accs["inversion"][i] == lb.token_accuracy(p, lb.inversion_scores(p, lb.g1_from_counts(p, C, N)))
    out = lb.estimator_nstars(cfg, 0.99, seed=3, n_min=4, n_max=256)
    for e in lb.ESTIMATORS:
        assert out[e] == lb.first_stable(Ns, accs[e], 0.99)


def test_first_stable_and_grid():
    assert lb.first_stable([1, 2, 3, 4], [0.5, 1.0, 0.9, 1.0], 0.95) == 4
    assert lb.first_stable([1, 2, 3], [0.99, 0.99, 0.99], 0.95) == 1
    assert lb.first_stable([1, 2, 3], [0.99, 0.99, 0.5], 0.95) is None
    g = lb.n_grid(16, 256, 4)
    assert g[0] == 16 and g[-1] == 256 and len(g) == 17 and g == sorted(set(g))


# ----------------------------------------------------------------------------- the heuristic

def test_leakage_matches_projected_planted_tables():
    # the planted table alone (one count per fact, no count noise), seen through the inversion's projections
    g = np.random.default_rng(0)
    V, d = 64, 40
    rc, rr = [], []
    for _ in range(12):
        E, U = g.standard_normal((V, d)), g.standard_normal((V, d))
        A = U - U.mean(0)
        perm = g.permutation(V)
        P = np.zeros((V, V)); P[perm, np.arange(V)] = 1
        Ch = np.linalg.pinv(A.T) @ A.T @ P @ E @ np.linalg.pinv(E)
        corr = Ch[perm, np.arange(V)]
        riv = np.delete(Ch.T.ravel(), np.arange(V) * V + perm)
        sig = corr.mean()
        rc.append(corr.var() / sig ** 2); rr.append(riv.var() / sig ** 2)
    rival, correct = lb.leakage(V, d)
    assert np.mean(rr) == pytest.approx(rival, rel=0.15)
    assert np.mean(rc) == pytest.approx(correct, rel=0.2)
    assert lb.leakage(32, 32) == (0.0, 0.0)


def test_leakage_rival_is_its_closed_form_down_to_two_tokens():
    """The rival entry's two single leaks and V - 2 double leaks sum to (V - d)(V + d)/(V d^2) (the docstring's
    total), down to V = 2, the least V: (1.5 at d = 1, none at d = 2); V = 1 is refused, naming V."""
    for V, d in ((2, 1), (3, 1), (64, 40), (1000, 7)):
        assert lb.leakage(V, d)[0] == pytest.approx((V - d) * (V + d) / (V * d * d), rel=1e-12)
    assert lb.leakage(2, 2) == (0.0, 0.0)
    with pytest.raises(ValueError, match="V"):
        lb.leakage(1, 1)


def test_g1_point_ratio_formula():
    V, d, L, N = 64, 40, 32, 5000.0
    assert lb.g1_inverse_snr2(N, V, d, L) == pytest.approx(31 * (64 / 40) ** 2 / N + 24 * 104 / (64 * 1600))
    assert lb.g1_inverse_snr2(N, 32, 64, 16) == pytest.approx(15 / N)


def test_g1_accuracy_against_simulation_of_its_own_model():
    # the model behind the heuristic: n ~ Poisson(N/V), correct score 1 + s_c X_0, rivals s_r X_i
    g = np.random.default_rng(0)
    V, d, L, N = 16, 12, 8, 400.0
    reps = 40000
    lr, lc = lb.leakage(V, d)
    n = g.poisson(N / V, reps)
    count = (L - 1) * N * (V / d) ** 2 / (V * np.maximum(n, 1)) ** 2
    X = g.standard_normal((reps, V))
    win = (1 + np.sqrt(count + lc) * X[:, 0] > np.sqrt(count + lr) * X[:, 1:].max(1))
    win = np.where(n > 0, win, g.random(reps) < 1 / V)
    assert abs(win.mean() - lb.g1_accuracy(N, V, d, L)) < 4 * math.sqrt(0.25 / reps)
    # d >= V: no leakage, the attention-style formula of chapter 5 at every n
    assert lb.g1_accuracy(1e6, 8, 16, 2) == pytest.approx(gaussian_attention_accuracy(1e6 / 8 / math.sqrt(1e6 / 64), 8), abs=1e-3)


def test_assignment_is_the_best_permutation():
    g = np.random.default_rng(1)
    for V in (3, 5, 6):
        for _ in range(10):
            W = g.standard_normal((V, V))
            best = max(itertools.permutations(range(V)), key=lambda p: sum(W[p[j], j] for j in range(V)))
            assert list(lb.assignment(W)) == list(best)
            shifted = W + g.standard_normal(V)[None, :]                   # a constant per column
            assert list(lb.assignment(shifted)) == list(best)
            T = g.integers(0, 3, size=(V, V)).astype(float)               # with ties: the best total
            top = max(sum(T[p[j], j] for j in range(V)) for p in itertools.permutations(range(V)))
            pi = lb.assignment(T)
            assert sorted(pi) == list(range(V)) and sum(T[pi[j], j] for j in range(V)) == top
    with pytest.raises(ValueError, match="W"):
        lb.assignment(np.zeros((2, 3)))


def test_three_steps_nstar_is_first_stable_on_the_grid():
    # each N's batch drawn afresh (the function slices one batch of n_max); a problem whose answer lies inside
    # the grid (V = 8, d = 16 never reached 0.99 by N = 128, which made the comparison None == None)
    cfg = lib.TaskConfig(V=8, d=32, L=4, trigger_in_value=False, device="cpu")
    Ns = lb.n_grid(4, 256)
    p = lib.make_problem(cfg, 2)
    test = lib.sample_batch(p, 512, 2, split="test")
    accs = [lib.evaluate(p, lib.three_steps(p, lib.sample_batch(p, N, 2)), batch=test).acc for N in Ns]
    want = lb.first_stable(Ns, accs, 0.99)
    assert want is not None and Ns[1] < want < Ns[-1], want
    assert lb.three_steps_nstar(cfg, 0.99, seed=2, n_min=4, n_max=256, n_test=512) == want


def test_g1_nstar_solves_the_threshold_and_has_a_wall():
    for V, d, L in ((32, 64, 64), (128, 96, 16), (32, 24, 64)):
        N = lb.g1_nstar(V, d, L)
        assert lb.g1_accuracy(N, V, d, L) >= 0.99 > lb.g1_accuracy(N / 1.01, V, d, L)
        assert N > lb.coverage_nstar(V)                               # coverage is included
    assert math.isinf(lb.g1_nstar(32, 12, 64))                        # past the wall


def test_g1_nstar_grows_with_L_and_falls_with_d_below_V():
    Ls = [lb.g1_nstar(64, 48, L) for L in (16, 32, 64)]
    ds = [lb.g1_nstar(64, d, 32) for d in (40, 48, 56, 64)]
    assert Ls == sorted(Ls) and ds == sorted(ds, reverse=True)
    assert lb.g1_nstar(32, 64, 32) == lb.g1_nstar(32, 128, 32)      # flat in d above V


# ----------------------------------------------------------------------------- validation

@pytest.mark.parametrize("call,name", [
    (lambda: lb.counting_bits(0), "V"),
    (lambda: lb.counting_bits(5, 1.5), "threshold"),
    (lambda: lb.counting_capacity(0, 8), "params"),
    (lambda: lb.counting_capacity(10, -1), "bits"),
    (lambda: lb.coverage_accuracy(-1, 5), "N"),
    (lambda: lb.coverage_nstar(1), "V"),
    (lambda: lb.coverage_nstar(10, 1.0), "threshold"),
    (lambda: lb.g1_nstar(32, 0, 16), "d"),
    (lambda: lb.g1_nstar(32, 16, 1), "L"),
    (lambda: lb.g1_accuracy(0, 32, 16, 8), "N"),
    (lambda: lb.n_grid(10, 5), "n_min"),
    (lambda: lb.cooccurrence("x", None), "problem"),
    (lambda: lb.estimator_nstars(lib.TaskConfig(V=4, d=4, L=2, device="cpu"), estimators=("magic",)), "estimators"),
    (lambda: lb.estimator_nstars("cfg"), "cfg"),
    (lambda: lb.three_steps_nstar("cfg"), "cfg"),
    (lambda: lb.leakage(32, 0), "d"),
])
def test_bad_arguments_raise_naming_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()
