"""Train chapter 11's capacity grid (lib.factual.CAPACITY_GRID) into a store, in parallel.

    python scripts/fact_capacity_grid.py --out book/data/ch11_capacity_grid.jsonl [--draws 0 1 2 3]
                                         [--jobs 16] [--device cpu]

One job is one search, `lib.factual.grid_search(block, S, seed)`, under one draw (lib.core.seed.set_draw):
every block, size S (the fitted range and the sizes beyond it) and seed of the grid, for each draw. Each worker runs one torch thread; every trained
point is appended to the store (a FactStore: one checksummed line per point, appended under flock), so
the jobs share one file, a killed run keeps what it trained, and a rerun trains only what is missing.
Draw 0 first, the largest problems first within a draw. Prints one line per search.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _job(args):
    block, S, seed, draw, out, device = args
    import torch
    torch.set_num_threads(1)
    from lib.core.seed import set_draw
    from lib import factual as F
    set_draw(draw)
    t0 = time.perf_counter()
    r = F.grid_search(block, S, seed, store=F.FactStore(out), device=device)
    return block, S, seed, draw, r, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--draws", type=int, nargs="+", default=[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error("--jobs must be at least 1")
    if any(k < 0 for k in a.draws):
        ap.error("--draws must be non-negative")
    from lib.factual import CAPACITY_GRID as G
    jobs = [(b, S, s, k, a.out, a.device) for k in a.draws for b in ("attention", "mlp")
            for S in G["S"][b] + G["beyond"][b] for s in G["seeds"]]
    jobs.sort(key=lambda j: (j[3], -j[1]))          # draw 0 first; within a draw, the largest problems first
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(a.jobs) as pool:
        for block, S, seed, draw, r, sec in pool.imap_unordered(_job, jobs):
            print(f"draw {draw} {block:9s} S={S:4d} seed {seed}: n = {r['n']} (last failure {r['last_false']}),"
                  f" block parameters {r['block_params']}  [{sec:.0f} s, {time.perf_counter() - t0:.0f} s in all]",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
