"""Step 2's direction k on a finite batch (chapter 5): the exact finite-N factor of
the trigger's bonus and its leading order, and the batch-to-batch variance of k (Hoeffding's
decomposition, lib.analysis.k_noise) against Monte Carlo over batches. Tolerances are multiples of the
Monte Carlo's standard error."""
import math

import numpy as np
import pytest
import torch

import lib
from lib import theory
from lib.analysis import k_noise, margins


def problem(V, d, L, seed=0):
    return lib.make_problem(lib.TaskConfig(V=V, d=d, L=L, dtype="float64", device="cpu"), seed)


def test_trigger_factor_is_one_plus_beta_over_n_exactly():
    pr = problem(32, 16, 8)
    beta = k_noise.k_self_beta(pr)
    for N in (1, 7, 256):
        assert k_noise.k_trigger_factor(pr, N) == pytest.approx(1 + beta / N, rel=1e-10)


def test_beta_on_average_over_problems():
    # the exact beta of single problems averages to V (1 + (L-1)/d) - 1 within 3 standard errors (+1 %)
    V, d, L = 64, 256, 16
    b = np.array([k_noise.k_self_beta(problem(V, d, L, s)) for s in range(12)])
    se = b.std(ddof=1) / len(b) ** 0.5
    assert abs(b.mean() - theory.trigger_self_bias(V, d, L)) < 3 * se + 0.01 * b.mean(), (b.mean(), se)


def test_trigger_factor_against_batches():
    # z . (mean of k over batches) / z . k_inf against the exact factor, within 4 standard errors
    pr, N = problem(32, 16, 8, 1), 16
    z = pr.z_trig
    kz = np.array([float(z @ lib.three_steps(pr, lib.sample_batch(pr, N, 500 + b), mode="limit").k) for b in range(400)])
    kz /= float(z @ margins.k_population(pr))
    assert abs(kz.mean() - k_noise.k_trigger_factor(pr, N)) < 4 * kz.std(ddof=1) / len(kz) ** 0.5


@pytest.mark.slow
@pytest.mark.parametrize("V,d,L,N", [(32, 64, 8, 64), (32, 8, 8, 512)])
def test_variance_against_batches(V, d, L, N):
    # E Q(k - E k) over batches: both forms (token-score noise off the trigger, trigger component)
    pr = problem(V, d, L, 2)
    mom = k_noise.k_noise_moments(pr, samples=20000, seed=3)
    pred = k_noise.k_noise_variance(mom, N)
    forms = k_noise._forms(pr)
    k_m = margins.k_mean(pr, N)
    z = pr.z_trig
    unit = float(z @ z) / float(z @ margins.k_population(pr)) ** 2
    meas = {f: [] for f in forms}
    for b in range(300):
        dk = (lib.three_steps(pr, lib.sample_batch(pr, N, 9000 + b), mode="limit").k - k_m)[None]
        for f, Q in forms.items():
            meas[f].append(Q(dk, dk) * unit)
    for f in forms:
        m = np.array(meas[f])
        se = m.std(ddof=1) / len(m) ** 0.5
        assert abs(pred[f] - m.mean()) < 4 * se + 0.05 * m.mean(), (f, pred[f], m.mean(), se)
    # leaving out the pair term (the 1/N^2 part of the fluctuation) is visibly wrong at the smaller N
    if N == 64:
        m = np.array(meas["perp"])
        assert abs(pred["perp_leading"] - m.mean()) > 4 * m.std(ddof=1) / len(m) ** 0.5


def test_variance_formula_structure():
    # N = 1: k = s(x), so the variance is Q[s]; the leading share psi/N -> 1 as N grows; the fluctuation
    # falls like 1/N and the self-term's noise like 1/N^2, so their ratio grows like N
    pr = problem(32, 16, 8, 4)
    mom = k_noise.k_noise_moments(pr, samples=4000, seed=1)
    for f in ("perp", "trigger"):
        assert k_noise.k_noise_variance(mom, 1)[f] == pytest.approx(mom[f]["self"])
    big = k_noise.k_noise_variance(mom, 10 ** 6)
    assert big["perp"] / big["perp_leading"] == pytest.approx(1, abs=1e-3)
    F1, F2 = k_noise.fluctuation_coefficients(mom)
    for N in (10 ** 4, 10 ** 6):                 # N^2 Var - F1 N -> F2
        assert N ** 2 * k_noise.k_noise_variance(mom, N)["perp"] - F1 * N == pytest.approx(F2, rel=1e-2, abs=1e-6 * F1 * N)
    # exactly: N^2 Var = F1 N + F2 + (2 psi - pair + self - 2 cross) / N (expand the variance formula's numerator)
    m = mom["perp"]
    rest = 2 * m["psi"] - m["pair"] + m["self"] - 2 * m["cross"]
    for N in (2, 7, 100):
        got = N * (N ** 2 * k_noise.k_noise_variance(mom, N)["perp"] - F1 * N - F2)
        assert got == pytest.approx(rest, rel=1e-6, abs=1e-9 * m["psi"])
    with pytest.raises(ValueError, match="form"):
        k_noise.fluctuation_coefficients(mom, "diag")
    x = [theory.excess_noise(N, 32, 16, 8, F1, F2) for N in (1e4, 1e6)]
    b = [theory.excess_noise(N, 32, 16, 8, 0.0) for N in (1e4, 1e6)]
    assert (x[1] - b[1]) / b[1] > 50 * (x[0] - b[0]) / b[0]
    r = theory.attention_snr_fluct(np.array([1e2, 1e8]), 32, 16, 8, mom["perp"]["psi"])
    assert r[1] == pytest.approx(4.0, rel=1e-3) and r[0] < r[1]


@pytest.mark.parametrize("tiv", [True, False])
def test_first_projection_is_the_pair_kernel_averaged_over_every_sample(tiv):
    """psi(x) = E_Y K(x, Y) + E_X K(X, x) and s(x) = K(x, x), exactly: at V = 3, L = 2 the V^L L = 18
    equally likely samples (tokens i.i.d. uniform, position uniform) are enumerated, and the pair
    kernel averaged over all of them is psi, for every x, with the trigger in and out of the value path."""
    import itertools
    V, L = 3, 2
    pr = lib.make_problem(lib.TaskConfig(V=V, d=5, L=L, trigger_in_value=tiv, dtype="float64", device="cpu"), 1)
    seqs = [(t, p) for t in itertools.product(range(V), repeat=L) for p in range(L)]
    tok = torch.tensor([t for t, _ in seqs], dtype=torch.long)
    pos = torch.tensor([p for _, p in seqs], dtype=torch.long)
    inf = tok[torch.arange(len(seqs)), pos]
    every = lib.Batch(tok, pos, pr.perm[inf], inf)
    psi, s = k_noise.first_projection(pr, every)
    n = every.N
    for i in range(n):
        x = every.slice_mask(torch.full((n,), False).index_fill_(0, torch.tensor([i]), True))
        xs = lib.Batch(x.tokens.repeat(n, 1), x.pos.repeat(n), x.labels.repeat(n), x.informative.repeat(n))
        kxy, kyx = k_noise.pair_kernel(pr, xs, every)
        assert torch.allclose(psi[i], kxy.mean(0) + kyx.mean(0), rtol=1e-10, atol=1e-12), i
        assert torch.allclose(s[i], k_noise.pair_kernel(pr, x, x)[0][0], rtol=1e-10, atol=1e-12), i


def test_moments_do_not_depend_on_the_chunking():
    """Q[psi], Q[s] and Q[psi, s] are moments of per-sample quantities: the same whatever the chunk
    size, odd ones included (an odd chunk leaves its last sample out of the pairs)."""
    pr = problem(16, 8, 4)
    a = k_noise.k_noise_moments(pr, samples=60, seed=2, chunk=60)
    for chunk in (3, 7):
        b = k_noise.k_noise_moments(pr, samples=60, seed=2, chunk=chunk)
        for f in k_noise.FORMS:
            for key in ("psi", "self", "cross"):
                assert b[f][key] == pytest.approx(a[f][key], rel=1e-9), (chunk, f, key)
            assert math.isfinite(b[f]["pair"])


def test_fluctuating_snr_at_one_dimension():
    """d = 1, the least d: r(N) = 1 / sqrt(1/d + X(N)) rises to sqrt(d) = 1 as the excess noise X(N) falls
    to 0 with N, and stays below it; d = 0 is refused, naming d."""
    r = theory.attention_snr_fluct(np.array([10.0, 1e12]), 32, 1, 8, 0.5)
    assert r[0] < r[1] < 1 and abs(r[1] - 1) < 1e-6
    with pytest.raises(ValueError, match="d"):
        theory.attention_snr_fluct(10.0, 32, 0, 8, 0.5)


def test_batch_check_measures_in_the_formulas_units():
    """batch_check's measured token-score noise of 60 simulated batches (N = 64) against the formula it
    reports, both in units mu_inf^2 / |z|^2: within 4 standard errors of the batches' mean plus 5 %, as in
    `test_variance_against_batches` (mu_inf is about 4e-4 here, so any other power of it is far off)."""
    pr = problem(32, 16, 8, 2)
    r = k_noise.batch_check(pr, k_noise.k_noise_moments(pr, samples=4000, seed=3), 64, batches=60)
    m = r["measured"]
    assert abs(m.mean() - r["pred"]) < 4 * m.std(ddof=1) / len(m) ** 0.5 + 0.05 * r["pred"], (m.mean(), r["pred"])


def test_validation():
    pr = problem(16, 8, 4)
    with pytest.raises(ValueError, match="N"):
        k_noise.k_trigger_factor(pr, 0)
    with pytest.raises(ValueError, match="samples"):
        k_noise.k_noise_moments(pr, samples=1)
    with pytest.raises(ValueError, match="N"):
        k_noise.k_noise_variance({}, -3)
    with pytest.raises(ValueError, match="F1"):
        theory.excess_noise(100, 16, 8, 4, -1.0)
    with pytest.raises(ValueError, match="F2"):
        theory.excess_noise(100, 16, 8, 4, 1.0, math.nan)
    assert theory.excess_noise(100, 16, 8, 4, 1.0, -0.5) < theory.excess_noise(100, 16, 8, 4, 1.0, 0.0)   # F2 may be negative
    with pytest.raises(ValueError, match="N"):
        theory.excess_noise(0, 16, 8, 4, 1.0)
    noisy = lib.make_problem(lib.TaskConfig(V=16, d=8, L=4, noise_vocab=16, device="cpu"), 0)
    with pytest.raises(ValueError, match="noise_vocab"):
        k_noise.k_self_beta(noisy)


def test_batch_entries_refuse_bad_batches():
    pr = problem(16, 8, 4)
    b = lib.sample_batch(pr, 10, 0)
    bad = lib.Batch(b.tokens.clone(), b.pos.clone(), b.labels.clone())
    bad.tokens[0, 0] = 99
    with pytest.raises(ValueError, match="tokens"):
        k_noise.first_projection(pr, bad)
    with pytest.raises(ValueError, match="tokens"):
        k_noise.pair_kernel(pr, b, bad)
    with pytest.raises(ValueError, match="b2"):
        k_noise.pair_kernel(pr, b, b.slice(0, 5))
