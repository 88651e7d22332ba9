"""Sec. 5 table: N_lower = lib.lowerbound.attention_lower_bound(V, d, L, 0.99) against the measured attention N*
of the three steps (docs_draft/checks/measure_nstar.py's JSON lines): per-problem values, geometric mean over
problems (inf if any problem never reached 0.99 by N = 2^15), ratio geo-mean / N_lower, and the smallest
per-problem ratio. Usage: python docs_draft/checks/ratio_table.py FILE.jsonl"""
import json
import math
import sys

import numpy as np

from lib.lowerbound import attention_lower_bound

rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault((r["V"], r["d"], r["L"]), []).append(r["nstar"])
below = within = n = 0
print("| V | d | L | N_lower | three-step N* per problem | geo-mean | geo-mean / N_lower | min / N_lower |")
print("|---|---|---|---|---|---|---|---|")
for (V, d, L), ns in rows.items():
    nl = attention_lower_bound(V, d, L, 0.99)
    gm = float(np.exp(np.mean(np.log(ns)))) if all(map(math.isfinite, ns)) else math.inf
    per = ", ".join(str(int(x)) if math.isfinite(x) else "inf" for x in ns)
    ratio = gm / nl
    n += 1
    below += ratio >= 1
    within += ratio <= 16
    print(f"| {V} | {d} | {L} | {nl:.2f} | {per} | {gm:.1f} | {ratio:.2f} | {min(ns) / nl:.2f} |")
print(f"\n{n} configurations: N_lower <= geo-mean N* at {below}; geo-mean N* <= 16 N_lower at {within}")
