"""Chapter 7: the attention requirement as a calibrated law in the paper's regime (d < V).

Chapter 5 derives the attention condition from the self-term's noise alone; past a few hundred
samples the batch-to-batch fluctuation of k is of the same size, and the derived N_att misses the
measured one by factors of 2 to 80 at d < V. Chapter 7 therefore measures the N at which attention
alone (metric att_acc of `lib.experiments.capacity.nstar`) reaches a threshold t over a grid
V in {64, 128, 256, 512}, d from V/8 to V, L from 8 to 256, trigger in and out of the value path
(`scripts/capacity_grid.py`), fits a law on half of the grid (the calibration part) and reports its
error on the other half (held out). Two forms, on log N (r*(L, t) = `critical_snr`: the Gaussian
score ratio attention needs at accuracy t among L positions, chapter 5):

    product:   log N = c0 + cL log L + cV log V + cd log d + cr log r*^2 - log(1 - r*^2/d)
    separate:  log N = c0 + cL log L + cV log V + cr log r*^2, for d > r*^2: two separate thresholds,
               N >~ f(V, L) and d >~ g(L) = r*^2, with no trade-off between N and d

The last term of the product form is chapter 5's population wall (no finite N when d <= r*^2), with
the exponent of the 1/N regime of the fluctuation (N ~ F1 / (1/r*^2 - 1/d)): it couples N and d
multiplicatively near the wall, and log d far from it. Constants are fitted by least squares,
one set per form and trigger setting, once; `lib/theory/capacity_calibration.json` holds them with
the grid they came from (`scripts/calibrate_capacity_law.py` writes it).
"""

from __future__ import annotations

import functools
import json
import math
import os

import numpy as np

from ..core.config import check_bool, check_choice, check_float, check_int
from .ch05_attention_step import critical_snr

FORMS = ("product", "separate")
MIN_N = 32          # the law covers N >= 32: below it attention works from a handful of samples (next to
                    # the search's first N = 16), a regime that never decides the capacity (coverage alone
                    # needs V log(1/(1 - threshold)) >= 147 samples at V = 64), and the calibration skips it
THRESHOLDS = (0.9, 0.99)
CALIBRATION_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capacity_calibration.json")


@functools.lru_cache(maxsize=None)
def rstar_cached(L: int, threshold: float) -> float:
    """`critical_snr(L, threshold)`, computed once per (L, threshold) for the laws of this chapter."""
    return critical_snr(L, threshold)


def _rstar2(L: int, threshold: float) -> float:
    return rstar_cached(L, threshold) ** 2


def law_features(V: int, d: int, L: int, threshold: float, form: str = "product"):
    """(features, offset) of log N for one configuration; None past the population wall
    (d <= r*(L, threshold)^2). Product form: features [1, log L, log V, log d, log r*^2] and offset
    -log(1 - r*^2/d); separate form: [1, log L, log V, log r*^2] and offset 0 (d enters only as the wall)."""
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 2)
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    check_choice("form", form, FORMS)
    rs2 = _rstar2(L, threshold)
    if d <= rs2:
        return None
    if form == "product":
        return np.array([1.0, math.log(L), math.log(V), math.log(d), math.log(rs2)]), -math.log(1.0 - rs2 / d)
    return np.array([1.0, math.log(L), math.log(V), math.log(rs2)]), 0.0


def fit_law(points, form: str = "product") -> dict:
    """Least squares of log N on the law's features over `points`, each a dict with V, d, L, threshold
    and y = the mean over problems of log N* (the log of the geometric mean). Points past the wall are
    refused. Returns {"theta": list, "form", "n": points, "sd": residual standard deviation}."""
    check_choice("form", form, FORMS)
    X, y = [], []
    for p in points:
        feat = law_features(p["V"], p["d"], p["L"], p["threshold"], form)
        if feat is None:
            raise ValueError(f"point {p} is past the population wall: no law to fit there")
        X.append(feat[0])
        y.append(float(p["y"]) - feat[1])
    X, y = np.array(X), np.array(y)
    if len(y) <= X.shape[1]:
        raise ValueError(f"points must number more than the {X.shape[1]} constants of the {form} form, got {len(y)}")
    theta, *_ = np.linalg.lstsq(X, y, rcond=None)
    res = y - X @ theta
    return {"theta": [float(t) for t in theta], "form": form, "n": int(len(y)),
            "sd": float(np.sqrt((res ** 2).sum() / (len(y) - X.shape[1])))}


def law_value(fit: dict, V: int, d: int, L: int, threshold: float) -> float:
    """N of a fitted law (`fit_law`'s dict) at one configuration; inf past the wall."""
    feat = law_features(V, d, L, threshold, fit["form"])
    if feat is None:
        return math.inf
    return float(math.exp(feat[0] @ np.array(fit["theta"]) + feat[1]))


@functools.lru_cache(maxsize=None)
def calibration() -> dict:
    """The shipped calibration: constants per form and trigger setting, their provenance (command,
    search settings, seeds, lib version, commit), the calibration/held-out split and the measured grid."""
    with open(CALIBRATION_FILE) as f:
        return json.load(f)


def law_range(V: int, d: int, L: int, threshold: float = 0.99, trigger_in_value: bool = False) -> bool:
    """Whether (V, d, L, threshold) lies inside the calibrated range: V, d, L within the grid's bounds,
    d <= V (the paper's regime), the threshold in [0.9, 0.99] (between the two calibrated thresholds,
    interpolated through r*(L, t)), and the law's N between MIN_N and the grid's largest N (2^18: the
    calibration kept only points that every problem reached by then). Outside it the law is an
    extrapolation (or, past the wall, says no N is enough)."""
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 2)
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    r = calibration()["range"]
    inside = (r["V"][0] <= V <= r["V"][1] and r["d_over_V"][0] * V <= d <= r["d_over_V"][1] * V
              and r["L"][0] <= L <= r["L"][1] and r["threshold"][0] <= threshold <= r["threshold"][1])
    return inside and MIN_N <= attention_law(V, d, L, threshold, trigger_in_value) <= calibration()["provenance"]["search"]["n_max"]


def attention_law(V: int, d: int, L: int, threshold: float = 0.99, trigger_in_value: bool = False,
                  form: str = "product") -> float:
    """The calibrated attention requirement: the N at which attention picks the marked position with
    probability `threshold` (chapter 7), from the constants of `calibration()`; inf past the population
    wall d <= r*(L)^2. `law_range` says whether the point is inside the grid it was calibrated on."""
    check_bool("trigger_in_value", trigger_in_value)
    check_choice("form", form, FORMS)
    fit = calibration()["fits"][f"{form}/{'in' if trigger_in_value else 'out'}"]
    return law_value(fit, V, d, L, threshold)
