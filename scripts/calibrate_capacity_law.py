"""Fit chapter 7's attention law once and write `lib/theory/capacity_calibration.json`.

Reads the grid measured by `scripts/capacity_grid.py` (one JSON file), splits it into a calibration
part and a held-out part by a checkerboard on the grid's axes (the d/V index plus the L index even:
calibration; odd: held out; so every V, every trigger setting and both thresholds are in both parts),
and fits each form of `lib.theory.ch07_law` (product, separate) for each trigger setting on the
calibration part's points at which every problem reached the threshold with a geometric mean of at
least `ch07_law.MIN_N` (the response is the mean over problems of log N*). The output holds the constants, the provenance and the whole grid, so that
chapter 7 can show the held-out errors without recomputing them.

    python scripts/calibrate_capacity_law.py --grid grid.json --commit $(git rev-parse --short HEAD)
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from lib.theory import ch07_law  # noqa: E402

KEYS = {0.9: "att_0.9", 0.99: "att_0.99"}


def grid_points(rows: list[dict]) -> list[dict]:
    """One point per (V, d, L, trigger, threshold): the per-problem N* (None: not reached), the
    calibration flag of the checkerboard split."""
    configs = {}
    for r in rows:
        configs.setdefault((r["V"], r["d"], r["L"], r["trigger_in_value"]), []).append(r)
    fracs = sorted({round(d / V, 6) for V, d, _, _ in configs})
    Ls = sorted({L for _, _, L, _ in configs})
    points = []
    for (V, d, L, trig), rs in sorted(configs.items()):
        cal = (fracs.index(round(d / V, 6)) + Ls.index(L)) % 2 == 0
        for t, key in KEYS.items():
            ns = [r[key] for r in sorted(rs, key=lambda r: r["seed"])]
            points.append({"V": V, "d": d, "L": L, "trigger_in_value": trig, "threshold": t, "calibration": cal,
                           "nstar": ns, "acc_nstar": [r[key.replace("att", "acc")] for r in sorted(rs, key=lambda r: r["seed"])]})
    return points


def fittable(p: dict) -> bool:
    """Every problem reached the threshold, the geometric mean is at least MIN_N, and d is past the wall."""
    return (all(n is not None for n in p["nstar"]) and np.exp(np.mean(np.log(p["nstar"]))) >= ch07_law.MIN_N
            and ch07_law.law_features(p["V"], p["d"], p["L"], p["threshold"]) is not None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", required=True)
    ap.add_argument("--commit", required=True, help="the commit the grid was measured at")
    ap.add_argument("--out", default=ch07_law.CALIBRATION_FILE)
    a = ap.parse_args(argv)
    with open(a.grid) as f:
        grid = json.load(f)
    points = grid_points(grid["rows"])
    fits = {}
    for form in ch07_law.FORMS:
        for trig in (False, True):
            cal = [dict(p, y=float(np.mean(np.log(p["nstar"])))) for p in points
                   if p["calibration"] and p["trigger_in_value"] == trig and fittable(p)]
            fits[f"{form}/{'in' if trig else 'out'}"] = ch07_law.fit_law(cal, form)
    Vs, Ls = [p["V"] for p in points], [p["L"] for p in points]
    out = {
        "provenance": {"grid_command": grid["settings"]["command"], "search": {k: grid["settings"][k] for k in
                       ("n_test", "n_min", "n_max", "resolution", "mode")},
                       "problems": grid["settings"]["problems"], "seed0": grid["settings"]["seed0"],
                       "draw": grid["settings"].get("draw", 0),
                       "lib_version": grid["settings"]["lib_version"], "commit": a.commit,
                       "fitted": datetime.date.today().isoformat(),
                       "fit_command": "python scripts/calibrate_capacity_law.py --grid GRID --commit " + a.commit},
        "range": {"V": [min(Vs), max(Vs)], "L": [min(Ls), max(Ls)],
                  "d_over_V": [min(p["d"] / p["V"] for p in points), 1.0], "threshold": [0.9, 0.99]},
        "split": "checkerboard: (index of d/V + index of L) even = calibration",
        "fits": fits,
        "points": points,
    }
    with open(a.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    for k, v in fits.items():
        print(k, "n =", v["n"], "sd =", round(v["sd"], 3), "theta =", [round(t, 3) for t in v["theta"]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
