"""Benchmark: the sweep engine (lib.sweep) against named baselines measured in the same run.

  point    : one N* search at V = d = 256, L = 16, 5 seeds (threshold 0.99, limit mode, defaults),
             in memory and on the crash-safe store (one fsynced line per evaluated N);
  baseline : one `lib.run` at the N* found, same 5 seeds: the cost of a single evaluation, so
             point / baseline says how many evaluations' worth the search costs;
  grid     : a chapter-7-like grid (V = 32, trigger out of the value path; L in {64, 128, 256} at
             d = 64 and d in {64, 96, 128, 192, 256} at L = 128; 3 seeds, n_test 1024, n_min 32,
             n_max 2^16, resolution 0.1), with jobs = 1 (baseline) and jobs = 2 (loky processes, one
             torch thread each; first call starts the workers, the second reuses them), ratios
             printed; then the same grid again on a full store (all hits).
Timings are wall-clock on whatever else the machine is running: compare ratios within one run.
Usage: OMP_NUM_THREADS=1 python bench/bench_sweep.py [--seeds 5] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

import lib


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"lib {lib.__version__}, torch {torch.__version__}, {os.cpu_count()} CPUs, load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))

    cfg = lib.TaskConfig(V=256, d=256, L=16, device="cpu")
    t_mem, res = timed(lambda: lib.experiments.capacity.nstar(cfg, 0.99, seeds=a.seeds))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "points.jsonl")
        t_store, res_store = timed(lambda: lib.sweep.sweep([cfg], seeds=a.seeds, cache=path)[0])
        t_hit, _ = timed(lambda: lib.sweep.sweep([cfg], seeds=a.seeds, cache=path)[0])
    assert res_store.nstar == res.nstar
    t_run, _ = timed(lambda: lib.run(cfg, res.nstar, seeds=a.seeds))
    print(f"\nN* point V=d=256 L=16, {a.seeds} seeds: N* = {res.nstar} (bootstrap 10-90 %: "
          f"{res_store.nstar_q10}-{res_store.nstar_q90}), {res.runs} evaluations")
    print(f"  search, in memory          {t_mem:8.2f} s")
    print(f"  search, on the store       {t_store:8.2f} s   (store / memory {t_store / t_mem:.2f})")
    print(f"  again, all from the store  {t_hit:8.3f} s")
    print(f"  baseline: one lib.run at N*{t_run:8.2f} s   (search / one run {t_mem / t_run:.1f})")

    base = lib.TaskConfig(V=32, d=64, L=128, trigger_in_value=False, device="cpu")
    configs = lib.sweep.grid(base.with_(d=64), L=[64, 128, 256]) + \
        lib.sweep.grid(base.with_(L=128), d=[96, 128, 192, 256])
    opts = dict(threshold=0.99, seeds=3, n_test=1024, n_min=32, n_max=2 ** 16, resolution=0.1)
    t1, p1 = timed(lambda: lib.sweep.sweep(configs, **opts))
    t2, p2 = timed(lambda: lib.sweep.sweep(configs, jobs=a.jobs, **opts))     # starts the workers
    t2w, _ = timed(lambda: lib.sweep.sweep(configs, jobs=a.jobs, **opts))     # joblib reuses them
    same = [p.nstar for p in p1] == [p.nstar for p in p2]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "points.jsonl")
        lib.sweep.sweep(configs, cache=path, **opts)
        t_hits, _ = timed(lambda: lib.sweep.sweep(configs, cache=path, **opts))
    n_points = sum(len(p.points) for p in p1)
    print(f"\nchapter-7-like grid: {len(configs)} configurations, {n_points} evaluated points")
    print("  N*: " + ", ".join(f"(d={p.d}, L={p.L}) {p.nstar}" for p in p1))
    print(f"  baseline jobs=1            {t1:8.2f} s")
    print(f"  jobs={a.jobs}, workers started   {t2:8.2f} s   (jobs=1 / jobs={a.jobs} {t1 / t2:.2f}, "
          f"same N*: {same})")
    print(f"  jobs={a.jobs}, workers reused    {t2w:8.2f} s   (jobs=1 / jobs={a.jobs} {t1 / t2w:.2f})")
    print(f"  again, all from the store  {t_hits:8.3f} s")


if __name__ == "__main__":
    main()
