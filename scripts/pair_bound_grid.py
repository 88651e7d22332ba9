"""Chapter 9's pair-statistic bound against four members of the class, on a grid the book never fitted on.

For each (V, d, L, trigger setting) and problem seed: the problem's moments (`lowerbound_pairs.pair_moments`)
and the exact attention accuracy of the three steps, of the same sum without self-pairs and of the split-batch
steps along one nested batch (`lowerbound_pairs.learner_directions`), and of the member that attains the noise
floor (`lowerbound_pairs.best_direction`), at every N of `n_grid(2, n_max)`.
One JSON line per (point, problem) in --out. With --beyond, the rows are instead those of the four learners
outside the class (`lowerbound_beyond.beyond_row`: step 2 with a memory from the assignment of G1's inversion
scores, with that assignment's read-out, with a memory from the assignment of the decoded co-occurrence table, and
with the memory written with Pi* itself), on the same problems and batches. Usage:

    python scripts/pair_bound_grid.py --out book/data/ch09_pairs.jsonl --jobs 2
    python scripts/pair_bound_grid.py --beyond --out book/data/ch09_beyond.jsonl --jobs 2
"""
import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

V_GRID, D_GRID, L_GRID = (256,), (32, 48, 64, 96, 128), (8, 16, 32, 64)


def one(args):
    V, d, L, tin, seed, n_max, samples, *beyond = args
    import torch
    torch.set_num_threads(1)
    import lib
    from lib.analysis import lowerbound_beyond as lb2
    from lib.analysis import lowerbound_pairs as lp
    cfg = lib.TaskConfig(V=V, d=d, L=L, trigger_in_value=tin)
    return lb2.beyond_row(cfg, seed, n_max) if beyond and beyond[0] else lp.pair_row(cfg, seed, n_max, samples)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--problems", type=int, default=6)
    ap.add_argument("--seed0", type=int, default=500)
    ap.add_argument("--n-max", type=int, default=2 ** 15)
    ap.add_argument("--samples", type=int, default=8000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--trigger", choices=("in", "out", "both"), default="both")
    ap.add_argument("--beyond", action="store_true", help="the learners outside the class instead (beyond_row)")
    a = ap.parse_args()
    trig = {"in": (True,), "out": (False,), "both": (True, False)}[a.trigger]
    tasks = [(V, d, L, t, a.seed0 + s, a.n_max, a.samples, a.beyond) for V in V_GRID for d in D_GRID for L in L_GRID
             for t in trig for s in range(a.problems)]
    t0 = time.time()
    with ProcessPoolExecutor(a.jobs) as ex, open(a.out, "w") as f:
        for row in ex.map(one, tasks):
            f.write(json.dumps(row) + "\n")
            f.flush()
    print(f"{len(tasks)} rows in {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
