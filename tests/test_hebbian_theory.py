"""The one-step memory heuristic of chapter 2 (lib.theory): the score variances match simulated
memories, the conditional model averages back to them, the predicted accuracy and capacity are
consistent with each other and with measurement, and bad arguments are refused."""

import math

import numpy as np
import pytest
import torch

from lib.analysis.construct import hand_built
from lib.core.embeddings import make_problem
from lib.core.config import TaskConfig
from lib.core.memory import hebbian, hebbian_margins, hebbian_scores, make_memory, memory_logits, recall_accuracy
from lib.theory import (hebbian_conditional_moments, hebbian_predicted_accuracy, hebbian_predicted_capacity,
                        hebbian_score_moments, trigger_bias_var)


@pytest.mark.parametrize("n,d", [(20, 16), (62, 64)])
def test_score_variances_match_simulated_memories(n, d):
    correct, wrong = hebbian_scores(n, d, range(300))
    th = hebbian_score_moments(n, d)
    assert abs(float(correct.mean()) - th["correct_mean"]) < 0.02
    assert abs(float(correct.var()) / th["correct_var"] - 1) < 0.06
    assert abs(float(wrong.var()) / th["wrong_var"] - 1) < 0.06
    assert th["margin_var"] == pytest.approx(6 / d + (2 * n + 5) / d ** 2)


@pytest.mark.parametrize("n,d", [(2, 3), (3, 3)])
def test_wrong_score_variance_is_exact_at_small_n_and_d(n, d):
    """A wrong label k = Pi x'' of a stored pair scores s_k = sum_j (u_k . u_{Pi j})(e_j . e_x): its own key
    and the queried pair give 2 (1 + 2/d)/d, the n - 2 other pairs 1/d^2 each, exactly (not only to
    leading order). Monte Carlo over 500000 memories at small n and d, where the n - 2 term is a
    tenth of the variance (n = 2: it vanishes), within 5 standard errors of the mean square (about 2.5 %
    of it; counting one pair more or less moves the variance by 10 %)."""
    g = torch.Generator().manual_seed(n)
    R = 500_000
    U = torch.randn(R, n, d, generator=g, dtype=torch.float64) / d ** 0.5   # u_{Pi j}, Pi = identity
    E = torch.randn(R, n, d, generator=g, dtype=torch.float64) / d ** 0.5
    s = ((U[:, 1:2] * U).sum(-1) * (E * E[:, :1]).sum(-1)).sum(1)            # query x = 0, wrong label Pi(1)
    sq = s * s
    th = hebbian_score_moments(n, d)
    assert abs(float(sq.mean()) - th["wrong_var"]) < 5 * float(sq.std()) / R ** 0.5


def test_conditional_moments_are_exact_given_the_norms():
    """Given a = |e_x|^2 = 2 and b = |u_y|^2 = 1/2 (the queried pair drawn with those norms, the rest
    N(0, I/d)), the correct score has mean a b and variance a b (n - 1)/d^2, and a wrong label k = Pi x''
    scores (u_k . u_y) a (E = a^2 b/d), |u_k|^2 (e_x'' . e_x) ((1 + 2/d) a/d) and n - 2 others (a/d^2 each),
    exactly. Monte Carlo over 200000 memories at n = d = 3, each within 5 standard errors (the wrong
    score's second moment, 2: about 0.06; a^2 in its first term read as 1 would give 1.5)."""
    g = torch.Generator().manual_seed(0)
    n, d, a, b, R = 3, 3, 2.0, 0.5, 200_000
    U = torch.randn(R, n, d, generator=g, dtype=torch.float64) / d ** 0.5     # u_{Pi j}, Pi = identity
    E = torch.randn(R, n, d, generator=g, dtype=torch.float64) / d ** 0.5
    U[:, 0] *= (b / (U[:, 0] ** 2).sum(-1, keepdim=True)) ** 0.5               # the queried pair x = 0
    E[:, 0] *= (a / (E[:, 0] ** 2).sum(-1, keepdim=True)) ** 0.5
    ee = (E * E[:, :1]).sum(-1)                                                 # e_j . e_x
    s_y, s_w = ((U[:, :1] * U).sum(-1) * ee).sum(1), ((U[:, 1:2] * U).sum(-1) * ee).sum(1)
    mean_y, var_y, var_w = hebbian_conditional_moments(n, d, a, b)
    dev = (s_y - s_y.mean()) ** 2
    for meas, se, th in ((s_y.mean(), s_y.std(), mean_y), (dev.mean(), dev.std(), var_y),
                         ((s_w * s_w).mean(), (s_w * s_w).std(), var_w)):
        assert abs(float(meas) - float(th)) < 5 * float(se) / R ** 0.5, (float(meas), float(th))


def test_predicted_accuracy_uses_the_chi2_norms():
    """The norms a, b ~ chi^2_d / d enter through the Wilson-Hilferty transform of the Gauss-Hermite nodes.
    Integrating the same conditional model (`hebbian_conditional_moments`) on the same nodes with the
    exact chi^2 quantiles (scipy) gives the same accuracy to within Wilson-Hilferty's own error (under
    5e-5 here, 5e-4 allowed) even at d = 4, where the transform's constants matter most."""
    from scipy import stats

    def exact_norm(g, d):
        return np.where(g > 0, stats.chi2.isf(stats.norm.sf(g), d), stats.chi2.ppf(stats.norm.cdf(g), d)) / d

    z, w = np.polynomial.hermite_e.hermegauss(32)
    w = w / w.sum()
    weight = w[:, None, None] * w[None, :, None] * w[None, None, :]
    for n, d in ((10, 4), (20, 8), (100, 64)):
        a = exact_norm(z, d)
        mean_y, var_y, var_w = hebbian_conditional_moments(n, d, a[:, None, None], a[None, :, None])
        s_y = mean_y + np.sqrt(var_y) * z[None, None, :]
        p = torch.special.ndtr(torch.as_tensor(s_y / np.sqrt(var_w))).numpy()
        assert abs(hebbian_predicted_accuracy(n, d) - float((weight * p ** (n - 1)).sum())) < 5e-4, (n, d)


def test_conditional_model_averages_back_to_the_unconditional_variances():
    n, d = 50, 24
    g = np.random.default_rng(0)
    a, b = g.chisquare(d, 400_000) / d, g.chisquare(d, 400_000) / d
    mean_y, var_y, var_w = hebbian_conditional_moments(n, d, a, b)
    th = hebbian_score_moments(n, d)
    assert float(np.mean(var_y) + np.var(mean_y)) == pytest.approx(th["correct_var"], rel=0.02)
    assert float(np.mean(var_w)) == pytest.approx(th["wrong_var"], rel=0.02)


@pytest.mark.parametrize("n,d", [(2, 3), (3, 3), (50, 24)])
def test_conditional_model_averages_back_exactly(n, d):
    """The conditional variances are polynomials in a, b of degree 3 at most: a generalised
    Gauss-Laguerre rule on chi^2_d / d (6 nodes, exact to degree 11) averages them with no sampling
    error, and the unconditional variances must come back to 1e-12 (the sampled test above allows 2 %,
    too loose for a change of a^n/d^2 terms; n = 2 has no third pair)."""
    from scipy.special import roots_genlaguerre
    x, w = roots_genlaguerre(6, d / 2 - 1)
    a, w = 2 * x / d, w / w.sum()                                     # a ~ chi^2_d / d
    mean_y, var_y, var_w = hebbian_conditional_moments(n, d, a[:, None], a[None, :])
    W = w[:, None] * w[None, :]
    th = hebbian_score_moments(n, d)
    mean = float((W * mean_y).sum())
    assert mean == pytest.approx(1.0, rel=1e-12)
    assert float((W * (var_y + mean_y ** 2)).sum()) - mean ** 2 == pytest.approx(th["correct_var"], rel=1e-12)
    assert float((W * var_w).sum()) == pytest.approx(th["wrong_var"], rel=1e-12)


def test_predicted_accuracy_is_a_probability_falling_with_n_and_close_to_measured():
    accs = [hebbian_predicted_accuracy(n, 64) for n in (10, 40, 100, 400)]
    assert all(0.0 <= a <= 1.0 for a in accs) and accs == sorted(accs, reverse=True)
    measured = np.mean([recall_accuracy(m, hebbian(m)) for m in
                        (make_memory(100, 64, seed=s, dtype="float64", device="cpu") for s in range(40))])
    assert abs(hebbian_predicted_accuracy(100, 64) - measured) < 0.02


def test_predicted_capacity_is_the_last_n_above_the_threshold():
    for d in (48, 128):
        n = hebbian_predicted_capacity(d)
        assert hebbian_predicted_accuracy(n, d) >= 0.99 > hebbian_predicted_accuracy(n + 1, d)
    assert hebbian_predicted_capacity(1024) > hebbian_predicted_capacity(512) > 4 * 512 / math.log(512)


def test_trigger_bias_variance_matches_simulated_problems():
    V, d = 64, 16
    b = [p.U @ (hand_built(p).W_V @ p.z_trig)
         for p in (make_problem(TaskConfig(V=V, d=d, L=4, device="cpu"), seed=s) for s in range(60))]
    assert abs(float(torch.cat(b).pow(2).mean()) / trigger_bias_var(V, d) - 1) < 0.1


def test_bias_variance_widens_the_prediction():
    assert hebbian_predicted_accuracy(200, 64, bias_var=0.05) < hebbian_predicted_accuracy(200, 64)


@pytest.mark.parametrize("call, name", [
    (lambda: hebbian_score_moments(0, 8), "n"),
    (lambda: hebbian_predicted_accuracy(10, 0), "d"),
    (lambda: hebbian_predicted_accuracy(10, 8, bias_var=-1.0), "bias_var"),
    (lambda: hebbian_predicted_accuracy(10, 8, bias_var=float("nan")), "bias_var"),
    (lambda: hebbian_predicted_capacity(8, threshold=1.0), "threshold"),
    (lambda: trigger_bias_var(0, 8), "V"),
])
def test_bad_arguments_are_refused_with_the_parameter_named(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_hebbian_scores_and_margins_are_the_memories_scores_in_order():
    correct, wrong = hebbian_scores(6, 5, [3, 1], "sphere")
    assert correct.shape == (12,) and wrong.shape == (12, 5)
    for row, s in enumerate((3, 1)):                      # the memories one after the other
        mem = make_memory(6, 5, "sphere", seed=s, dtype="float64", device="cpu")
        S = memory_logits(mem, hebbian(mem))
        for x in range(6):
            k = [j for j in range(6) if j != int(mem.perm[x])]
            assert correct[6 * row + x] == S[x, mem.perm[x]] and torch.equal(wrong[6 * row + x], S[x, k])
    margins, se = hebbian_margins(6, 5, 4, "sphere")
    per = [(c[:, None] - w).flatten() for c, w in (hebbian_scores(6, 5, [s], "sphere") for s in range(4))]
    assert torch.equal(margins, torch.cat(per)) and se > 0
    for call, name in ((lambda: hebbian_scores(1, 5, [0]), "n"), (lambda: hebbian_scores(6, 5, 3), "seeds"),
                       (lambda: hebbian_scores(6, 5, []), "seeds"), (lambda: hebbian_scores(6, 5, [-1]), "seeds"),
                       (lambda: hebbian_margins(6, 5, 1), "memories"), (lambda: hebbian_scores(6, 5, [0], "cube"), "embedding")):
        with pytest.raises(ValueError, match=name):
            call()


def test_trigger_bias_variance_at_small_sizes_by_direct_sampling():
    """E[b_k^2] = (d + V + 1)/d^2 where the + 1 is a large share (V = 2, d = 4: 7/16 against 8/16 without
    it): b_k = sum_j (u_k . u_j)(e_j . z), everything N(0, I/d), sampled directly (400,000 draws), within
    five standard errors of the mean of b^2."""
    g = torch.Generator().manual_seed(0)
    for V, d in ((2, 4), (3, 2)):
        n = 400_000
        U, E = (torch.randn(n, V, d, generator=g, dtype=torch.float64) / d ** 0.5 for _ in range(2))
        z = torch.randn(n, d, 1, generator=g, dtype=torch.float64) / d ** 0.5
        b = (U @ U.transpose(1, 2) @ (E @ z)).flatten()           # b_k for every k of every draw
        b2 = b.pow(2).reshape(n, V).mean(1)                        # independent across draws
        se = float(b2.std()) / n ** 0.5
        assert abs(float(b2.mean()) - trigger_bias_var(V, d)) < 5 * se, (V, d, float(b2.mean()), se)
        assert abs((d + V + 2) / d ** 2 - trigger_bias_var(V, d)) > 10 * se      # the + 1 is resolved


def test_one_stored_pair_is_always_recalled_and_two_are_not():
    # n = 1 (the smallest memory) has no wrong label to lose to: accuracy exactly 1; with two pairs it drops
    from lib.theory import hebbian_predicted_accuracy
    assert hebbian_predicted_accuracy(1, 8) == 1.0
    assert hebbian_predicted_accuracy(2, 8) < 0.95
