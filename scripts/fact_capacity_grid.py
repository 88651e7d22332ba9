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

`--stacked`: the same searches by `lib.factual.grid_searches` (route "stacked": each draw's searches in lockstep,
the models they wait for trained together in stacks of at most --stack), split over --jobs processes per draw;
its points are stored under that route's key, apart from the one-at-a-time points chapter 11 reads.
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


def _stacked_part(args):
    """One process's share of a draw's searches, all at once (lib.factual.grid_searches); noise points by
    lib.factual.trained_points."""
    draw, part, out, device, stack = args
    import torch
    torch.set_num_threads(1)
    from lib.core.seed import set_draw
    from lib import factual as F
    from lib.factual.capacity import _grid_task, block_config
    set_draw(draw)
    t0 = time.perf_counter()
    store = F.FactStore(out)
    searches = [(b, S, s) if steps is None else (b, S, s, steps) for b, S, s, steps in part if b != "noise"]
    found = dict(zip(searches, F.grid_searches(searches, store=store, device=device, stack=stack)))
    G, c = F.CAPACITY_GRID, F.DIRECT_GRID["noise"]
    noise = [(b, S, s, steps) for b, S, s, steps in part if b == "noise"]
    if noise:
        pts = F.trained_points([(_grid_task(S, s, n_noise=c["n_noise"]), block_config("mlp", c["width"] // G["unit"], G["d"], G["d_h"],
                                 G["unit"], s)) for _, S, s, _ in noise], G["train"], store, device, stack)
        for (b, S, s, steps), p in zip(noise, pts):
            found[(b, S, s)] = {"n": c["width"] if p["max_acc"] >= G["threshold"] else None, "last_false": None,
                                "block_params": None}
    sec = time.perf_counter() - t0
    return [(b, S, s, steps, draw, found[(b, S, s) if steps is None else (b, S, s, steps)], sec) for b, S, s, steps in part]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--draws", type=int, nargs="+", default=[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", choices=("all", "direct", "noise", "budget"), default="all",
                    help="direct: DIRECT_GRID's searches only; noise: its noise points only; budget: the attention "
                         "searches at CAPACITY_GRID's budget_steps only")
    ap.add_argument("--stacked", action="store_true", help="each draw's searches at once, models trained in stacks")
    ap.add_argument("--stack", type=int, default=16, help="with --stacked: models a stack holds at most (default 16)")
    a = ap.parse_args(argv)
    if a.stack < 1:
        ap.error("--stack must be at least 1")
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
    if a.stacked:                                   # per draw, the searches dealt round the processes, largest first
        parts = [(k, [(b, S, s, st) for b, S, s, st, dk, _, _ in jobs if dk == k][i::a.jobs], a.out, a.device, a.stack)
                 for k in a.draws for i in range(a.jobs)]
        with mp.get_context("spawn").Pool(a.jobs) as pool:
            for rows in pool.imap_unordered(_stacked_part, [p for p in parts if p[1]]):
                for block, S, seed, steps, draw, r, sec in rows:
                    print(f"draw {draw} {block:9s} S={S:4d} seed {seed} steps {steps or G['train'].steps}: n = {r['n']} "
                          f"(last failure {r['last_false']}), block parameters {r['block_params']}  [part: {sec:.0f} s, "
                          f"{time.perf_counter() - t0:.0f} s in all]", flush=True)
        return 0
    with mp.get_context("spawn").Pool(a.jobs) as pool:
        for block, S, seed, steps, draw, r, sec in pool.imap_unordered(_job, jobs):
            print(f"draw {draw} {block:9s} S={S:4d} seed {seed} steps {steps or G['train'].steps}: n = {r['n']} (last failure {r['last_false']}),"
                  f" block parameters {r['block_params']}  [{sec:.0f} s, {time.perf_counter() - t0:.0f} s in all]",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
