"""Train chapter 11's capacity grids (lib.factual.CAPACITY_GRID and DIRECT_GRID) into a store, in parallel.

    python scripts/fact_capacity_grid.py --out book/data/ch11_capacity_grid.jsonl [--draws 0 1 2 3]
                                         [--jobs N] [--device cpu] [--route stacked|single]

The jobs are those of `lib.factual.capacity_grid_jobs()` under each draw (lib.core.seed.set_draw): every
block, size S (the fitted range and the sizes beyond it) and seed of the grid, the attention searches again
at CAPACITY_GRID["budget_steps"], DIRECT_GRID's searches at both budgets, and the noise points chapter 11 reads.

Route "stacked" (the default, the route chapter 11 reads): each draw's jobs are dealt round --jobs processes,
largest first, and each process runs its share with `lib.factual.capacity_grid`: the searches in lockstep, the
models they wait for trained together in stacks of at most --stack. Route "single": one process per search
(`grid_search`, `direct_search`, `noise_point`), one model at a time, stored under that route's key. Each
worker runs one torch thread; every trained point is appended to the store (a FactStore: one checksummed line
per point, appended under flock), so the processes share one file, a killed run keeps what it trained, and a
rerun trains only what is missing. Prints one line per search or point.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _line(draw, job, r):
    kind, S, seed, extra = job
    if kind == "noise":
        tokens = "S + R" if extra[0] is None else extra[0]
        return f"draw {draw} noise     S={S:4d} seed {seed} noise tokens {tokens} width {extra[1]}: best accuracy {r['max_acc']:.4f}"
    from lib.factual import CAPACITY_GRID as G
    return (f"draw {draw} {kind:9s} S={S:4d} seed {seed} steps {extra or G['train'].steps}: n = {r['n']} "
            f"(last failure {r['last_false']}), block parameters {r['block_params']}")


def _part(args):
    """One process's share of a draw's jobs (lib.factual.capacity_grid on the run's route)."""
    draw, part, out, device, stack, route = args
    import torch
    torch.set_num_threads(1)
    from lib.core.seed import set_draw
    from lib import factual as F
    set_draw(draw)
    t0 = time.perf_counter()
    found = F.capacity_grid(part, store=F.FactStore(out), device=device, stack=stack, route=route)
    return [(draw, j, found[j]) for j in part], time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--draws", type=int, nargs="+", default=[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per CPU core)")
    ap.add_argument("--device", default="cpu")
    from lib.factual.capacity import GRID_PARTS, TRAIN_ROUTES
    ap.add_argument("--only", choices=GRID_PARTS, default="all",
                    help="direct: DIRECT_GRID's searches only; noise: the noise points only; budget: the attention "
                         "searches at CAPACITY_GRID's budget_steps only")
    ap.add_argument("--route", choices=TRAIN_ROUTES, default="stacked",
                    help="stacked (default, what chapter 11 reads): each draw's jobs at once, models trained in stacks; "
                         "single: one model at a time")
    ap.add_argument("--stack", type=int, default=16, help="route stacked: models a stack holds at most (default 16)")
    a = ap.parse_args(argv)
    if a.stack < 1:
        ap.error("--stack must be at least 1")
    if a.jobs < 1:
        ap.error("--jobs must be at least 1")
    if any(k < 0 for k in a.draws):
        ap.error("--draws must be non-negative")
    from lib.factual import capacity_grid_jobs
    jobs = sorted(capacity_grid_jobs(a.only), key=lambda j: -j[1])   # the largest problems first
    if a.route == "stacked":                        # per draw, the jobs dealt round the processes
        tasks = [(k, jobs[i::a.jobs], a.out, a.device, a.stack, a.route) for k in a.draws for i in range(a.jobs)]
    else:                                           # one job a task
        tasks = [(k, [j], a.out, a.device, a.stack, a.route) for k in a.draws for j in jobs]
    tasks = [t for t in tasks if t[1]]
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(a.jobs) as pool:
        for rows, sec in pool.imap_unordered(_part, tasks):
            for draw, job, r in rows:
                print(f"{_line(draw, job, r)}  [{sec:.0f} s, {time.perf_counter() - t0:.0f} s in all]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
