"""Fits and intervals, and parameter counts: the general helpers the chapters share.

Least-squares power-law fits on log-log axes (chapter 2 onwards), the constant of a law through the
origin, Student-t intervals over problems (chapter 7 onwards: `t_interval`, `geometric_interval`,
`fit_power_law_ci`), and the parameter counts of the two models (chapter 3).
"""

from __future__ import annotations

import math

import numpy as np

from ..core.config import check_choice, check_int
from ..core.featuremaps import REGISTRY


def param_count(model: str, d: int, m: int | None = None) -> dict:
    """Trainable parameters of the two models (W_V and W_KQ), and the frozen ones (F)."""
    check_choice("model", model, tuple(REGISTRY))
    d = check_int("d", d, 1)
    feature_map = REGISTRY[model]
    if feature_map.needs_m:
        m = check_int("m", m, 1)
    width, frozen = feature_map.widths(d, m)
    return {"W_V": d * width, "W_KQ": d * d, "frozen": frozen}


def fit_power_law(x, y) -> tuple[float, float]:
    """Least-squares fit of log y = slope log x + log c; returns (slope, c)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError("x and y must be arrays of the same length >= 2")
    if (x <= 0).any() or (y <= 0).any():
        raise ValueError("x and y must be positive for a log-log fit")
    slope, logc = np.polyfit(np.log(x), np.log(y), 1)
    return float(slope), float(math.exp(logc))


def fit_power_law_interval(x, y, k: float = 2.0) -> tuple[float, float, float]:
    """Least-squares slope of log y on log x with its standard error (`scipy.stats.linregress`): (slope,
    slope - k se, slope + k se); k = 2 is an interval of about 95 % when the residuals are Gaussian
    (needs >= 3 points)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape or x.size < 3:
        raise ValueError("x and y must be arrays of the same length >= 3")
    if (x <= 0).any() or (y <= 0).any():
        raise ValueError("x and y must be positive for a log-log fit")
    from scipy.stats import linregress
    fit = linregress(np.log(x), np.log(y))            # slope and its standard error (n - 2 dof)
    return float(fit.slope), float(fit.slope - k * fit.stderr), float(fit.slope + k * fit.stderr)


def fit_constant(num, den) -> float:
    """Least-squares constant c in num ~ c den through the origin (e.g. d^2 = c n log n)."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    if num.shape != den.shape or num.size < 1:
        raise ValueError("num and den must be arrays of the same positive length")
    return float((num * den).sum() / (den * den).sum())


def t_quantile(p: float, dof: int) -> float:
    """Quantile of Student's t distribution with `dof` degrees of freedom (`scipy.stats.t.ppf`)."""
    from scipy.stats import t
    from ..core.config import check_float
    p = check_float("p", p, 0.5, 0.9995)
    dof = check_int("dof", dof, 1)
    return float(t.ppf(p, dof))


def fit_power_law_ci(x, Y, level: float = 0.95) -> dict:
    """Power-law fit with an interval over problems: Y is (problems, len(x)), each row one problem's
    measurements (e.g. its N* along x). Each row gets its own least-squares slope on log-log axes; the
    slope of the geometric-mean curve equals their mean (least squares is linear in log y), and the
    interval is mean +- t_{(1+level)/2, n-1} * sd / sqrt(n). Returns {"slope", "half", "c", "slopes"}
    (c: prefactor of the geometric-mean fit)."""
    x = np.asarray(x, float)
    Y = np.asarray(Y, float)
    if Y.ndim != 2 or Y.shape[1] != x.size or x.size < 2:
        raise ValueError("Y must be a 2-d array (problems, len(x)) and x have >= 2 points")
    if Y.shape[0] < 2:
        raise ValueError(f"Y must hold at least 2 problems (rows), got {Y.shape[0]}")
    if (x <= 0).any() or not (np.isfinite(Y).all() and (Y > 0).all()):
        raise ValueError("x and Y must be positive and finite for a log-log fit")
    from ..core.config import check_float
    level = check_float("level", level, 0.0, 0.999, strict_min=True)
    slopes = np.array([np.polyfit(np.log(x), np.log(row), 1)[0] for row in Y])
    slope, logc = np.polyfit(np.log(x), np.log(Y).mean(0), 1)
    half = float(t_interval(slopes, level=level)[1])
    return {"slope": float(slope), "half": half, "c": float(math.exp(logc)), "slopes": slopes}


def t_interval(x, axis: int = 0, level: float = 0.95):
    """Mean over independent problems (along `axis`) and the half-width of its Student-t interval at
    `level`: t_{(1+level)/2, n-1} * sd / sqrt(n). The one interval the chapters report over problems."""
    from ..core.config import check_float
    level = check_float("level", level, 0.0, 0.999, strict_min=True)
    x = np.asarray(x, float)
    if x.ndim == 0 or x.shape[axis] < 2:
        raise ValueError(f"x must hold at least 2 problems along axis {axis}, got shape {x.shape}")
    n = x.shape[axis]
    return x.mean(axis), t_quantile((1 + level) / 2, n - 1) * x.std(axis, ddof=1) / math.sqrt(n)


def geometric_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of positive values over problems and its Student-t interval, taken on the logs:
    (geometric mean, lower end, upper end). A zero, negative or non-finite value raises."""
    v = np.asarray(values, float)
    if not (np.isfinite(v).all() and (v > 0).all()):
        raise ValueError("values must be positive and finite")
    m, half = t_interval(np.log(v), level=level)
    return float(math.exp(m)), float(math.exp(m - half)), float(math.exp(m + half))

