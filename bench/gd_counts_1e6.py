"""Full-batch gradient descent on the count route at N = 10^6 (closed-form gradients, no autograd,
no (N, L, d) tensor): prints loss, training accuracy and wall time. Usage:
python bench/gd_counts_1e6.py [--N 1000000] [--steps 10]"""
import argparse
import time

import torch

import lib
from lib.learning.trainer import gd_counts

ap = argparse.ArgumentParser()
ap.add_argument("--N", type=int, default=1_000_000)
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--lr", type=float, default=50.0)
a = ap.parse_args()
cfg = lib.TaskConfig(V=256, d=64, L=16, device="cpu")
problem = lib.make_problem(cfg, 0)
batch = lib.sample_batch(problem, a.N, 0)
init = lib.three_steps(problem, batch, "finite")            # start from the three steps' V2, W1
t = time.perf_counter()
params, hist = gd_counts(problem, batch, steps=a.steps, lr=a.lr, init=lib.Params(init.V2, init.W1))
wall = time.perf_counter() - t
print(f"torch threads {torch.get_num_threads()}; V=256 d=64 L=16 N={a.N}: {a.steps} GD steps in {wall:.1f} s "
      f"({wall / (a.steps + 1):.2f} s per gradient)")
for s, l, acc in zip(hist.step, hist.loss, hist.acc):
    print(f"  step {s:3d}  loss {l:.4f}  train acc {acc:.4f}")
print("test", lib.evaluate(problem, params, 8192))
