"""The two grid rules (lib.core.grid) against their definitions written as loops, on random curves,
along an axis and alone; and the modules that read a threshold off a grid give what the rules give."""
import math

import numpy as np
import pytest

from lib.analysis import attention_curve as ac
from lib.analysis import lowerbound as lb
from lib.analysis import refined
from lib.core.grid import between, crossing, first_index, stays_from


def _first_loop(ok):
    for i, v in enumerate(ok):
        if v:
            return i
    return None


def _stays_loop(ok):
    out = None
    for i in range(len(ok) - 1, -1, -1):
        if not ok[i]:
            break
        out = i
    return out


@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_the_rules_equal_their_loops_alone_and_along_an_axis(p):
    rng = np.random.default_rng(7)
    for n in range(0, 9):
        ok = rng.random((40, n)) < p
        for row in ok:
            assert first_index(row) == _first_loop(row)
            assert stays_from(row) == _stays_loop(row)
        if n:
            none = lambda i: n if i is None else i                          # noqa: E731
            assert first_index(ok, axis=1).tolist() == [none(_first_loop(r)) for r in ok]
            assert stays_from(ok, axis=1).tolist() == [none(_stays_loop(r)) for r in ok]
            assert stays_from(ok.T, axis=0).tolist() == [none(_stays_loop(r)) for r in ok]


def test_the_rules_differ_where_a_curve_dips_and_refuse_what_is_not_boolean():
    ok = np.array([False, True, False, True, True])
    assert (first_index(ok), stays_from(ok)) == (1, 3)
    assert stays_from(np.array([True, False])) is None
    with pytest.raises(ValueError, match="ok"):
        stays_from(np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="ok"):
        first_index(np.ones((2, 2), bool))


def test_the_readers_give_what_the_rules_give():
    rng = np.random.default_rng(3)
    Ns = [4, 8, 16, 32, 64, 128]
    for _ in range(50):
        acc = np.clip(np.sort(rng.random((3, 6)), axis=1) + rng.normal(0, 0.05, (3, 6)), 0, 1)
        t = float(rng.choice([0.5, 0.9, 0.99]))
        for a in acc:
            i = _stays_loop(a >= t)
            assert lb.first_stable(Ns, a, t) == (None if i is None else Ns[i])
        fp = ac.first_passage(acc, Ns, t)
        want = [math.inf if _first_loop(a >= t) is None else Ns[_first_loop(a >= t)] for a in acc]
        assert fp.tolist() == want
        y = acc[0][::-1]                                   # a falling curve for first_crossing
        j = _first_loop(y < t)
        got = refined.first_crossing(Ns, y, t)
        if y[0] < t or j is None:
            assert math.isnan(got)
        else:
            assert Ns[j - 1] <= got <= Ns[j]
            assert got == pytest.approx(Ns[j - 1] + (Ns[j] - Ns[j - 1]) * (y[j - 1] - t) / (y[j - 1] - y[j]))


def test_crossing_is_the_rule_then_the_interpolation():
    """crossing = the rule's index, then `between` from the grid point before: against a loop over the
    segments (the first segment whose ends bracket the level from below) on random rising and noisy
    curves, linear and in log x; x[0] when the curve starts at the level; None when not reached."""
    rng = np.random.default_rng(11)
    Ns = [4, 8, 16, 32, 64, 128]
    for _ in range(200):
        y = np.clip(np.sort(rng.random(6)) + rng.normal(0, 0.05, 6), 0, 1)
        t = float(rng.choice([0.3, 0.5, 0.9]))
        for log_x in (False, True):
            got = crossing(Ns, y, t, log_x=log_x)
            if y[0] >= t:
                assert got == Ns[0]
                continue
            seg = next((i for i in range(1, 6) if y[i - 1] < t <= y[i]), None)
            if seg is None:
                assert got is None
                continue
            w = (t - y[seg - 1]) / (y[seg] - y[seg - 1])
            x0, x1 = (math.log(Ns[seg - 1]), math.log(Ns[seg])) if log_x else (Ns[seg - 1], Ns[seg])
            want = x0 + w * (x1 - x0)
            assert got == pytest.approx(math.exp(want) if log_x else want, rel=1e-12)
            assert Ns[seg - 1] <= got <= Ns[seg]
            i = _stays_loop(y >= t)
            stays = crossing(Ns, y, t, rule="stays", log_x=log_x)
            assert (stays is None) == (i is None) and (i is None or stays <= Ns[i])


def test_between_and_crossing_refuse_bad_arguments():
    with pytest.raises(ValueError, match="same length"):
        between([1, 2], [0.5], 1, 0.7)
    with pytest.raises(ValueError, match="j must index"):
        between([1, 2], [0.5, 1.0], 2, 0.7)
    with pytest.raises(ValueError, match="rule must be"):
        crossing([1, 2], [0.5, 1.0], 0.7, rule="last")
    assert between([1, 2], [0.5, 0.5], 1, 0.7) == 2.0                 # a flat segment: its right end
    assert between([1, 3], [1.0, 0.0], 1, 0.25) == 2.5                # falling curves interpolate alike
