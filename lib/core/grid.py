"""Reading a threshold off a curve measured on a grid: the two rules the book uses, written once.

A measured curve (accuracy against N, or against V) is known only at grid points. Its critical point is
then one of two indices of the boolean curve ok[i] = (curve[i] >= threshold):

  first_index(ok)   the first grid point where ok holds ("first reaches"): a first passage, for one
                    problem's own curve or where a later dip is part of what is measured;
  stays_from(ok)    the first grid point from which ok holds to the grid's end ("stays"): the
                    requirement of a curve that may fluctuate around the threshold before settling.

Both return None when no grid point qualifies (the curve never reaches the threshold, or its last point
is below it): "not reached" is a result the caller reports, not an error. Along an axis of a 2-D array
(`axis=`) they return one index per column or row, with the grid's length meaning "not reached".
Between grid points, `between` interpolates where the curve passes the threshold (linearly in x, or in
log x for grids spaced by factors), and `crossing` reads the index by either rule and interpolates: the
one interpolation the book's readers use.
The searches that choose where to evaluate (doubling, bisection) are `core.search`; these only read a
grid that was evaluated in full.
"""

from __future__ import annotations

import math

import numpy as np


def _bools(ok) -> np.ndarray:
    a = np.asarray(ok)
    if a.dtype != bool:
        raise ValueError(f"ok must be a boolean array (curve >= threshold), got dtype {a.dtype}")
    return a


def first_index(ok, axis: int | None = None):
    """Index of the first True of the 1-D `ok` (None if none); with `axis`, of each slice along it
    (`ok.shape[axis]` where a slice has none)."""
    ok = _bools(ok)
    if axis is None:
        if ok.ndim != 1:
            raise ValueError(f"ok must be 1-D without axis, got shape {ok.shape}")
        hit = np.flatnonzero(ok)
        return int(hit[0]) if hit.size else None
    return np.where(ok.any(axis=axis), ok.argmax(axis=axis), ok.shape[axis])


def stays_from(ok, axis: int | None = None):
    """Index from which the 1-D `ok` is True to its end (None if its last entry is False or it is
    empty); with `axis`, of each slice along it (`ok.shape[axis]` where a slice ends False)."""
    ok = _bools(ok)
    if axis is None:
        if ok.ndim != 1:
            raise ValueError(f"ok must be 1-D without axis, got shape {ok.shape}")
        if ok.size == 0 or not ok[-1]:
            return None
        bad = np.flatnonzero(~ok)
        return int(bad[-1]) + 1 if bad.size else 0
    tail = np.flip(np.logical_and.accumulate(np.flip(ok, axis=axis), axis=axis), axis=axis)
    return first_index(tail, axis=axis)


def between(x, y, j: int, level: float, log_x: bool = False) -> float:
    """Where the curve y (measured at the increasing grid x) passes `level` between grid points j - 1 and
    j, interpolated linearly in x (in log x with `log_x`), the weight clamped to [0, 1]; x[0] when j = 0
    (the curve is already past the level at the grid's start). Rising or falling alike."""
    if len(x) != len(y):
        raise ValueError(f"x and y must have the same length, got {len(x)} and {len(y)}")
    if not 0 <= int(j) < len(x):
        raise ValueError(f"j must index the grid (0 <= j < {len(x)}), got {j}")
    j = int(j)
    if j == 0:
        return float(x[0])
    a, b = float(y[j - 1]), float(y[j])
    w = min(max((level - a) / (b - a), 0.0), 1.0) if b != a else 1.0
    if log_x:
        lo, hi = math.log(x[j - 1]), math.log(x[j])
        return float(math.exp(lo + w * (hi - lo)))
    return float(x[j - 1] + w * (x[j] - x[j - 1]))


def crossing(x, y, level: float, rule: str = "first", log_x: bool = False):
    """Where the curve y (at the increasing grid x) reaches `level` (y >= level) by `rule` ("first":
    `first_index`, "stays": `stays_from`), interpolated from the grid point before (`between`); x[0]
    when the curve starts there, None when not reached."""
    if rule not in ("first", "stays"):
        raise ValueError(f"rule must be 'first' or 'stays', got {rule!r}")
    ok = np.asarray(y, dtype=float) >= level
    j = first_index(ok) if rule == "first" else stays_from(ok)
    return None if j is None else between(x, y, j, level, log_x)
