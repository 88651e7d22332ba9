"""Sweeps past one process: concurrent sweeps over one cache compute every point once, and a
claim dies with the process that held it."""
import multiprocessing
import os
import signal
import time

import pytest

import lib
from lib.experiments.store import Store, point_prefix
from lib.experiments.sweep import grid, sweep

BASE = lib.TaskConfig(V=16, d=32, L=4, trigger_in_value=False, device="cpu")
FAST = dict(seeds=3, n_test=512, threshold=0.9)
VOLATILE = ("seconds", "computed", "from_cache")
# a grid of a few seconds per worker: long enough to be killed in the middle
SLOW = ["--V", "64", "--d", "16", "24", "--L", "4", "8", "16", "--threshold", "0.99", "--seeds", "2",
        "--n-test", "1024", "--n-max", str(2 ** 17), "--device", "cpu", "--json"]
SLOW_CONFIGS = grid(lib.TaskConfig(V=64, d=16, L=4, device="cpu"), d=[16, 24], L=[4, 8, 16])
SLOW_KW = dict(threshold=0.99, seeds=2, n_test=1024, n_max=2 ** 17)
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def strip(points):
    return [{k: v for k, v in (p if isinstance(p, dict) else p.as_dict()).items() if k not in VOLATILE}
            for p in points]


def lines(path):
    return sum(1 for _ in open(path, "rb")) if os.path.exists(path) else 0


@pytest.fixture(scope="module")
def slow_reference():
    """The SLOW grid with one job, in this process: what every other route must give."""
    return [p.as_dict() for p in sweep(SLOW_CONFIGS, **SLOW_KW)]


# ----------------------------------------------------------------------------- concurrent sweeps

def _sweep_at_once(barrier, queue, cache):
    barrier.wait(60)                                                  # both start computing together
    queue.put([p.as_dict() for p in sweep(SLOW_CONFIGS, cache=cache, **SLOW_KW)])


def test_two_concurrent_sweeps_compute_every_point_once(tmp_path, slow_reference):
    """Two processes sweeping one grid into one cache, started at the same moment: every point is
    computed by one of them (lines in the store == distinct points == points computed by both
    together; without the claims each computed the whole grid), and both return the numbers of a
    single sweep."""
    cache = str(tmp_path / "points.jsonl")
    ctx = multiprocessing.get_context("spawn")                        # no fork of a process using torch
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_sweep_at_once, args=(barrier, queue, cache)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    total = sum(len(p["points"]) for p in slow_reference)
    assert strip(results[0]) == strip(results[1]) == strip(slow_reference)
    assert lines(cache) == len(Store(cache)) == total
    assert sum(p["computed"] for r in results for p in r) == total


def _hold_claim(path, prefix, ready):
    store = Store(path)
    with store.claim(prefix, 64):
        ready.set()
        time.sleep(60)


def test_a_claim_waits_for_its_holder_and_dies_with_it(tmp_path):
    """A claimed point blocks another claimant until the holder ends; a SIGKILLed holder releases
    it (the kernel drops its flock), so a crash never blocks a sweep. refresh() reads what another
    process appended since the last read, only whole lines."""
    path = str(tmp_path / "p.jsonl")
    prefix = point_prefix(BASE, seeds=1, seed=0, mode="limit", n_test=8, step_sizes=lib.StepSizes())
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_claim, args=(path, prefix, ready))
    holder.start()
    assert ready.wait(30)
    waiter = Store(path)
    t0 = time.time()
    killer = ctx.Process(target=lambda: (time.sleep(1.0), os.kill(holder.pid, signal.SIGKILL)))
    killer.start()
    with waiter.claim(prefix, 64):
        waited = time.time() - t0
    killer.join(10)
    holder.join(10)
    assert holder.exitcode == -signal.SIGKILL and 0.8 < waited < 10, waited
    with waiter.claim(prefix, 128):                                   # another point: no wait
        pass
    other = Store(path)
    result = lib.run(BASE, 64, seeds=1, n_test=8)
    other.put(prefix, result)
    assert waiter.get(prefix, 64) is None and waiter.refresh() == 1 and waiter.get(prefix, 64) == result
    with open(path, "ab") as f:                                       # a line being written: not read yet
        f.write(b'{"key": ')
    assert waiter.refresh() == 0
