"""(R1) directly: the realised excess noise-to-signal of one batch's k, X = |z|^2 (1/r_Y^2 - 1/r_inf^2)
(r = mu / s of lib.analysis.margins.score_stats; r_inf that of k_population), averaged over P problems and
4 batches each, against X_lo(N) (lib.analysis.lowerbound_attention.excess_noise_floor).
Usage: python docs_draft/checks/excess_vs_floor.py V d L P N1 N2 ..."""
import sys

import numpy as np
import torch

import lib
from lib.analysis.lowerbound_attention import excess_noise_floor
from lib.analysis.margins import k_population, score_stats

torch.set_num_threads(1)
V, d, L, P = map(int, sys.argv[1:5])
Ns = [int(x) for x in sys.argv[5:]]
X = np.zeros((P, 4, len(Ns)))
for s in range(P):
    p = lib.make_problem(lib.TaskConfig(V=V, d=d, L=L), s)
    zz = float(p.z_trig @ p.z_trig)
    rinf = score_stats(p, k_population(p))["r"]
    for b in range(4):
        batch = lib.sample_batch(p, max(Ns), 100 * s + b)
        for i, N in enumerate(Ns):
            r = score_stats(p, lib.three_steps(p, batch.slice(0, N), mode="limit").k)["r"]
            X[s, b, i] = zz * (1 / r ** 2 - 1 / rinf ** 2)
print(f"V={V} d={d} L={L}, {P} problems x 4 batches")
for i, N in enumerate(Ns):
    m = X[:, :, i].mean()
    print(f"| {N} | {excess_noise_floor(N, V, d, L):.4g} | {m:.4g} | {m / excess_noise_floor(N, V, d, L):.2f} | "
          f"{np.mean(X[:, :, i] < excess_noise_floor(N, V, d, L)):.2f} |")
