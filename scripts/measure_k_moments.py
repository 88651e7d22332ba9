"""Measure the moments of step 2's direction k that chapter 7's derived attention formula needs, and fit
their moment laws (no training, no N*: only one- and two-sample moments of single problems).

    python scripts/measure_k_moments.py [--jobs 2] [--samples 8000] [--problems 3] [--out PATH]

For every (V, d, L) of the grid (V in {128, 256, 512}, d = V/8 .. V, L = 8 .. 256) and both trigger
settings, `--problems` problems (seeds 1000, 1001, ...; float64, CPU) give, each:
  r_inf2   the squared signal-to-noise ratio of k_inf over |z|^2 d (1 to leading order, chapter 5)
  beta     the exact self-term factor (lib.analysis.k_noise.k_self_beta)
  F1, F2   the fluctuation's coefficients (k_noise.fluctuation_coefficients, `--samples` sequences)
  C1, C0   the mean's coefficients, exactly (k_noise.mean_coefficients)
The records and the laws fitted to them (lib.theory.ch07_derived.fit_moment_laws) are written to
lib/theory/attention_moments.json (about 10 minutes on two cores).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GRID = {"V": (128, 256, 512), "rho": (1, 2, 4, 8), "L": (8, 16, 32, 64, 128, 256)}


def one_config(args):
    V, d, L, trig, problems, samples = args
    import torch
    torch.set_num_threads(1)
    import lib
    from lib.analysis import k_noise as KN
    from lib.analysis import margins as M
    out = []
    cfg = lib.TaskConfig(V=V, d=d, L=L, trigger_in_value=trig, dtype="float64", device="cpu")
    for s in range(problems):
        pr = lib.make_problem(cfg, 1000 + s)
        zz = float(pr.z_trig @ pr.z_trig)
        st = M.score_stats(pr, M.k_population(pr))
        mom = KN.k_noise_moments(pr, samples=samples, seed=1000 + s)
        F1, F2 = KN.fluctuation_coefficients(mom)
        C1, C0 = KN.mean_coefficients(pr)
        out.append({"V": V, "d": d, "L": L, "trigger_in_value": trig, "seed": 1000 + s,
                    "r_inf2": st["r"] ** 2 / (d * zz), "beta": KN.k_self_beta(pr), "F1": F1, "F2": F2,
                    "C1": C1, "C0": C0})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--samples", type=int, default=8000, help="sequences per moment estimate (default 8000)")
    ap.add_argument("--problems", type=int, default=3, help="problems per configuration (default 3)")
    ap.add_argument("--out", default=os.path.join(ROOT, "lib", "theory", "attention_moments.json"))
    ap.add_argument("--refit", action="store_true", help="refit the laws to the records already in --out")
    a = ap.parse_args(argv)
    for name in ("jobs", "samples", "problems"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be >= 1")
    import lib
    from lib.theory.ch07_derived import fit_moment_laws
    if a.refit:
        with open(a.out) as f:
            table = json.load(f)
        table["laws"] = fit_moment_laws(table["records"])
        return write(table, a.out)
    if lib.get_draw() != 0:
        ap.error("the moment table is measured on draw 0: unset RECALL_DRAW")
    jobs = [(V, V // rho, L, trig, a.problems, a.samples) for trig in (True, False) for V in GRID["V"]
            for rho in GRID["rho"] for L in GRID["L"]]
    jobs.sort(key=lambda j: -j[0] * j[1] * j[2])                    # the costly ones first
    t0 = time.time()
    with ProcessPoolExecutor(a.jobs) as ex:
        records = [r for rs in ex.map(one_config, jobs) for r in rs]
    records.sort(key=lambda r: (not r["trigger_in_value"], r["V"], r["d"], r["L"], r["seed"]))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    table = {"provenance": {"command": "python scripts/measure_k_moments.py " + " ".join(argv or sys.argv[1:]),
                            "samples": a.samples, "problems": a.problems, "seed0": 1000, "draw": 0,
                            "grid": GRID, "commit": commit,
                            "measured": datetime.date.today().isoformat(),
                            "seconds": round(time.time() - t0)},
             "records": records}
    with open(a.out, "w") as f:                                      # the records first: a fit can be redone
        json.dump(table, f)
    table["laws"] = fit_moment_laws(records)
    write(table, a.out)


def write(table, path):
    with open(path, "w") as f:
        json.dump(table, f, indent=0)
        f.write("\n")
    print(f"{len(table['records'])} records -> {path}")
    for key, law in table["laws"].items():
        print(key, law)


if __name__ == "__main__":
    main()
