"""The exact attention-accuracy curves behind chapter 7's requirement (shipped with the book).

    python scripts/attention_curve_grid.py --part slice|off|off2048 [--jobs 2] [--out PATH]

For each configuration and problem (seed s, draw 0, float64, CPU), `lib.analysis.attention_curve
.exact_curves`: the exact attention accuracy after the three steps (limit mode) at every N of a geometric
grid (two points per octave, 16 to 2^18; the batch of each problem nested in N). Nothing is searched
and nothing is fitted; chapter 7 reads each problem's first passage and the mean curve's requirement
off these curves.

  slice  chapter 7's calibration grid at V = 256 (d/V = 1/8 .. 1, L = 8 .. 256, trigger in and out),
         the calibration's eight problems (seeds 0-7)
  off    sizes neither the calibration grid nor the moment table holds: V in {384, 1024},
         d/V in {3/16, 3/8, 3/4}, L in {12, 48, 192}, trigger in and out, four problems (seeds 100-103)
  off2048  the same at V = 2048, d = 384 (its V^2 d count tables make larger d costly on a CPU)

One JSON line per (configuration, problem), appended as it finishes (an interrupted run resumes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

NS = sorted({int(round(2 ** (k / 2))) for k in range(8, 37)})       # 16 .. 2^18, two per octave
PARTS = {
    "slice": {"V": (256,), "d_over_V": (0.125, 0.25, 0.375, 0.5, 0.75, 1.0), "L": (8, 16, 32, 64, 128, 256),
              "seeds": tuple(range(8))},
    "off": {"V": (384, 1024), "d_over_V": (0.1875, 0.375, 0.75), "L": (12, 48, 192),
            "seeds": (100, 101, 102, 103)},
    "off2048": {"V": (2048,), "d_over_V": (0.1875,), "L": (12, 48, 192), "seeds": (100, 101, 102, 103)},
}
OUT = {p: os.path.join(ROOT, "book", "data", f"ch07_curves_{p}.jsonl") for p in PARTS}


def jobs(part: str) -> list:
    g = PARTS[part]
    return [(V, int(V * f), L, trig, s) for trig in (True, False) for V in g["V"] for f in g["d_over_V"]
            for L in g["L"] for s in g["seeds"]]


def one(job):
    V, d, L, trig, s = job
    import torch
    torch.set_num_threads(1)
    import lib
    from lib.analysis.attention_curve import exact_curves
    t = time.time()
    acc = exact_curves(lib.TaskConfig(V=V, d=d, L=L, trigger_in_value=trig), NS, [s])[0]
    return {"V": V, "d": d, "L": L, "trigger_in_value": trig, "seed": s, "Ns": NS,
            "acc": [round(float(a), 6) for a in acc], "seconds": round(time.time() - t, 2)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=tuple(PARTS), required=True)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--out", default=None, help="JSON lines file (default book/data/ch07_curves_PART.jsonl)")
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error("--jobs must be >= 1")
    import lib
    if lib.get_draw() != 0:
        ap.error("the shipped curves are draw 0: unset RECALL_DRAW")
    out = a.out or OUT[a.part]
    done = set()
    if os.path.exists(out):
        with open(out) as f:
            done = {(r["V"], r["d"], r["L"], r["trigger_in_value"], r["seed"]) for r in map(json.loads, f)}
    todo = [j for j in jobs(a.part) if j not in done]
    todo.sort(key=lambda j: -j[0] ** 2 * j[1])                       # the costly ones first
    print(f"{len(todo)} curves to compute ({len(done)} already in {out})", flush=True)
    with ProcessPoolExecutor(a.jobs) as ex, open(out, "a") as f:
        for rec in ex.map(one, todo):
            f.write(json.dumps(rec) + "\n")
            f.flush()


if __name__ == "__main__":
    main()
