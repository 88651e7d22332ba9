"""Benchmark of chapter 10's trainer: one full-batch step on the count route against named baselines
measured in the same run, and a long Adam run.

  floor    : one torch.bincount over the same N L token ids;
  autograd : one step of the reference trainer `lib.learning.trainer.train_transformer` (torch autograd through
             the token-id forward pass, chunked, same N, same parameters), loss + both gradients, timed
             in rounds interleaved with the count steps (a drift of a shared machine reaches both);
  count    : one full-batch gradient of the count route (`lib.fast.counts.count_gradients`, what each step of
             `lib.train` computes; its Adam update is O(d^2)), median of --repeat; at L <= d it takes the logit-table
             route (`lib.fast.counts.table_gradients`), whose batch index is built once (timed apart);
  features : the count route's feature route (`count_gradients(..., tables=False)`: O((V + V_in + d) d)
             GEMMs per sample), the route chapter 10 was first written on;
  primitives: one pass of each torch primitive of the table route (bench/primitives.py), the most
             this route can gain without a fused kernel.
The parameters are the finite-mode three-step solution (a generic point, not zero). Prints the
times, the ratios count / floor and autograd / count, the peak resident memory of this process
after the count-route steps (before autograd has run: the batch plus the count route's chunk
temporaries), and with --long K the wall time of a K-step Adam run (progress every 50 steps).
With --long K --target T (K < T) the K-step run is timed and T steps are extrapolated from it, labelled.
Usage: OMP_NUM_THREADS=1 python bench/bench_train.py --V 256 --d 128 --L 16 [--N 1000000] [--long 500]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time

import torch

import lib
from lib.fast.counts import count_gradients, table_chunk_size
from lib.fast.tokens import token_index
from lib.learning.trainer import TrainConfig, train, train_transformer

from primitives import median_time, table_step_floor


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--V", type=int, default=256)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--N", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--autograd", type=int, default=1, help="autograd steps to time (0: skip)")
    ap.add_argument("--long", type=int, default=0, help="steps of the long Adam run (0: skip)")
    ap.add_argument("--target", type=int, default=500, help="steps to extrapolate the long run to")
    ap.add_argument("--lr", type=float, default=0.01)
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = lib.TaskConfig(V=a.V, d=a.d, L=a.L, device="cpu")
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, a.N, 0)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}; V={a.V} d={a.d} L={a.L} N={a.N} "
          f"(float32); token ids {batch.tokens.dtype}, {batch.tokens.numel() * batch.tokens.element_size() / 2**20:.0f} MiB",
          flush=True)
    t = time.perf_counter()
    start = lib.three_steps(problem, batch, "finite").params
    print(f"three steps (finite, start point): {time.perf_counter() - t:.2f} s", flush=True)
    ids = batch.tokens.reshape(-1)
    floor = median_time(lambda: torch.bincount(ids, minlength=cfg.V_in), 5)
    before = peak_mib()
    fresh = lib.Batch(batch.tokens, batch.pos, batch.labels)      # the same samples, no index kept yet
    t = time.perf_counter()
    token_index(problem, fresh, table_chunk_size(problem))
    t_index = time.perf_counter() - t
    del fresh
    count_gradients(problem, start, batch)                        # warm-up (and the peak of the count route)
    peak_count = peak_mib()
    # count and autograd timed in interleaved rounds, so that a drift of the machine's speed (a shared
    # host) reaches both alike; medians of each
    steps = {"count": lambda: count_gradients(problem, start, batch)}   # the update itself is O(d^2)
    if a.autograd:
        warm = lib.sample_batch(problem, 2048, 1)        # autograd's one-time start-up cost is not a step
        train_transformer(problem, warm, TrainConfig(steps=0, lr=a.lr, optimizer="adam"), init=start)
        steps["autograd"] = lambda: train_transformer(problem, batch, TrainConfig(steps=0, lr=a.lr, optimizer="adam"),
                                                      init=start)
    rounds = {"count": a.repeat, "autograd": a.autograd}
    times = {k: [] for k in steps}
    for r in range(max(a.repeat, a.autograd)):
        for k, fn in steps.items():
            if r < rounds[k]:
                times[k].append(median_time(fn, 1))
    count = statistics.median(times["count"])
    print(f"floor    torch.bincount over {ids.numel()} ids: {floor:.4f} s", flush=True)
    print(f"count    one full-batch gradient (median of {a.repeat}, rounds interleaved with the "
          f"autograd steps): {count:.3f} s  = {count / floor:.0f} x floor", flush=True)
    print(f"         (route: {'logit tables' if lib.fast.counts.uses_tables(problem, start) else 'features'}; "
          f"its batch index, built once before the steps: {t_index:.3f} s)", flush=True)
    print(f"peak RSS after the count-route steps: {peak_count:.0f} MiB (before them: {before:.0f} MiB)", flush=True)
    feat = median_time(lambda: count_gradients(problem, start, batch, tables=False), a.repeat)
    print(f"features one gradient on the feature route (median of {a.repeat}): {feat:.3f} s "
          f"= {feat / count:.1f} x the count-route step", flush=True)
    prim = table_step_floor(problem, batch)
    print("primitives " + ", ".join(f"{k} {v:.3f} s" for k, v in prim.items())
          + f": the count-route step is {count / prim['sum']:.2f} x their sum", flush=True)
    if a.autograd:
        auto = statistics.median(times["autograd"])
        print(f"autograd one full-batch step (chunk 8192, median of {a.autograd}, interleaved with the count steps): "
              f"{auto:.3f} s  "
              f"= {auto / count:.1f} x the count-route step ({auto / prim['sum']:.1f} x the primitives' sum, "
              f"the most a route without fused kernels could reach)",
              flush=True)
        print(f"peak RSS after autograd: {peak_mib():.0f} MiB", flush=True)
    if a.long:
        t = time.perf_counter()
        params, rec = train(problem, batch, optimizer="adam", steps=a.long, lr=a.lr, init="zero", n_test=2 ** 13,
                            record_every=max(1, a.long // 10), progress=False)
        wall = time.perf_counter() - t
        per = wall / (a.long + 1)
        print(f"long run: {a.long} Adam steps from zero (lr {a.lr}) in {wall:.0f} s "
              f"({per:.2f} s per step, records included)", flush=True)
        if a.target != a.long:
            print(f"EXTRAPOLATED (not run): {a.target} steps at this rate = {per * (a.target + 1):.0f} s "
                  f"= {per * (a.target + 1) / 60:.1f} min", flush=True)
        for row in zip(rec.step, rec.loss, rec.acc, rec.test_acc, rec.att_acc, rec.entropy):
            print("  step {:4d} loss {:.4f} train acc {:.4f} test acc {:.4f} att acc {:.4f} entropy {:.3f}".format(*row),
                  flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
