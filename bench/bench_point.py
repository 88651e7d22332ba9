"""What one sweep point costs: wall time and peak memory of one `lib.run(cfg, N, seeds=1)` (the unit
a sweep computes and stores), each in a fresh process with one torch thread (a sweep worker's setting).

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_point.py            # the grid of the README's table
    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_point.py --one V d L N [mode]

Prints one line per point: V d L N mode, the seconds of run() (imports excluded), the peak resident
memory of the process (ru_maxrss) and the same for the process before run() (imports, the problem),
then least-squares fits of time and memory to the terms the three steps and the evaluation touch:
time ~ a N L + b N + c V d (+ const), memory ~ m0 + m1 N L + m2 V d.
"""
import json
import resource
import subprocess
import sys
import time

import numpy as np

GRID = [  # V, d, L, N: N and L at V = 256, d = 128; then V and d
    (256, 128, 16, 2 ** 14), (256, 128, 16, 2 ** 16), (256, 128, 16, 2 ** 18), (256, 128, 16, 2 ** 20),
    (256, 128, 4, 2 ** 18), (256, 128, 64, 2 ** 18), (256, 128, 64, 2 ** 20),
    (64, 32, 16, 2 ** 18), (1024, 256, 16, 2 ** 18), (1024, 1024, 16, 2 ** 18), (1024, 256, 16, 2 ** 20),
]


def one(V, d, L, N, mode="limit"):
    import torch
    torch.set_num_threads(1)
    import lib
    cfg = lib.TaskConfig(V=V, d=d, L=L, device="cpu")
    lib.run(cfg, 64, seeds=1, mode=mode, n_test=64)          # warm-up: numba cache, allocator
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    lib.run(cfg, N, seeds=1, mode=mode)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(dict(V=V, d=d, L=L, N=N, mode=mode, seconds=seconds, rss_mib=peak / 1024,
                          rss_before_mib=before / 1024)))


def main():
    rows = []
    for V, d, L, N in GRID:
        out = subprocess.run([sys.executable, __file__, "--one", str(V), str(d), str(L), str(N)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"V={V:<5d} d={d:<5d} L={L:<3d} N={N:<8d} {r['seconds']:8.2f} s  peak {r['rss_mib']:7.0f} MiB "
              f"(before run {r['rss_before_mib']:.0f} MiB)", flush=True)
    NL = np.array([r["N"] * r["L"] for r in rows], float)
    N = np.array([r["N"] for r in rows], float)
    Vd = np.array([r["V"] * r["d"] for r in rows], float)
    t = np.array([r["seconds"] for r in rows])
    m = np.array([r["rss_mib"] for r in rows])
    A = np.stack([NL, N, Vd, np.ones_like(N)], 1)
    ct, *_ = np.linalg.lstsq(A, t, rcond=None)
    cm, *_ = np.linalg.lstsq(np.stack([NL, Vd, np.ones_like(N)], 1), m, rcond=None)
    print(f"time  ~ {ct[0]:.3g} N L + {ct[1]:.3g} N + {ct[2]:.3g} V d + {ct[3]:.3g}   (seconds)")
    print(f"memory ~ {cm[2]:.0f} MiB + {cm[0] * 2**20:.3g} B x N L + {cm[1] * 2**20:.3g} B x V d")
    pred = A @ ct
    print("time fit, measured / fitted: " + " ".join(f"{a / b:.2f}" for a, b in zip(t, pred)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        one(*map(int, sys.argv[2:6]), *(sys.argv[6:7] or ["limit"]))
    else:
        main()
