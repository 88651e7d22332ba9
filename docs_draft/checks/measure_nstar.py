"""Measured attention N* of the three steps (limit mode) per problem: lib.analysis.margins.attention_nstar
(exact attention accuracy >= threshold; grid 1..2^15, 4 points per doubling, bisection; batches nested in N).
Writes one JSON line per (V, d, L, seed) to the output file (appends; skips rows already there).
Usage: python docs_draft/checks/measure_nstar.py OUT S V:d:L [V:d:L ...]"""
import json
import os
import sys
import time

import torch

import lib
from lib.analysis.margins import attention_nstar

torch.set_num_threads(1)
out, S = sys.argv[1], int(sys.argv[2])
done = set()
if os.path.exists(out):
    for line in open(out):
        r = json.loads(line)
        done.add((r["V"], r["d"], r["L"], r["seed"]))
for spec in sys.argv[3:]:
    V, d, L = map(int, spec.split(":"))
    for s in range(S):
        if (V, d, L, s) in done:
            continue
        t0 = time.time()
        n = attention_nstar(lib.TaskConfig(V=V, d=d, L=L), seed=s, threshold=0.99, n_min=1, n_max=2 ** 15)
        with open(out, "a") as f:
            f.write(json.dumps({"V": V, "d": d, "L": L, "seed": s, "nstar": n, "secs": round(time.time() - t0, 1)}) + "\n")
        print(V, d, L, s, n, round(time.time() - t0, 1), flush=True)
