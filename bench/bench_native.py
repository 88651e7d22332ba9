"""Benchmark: lib.fast.native's numba loops against the C loops they replaced and against torch primitives,
loop by loop, through lib.three_steps (limit and finite mode) and through one training step (both
gradients at soft attention, as each step of lib.train), in one run on one problem and batch.

  numba : lib.fast.native as it is (numba, `lib/fast/loops.py`): the limit mode's three passes;
  C     : lib/native.py and lib/native.c of the commit before the numba port (C_COMMIT), taken from
          git (`git show`) into a temporary folder, compiled there with gcc (-O3 -march=native
          -ffast-math -fopenmp, as they were) and loaded as a second module, `c_native`, whose three
          limit-mode loops replace numba's;
  torch : the same operations on torch primitives (per loop: `TorchLoops` below, the formulas the
          tests bind the loops to; otherwise the library's own torch route, lib.fast.native.disabled()).

The logit-table step (the finite mode's steps 2 and 3, a training step) runs on torch primitives in
every column: its fused loops, in C and then in numba, were removed after this benchmark measured the
torch route as fast or faster (V = 512, d = 128, L = 32, N = 2^18, one thread: finite mode numba 4.07 s,
C 8.10 s, torch 3.10 s; one training step 1.98 s, 4.39 s, 1.82 s; V = 256, d = 128, L = 16, N = 2^17:
training step 0.57 s, 0.83 s, 0.39 s).

Per loop, the calls that one limit-mode and one finite-mode three_steps make (recorded with their
arguments) are replayed with each implementation: the time is the median over --repeat replays of
the whole set. The routes: the median of --repeat runs, `lib.fast.limit.native` swapped for the C
module for the C column. The three implementations are timed in turn, repeat after repeat (each
warmed once first), so that a busy spell of the machine hits all alike.
Usage (one thread, as the defaults print): OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python bench/bench_native.py
        [--V 512] [--d 128] [--L 32] [--N 262144] [--dtype float32] [--repeat 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import types
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as Fn

import lib
from lib.fast import native

from primitives import timed

C_COMMIT = "156e628"          # the last commit with lib/native.c
LOOPS = ("pair_count", "beta_counts", "attend")
STEPS = dict(eta=0.01, gamma_W=1e8, gamma_V=1e3)


def load_c_reference(tmp: Path):
    """The C route of C_COMMIT as module `c_native` (its own native.py, compiling its native.c in tmp)."""
    root = Path(__file__).resolve().parents[1]
    pkg = tmp / "c_native"
    pkg.mkdir()
    for name in ("native.py", "native.c"):
        text = subprocess.run(["git", "-C", str(root), "show", f"{C_COMMIT}:lib/{name}"], capture_output=True,
                              text=True, check=True).stdout
        if name == "native.py":
            text = text.replace("from .config import check_int", "from lib.core.config import check_int")
        (pkg / name).write_text(text)
    os.environ["RECALL_NATIVE_CACHE"] = str(tmp / "cache")
    spec = importlib.util.spec_from_file_location("c_native", pkg / "native.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["c_native"] = mod
    spec.loader.exec_module(mod)
    if not mod.available():
        raise SystemExit(f"the C reference did not build: {mod._state.get('error')!r}")
    return mod


class TorchLoops:
    """The loops' operations on torch primitives, with their signatures (the tests' formulas)."""

    @staticmethod
    def pair_count(tokens, informative, V, V_in, check=True):
        pairs = torch.add(tokens, informative.to(torch.int32)[:, None], alpha=V_in)
        return torch.bincount(pairs.view(-1), minlength=V * V_in).view(V, V_in)

    @staticmethod
    def beta_counts(tokens, informative, D, s_w, K, check=True):
        pairs = torch.add(tokens, informative.to(torch.int32)[:, None], alpha=D.shape[1])
        beta = (Fn.embedding_bag(pairs, D.reshape(-1, 1), mode="sum")[:, 0] + s_w[informative]).double() / K
        w = beta[:, None].expand(tokens.shape).reshape(-1)
        return torch.bincount(tokens.view(-1), weights=w, minlength=D.shape[1]), float(beta.sum())

    @staticmethod
    def attend(tokens, pos, informative, S, bonus, s_eos, V, check=True):
        sc = S[tokens]
        rows = torch.arange(len(pos))
        sc[rows, pos] += bonus
        best, t = sc.max(1)                                            # first maximum
        group = torch.where(t == pos, S.numel(), tokens[rows, t].long())
        if s_eos is not None:
            group = torch.where(s_eos > best, S.numel() + 1, group)
        return informative + group * V


class Recorder(types.ModuleType):
    """lib.fast.native with its loops' calls recorded (arguments as they were passed)."""

    def __init__(self, real):
        super().__init__("native_recorder")
        self._real, self.calls = real, {name: [] for name in LOOPS}

    def __getattr__(self, name):
        value = getattr(self._real, name)
        if name in LOOPS:
            def record(*args, **kw):
                self.calls[name].append((args, kw))
                return value(*args, **kw)
            return record
        return value


ROUTE_MODULES = (lib.fast.limit,)   # the module that calls the loops (as `native`)


@contextmanager
def loops_from(module):
    """The count routes call `module`'s loops instead of lib.fast.native's within this block."""
    for m in ROUTE_MODULES:
        m.native = module
    try:
        yield
    finally:
        for m in ROUTE_MODULES:
            m.native = native


def record_calls(problem, batch):
    rec = Recorder(native)
    with loops_from(rec):
        lib.three_steps(problem, batch, "limit")
        lib.three_steps(problem, batch, "finite", step_sizes=lib.StepSizes(**STEPS))
    return rec.calls


def interleaved(runs: dict, repeat: int) -> dict:
    """{name: median seconds of fn()} with the runs taken in turn (each once to warm first): on a
    loaded machine a slow spell then hits every route alike, not the one timed during it."""
    times = {name: [] for name in runs}
    for fn in runs.values():
        fn()
    for _ in range(repeat):
        for name, fn in runs.items():
            times[name].append(timed(fn, 1)[0])
    return {name: statistics.median(t) for name, t in times.items()}


def replayer(impl, calls):
    def run():
        for args, kw in calls:
            impl(*args, **kw)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, default=512)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--L", type=int, default=32)
    ap.add_argument("--N", type=int, default=2 ** 18)
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch's threads (numba follows them)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    import numba
    print(f"torch {torch.__version__} threads {torch.get_num_threads()} | numba {numba.__version__} "
          f"(NUMBA_NUM_THREADS {numba.config.NUMBA_NUM_THREADS}) | V={a.V} d={a.d} L={a.L} N={a.N} {a.dtype}", flush=True)
    if not native.available():
        raise SystemExit(f"lib.fast.native's numba loops are off: {native._state.get('error')!r}")
    print(f"numba threading layer: {numba.threading_layer()}", flush=True)
    cfg = lib.TaskConfig(V=a.V, d=a.d, L=a.L, device="cpu", dtype=a.dtype)
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, a.N, 0)
    with tempfile.TemporaryDirectory() as tmp:
        cmod = load_c_reference(Path(tmp))
        calls = record_calls(problem, batch)
        rows = []
        for name in LOOPS:
            c = calls[name]
            t = interleaved({k: replayer(getattr(impl, name), c) for k, impl in
                             (("numba", native), ("C", cmod), ("torch", TorchLoops))}, a.repeat)
            rows.append((f"{name} ({len(c)} calls)", t["numba"], t["C"], t["torch"]))
            print(f"  {rows[-1][0]:<28} numba {t['numba']:.3f} s  C {t['C']:.3f} s  torch {t['torch']:.3f} s", flush=True)
        trained = lib.three_steps(problem, batch, "finite", step_sizes=lib.StepSizes(**STEPS)).params
        work = {"three_steps limit": lambda: lib.three_steps(problem, batch, "limit"),
                "three_steps finite": lambda: lib.three_steps(problem, batch, "finite", step_sizes=lib.StepSizes(**STEPS)),
                # one step of lib.train: both gradients at soft-attention parameters (after the three steps)
                "one training step": lambda: lib.fast.counts.count_gradients(problem, trained, batch)}
        for label, fn in work.items():
            def route(module, off=False, fn=fn):
                def run():
                    with loops_from(module):
                        if off:
                            with native.disabled():
                                return fn()
                        return fn()
                return run
            t = interleaved({"numba": route(native), "C": route(cmod), "torch": route(native, off=True)}, a.repeat)
            rows.append((label, t["numba"], t["C"], t["torch"]))
            print(f"  {rows[-1][0]:<28} numba {t['numba']:.3f} s  C {t['C']:.3f} s  torch {t['torch']:.3f} s", flush=True)
    print(f"\nmedians of {a.repeat}, seconds | numba / C: the port's cost (target <= 1.3) | torch / numba: its gain")
    print(f"{'':<28} {'numba':>8} {'C':>8} {'torch':>8} {'numba/C':>8} {'torch/numba':>11}")
    for name, t_nb, t_c, t_torch in rows:
        print(f"{name:<28} {t_nb:8.3f} {t_c:8.3f} {t_torch:8.3f} {t_nb / t_c:8.2f} {t_torch / t_nb:11.2f}")


if __name__ == "__main__":
    main()
