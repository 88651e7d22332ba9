"""Sec. 2 checks: the reduction's constants against their exact per-problem values (chapter 5's exact pieces).
For each (V, d, L) and problems seed = 0..P-1: Q[s] / Q_lo (the self-pair's token-score noise,
lib.analysis.k_noise.k_noise_moments 'perp' 'self', on 6000 fresh sequences), the exact bias B_exact / B
(Var_j e_j . D_perp of margins.k_self_term, units mu_inf^2 / |z|^2) against B = lib.theory.imbalance_noise,
beta_exact / beta (k_noise.k_self_beta against lib.theory.trigger_self_bias), and the moments the bound drops:
pair = Q[K] + Q[K, K^swap] (>= 0 by symmetry) and cross = Q[psi, s] (sign not fixed: measured).
Usage: python docs_draft/checks/noise_floors.py P V:d:L [V:d:L ...]"""
import sys

import numpy as np
import torch

import lib
from lib import theory as th
from lib.analysis import k_noise as kn
from lib.analysis import margins as mg
from lib.analysis.lowerbound_attention import self_pair_floor

torch.set_num_threads(1)
P = int(sys.argv[1])
print("V d L | Q[s]/Q_lo min mean | B_exact/B min mean | beta_exact/beta min mean max | pair>=0 | cross min")
for spec in sys.argv[2:]:
    V, d, L = map(int, spec.split(":"))
    rows = []
    for s in range(P):
        p = lib.make_problem(lib.TaskConfig(V=V, d=d, L=L), s)
        m = kn.k_noise_moments(p, samples=6000, seed=1)["perp"]
        z = p.z_trig
        mu = float(z @ mg.k_population(p))
        D = mg.k_self_term(p)
        Dp = D - (D @ z) / (z @ z) * z
        Bx = float((p.E @ Dp).var(correction=0)) / mu ** 2 * float(z @ z)
        rows.append((m["self"] / self_pair_floor(V, d, L), Bx / th.imbalance_noise(V, d, L),
                     kn.k_self_beta(p) / th.trigger_self_bias(V, d, L), m["pair"], m["cross"]))
    r = np.array(rows)
    print(f"{V} {d} {L} | {r[:, 0].min():.2f} {r[:, 0].mean():.2f} | {r[:, 1].min():.2f} {r[:, 1].mean():.2f} | "
          f"{r[:, 2].min():.2f} {r[:, 2].mean():.2f} {r[:, 2].max():.2f} | {bool((r[:, 3] >= 0).all())} | {r[:, 4].min():.1f}",
          flush=True)
