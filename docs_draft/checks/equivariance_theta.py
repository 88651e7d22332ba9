"""Sec. 3 checks: (a) the step-2 direction is rotation-equivariant, k(R E, R z) = R k(E, z) (the premise of
step (i), exact); (b) over equivariant randomised rules k_hat = cos(theta) Y/|Y| + sin(theta) W (W uniform on
the unit sphere orthogonal to Y), the exact attention accuracy of the three steps' Y is largest at theta = 0
(step (ii)): mean over problems and 8 draws of W per problem.
Usage: python docs_draft/checks/equivariance_theta.py V d L N problems"""
import dataclasses
import math
import sys

import numpy as np
import torch

import lib
from lib.analysis.margins import attention_accuracy

torch.set_num_threads(1)
V, d, L, N, P = map(int, sys.argv[1:6])
cfg = lib.TaskConfig(V=V, d=d, L=L)
thetas = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, math.pi / 2, math.pi]
acc = np.zeros((P, len(thetas)))
worst = 0.0
for s in range(P):
    p = lib.make_problem(cfg, s)
    b = lib.sample_batch(p, N, s)
    Y = lib.three_steps(p, b, mode="limit").k
    g = torch.Generator().manual_seed(1000 + s)
    R, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=p.E.dtype))
    pr = dataclasses.replace(p, E=p.E @ R.T, z_trig=R @ p.z_trig)
    Yr = lib.three_steps(pr, b, mode="limit").k
    worst = max(worst, float((Yr - R @ Y).norm() / Y.norm()))
    y = Y / Y.norm()
    for i, th in enumerate(thetas):
        vals = []
        for _ in range(8 if 0 < th < math.pi else 1):
            w = torch.randn(d, generator=g, dtype=Y.dtype)
            w = w - (w @ y) * y
            w = w / w.norm()
            vals.append(attention_accuracy(p, math.cos(th) * y + math.sin(th) * w))
        acc[s, i] = np.mean(vals)
m, se = acc.mean(0), acc.std(0, ddof=1) / math.sqrt(P)
print(f"V={V} d={d} L={L} N={N} problems={P}: max |k(RE,Rz) - R k| / |k| = {worst:.1e}")
print("theta  " + "  ".join(f"{t:6.3f}" for t in thetas))
print("acc    " + "  ".join(f"{x:6.4f}" for x in m))
print("s.e.   " + "  ".join(f"{x:6.4f}" for x in se))
print("paired gain of theta=0 over the best theta>0: min over problems", f"{(acc[:, 0] - acc[:, 1:].max(1)).min():+.4f}",
      "mean", f"{(acc[:, 0] - acc[:, 1:].max(1)).mean():+.4f}")

# the sign condition of step (ii): the trigger's bonus along Y, z . Y, over problems and N = 1, 4, 16, 64, 256
signs = []
for s in range(P):
    p = lib.make_problem(cfg, s)
    b = lib.sample_batch(p, 256, s)
    for n in (1, 4, 16, 64, 256):
        Y = lib.three_steps(p, b.slice(0, n), mode="limit").k
        signs.append(float(p.z_trig @ Y / (p.z_trig.norm() * Y.norm())))
        if signs[-1] < 0:
            print(f"  negative: problem {s}, N = {n}")
print(f"cos(z, Y) over {P} problems x N in (1, 4, 16, 64, 256): min {min(signs):+.3f}, negative in {sum(c < 0 for c in signs)} of {len(signs)}")
