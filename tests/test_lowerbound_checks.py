"""lib.analysis.lowerbound_checks: chapter 9's references computed the long way."""
import math

import numpy as np
import pytest

import lib
from lib import lowerbound as lb
from lib.analysis.lowerbound_checks import (attention_nstar_grid, enumerated_bits, estimator_nstar_grid, lookup_guess_accuracies,
                                            permutation_bit_rows)


def test_grid_rows_are_problems_and_match_single_calls():
    cfgs = [lib.TaskConfig(V=8, d=16, L=4, trigger_in_value=False, device="cpu"),
            lib.TaskConfig(V=8, d=16, L=8, trigger_in_value=False, device="cpu")]
    ns = estimator_nstar_grid(cfgs, 2, 0.9, n_min=8, n_max=2 ** 8, n_test=256)
    assert set(ns) == set(lb.ESTIMATORS) | {"three"} and all(v.shape == (2, 2) for v in ns.values())
    one = lb.estimator_nstars(cfgs[1], 0.9, seed=1, n_min=8, n_max=2 ** 8)
    for e in lb.ESTIMATORS:
        assert (np.isnan(ns[e][1, 1]) and one[e] is None) or ns[e][1, 1] == one[e]
    three = lb.three_steps_nstar(cfgs[0], 0.9, seed=1, n_min=8, n_max=2 ** 8, n_test=256)
    assert (np.isnan(ns["three"][1, 0]) and three is None) or ns["three"][1, 0] == three
    with pytest.raises(ValueError, match="problems"):
        estimator_nstar_grid(cfgs, 0)
    with pytest.raises(ValueError, match="configs"):
        estimator_nstar_grid([], 1)


def test_enumerated_bits_at_the_ends_and_in_between():
    assert enumerated_bits(4, 0) == pytest.approx(math.log2(24))      # a map serves one permutation exactly
    assert enumerated_bits(4, 4) == pytest.approx(0.0)                # within 4 errors of everything
    assert enumerated_bits(3, 1) == pytest.approx(math.log2(3))       # f = (0, 0, 2): one error from 012 and 102
    with pytest.raises(ValueError, match="V"):
        enumerated_bits(7, 1)
    with pytest.raises(ValueError, match="k"):
        enumerated_bits(4, -1)


def test_rows_count_permutations_one_map_serves():
    rows = permutation_bit_rows(brute_force=(3,), counted=((6, 2),))
    assert [(V, k) for V, k, _, _ in rows] == [(3, 0), (3, 1), (3, 2), (3, 3), (6, 2)]
    assert [s for *_, s in rows] == [1, 3, 6, 6, 30] and math.isinf(rows[-1][2])
    with pytest.raises(ValueError, match="brute_force"):
        permutation_bit_rows(brute_force=(9,))
    # the ends of the brute-force range: V = 1 (one map, one permutation: 0 bits, one served at k = 0, 1)
    # is accepted; V = 0 and V = 7 (past enumerated_bits' 6) are refused by this guard, naming it
    assert permutation_bit_rows(brute_force=(1,), counted=()) == [(1, 0, 0.0, 1), (1, 1, 0.0, 1)]
    for v in (0, 7):
        with pytest.raises(ValueError, match="brute_force"):
            permutation_bit_rows(brute_force=(v,), counted=())
    with pytest.raises(ValueError, match="counted"):
        permutation_bit_rows(counted=((3, 4),))


def test_default_rows_enumerate_v4_and_v5_and_count_four_pairs():
    """The default table: every k at V = 4 and 5 by enumeration (log2 V! bits at k = 0, none at k = V), then
    (6, 2), (7, 3), (8, 1), (8, 5) by the count V!/(V - k)! of the ordered choices (30, 210, 8, 6720)."""
    rows = permutation_bit_rows()
    assert [(V, k) for V, k, _, _ in rows] == [(4, k) for k in range(5)] + [(5, k) for k in range(6)] + \
        [(6, 2), (7, 3), (8, 1), (8, 5)]
    assert rows[0][2] == pytest.approx(math.log2(24)) and rows[5][2] == pytest.approx(math.log2(120))
    assert rows[4][2] == pytest.approx(0.0) and rows[10][2] == pytest.approx(0.0)
    assert [s for *_, s in rows[-4:]] == [30, 210, 8, 6720] and all(math.isinf(r[2]) for r in rows[-4:])


def test_lookup_guesses_are_right_on_seen_tokens_and_reproducible():
    acc = lookup_guess_accuracies(4, 200, 3)
    assert len(acc) == 5 and all(len(a) == 200 for a in acc)
    assert all(a == 1.0 for a in acc[3] + acc[4])                     # one or no unseen token: forced
    assert abs(np.mean(acc[0]) - 0.25) < 0.05                         # nothing seen: a random bijection
    assert acc == lookup_guess_accuracies(4, 200, 3)
    with pytest.raises(ValueError, match="reps"):
        lookup_guess_accuracies(4, 0, 3)


def test_attention_grid_matches_single_calls_and_marks_unreached_as_nan():
    from lib.analysis.margins import measured_attention_nstar
    cfgs = [lib.TaskConfig(V=32, d=16, L=8, device="cpu"), lib.TaskConfig(V=32, d=24, L=8, device="cpu")]
    ns = attention_nstar_grid(cfgs, 2, 0.9, n_max=2 ** 8)
    assert ns.shape == (2, 2)
    for s in range(2):
        for j, c in enumerate(cfgs):
            one = measured_attention_nstar(c, seed=s, threshold=0.9, n_min=1, n_max=2 ** 8)
            assert (np.isnan(ns[s, j]) and math.isinf(one)) or ns[s, j] == one
    # d = 4 is past the population wall d <= r*^2 at L = 16: no N reaches 0.999, every entry is nan
    assert np.isnan(attention_nstar_grid([lib.TaskConfig(V=32, d=4, L=16, device="cpu")], 2, 0.999, n_max=2 ** 6)).all()
    with pytest.raises(ValueError, match="problems"):
        attention_nstar_grid(cfgs, 0)
    with pytest.raises(ValueError, match="configs"):
        attention_nstar_grid([], 1)


def test_attention_grid_reaches_two_to_the_fifteen_by_default(monkeypatch):
    """Chapter 9's grid runs up to N = 2^15 (its text says so, and it calls the grid with the default):
    every call gets n_max = 2^15 and n_min = 1 unless told otherwise."""
    import lib.analysis.margins as margins
    calls = []
    monkeypatch.setattr(margins, "measured_attention_nstar", lambda c, **kw: calls.append(kw) or 64.0)
    out = attention_nstar_grid([lib.TaskConfig(V=32, d=16, L=8, device="cpu")], 2)
    assert out.shape == (2, 1) and (out == 64.0).all()
    assert [(k["n_min"], k["n_max"]) for k in calls] == [(1, 2 ** 15)] * 2
