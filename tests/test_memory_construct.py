"""Associative memories, the hand-built transformer, Bayes accuracy, theory helpers."""

import math

import numpy as np
import pytest
import torch

import lib
from lib.analysis.construct import bayes_accuracy_unmarked, hand_built, hand_built_predicted_accuracy
from lib.core.embeddings import coherence, draw_vectors
from lib.core.memory import hebbian, make_memory, recall_accuracy
from lib.experiments.memory_capacity import hebbian_capacity
from lib.theory import (capacity_from_constant, fit_constant, fit_power_law, inner_product_moments,
                        predicted_coherence)


def test_predicted_coherence_counts_the_pairs():
    """sqrt(2 log M / d) with M the number of distinct pairs of V vectors, counted by enumeration; with one
    pair (V = 2) the mean |overlap| of one N(0, 1/d) variable, sqrt(2 / (pi d))."""
    import itertools
    for V, d in ((3, 16), (10, 64), (500, 64)):
        M = sum(1 for _ in itertools.combinations(range(V), 2))
        assert predicted_coherence(V, d) == pytest.approx(math.sqrt(2 * math.log(M) / d), rel=1e-12)
    assert predicted_coherence(2, 8) == pytest.approx(math.sqrt(2 / (math.pi * 8)), rel=1e-12)


def test_orthogonal_memory_is_exact():
    mem = make_memory(32, 32, "orthogonal", dtype="float64", device="cpu")
    assert recall_accuracy(mem, hebbian(mem)) == 1.0
    assert hebbian_capacity(32, embedding="orthogonal") == 32


def test_hebbian_capacity_grows_superlinearly_in_d():
    c16, c32 = hebbian_capacity(16, seeds=2), hebbian_capacity(32, seeds=2)
    assert 2.5 < c32 / c16 < 5.0          # about d^2 / log n: ratio near 4 / (1 + small)


def test_hand_built_transformer_is_exact_with_orthogonal_embeddings():
    V = 20
    cfg = lib.TaskConfig(V=V, d=2 * V + 2, L=8, embedding="orthogonal", dtype="float64", device="cpu")
    problem = lib.make_problem(cfg, 0)
    acc = lib.evaluate(problem, hand_built(problem, beta=60.0), 3000)
    assert acc.acc == 1.0 and acc.att_acc == 1.0


def test_hand_built_transformer_degrades_with_random_embeddings():
    cfg = lib.TaskConfig(V=512, d=32, L=8, device="cpu")
    problem = lib.make_problem(cfg, 0)
    acc = lib.evaluate(problem, hand_built(problem), 3000)
    assert acc.att_acc > 0.95 and acc.oracle_acc < 0.9


def test_bayes_accuracy_without_trigger():
    cfg = lib.TaskConfig(V=1000, d=4, L=5, device="cpu")
    b = lib.sample_batch(lib.make_problem(cfg, 0), 5000, 0)
    assert bayes_accuracy_unmarked(b, cfg.V) == pytest.approx(1 / 5, abs=0.01)   # repeats are rare


def test_inner_product_moments_match_simulation():
    g = torch.Generator().manual_seed(0)
    d = 8
    x = (torch.randn(200000, d, generator=g, dtype=torch.float64) / d ** 0.5)
    y = (torch.randn(200000, d, generator=g, dtype=torch.float64) / d ** 0.5)
    ip = (x * y).sum(1)
    m = inner_product_moments(d)
    assert float(ip.var()) == pytest.approx(m["var"], rel=0.02)
    assert float((ip ** 4).mean()) == pytest.approx(m["m4"], rel=0.05)


def test_fits():
    x = [1, 2, 4, 8]
    slope, c = fit_power_law(x, [3 * v ** 2 for v in x])
    assert slope == pytest.approx(2) and c == pytest.approx(3)
    assert fit_constant([2, 4], [1, 2]) == pytest.approx(2)
    with pytest.raises(ValueError, match="positive"):
        fit_power_law([1, 0], [1, 1])


@pytest.mark.parametrize("beta", [0.05, 0.5, 1.0, 1.5, 2.5])
def test_hand_built_prediction_is_exact_with_orthogonal_embeddings(beta):
    V = 12
    cfg = lib.TaskConfig(V=V, d=2 * V + 2, L=10, embedding="orthogonal", dtype="float64", device="cpu")
    problem = lib.make_problem(cfg, 0)
    test = lib.sample_batch(problem, 4000, 0, "test")
    measured = lib.evaluate(problem, hand_built(problem, beta), batch=test).acc
    assert measured == pytest.approx(hand_built_predicted_accuracy(test, V, beta), abs=1e-12)


def test_coherence_and_its_prediction():
    X = draw_vectors(500, 64, "sphere", lib.generator(0, "t"))
    assert 0.75 < coherence(X) / predicted_coherence(500, 64) < 1.25
    Q = draw_vectors(8, 8, "orthogonal", lib.generator(0, "t"))
    assert coherence(Q) < 1e-12
    with pytest.raises(ValueError, match="X"):
        coherence(X[:1])


def test_capacity_from_constant_solves_the_equation():
    for d, c in [(8, 1.3), (64, 2.0), (300, 5.0)]:
        n = capacity_from_constant(d, c)
        assert c * n * math.log(n) == pytest.approx(d * d, rel=1e-9)


def test_hand_built_accuracies_are_one_evaluation_per_problem():
    from lib.analysis.construct import hand_built_accuracies
    acc, att = hand_built_accuracies(32, 16, 6, 4.0, 3, trigger_in_value=False, n_test=256)
    assert acc.shape == att.shape == (3,)
    for s in range(3):                       # problem s and its test set both drawn with seed s
        p = lib.make_problem(lib.TaskConfig(V=32, d=16, L=6, trigger_in_value=False), seed=s)
        r = lib.evaluate(p, hand_built(p, 4.0), n_test=256, seed=s)
        assert (acc[s], att[s]) == (r.acc, r.att_acc)
    for kw, name in ((dict(problems=0), "problems"), (dict(n_test=0), "n_test"),
                     (dict(trigger_in_value="yes"), "trigger_in_value")):
        args = dict(V=32, d=16, L=6, beta=4.0, problems=2) | kw
        with pytest.raises(ValueError, match=name):
            hand_built_accuracies(**args)


def test_trigger_bias_measured_agrees_with_its_prediction():
    from lib.analysis.construct import trigger_bias_measured
    from lib.theory import trigger_bias_var
    mean, se = trigger_bias_measured(16, 8, problems=4000)
    assert se > 0 and abs(mean - trigger_bias_var(16, 8)) < 4 * se
    assert trigger_bias_measured(16, 8, problems=50, seed=1) == trigger_bias_measured(16, 8, problems=50, seed=1)
    assert trigger_bias_measured(16, 8, problems=50, seed=1) != trigger_bias_measured(16, 8, problems=50, seed=2)
    # the standard error is the spread of the mean over independent draws: 20 draws of 200 problems (their
    # ratio measured 0.74 to 1.11 over eight blocks of 20 seeds; a standard error off by sqrt(problems)
    # would give 1/200 or 200)
    runs = [trigger_bias_measured(16, 8, problems=200, seed=s) for s in range(20)]
    ratio = np.std([m for m, _ in runs], ddof=1) / np.mean([e for _, e in runs])
    assert 0.5 < ratio < 1.6, ratio
    for kw, name in ((dict(problems=1), "problems"), (dict(V=0), "V"), (dict(d=0), "d")):
        with pytest.raises(ValueError, match=name):
            trigger_bias_measured(**(dict(V=16, d=8) | kw))


def test_hand_built_accuracy_figure_draws_every_series():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from lib.plotting import hand_built_accuracy_figure
    dims = [8, 16]
    acc = {True: [np.array([0.1, 0.2]), np.array([0.5])], False: [np.array([0.3]), np.array([0.9])]}
    att = {True: [np.array([0.8]), np.array([1.0])], False: [np.array([0.7]), np.array([1.0])]}
    hand_built_accuracy_figure(dims, acc, att, {True: [0.1, 0.6], False: [0.3, 0.8]}, V=16, L=4)
    ax = plt.gcf().axes[0]
    assert len(ax.get_lines()) == 6 and ax.get_xscale() == "log"   # 2 x (points, prediction), attention, d = V
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([0.15, 0.5])
    plt.close("all")


def test_capacity_searches_start_at_first_seed():
    from lib.experiments.memory_capacity import trained_capacity
    one = [hebbian_capacity(16, seeds=1, first_seed=s) for s in range(3)]
    assert one[0] == hebbian_capacity(16, seeds=1)
    assert len(set(one)) > 1                        # different memories, different capacities
    assert trained_capacity(8, 1.0, seeds=1, first_seed=2, steps=50, lr=3.0) == \
        trained_capacity(8, 1.0, seeds=1, first_seed=2, steps=50, lr=3.0)
    for bad in (-1, 1.5, "0", True):
        with pytest.raises(ValueError, match="first_seed"):
            hebbian_capacity(16, first_seed=bad)


@pytest.mark.slow
def test_every_pair_at_once_is_at_least_as_strict():
    from lib.experiments.memory_capacity import trained_capacity
    for s in range(2):
        assert trained_capacity(16, 1.0, seeds=1, first_seed=s, steps=100, lr=3.0) <= \
            trained_capacity(16, 0.9, seeds=1, first_seed=s, steps=100, lr=3.0)
