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
    assert len(refined.leak_table(rows).splitlines()) == 1 + len(rows)
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


def test_term_sds_are_positive_and_predicted():
    meas, pred = refined.term_sds(16, 8, 256, 0, n_test=64)
    assert set(meas) == set(pred) == set(refined.TERMS)
    assert all(v > 0 for v in meas.values()) and all(v > 0 for v in pred.values())


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


def test_agreement_with_limit_at_the_default_step_sizes_is_total():
    p = lib.make_problem(lib.TaskConfig(V=16, d=32, L=4, device="cpu"), 0)
    tr, te = lib.sample_batch(p, 512, 0), lib.sample_batch(p, 128, 0, split="test")
    lim = lib.three_steps(p, tr, "limit")
    assert refined.agreement_with_limit(p, tr, te, lim.params, [lib.StepSizes()]) == [1.0]
    assert refined.median_trigger_gap(p, te, lim.k) > 0


def test_read_counts_and_the_memory_they_describe():
    c = lib.TaskConfig(V=6, d=14, L=3, embedding="orthogonal", dtype="float64", device="cpu")
    p = lib.make_problem(c, 1)
    tr = lib.sample_batch(p, 40, 1)
    att = torch.where(torch.arange(40) < 10, (tr.pos + 1) % 3, tr.pos)
    n_ok, M = refined.read_counts(p, tr, att)
    assert float(n_ok.sum()) == 30 and float(M.sum()) == 10
    assert float(M.sum(0)[tr.labels[0]]) >= (1 if att[0] != tr.pos[0] else 0)
    with pytest.raises(ValueError, match="attn"):
        refined.read_counts(p, tr, att[:5])


def test_key_term_samples_variance_and_arguments():
    t = refined.key_term_samples(4, 8, 1.0, 20000, lib.torch_generator(7))
    assert t.shape == (20000,) and abs(float(t.mean())) < 0.01
    for kwargs, name in (({"d": 2}, "d"), ({"s2": 0.0}, "s2"), ({"samples": 1}, "samples")):
        args = {"V": 4, "d": 8, "s2": 1.0, "samples": 100} | kwargs
        with pytest.raises(ValueError, match=name):
            refined.key_term_samples(gen=lib.torch_generator(0), **args)


def test_logit_spread_coupling_is_a_correlation():
    r = refined.logit_spread_coupling(16, 8, range(2))
    assert -1 <= r <= 1
    with pytest.raises(ValueError, match="seeds"):
        refined.logit_spread_coupling(16, 8, [])
    assert np.isfinite(r)
