"""lib.analysis.refined (chapter 6's experiments): each against a direct computation on a small
problem, and arguments that are refused with a ValueError naming them."""
import math

import numpy as np
import pytest
import torch

import lib
from lib.analysis import refined
from lib.analysis.decompose import decompose
from lib.analysis.step3 import oracle_memory_curve
from lib.theory import orthogonal_recall

SMALL = lib.TaskConfig(V=16, d=8, L=16, dtype="float64", device="cpu")


def test_leakage_row_none_when_attention_is_right_else_nine_numbers():
    easy = lib.TaskConfig(V=16, d=64, L=2, dtype="float64", device="cpu")
    assert refined.leakage_row(easy, 0, n_train=2048, n_test=64) is None
    rows = [r for r in (refined.leakage_row(SMALL, s, n_train=128, n_test=64) for s in range(4)) if r is not None]
    assert rows, "a hard problem should mis-attend"
    f, *_, oracle, learned, scattered, lsd = rows[0]
    assert 0 < f <= 1 and all(0 <= a <= 1 for a in (oracle, learned, scattered)) and lsd >= 0
    assert len(refined.leak_table(rows).splitlines()) == 2 + len(rows)
    assert max(map(len, refined.leak_table(rows).splitlines())) <= 100
    with pytest.raises(ValueError, match="rows"):
        refined.leak_table([(1, 2)])


def test_knockout_without_nothing_is_the_full_memory():
    ko = refined.knockout_accuracies(SMALL.with_(L=4), 0, 256, n_test=128)
    p = lib.make_problem(SMALL.with_(L=4), 0)
    tr, te = lib.sample_batch(p, 256, 0), lib.sample_batch(p, 128, 0, split="test")
    dec = decompose(p, tr, te, "oracle", "oracle")
    assert ko["all terms"] == pytest.approx(float((dec.logits.argmax(1) == te.labels).double().mean()))
    assert set(ko) == {"all terms"} | {f"without {t}" for t in refined.TERMS}
    with pytest.raises(ValueError, match="terms"):
        refined.knockout_accuracies(SMALL.with_(L=4), 0, 256, terms=("nonsense",))


def test_term_sds_match_their_predictions_term_by_term():
    """Measured / predicted standard deviation of each term, averaged over 16 problems (V = d = 64,
    N = 256, 256 test samples; about 2 s). The ratio of one problem is an SD estimate divided by its
    expectation: its Monte Carlo error is 1/sqrt(2 n) for n independent Gaussian values, n = V - 1 = 63
    wrong labels for the terms shared by inputs (0.09). Measured once over problems 0..47 the per-problem
    spread sigma is 0.054 (crosstalk: V (V - 1) entries), 0.18 (trigger_key), 0.16 (mean_bias), 0.12
    (finite_sample): above 1/sqrt(2 n) for the shared terms, whose shared vector (the trigger's w, the
    label frequencies' nu) is one more draw per problem, and for finite_sample (V per-input values, drawn
    with repeats by 256 samples). Tolerance on the mean of 16: 4 sigma / sqrt(16), plus 1/d + 1/V for
    the orders the prediction neglects. A variance off by a factor 2 moves the SD ratio by 0.29 or 0.41."""
    V, d, N, problems = 64, 64, 256, 16
    sigma = {"crosstalk": 0.06, "trigger_key": 0.19, "mean_bias": 0.17, "finite_sample": 0.12}
    ratios = {k: [] for k in refined.TERMS}
    for seed in range(problems):
        meas, pred = refined.term_sds(V, d, N, seed, n_test=256)
        assert set(meas) == set(pred) == set(refined.TERMS)
        for k in refined.TERMS:
            ratios[k].append(meas[k] / pred[k])
    for k in refined.TERMS:
        tol = 4 * sigma[k] / problems ** 0.5 + 1 / d + 1 / V
        assert abs(np.mean(ratios[k]) - 1) < tol, (k, np.mean(ratios[k]), tol)


def test_orthogonal_rule_runs_agree_with_the_rule_off_ties():
    c = lib.TaskConfig(V=8, d=18, L=3, embedding="orthogonal", dtype="float64", device="cpu")
    rows, ties = refined.orthogonal_rule_runs(c, [16, 64], n_test=256)
    assert len(rows) == 2 and all(r[3] == 0 for r in rows) and ties >= 0
    tr = lib.sample_batch(lib.make_problem(c, 0), 64, 0)
    te = lib.sample_batch(lib.make_problem(c, 0), 256, 0, split="test")
    rule = orthogonal_recall(torch.bincount(tr.informative, minlength=8), c.tau ** 2, True)[te.informative]
    assert rows[1][2] == pytest.approx(float(rule.double().mean()))
    with pytest.raises(ValueError, match="embedding"):
        refined.orthogonal_rule_runs(SMALL, [16])


def test_capacity_row_and_crossing():
    V, e, es, h, hs, p = refined.capacity_row(8, 16, 4)
    assert V == 8 and 0 <= e <= 1 and 0 <= h <= 1 and es >= 0 and hs >= 0 and 0 < p <= 1
    assert refined.first_crossing([1, 2, 3], [1.0, 0.995, 0.985], 0.99) == pytest.approx(2.5)
    assert math.isnan(refined.first_crossing([1, 2], [0.9, 0.8], 0.99))
    assert math.isnan(refined.first_crossing([1, 2], [1.0, 1.0], 0.99))
    with pytest.raises(ValueError, match="x and y"):
        refined.first_crossing([1], [1.0])


def test_nstar_row_reads_the_curve():
    row = refined.nstar_row(16, 32, False, 4)
    V, d, tiv, p, m, lo, hi, m_last, N_last = row
    assert (V, d, tiv) == (16, 32, False)
    Ns = [int((p or 2 ** 13) * 2 ** (k / 4)) for k in range(-6, 5 if p else 13)]
    mean, _ = oracle_memory_curve(lib.TaskConfig(V=16, d=32, L=4, trigger_in_value=False, device="cpu"), Ns, 4)
    assert N_last == Ns[-1] and m_last == pytest.approx(mean[-1])
    assert m is None or mean[Ns.index(m)] >= 0.99
    assert refined.nstar_table([row], 4).startswith("\n V    d")


def test_nstar_row_reads_mean_and_three_standard_errors(monkeypatch):
    """On a curve given by hand (mean, s.e. per grid N): the first N where the mean reaches 0.99 is the
    4th grid point, mean + 3 s.e. the 3rd, mean - 3 s.e. the 5th; a curve whose lower end never reaches
    gives None there."""
    seen = {}

    def curve(cfg, Ns, problems):
        seen["Ns"] = list(Ns)
        mean = np.array([0.95, 0.97, 0.985, 0.992, 0.997] + [0.999] * (len(Ns) - 5))
        return mean, np.full(len(Ns), 0.002)

    monkeypatch.setattr(refined, "refined_memory_nstar", lambda *a, **k: 1000)
    monkeypatch.setattr(refined, "oracle_memory_curve", curve)
    V, d, tiv, p, m, lo, hi, m_last, N_last = refined.nstar_row(16, 32, True, 4)
    Ns = seen["Ns"]
    assert (p, m, lo, hi, N_last, m_last) == (1000, Ns[3], Ns[2], Ns[4], Ns[-1], 0.999)

    def low(cfg, Ns, problems):
        return np.full(len(Ns), 0.991), np.full(len(Ns), 0.002)

    monkeypatch.setattr(refined, "oracle_memory_curve", low)
    _, _, _, _, m, lo, hi, _, _ = refined.nstar_row(16, 32, True, 4)
    assert (m, lo, hi) == (Ns[0], Ns[0], None)


def test_agreement_with_limit_at_the_default_step_sizes_is_total():
    p = lib.make_problem(lib.TaskConfig(V=16, d=32, L=4, device="cpu"), 0)
    tr, te = lib.sample_batch(p, 512, 0), lib.sample_batch(p, 128, 0, split="test")
    lim = lib.three_steps(p, tr, "limit")
    assert refined.agreement_with_limit(p, tr, te, lim.params, [lib.StepSizes()]) == [1.0]


def test_median_trigger_gap_is_its_definition():
    """Recomputed in NumPy (float64) from the keys h_t = e_{x_t} + 1[t = l] z_trig: per test sample the
    informative position's score along k / |k| less the best other position's; the median of the 128
    gaps is the mean of the two middle ones, sorted[63] and sorted[64]. The library works in float32 (scores of size ~1, rounding
    ~1e-7 each): 1e-5 leaves a margin of 100. The learned k reads most samples right (median gap > 0)."""
    p = lib.make_problem(lib.TaskConfig(V=16, d=32, L=4, device="cpu"), 0)
    tr, te = lib.sample_batch(p, 512, 0), lib.sample_batch(p, 128, 0, split="test")
    k = lib.three_steps(p, tr, "limit").k
    w = k.double().numpy() / np.linalg.norm(k.double().numpy())
    E, z = p.E.double().numpy(), p.z_trig.double().numpy()
    tokens, pos = te.tokens.long().numpy(), te.pos.numpy()
    gaps = []
    for row, l in zip(tokens, pos):
        keys = E[row] + np.eye(len(row))[l][:, None] * z
        s = keys @ w
        gaps.append(s[l] - np.delete(s, l).max())
    srt = np.sort(gaps)
    want = (srt[63] + srt[64]) / 2
    got = refined.median_trigger_gap(p, te, k)
    assert abs(got - want) < 1e-5 and want > 0, (got, want)
    assert abs(srt[64] - srt[63]) > 1e-4          # the two middles differ: the lower or upper one alone fails


def test_read_counts_and_the_memory_they_describe():
    """Against a plain loop over the samples: a correctly attended sample counts once for its informative
    token in n_ok, a mis-attended one once in M at (the token it read, its label). Counts are exact."""
    c = lib.TaskConfig(V=6, d=14, L=3, embedding="orthogonal", dtype="float64", device="cpu")
    p = lib.make_problem(c, 1)
    tr = lib.sample_batch(p, 40, 1)
    att = torch.where(torch.arange(40) < 10, (tr.pos + 1) % 3, tr.pos)
    n_ok, M = refined.read_counts(p, tr, att)
    want_ok, want_M = torch.zeros(6, dtype=torch.float64), torch.zeros(6, 6, dtype=torch.float64)
    for n in range(40):
        if int(att[n]) == int(tr.pos[n]):
            want_ok[int(tr.informative[n])] += 1
        else:
            want_M[int(tr.tokens[n, int(att[n])]), int(tr.labels[n])] += 1
    assert torch.equal(n_ok, want_ok) and torch.equal(M, want_M)
    assert float(n_ok.sum()) == 30 and float(M.sum()) == 10
    # a telling case: some mis-attended samples read a token other than their informative one
    assert any(int(tr.tokens[n, int(att[n])]) != int(tr.informative[n]) for n in range(10))
    with pytest.raises(ValueError, match="attn"):
        refined.read_counts(p, tr, att[:5])


def test_key_term_samples_variance_and_arguments():
    """The term (1/V) sum_i (e_i . s) a_ki is Gaussian given U, Pi and s: the e_i . s are i.i.d.
    N(0, s2/d) and, with orthonormal u, a_ki = u_k . (u_{Pi i} - u_bar) = 1[Pi i = k] - 1/V, so
    sum_i a_ki^2 = (1 - 1/V)^2 + (V - 1)/V^2 = (V - 1)/V and Var = s2 (V - 1) / (d V^3) (the book's
    s2 / (d V^2) (1 - 1/V)), mean 0. Tolerances: the sample variance of n Gaussian draws has relative
    standard error sqrt(2 / (n - 1)), the sample mean standard error sqrt(Var / n); both at 4 of them."""
    n = 20000
    for V, d, s2 in ((4, 8, 1.0), (6, 20, 2.5)):
        t = refined.key_term_samples(V, d, s2, n, lib.torch_generator(7))
        var = s2 * (V - 1) / (d * V ** 3)
        assert t.shape == (n,) and t.dtype == torch.float64
        assert abs(float(t.mean())) < 4 * (var / n) ** 0.5
        assert abs(float(t.var()) / var - 1) < 4 * (2 / (n - 1)) ** 0.5, (V, d, float(t.var()), var)
    for kwargs, name in (({"d": 2}, "d"), ({"s2": 0.0}, "s2"), ({"samples": 1}, "samples")):
        args = {"V": 4, "d": 8, "s2": 1.0, "samples": 100} | kwargs
        with pytest.raises(ValueError, match=name):
            refined.key_term_samples(gen=lib.torch_generator(0), **args)


def _coupling_from_the_definition(V, d, seeds):
    """The correlation over inputs recomputed from scratch in NumPy: with trigger out and N = infinity
    (f_i = 1/V) the logit of label k at input x is sum_i (1/V) u_k . (u_{Pi i} - u_bar) (e_i . e_x); the
    correct label of x is Pi x, the spread is the population SD of the V - 1 others; Pearson's r over
    the inputs of all problems pooled."""
    correct, spread = [], []
    for seed in seeds:
        cfg = lib.TaskConfig(V=V, d=d, L=4, trigger_in_value=False, dtype="float64", device="cpu")
        pr = lib.make_problem(cfg, seed)
        E, U, perm = pr.E[:V].numpy(), pr.U.numpy(), pr.perm.numpy()
        A = U @ (U[perm] - U.mean(0)).T / V                    # (k, i): (1/V) a_ki
        logits = (E @ E.T) @ A.T                                # (x, k): sum_i (e_x . e_i) a_ki / V
        for x in range(V):
            correct.append(logits[x, perm[x]])
            spread.append(np.delete(logits[x], perm[x]).std())
    c, w = np.array(correct) - np.mean(correct), np.array(spread) - np.mean(spread)
    return float((c * w).sum() / np.sqrt((c * c).sum() * (w * w).sum()))


def test_logit_spread_coupling_is_the_correlation_of_its_definition():
    """Against an independent NumPy recomputation from the definition on two small problems; both are
    float64 sums of O(V d) terms, so they agree to rounding (1e-9 leaves a margin of 10^5 over it)."""
    r = refined.logit_spread_coupling(16, 8, range(2))
    assert abs(r - _coupling_from_the_definition(16, 8, range(2))) < 1e-9
    assert abs(refined.logit_spread_coupling(8, 8, [3]) - _coupling_from_the_definition(8, 8, [3])) < 1e-9
    with pytest.raises(ValueError, match="seeds"):
        refined.logit_spread_coupling(16, 8, [])


def test_nstar_row_bands_and_last_point_on_a_made_up_curve(monkeypatch):
    """nstar_row on a made-up curve: the first N where the mean, mean + 3 s.e. and mean - 3 s.e.
    reach the threshold (equality counts as reaching; 3 s.e., not 2 or 4, decides both bands), and the last point."""
    monkeypatch.setattr(refined, "refined_memory_nstar", lambda *a, **k: 1024)
    m = np.array([0.90, 0.95, 0.97, 0.983, 0.985, 0.99, 0.99, 0.99, 0.995, 0.997, 0.998])
    se = np.full(11, 0.002)
    monkeypatch.setattr(refined, "oracle_memory_curve", lambda cfg, Ns, problems: (m, se))
    Ns = [int(1024 * 2 ** (k / 4)) for k in range(-6, 5)]
    row = refined.nstar_row(256, 64, False, problems=4, threshold=0.99)
    assert row[:4] == (256, 64, False, 1024)
    assert row[4] == Ns[5]                          # m hits 0.99 exactly at index 5
    assert row[5] == Ns[4]                          # 0.985 + 0.006 >= 0.99 first (0.983 + 0.006 falls short)
    assert row[6] == Ns[9]                          # 0.997 - 0.006 >= 0.99 (0.995 - 0.006 falls short)
    assert row[7] == 0.998 and row[8] == Ns[-1]      # the last point's mean, not the one before
