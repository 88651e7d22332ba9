"""One monotone search: doubling, then bisection to a relative resolution (chapters 2 and 4-7).

`threshold_search(ok, lo, hi, resolution)` assumes ok(n) is False below some n and True from it on
(for the critical sample size N*: "the accuracy with n samples reaches the threshold"; for a memory
capacity: "n associations are too many"). It evaluates ok at lo, 2 lo, 4 lo, ... (capped at hi)
until the first True, then bisects between the last False and the first True until

    first_true - last_false <= max(1, resolution * first_true),

and returns the `Bracket` (last_false, first_true). Every n it evaluated is recorded in order.
`smallest_true` and `largest_true` are its exact integer forms; `first_true_real` is the same search
on the reals (a root of a monotone formula: a predicted N*, a critical ratio), by geometric or
arithmetic halving to a stated tolerance. `first_true_on_grid` is the bisection alone, over the
indices of a grid the caller already spans (no doubling from the bottom: on a measured predicate that
is monotone only up to noise, a doubling can stop at an earlier crossing). No other module bisects by hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .config import check_float, check_int


@dataclass
class Bracket:
    last_false: int | None      # largest n seen with ok(n) False (None if ok(lo))
    first_true: int | None      # smallest n seen with ok(n) True (None if not ok(hi))
    evaluated: list = field(default_factory=list)   # (n, ok(n)) in the order evaluated


def threshold_search(ok, lo: int, hi: int, resolution: float) -> Bracket:
    """Bracket the switch of a monotone predicate ok: [lo, hi] -> bool to a relative resolution."""
    lo, hi = check_int("n_min", lo, 1), check_int("n_max", hi, 1)
    if lo > hi:
        raise ValueError(f"n_min must be <= n_max, got n_min={lo}, n_max={hi}")
    resolution = check_float("resolution", resolution, 0.0, 1.0, strict_min=True)
    out = Bracket(None, None)

    def test(n):
        res = bool(ok(n))
        out.evaluated.append((n, res))
        return res

    n = lo
    while not test(n):
        out.last_false = n
        if n >= hi:
            return out
        n = min(2 * n, hi)
    out.first_true = n
    bad = out.last_false if out.last_false is not None else 0
    while n - bad > max(1, resolution * n):
        mid = (n + bad) // 2
        if test(mid):
            n = mid
        else:
            bad = mid
    out.first_true = n
    out.last_false = bad if bad > 0 else out.last_false
    return out


def smallest_true(ok, n_min: int = 1, n_max: int = 2 ** 62) -> int:
    """Smallest n >= n_min with ok(n) True, for a predicate False below some n and True from it on:
    `threshold_search` at unit resolution, so every search in the library is the same doubling and
    bisection. Raises if ok(n_max) is still False."""
    br = threshold_search(ok, n_min, n_max, 1e-18)
    if br.first_true is None:
        raise ValueError(f"ok is still False at n_max={n_max}")
    return br.first_true


def first_true_on_grid(ok, size: int) -> int | None:
    """The smallest index i in [0, size) with ok(i) True, for ok False below some index and True from
    it on, by bisection of the indices: ok(size - 1) first (None if False), then ok(0) (0 if True;
    not asked again when size = 1), then midpoints (lo + hi) // 2 until the bracket is one index wide. At most 2 + ceil(log2(size))
    evaluations, none of them below the bracket the grid gives."""
    size = check_int("size", size, 1)
    if not ok(size - 1):
        return None
    if size == 1 or ok(0):
        return 0
    lo, hi = 0, size - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def largest_true(ok, n_max: int = 2 ** 62) -> int:
    """Largest n >= 1 with ok(n) True, for a predicate True up to some n and False after it (0 if
    ok(1) is False): one less than the smallest n at which it fails."""
    try:
        return smallest_true(lambda n: not ok(n), 1, n_max) - 1
    except ValueError:
        raise ValueError(f"ok is still True at n_max={n_max}") from None


def first_true_real(ok, lo: float, hi: float, tol: float, scale: str = "log", grow: bool = False) -> float:
    """The real counterpart of `threshold_search`: the smallest x in [lo, hi] with ok(x) True, for ok
    False below some x and True from it on, bracketed to within `tol` and returned as the bracket's
    upper end (where ok holds): lo if ok(lo), inf if not ok(hi) (hi if lo >= hi and ok(hi)). On scale "log" (0 < lo) the bracket
    is halved geometrically until hi / lo <= 1 + tol; on scale "linear" arithmetically until
    hi - lo <= tol. With `grow` (log scale) the bracket is first found by doubling from lo, capped at
    hi, so that a wide [lo, hi] costs about log2(x / lo) evaluations before the halving."""
    lo, hi, tol = float(lo), float(hi), check_float("tol", tol, 0.0, 1e300, strict_min=True)
    if scale not in ("log", "linear"):
        raise ValueError(f"scale must be 'log' or 'linear', got {scale!r}")
    if not (math.isfinite(lo) and math.isfinite(hi)) or (scale == "log" and not (lo > 0 and hi > 0)):
        raise ValueError(f"lo and hi must be finite{' and positive on scale log' if scale == 'log' else ''}, "
                         f"got lo={lo}, hi={hi}")
    if not ok(hi):
        return float("inf")
    if ok(lo):
        return lo
    if grow:
        if scale != "log":
            raise ValueError("grow needs scale 'log'")
        x = lo
        while x < hi and not ok(min(2 * x, hi)):
            x = min(2 * x, hi)
        lo, hi = x, min(2 * x, hi)
    while (hi / lo > 1 + tol) if scale == "log" else (hi - lo > tol):
        mid = math.sqrt(lo * hi) if scale == "log" else (lo + hi) / 2
        if not lo < mid < hi:                        # tol below the float spacing: as close as it gets
            break
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi
