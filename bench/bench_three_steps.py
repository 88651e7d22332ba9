"""Benchmark: the library's three steps against named baselines measured in the same run.

  floor   : one torch.bincount over the same N L token ids (the floor of any count-based route);
  before  : the implementation of the commit before the count-route rework (d802529, "today"),
            extracted with `git archive` into a temporary folder and run in a child process on the
            SAME problem and batch (saved tensors), so the numbers can be compared.
  primitives: the torch primitives each route is made of, timed alone (bench/primitives.py): for the
            limit mode the cheapest form of its three passes' bincounts, bag, lookup and row maximum,
            each in one call over all ids; for the finite mode two logit-table steps (forward bag,
            softmax, reverse bag) -- what a route without fused kernels cannot beat.
  native  : both modes run on lib.fast.native's fused numba loops when they load (the default), and again
            on torch primitives only (lib.fast.native.disabled()), both printed.
Prints medians (floor and limit: of --repeat runs; finite: of --repeat-finite runs), the ratios
limit / floor and finite before / after, the same ratios for the primitives alone, the relative
difference of the finite V2 against "before", and the peak resident memory of a fresh process
running the limit mode.
Usage: python bench/bench_three_steps.py [--N 1000000] [--repeat 5] [--repeat-finite 1]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import lib

from primitives import limit_floor, table_step_floor, timed

BEFORE = "d802529"
STEPS = dict(eta=0.01, gamma_W=1e8, gamma_V=1e3)     # explicit, so both versions take the same step


CHILD = """
import sys, time, statistics, torch
sys.path.insert(0, sys.argv[1])
import lib
assert lib.__version__ == "0.1.0", lib.__file__
d = torch.load(sys.argv[2])
cfg = lib.TaskConfig(V=d["V"], d=d["d"], L=d["L"], device="cpu")
p = lib.Problem(cfg, d["E"], d["U"], d["z_trig"], d["z_eos"], d["perm"], None)   # that commit has no lib.core
b = lib.Batch(d["tokens"], d["pos"], d["labels"])
s = lib.StepSizes(eta=0.01, gamma_W=1e8, gamma_V=1e3)
ts = []
for _ in range(int(sys.argv[4])):
    t = time.perf_counter(); r = lib.three_steps(p, b, "finite", s); ts.append(time.perf_counter() - t)
t = time.perf_counter(); lib.three_steps(p, b, "limit"); t_lim = time.perf_counter() - t
torch.save({"V2": r.V2, "t": statistics.median(ts), "t_lim": t_lim}, sys.argv[3])
"""


def before_finite(problem, batch, repeat):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        root = Path(__file__).resolve().parents[1]
        archive = subprocess.run(["git", "-C", str(root), "archive", BEFORE, "lib"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
        cfg = problem.cfg
        torch.save({"V": cfg.V, "d": cfg.d, "L": cfg.L, "E": problem.E, "U": problem.U, "z_trig": problem.z_trig,
                    "z_eos": problem.z_eos, "perm": problem.perm, "tokens": batch.tokens.long(), "pos": batch.pos,
                    "labels": batch.labels}, tmp / "in.pt")
        subprocess.run([sys.executable, "-c", CHILD, str(tmp), str(tmp / "in.pt"), str(tmp / "out.pt"), str(repeat)],
                       check=True)
        return torch.load(tmp / "out.pt")


def peak_memory_child(V, d, L, N):
    code = (
        "import time, lib\n"
        f"cfg = lib.TaskConfig(V={V}, d={d}, L={L}, device='cpu')\n"
        "p = lib.make_problem(cfg, 0)\n"
        f"b = lib.sample_batch(p, {N}, 0)\n"
        "rss = lambda key: int([l for l in open('/proc/self/status') if l.startswith(key)][0].split()[1])\n"
        "before = rss('VmRSS')\n"
        "t = time.perf_counter(); r = lib.three_steps(p, b, 'limit'); t = time.perf_counter() - t\n"
        "print(t, rss('VmHWM') / 2**20, before / 2**20)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return map(float, out.stdout.split())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, default=1024)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--L", type=int, default=64)
    ap.add_argument("--N", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--repeat-finite", type=int, default=1)
    a = ap.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}; V={a.V} d={a.d} L={a.L} N={a.N}", flush=True)
    cfg = lib.TaskConfig(V=a.V, d=a.d, L=a.L, device="cpu")
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, a.N, 0)
    flat = batch.tokens.reshape(-1)
    t_floor, _ = timed(lambda: torch.bincount(flat, minlength=cfg.V_in), a.repeat)
    print(f"lib.fast.native (fused numba loops): {'on' if lib.fast.native.available() else 'OFF (no numba, or RECALL_NATIVE=0)'}",
          flush=True)
    t_lim, _ = timed(lambda: lib.three_steps(problem, batch, "limit"), a.repeat)
    with lib.fast.native.disabled():
        t_lim_torch, _ = timed(lambda: lib.three_steps(problem, batch, "limit"), a.repeat)
    print(f"floor (bincount) {t_floor:.3f} s | limit {t_lim:.3f} s = {t_lim / t_floor:.1f}x the floor "
          f"(medians of {a.repeat}) | the same route on torch primitives only {t_lim_torch:.3f} s = "
          f"{t_lim_torch / t_floor:.1f}x", flush=True)
    prim = limit_floor(problem, batch)
    print("limit primitives: " + ", ".join(f"{k} {v:.3f} s" for k, v in prim.items())
          + f" = {prim['sum'] / t_floor:.1f}x the floor (the least these three passes cost with torch's own primitives)", flush=True)
    t_fin, fin = timed(lambda: lib.three_steps(problem, batch, "finite",
                                                     step_sizes=lib.StepSizes(**STEPS)), a.repeat_finite)
    with lib.fast.native.disabled():
        t_fin_torch, _ = timed(lambda: lib.three_steps(problem, batch, "finite",
                                                       step_sizes=lib.StepSizes(**STEPS)), a.repeat_finite)
    old = before_finite(problem, batch, a.repeat_finite)
    diff = float((fin.V2 - old["V2"]).norm() / old["V2"].norm())
    print(f"finite: before ({BEFORE}) {old['t']:.2f} s | after {t_fin:.2f} s = {old['t'] / t_fin:.2f}x faster "
          f"(V2 relative difference {diff:.1e}; on torch primitives only {t_fin_torch:.2f} s = "
          f"{old['t'] / t_fin_torch:.2f}x); limit before {old['t_lim']:.2f} s = {old['t_lim'] / t_lim:.2f}x faster now",
          flush=True)
    step = table_step_floor(problem, batch)
    print(f"finite primitives: two table steps (forward bag {step['forward bag']:.2f} s, softmax {step['softmax']:.2f} s, "
          f"reverse bag {step['reverse bag']:.2f} s, each) = {2 * step['sum']:.2f} s: before / primitives = "
          f"{old['t'] / (2 * step['sum']):.2f}x (the most an unfused finite mode can gain)", flush=True)
    t, peak, base = peak_memory_child(a.V, a.d, a.L, a.N)
    print(f"fresh process, limit mode: {t:.2f} s, peak RSS {peak:.2f} GiB (RSS before the steps {base:.2f} GiB; "
          f"token ids alone {a.N * a.L * batch.tokens.element_size() / 2**30:.2f} GiB, "
          f"{batch.tokens.dtype}; the torch runtime itself ~0.25 GiB)")


if __name__ == "__main__":
    main()
