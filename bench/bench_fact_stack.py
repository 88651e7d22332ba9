"""Benchmark of chapter 11's trainer against its peer, Nichani, Lee and Bietti's own JAX code, in one run.

Per Adam step, at the two sizes of the comparison the book was asked to win (and the capacity grid's attention
model), on one and on two threads:
  peer     : their `TF_one_layer` with `optax.adamw`, jit-compiled, batches sampled beforehand
             (bench/peer_nichani_step.py, in the interpreter given by --peer-python, on their checkout
             --peer-repo, pinned to as many cores as threads; --record keeps its figures); without them,
             the figures recorded in bench/peer_recorded.json are printed with their date and labelled so;
  book     : `lib.factual.train_facts` on a `FactTransformer` (the route chapter 11's shipped grids were
             trained with), a fresh batch sampled every step;
  stacked  : `lib.factual.stacked.train_stacked` with that one model (same batches; attention through the
             query when d_h > 4);
  stack xM : the same per model, M models of M tasks (seeds) trained in one stack: what a grid gains.
Prints the table and the ratios peer / stacked and book / stacked. Then the stack's two attention routes
(`lib.factual.stacked.ROUTES`) forced in turn at each size, per model in a stack of M, beside the one
`attention_route` picks by default: the measurement behind QUERY_ROUTE_DH. Each time is the median of --rounds rounds
of --steps steps (the test-set evaluation at the first and last step included: n_test = 64).

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_fact_stack.py [--peer-python /path/to/python --peer-repo DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from lib.factual import FactModelConfig, FactTask, FactTrainConfig, FactTransformer, train_facts  # noqa: E402
from lib.factual.stacked import ROUTES, attention_route, train_stacked  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = [  # the comparison's two rows (their run.py's T = 32), then the capacity grid's attention model
    {"S": 64, "R": 4, "D": 4, "T": 32, "d": 128, "H": 8, "d_h": 16, "m": 256, "batch": 1024},
    {"S": 256, "R": 4, "D": 4, "T": 32, "d": 64, "H": 4, "d_h": 16, "m": 512, "batch": 1024},
    {"S": 128, "R": 4, "D": 4, "T": 6, "d": 128, "H": 16, "d_h": 2, "m": 0, "batch": 256},
]


def per_step(fn, steps: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) / steps)
    return statistics.median(times)


def book_side(z: dict, steps: int, rounds: int, stack: int) -> dict:
    mc = FactModelConfig(d=z["d"], H=z["H"], d_h=z["d_h"], m=z["m"])
    cfg = FactTrainConfig(steps=steps, batch=z["batch"], lr=1e-3, log_every=steps, n_test=64)
    task = lambda s: FactTask(S=z["S"], R=z["R"], D=z["D"], T=z["T"], seed=s)
    out = {"book": per_step(lambda: train_facts(FactTransformer(task(0), mc), cfg), steps, rounds),
           "stacked": per_step(lambda: train_stacked([FactTransformer(task(0), mc)], cfg), steps, rounds)}
    if stack > 1:
        out["stack"] = per_step(lambda: train_stacked([FactTransformer(task(s), mc) for s in range(stack)], cfg),
                                steps, rounds) / stack
    return out


def route_side(z: dict, steps: int, rounds: int, stack: int) -> dict:
    """Seconds per model-step of a stack of `stack` models (seeds) at size z, on each attention route."""
    mc = FactModelConfig(d=z["d"], H=z["H"], d_h=z["d_h"], m=z["m"])
    cfg = FactTrainConfig(steps=steps, batch=z["batch"], lr=1e-3, log_every=steps, n_test=64)
    models = lambda: [FactTransformer(FactTask(S=z["S"], R=z["R"], D=z["D"], T=z["T"], seed=s), mc) for s in range(stack)]
    return {r: per_step(lambda: train_stacked(models(), cfg, route=r), steps, rounds) / stack for r in ROUTES}


def peer_side(python: str, repo: str, threads: int, steps: int, rounds: int) -> list:
    env = dict(os.environ)
    if threads == 1:
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:threads])
    r = subprocess.run(["taskset", "-c", cpus, python, os.path.join(HERE, "peer_nichani_step.py"), "--repo", repo,
                        "--sizes", json.dumps(SIZES), "--steps", str(steps), "--rounds", str(rounds)],
                       capture_output=True, text=True, env=env, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"the peer's run failed (rc {r.returncode}):\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["seconds_per_step"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer-python", default=os.environ.get("NICHANI_PYTHON"), help="an interpreter with JAX, flax, optax")
    ap.add_argument("--peer-repo", default=os.environ.get("NICHANI_REPO"), help="a checkout of eshnich/factual-recall-iclr")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stack", type=int, default=8, help="models per stack for the 'stack xM' column (default 8)")
    ap.add_argument("--record", action="store_true", help="with a live peer: write its figures to bench/peer_recorded.json")
    a = ap.parse_args()
    for name in ("steps", "rounds", "stack"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be a positive integer")
    if any(t < 1 or t > len(os.sched_getaffinity(0)) for t in a.threads):
        ap.error(f"--threads must lie in 1..{len(os.sched_getaffinity(0))} (the cores this process may use)")
    live = bool(a.peer_python and a.peer_repo)
    path = os.path.join(HERE, "peer_recorded.json")
    if live:
        recorded = {"date": time.strftime("%Y-%m-%d"), "how": "", "seconds_per_step": {}}
    elif os.path.exists(path):
        recorded = json.load(open(path))
    else:
        raise SystemExit("no peer: give --peer-python and --peer-repo, or keep bench/peer_recorded.json")
    print(f"torch {torch.__version__}; peer: " + (f"measured now ({a.peer_python}, {a.peer_repo})" if live else
          f"recorded {recorded['date']} ({recorded['how']}), not measured in this run"))
    print(f"{'S,R,D,T':>12} {'d,H,d_h,m':>14} {'batch':>5} {'thr':>3} {'peer ms':>8} {'book ms':>8} {'stacked':>8} "
          f"{'stack x' + str(a.stack):>9} {'peer/stacked':>12} {'book/stacked':>12}")
    for threads in a.threads:
        torch.set_num_threads(threads)
        peer = (peer_side(a.peer_python, a.peer_repo, threads, a.steps, a.rounds) if live
                else recorded["seconds_per_step"].get(str(threads), [None] * len(SIZES)))
        recorded["seconds_per_step"][str(threads)] = peer
        for z, p in zip(SIZES, peer):
            b = book_side(z, a.steps, a.rounds, a.stack if z["d_h"] <= 4 else 1)
            ms = lambda x: f"{x * 1e3:8.1f}" if x is not None else f"{'-':>8}"
            vs_peer = f"{p / b['stacked']:.2f}x" if p else "-"
            print(f"{'{S},{R},{D},{T}'.format(**z):>12} {'{d},{H},{d_h},{m}'.format(**z):>14} {z['batch']:>5} {threads:>3} "
                  f"{ms(p)} {ms(b['book'])} {ms(b['stacked'])} {ms(b.get('stack')):>9} "
                  f"{vs_peer:>12} {b['book'] / b['stacked']:11.2f}x", flush=True)
    print(f"\nattention routes: ms per model-step in a stack of {a.stack} (the default marked *)")
    print(f"{'S,R,D,T':>12} {'d,H,d_h,m':>14} {'batch':>5} {'thr':>3} " + " ".join(f"{r:>8}" for r in ROUTES))
    for threads in a.threads:
        torch.set_num_threads(threads)
        for z in SIZES:
            t = route_side(z, a.steps, a.rounds, a.stack)
            pick = attention_route(z["d_h"])
            print(f"{'{S},{R},{D},{T}'.format(**z):>12} {'{d},{H},{d_h},{m}'.format(**z):>14} {z['batch']:>5} {threads:>3} "
                  + " ".join(f"{t[r] * 1e3:7.1f}" + ("*" if r == pick else " ") for r in ROUTES), flush=True)
    if live and a.record:
        recorded["how"] = (f"bench/peer_nichani_step.py on {os.uname().machine}, {len(os.sched_getaffinity(0))} cores, "
                           f"--steps {a.steps} --rounds {a.rounds}")
        with open(path, "w") as f:
            json.dump(recorded, f, indent=1)
            f.write("\n")
        print(f"peer figures recorded in {path}")


if __name__ == "__main__":
    main()
