"""Chapter 7: the attention requirement derived from the moments of step 2's direction k.

Chapter 5 writes the attention direction after step 2 on a batch of N samples as k = E[k | N] + dk and
its signal-to-noise ratio r = mu / s (the trigger's bonus over the spread of the token scores) as

    1 / r(N)^2 = 1 / r_inf^2 + X(N),   X(N) = (G + F1 N) / (N + beta)^2          (|z_trig| = 1)

with r_inf^2 = d |z|^2 (the population wall), beta the self-term's factor, F1 the batch-to-batch
fluctuation's 1/N coefficient and G the whole 1/N^2 coefficient (the mean's self-term B plus the
fluctuation's F2). Hard attention is then right with probability A(r, L) = P(X_0 + r > max X_1..X_{L-1})
(`gaussian_attention_accuracy`), and the requirement N_att at threshold t is where A(r(N), L) = t *and
stays*: the largest root of

    (1/r*^2 - 1/d) (N + beta)^2 = G + F1 N,   r* = critical_snr(L, t),

    N_att = max(1, [F1 + sqrt(F1^2 + 4 q (G - F1 beta))] / (2 q) - beta),   q = 1/r*^2 - 1/d,

infinite when q <= 0 (d <= r*^2: no N is enough). With the trigger in the value path the curve can
pass the threshold at a handful of samples (the self-term points k at the trigger), fall below it and
rise again; the largest root is the N from which it stays above.

What is derived and what is measured (chapter 7 says the same):
  derived       r_inf^2 = d; beta = V (1 + (L-1)/d) - 1 with the trigger in the value path (chapter 5),
                and 0 without it (the keys' trigger term averages to zero against the values' mean);
                the form of X(N) (Hoeffding's decomposition, exact in N); A(r, L); the root.
  on moments    F1 and G: one- and two-sample moments of single problems, measured by
                `scripts/measure_k_moments.py` (no training, no N*) on a grid of (V, d, L) and
                summarised by two moment laws (`fit_moment_laws`), each constant with a 95 % interval:
                  F1 = (a + b L^p / d^q) / d          F2 = a + b L^p (V/d)^q / V^s
                and G = B + F2 with chapter 5's B (`imbalance_noise`, derived), the leading order of the
                mean's 1/N^2 coefficient C0 (`lib.analysis.k_noise.mean_coefficients`); the mean's 1/N
                coefficient C1 is left out (it changes sign from problem to problem).
                The table and the fitted constants ship in attention_moments.json.
Nothing here was fitted to an N* or to an accuracy.
"""

from __future__ import annotations

import functools
import json
import math
import os

import numpy as np

from ..core.config import check_bool, check_float, check_int
from .ch05_attention_step import gaussian_attention_accuracy, imbalance_noise
from .ch04_value_step import trigger_self_bias
from .ch07_law import rstar_cached
from .fits import t_quantile

MOMENTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention_moments.json")


def _f1_form(theta, V, d, L):
    la, lb, p, q = theta
    return (np.exp(la) + np.exp(lb) * L ** p / d ** q) / d


def _g_form(theta, V, d, L):
    la, lb, p, q, s = theta
    return np.exp(la) + np.exp(lb) * L ** p * (V / d) ** q / V ** s


LAW_FORMS = {"F1": (_f1_form, ("log a", "log b", "p", "q"), (3.0, 5.0, 1.5, 1.7)),
             "F2": (_g_form, ("log a", "log b", "p", "q", "s"), (4.0, 0.0, 3.0, 2.5, 2.0))}


def _gauss_newton(form, theta0, X, y, iters: int = 200):
    """Levenberg-Marquardt on sum (log form(theta, X) - log y)^2; returns (theta, residuals, jacobian)."""
    theta, lam = np.array(theta0, float), 1e-3

    def res(th):
        with np.errstate(over="ignore", invalid="ignore"):
            r = np.log(form(th, *X)) - np.log(y)
        return np.where(np.isfinite(r), r, 1e6)

    def jac(th):
        J = np.empty((len(y), len(th)))
        for i in range(len(th)):
            h = 1e-6 * max(1.0, abs(th[i]))
            e = np.zeros_like(th)
            e[i] = h
            J[:, i] = (res(th + e) - res(th - e)) / (2 * h)
        return J

    r = res(theta)
    for _ in range(iters):
        J = jac(theta)
        A, g = J.T @ J, J.T @ r
        step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
        r_new = res(theta + step)
        if (r_new ** 2).sum() < (r ** 2).sum():
            theta, r, lam = theta + step, r_new, lam / 3
            if np.abs(step).max() < 1e-10:
                break
        else:
            lam *= 10
    return theta, r, jac(theta)


def fit_moment_laws(records) -> dict:
    """Fit the moment laws of `LAW_FORMS` to a moment table's records (dicts with V, d, L,
    trigger_in_value, F1, F2), one law per quantity and trigger setting, by least squares on the logs
    of the means over problems per configuration. Returns {"F1/in": {...}, ...},
    each with theta, its 95 % half-widths (from the residuals, configurations taken as independent), the
    parameter names, the root-mean-square and largest log residual and the number of configurations."""
    records = list(records)
    if not records:
        raise ValueError("records must not be empty")
    out = {}
    for trig in (True, False):
        groups = {}
        for r in records:
            if r["trigger_in_value"] == trig:
                groups.setdefault((r["V"], r["d"], r["L"]), []).append(r)
        if len(groups) < 8:
            raise ValueError(f"records must hold at least 8 configurations per trigger setting, got {len(groups)}")
        keys = sorted(groups)
        X = tuple(np.array([k[i] for k in keys], float) for i in range(3))
        y = {name: np.array([np.mean([r[name] for r in groups[k]]) for k in keys]) for name in LAW_FORMS}
        for name, (form, names, theta0) in LAW_FORMS.items():
            if (y[name] <= 0).any():
                raise ValueError(f"{name} must be positive at every configuration to fit its law on the log scale")
            theta, res, J = _gauss_newton(form, theta0, X, y[name])
            dof = len(res) - len(theta)
            cov = np.linalg.pinv(J.T @ J) * (res ** 2).sum() / dof
            half = t_quantile(0.975, dof) * np.sqrt(np.diag(cov))
            out[f"{name}/{'in' if trig else 'out'}"] = {
                "names": list(names), "theta": [float(t) for t in theta], "half": [float(h) for h in half],
                "rms": float(np.sqrt((res ** 2).mean())), "max": float(np.abs(res).max()), "configs": len(keys)}
    return out


@functools.lru_cache(maxsize=None)
def moment_table() -> dict:
    """The shipped moment table: provenance, the per-problem records and the fitted laws."""
    with open(MOMENTS_FILE) as f:
        return json.load(f)


def _law(name: str, trigger_in_value: bool, V: int, d: int, L: int) -> float:
    law = moment_table()["laws"][f"{name}/{'in' if trigger_in_value else 'out'}"]
    return float(LAW_FORMS[name][0](np.array(law["theta"]), float(V), float(d), float(L)))


def _check(V, d, L, trigger_in_value):
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 2)
    return V, d, L, check_bool("trigger_in_value", trigger_in_value)


def derived_terms(V: int, d: int, L: int, trigger_in_value: bool = True) -> dict:
    """The terms of X(N) at (V, d, L): beta (derived), F1 (moment law), G = B (derived) + F2 (moment law),
    r_inf^2 = d (derived)."""
    V, d, L, trig = _check(V, d, L, trigger_in_value)
    return {"beta": trigger_self_bias(V, d, L) if trig else 0.0, "F1": _law("F1", trig, V, d, L),
            "G": imbalance_noise(V, d, L) + _law("F2", trig, V, d, L), "r_inf2": float(d)}


def derived_attention_accuracy(N, V: int, d: int, L: int, trigger_in_value: bool = True) -> np.ndarray:
    """A(r(N), L) with 1/r(N)^2 = 1/d + (G + F1 N)/(N + beta)^2: the predicted attention accuracy after
    step 2 on N samples (limit mode). Accepts an array of N (each >= 1)."""
    N = np.asarray(N, float)
    if N.size == 0 or not (np.isfinite(N) & (N >= 1)).all():
        raise ValueError(f"N must be finite and >= 1, got {N!r}")
    t = derived_terms(V, d, L, trigger_in_value)
    X = (t["G"] + t["F1"] * N) / (N + t["beta"]) ** 2
    r = 1.0 / np.sqrt(1.0 / t["r_inf2"] + X)
    return np.array([gaussian_attention_accuracy(float(x), L) for x in np.atleast_1d(r)]).reshape(N.shape)


def derived_attention_nstar(V: int, d: int, L: int, threshold: float = 0.99, trigger_in_value: bool = True) -> float:
    """N_att: the largest root of (1/r*^2 - 1/d)(N + beta)^2 = G + F1 N (at least 1), the N from which the
    derived accuracy stays at or above `threshold`; inf when d <= r*(L, threshold)^2."""
    V, d, L, trig = _check(V, d, L, trigger_in_value)
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    if threshold >= 1.0:
        raise ValueError(f"threshold must be below 1, got {threshold!r}")
    t = derived_terms(V, d, L, trig)
    q = 1.0 / rstar_cached(L, threshold) ** 2 - 1.0 / t["r_inf2"]
    if q <= 0:
        return math.inf
    disc = t["F1"] ** 2 + 4 * q * (t["G"] - t["F1"] * t["beta"])
    if disc < 0:                                                     # X(N) < q for every N: from the start
        return 1.0
    return max(1.0, (t["F1"] + math.sqrt(disc)) / (2 * q) - t["beta"])
