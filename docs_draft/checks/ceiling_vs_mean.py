"""Sec. 4 check, on the theorem's own scale: the mean exact attention accuracy of the three steps (k_hat = Y,
limit mode) over problems seed = 0..P-1 (one batch each, nested in N) against the ceiling A(r(N))
(lib.analysis.lowerbound_attention.accuracy_ceiling). Usage: python docs_draft/checks/ceiling_vs_mean.py V d L P N1 N2 ..."""
import math
import sys

import numpy as np
import torch

import lib
from lib.analysis.lowerbound_attention import accuracy_ceiling, attention_lower_bound
from lib.analysis.margins import attention_accuracy

torch.set_num_threads(1)
V, d, L, P = map(int, sys.argv[1:5])
Ns = [int(x) for x in sys.argv[5:]]
cfg = lib.TaskConfig(V=V, d=d, L=L)
acc = np.zeros((P, len(Ns)))
for s in range(P):
    p = lib.make_problem(cfg, s)
    b = lib.sample_batch(p, max(Ns), s)
    for i, N in enumerate(Ns):
        acc[s, i] = attention_accuracy(p, lib.three_steps(p, b.slice(0, N), mode="limit").k)
print(f"V={V} d={d} L={L}, {P} problems, N_lower(0.99) = {attention_lower_bound(V, d, L, 0.99):.2f}")
for i, N in enumerate(Ns):
    m, se = acc[:, i].mean(), acc[:, i].std(ddof=1) / math.sqrt(P)
    c = accuracy_ceiling(N, V, d, L)
    print(f"| {N} | {c:.4f} | {m:.4f} ± {se:.4f} | {(m - c) / se if se > 0 else float('nan'):+.1f} |")
