"""Measure the critical sample sizes of chapter 7's calibration grid (the provenance of the constants
shipped in `lib/theory/capacity_calibration.json`).

For every configuration (V, d, L, trigger in or out of the value path) and problem (seed s: its own
embeddings, permutation and data), four searches of `lib.experiments.capacity.nstar` (limit mode,
1024 test samples, one problem each, doubling from 16 and bisection to 10 %, up to 2^18 samples):
the N at which attention picks the marked position with probability 0.9 and 0.99 (metric att_acc)
and the N at which the test accuracy reaches 0.9 and 0.99 (acc). Searches share the points of one
crash-safe store, so an interrupted run resumes where it stopped.

    OMP_NUM_THREADS=1 python scripts/capacity_grid.py --out grid.json --cache _cache/grid.jsonl \
        --V 64 128 256 512 --d-frac 0.125 0.25 0.375 0.5 0.75 1 --L 8 16 32 64 128 256 --problems 8

Output: JSON {"settings": {...}, "rows": [{"V", "d", "L", "trigger_in_value", "seed", "att_0.9",
"att_0.99", "acc_0.9", "acc_0.99"}, ...]} with null where n_max was reached first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import lib  # noqa: E402
from lib.experiments.capacity import nstar  # noqa: E402
from lib.experiments.store import Store  # noqa: E402

SEARCH = dict(n_test=1024, n_min=16, n_max=2 ** 18, resolution=0.1, mode="limit")
TARGETS = (("att_acc", 0.9), ("att_acc", 0.99), ("acc", 0.9), ("acc", 0.99))


def key(metric: str, threshold: float) -> str:
    return f"{'att' if metric == 'att_acc' else 'acc'}_{threshold:g}"


def measure(V: int, d: int, L: int, trig: bool, seed: int, store: Store) -> dict:
    cfg = lib.TaskConfig(V=V, d=d, L=L, trigger_in_value=trig, device="cpu")
    row = {"V": V, "d": d, "L": L, "trigger_in_value": trig, "seed": seed}
    for metric, t in TARGETS:
        row[key(metric, t)] = nstar(cfg, t, seeds=1, seed=seed, store=store, metric=metric, **SEARCH).nstar
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--V", type=int, nargs="+", required=True)
    ap.add_argument("--d-frac", type=float, nargs="+", required=True, help="d as fractions of V")
    ap.add_argument("--L", type=int, nargs="+", required=True)
    ap.add_argument("--trigger", choices=("out", "in", "both"), default="both")
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--seed0", type=int, default=0, help="first problem's seed")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache", required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    store = Store(a.cache)
    trigs = {"out": (False,), "in": (True,), "both": (False, True)}[a.trigger]
    configs = [(V, max(8, int(round(f * V))), L, t) for V in a.V for f in a.d_frac for L in a.L for t in trigs]
    rows, t0 = [], time.time()
    for i, (V, d, L, trig) in enumerate(configs):
        for s in range(a.seed0, a.seed0 + a.problems):
            rows.append(measure(V, d, L, trig, s, store))
        print(f"[{i + 1}/{len(configs)}] V={V} d={d} L={L} trigger_in_value={trig}: "
              f"{time.time() - t0:.0f} s", flush=True)
    settings = dict(SEARCH, problems=a.problems, seed0=a.seed0, draw=lib.core.seed.get_draw(), lib_version=lib.__version__,
                    command="python scripts/capacity_grid.py " + " ".join(sys.argv[1:] if argv is None else argv))
    with open(a.out, "w") as f:
        json.dump({"settings": settings, "rows": rows}, f, indent=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
