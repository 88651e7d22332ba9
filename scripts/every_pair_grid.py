"""Chapter 2's every-pair capacity of trained linear memories at larger d than the chapter runs live.

For each d and memory seed s: `lib.experiments.memory_capacity.trained_capacity(d, 1.0, seeds=1, first_seed=s, steps, lr=3.0)`,
the largest n of which a d x d memory trained by Adam (full batch, `steps` steps, stopped once every pair is
right) recalls every pair. Writes one JSON object (provenance and {d: [n per seed]}). Usage:

    OMP_NUM_THREADS=1 python scripts/every_pair_grid.py --out book/data/ch02_every_pair.json --jobs 2
"""
import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one(args):
    d, s, steps = args
    import torch
    torch.set_num_threads(1)
    from lib.experiments.memory_capacity import trained_capacity
    return d, s, trained_capacity(d, 1.0, seeds=1, first_seed=s, steps=steps, lr=3.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--d", type=int, nargs="+", default=[32, 48, 64, 96, 128])
    ap.add_argument("--memories", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    t0 = time.time()
    tasks = [(d, s, a.steps) for d in a.d for s in range(a.memories)]
    n = {str(d): [0] * a.memories for d in a.d}
    with ProcessPoolExecutor(a.jobs) as ex:
        for d, s, c in ex.map(one, tasks):
            n[str(d)][s] = c
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"provenance": {"command": "python scripts/every_pair_grid.py " + " ".join(sys.argv[1:]), "steps": a.steps,
                          "lr": 3.0, "draw": 0, "commit": commit, "seconds": round(time.time() - t0)}, "n": n}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"{len(tasks)} capacities in {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
