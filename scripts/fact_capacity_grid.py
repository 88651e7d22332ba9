"""Train chapter 11's capacity grids (lib.factual.CAPACITY_GRID and DIRECT_GRID) into a store, in parallel.

    python scripts/fact_capacity_grid.py --out book/data/ch11_capacity_grid.jsonl [--draws 0 1 2 3]
                                         [--jobs 16] [--device cpu]

One job is one search, `lib.factual.grid_search(block, S, seed)`, under one draw (lib.core.seed.set_draw):
every block, size S (the fitted range and the sizes beyond it) and seed of the grid, for each draw, and
`lib.factual.direct_search(S, seed, steps)` at every size and seed of DIRECT_GRID (and its second budget),
and the attention searches again at CAPACITY_GRID["budget_steps"] for its "budget_S", and
`lib.factual.noise_point` at DIRECT_GRID["noise"] for every seed (n: the width if it stores the facts). Each worker runs one torch thread; every trained
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
    block, S, seed, steps, draw, out, device = args
    import torch
    torch.set_num_threads(1)
    from lib.core.seed import set_draw
    from lib import factual as F
    set_draw(draw)
    t0 = time.perf_counter()
    if block == "direct":                   # the MLP with T = 2 (lib.factual.DIRECT_GRID), at a step budget
        r = F.direct_search(S, seed, steps=steps, store=F.FactStore(out), device=device)
    elif block == "noise":                  # the T = 6 MLP with few noise tokens, one point (DIRECT_GRID["noise"])
        c = F.DIRECT_GRID["noise"]
        p = F.noise_point(S, seed, c["n_noise"], c["width"], store=F.FactStore(out), device=device)
        r = {"n": c["width"] if p["max_acc"] >= F.CAPACITY_GRID["threshold"] else None, "last_false": None,
             "block_params": None}
    else:
        r = F.grid_search(block, S, seed, store=F.FactStore(out), device=device, steps=steps)
    return block, S, seed, steps, draw, r, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--draws", type=int, nargs="+", default=[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", choices=("all", "direct", "noise", "budget"), default="all",
                    help="direct: DIRECT_GRID's searches only; noise: its noise points only; budget: the attention "
                         "searches at CAPACITY_GRID's budget_steps only")
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error("--jobs must be at least 1")
    if any(k < 0 for k in a.draws):
        ap.error("--draws must be non-negative")
    from lib.factual import CAPACITY_GRID as G, DIRECT_GRID as D
    jobs = [(b, S, s, None, k, a.out, a.device) for k in a.draws for b in ("attention", "mlp")
            for S in G["S"][b] + G["beyond"][b] for s in G["seeds"]] if a.only == "all" else []
    if a.only in ("all", "budget"):         # the attention searches again at the larger budget
        jobs += [("attention", S, s, G["budget_steps"], k, a.out, a.device) for k in a.draws
                 for S in G["budget_S"]["attention"] for s in G["seeds"]]
    if a.only in ("all", "direct"):
        jobs += [("direct", S, s, None, k, a.out, a.device) for k in a.draws for S in D["S"] for s in G["seeds"]]
        jobs += [("direct", S, s, D["budget_steps"], k, a.out, a.device) for k in a.draws for S in D["budget_S"]
                 for s in G["seeds"]]
    if a.only in ("all", "noise"):
        jobs += [("noise", D["noise"]["S"], s, None, k, a.out, a.device) for k in a.draws for s in G["seeds"]]
    jobs.sort(key=lambda j: (j[4], -j[1]))          # draw 0 first; within a draw, the largest problems first
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(a.jobs) as pool:
        for block, S, seed, steps, draw, r, sec in pool.imap_unordered(_job, jobs):
            print(f"draw {draw} {block:9s} S={S:4d} seed {seed} steps {steps or G['train'].steps}: n = {r['n']} (last failure {r['last_false']}),"
                  f" block parameters {r['block_params']}  [{sec:.0f} s, {time.perf_counter() - t0:.0f} s in all]",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
