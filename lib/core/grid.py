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
The searches that choose where to evaluate (doubling, bisection) are `core.search`; these only read a
grid that was evaluated in full.
"""

from __future__ import annotations

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
