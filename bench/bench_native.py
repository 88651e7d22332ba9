"""Benchmark: lib.fast.native's numba loops against the C loops they replaced and against torch primitives,
loop by loop, through lib.three_steps (limit and finite mode) and through one training step (both
gradients at soft attention, as each step of lib.train), in one run on one problem and batch.

  numba : lib.fast.native as it is (numba, `lib/fast/loops.py`);
  C     : lib/native.py and lib/native.c of the commit before the numba port (C_COMMIT), taken from
          git (`git show`) into a temporary folder, compiled there with gcc (-O3 -march=native
          -ffast-math -fopenmp, as they were) and loaded as a second module, `c_native`;
  torch : the same operations on torch primitives (per loop: `TorchLoops` below, the formulas the
          tests bind the loops to; for three_steps: the library's own torch route, lib.fast.native.disabled()).

Per loop, the calls that one limit-mode and one finite-mode three_steps make (recorded with their
arguments, N samples in the route's chunks) are replayed with each implementation: the time is the
median over --repeat replays of the whole set. three_steps: the median of --repeat runs, the route's
`lib.fast.counts.native` swapped for the C module for the C column. The three implementations are timed in
turn, repeat after repeat (each warmed once first), so that a busy spell of the machine hits all alike.
Usage (one thread, as the defaults print): OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python bench/bench_native.py
        [--V 512] [--d 128] [--L 32] [--N 262144] [--dtype float32] [--repeat 3]
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
LOOPS = ("pair_count", "beta_counts", "attend", "attention", "forward_bag", "softmax_rows", "reverse_bag")
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

    @staticmethod
    def attention(tokens, pos, S, bonus, s_eos, split, a_bag, a_l, a_eos, rest):
        B, L = tokens.shape
        sc = S[tokens]
        rows = torch.arange(B)
        sc[rows, pos] += bonus
        if s_eos is not None:
            sc = torch.cat([sc, torch.full((B, 1), s_eos, dtype=sc.dtype)], 1)
        a = torch.softmax(sc, 1)
        a_l.copy_(a[rows, pos])
        if a_eos is not None:
            a_eos.copy_(a[:, L])
        a_bag.copy_(a[:, :L])
        a_bag[rows, pos] = 0
        rest.copy_(a_bag.sum(1) + (a[:, L] if a_eos is not None else 0))
        if not split:
            a_bag[rows, pos] = a_l

    @staticmethod
    def forward_bag(tokens, a, table, out):
        return out.copy_(Fn.embedding_bag(tokens, table, mode="sum", per_sample_weights=a))

    @staticmethod
    def softmax_rows(xi_rest, table, informative, a_l, xi_z, split, tiv, a_eos, xi_q, labels, err, acc, tokens=None,
                     a_bag=None, rest=None):
        ce = a_eos if a_eos is not None else torch.zeros_like(a_l)
        Tl = table[informative]
        xi = xi_rest + split * a_l[:, None] * Tl + tiv * a_l[:, None] * xi_z + ce[:, None] * xi_q
        rows = torch.arange(len(labels))
        e = torch.softmax(xi, 1)
        e[rows, labels] -= 1
        err.copy_(e)
        acc.stats[0, 0] += float(Fn.cross_entropy(xi, labels, reduction="sum"))
        acc.stats[0, 1] += float((xi.argmax(1) == labels).sum())
        if acc.sums is not None:
            acc.sums[0, :xi.shape[1]] += (tiv * a_l @ e).double()
            acc.sums[0, xi.shape[1]:2 * xi.shape[1]] += (ce @ e).double()
        if acc.ds is not None:
            r_rest = (e * (xi_rest + ce[:, None] * xi_q)).sum(1)
            r_l = (e * (Tl + tiv * xi_z)).sum(1)
            beta = r_rest + a_l * r_l
            ds_l = a_l * (rest * r_l - r_rest)
            ds = acc.ds[0]
            ds.index_add_(0, informative, ds_l.double())
            ds.index_add_(0, tokens.reshape(-1).long(), -(a_bag * beta[:, None]).reshape(-1).double())
            ds[acc.V_in] += ds_l.sum()
            ds[acc.V_in + 1] += (ce * (e @ xi_q - beta)).sum()

    @staticmethod
    def reverse_bag(order, offsets, a, err, P, work):
        L = a.shape[1]
        o = order.long()
        w = a.reshape(-1)[o]
        return P.add_(Fn.embedding_bag(o // L, err, offsets.long(), mode="sum", per_sample_weights=w))


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


ROUTE_MODULES = (lib.fast.counts, lib.fast.limit)   # the modules that call the loops (as `native`)


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
