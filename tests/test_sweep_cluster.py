"""Sweeps past one process: a Dask cluster (local, or joined by address) gives the numbers of one
job and resumes after a kill; the workers a sweep started die with it (SIGKILL to the parent leaves
no process computing and no line appended); concurrent sweeps over one cache compute every point
once, and a claim dies with the process that held it."""
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import psutil
import pytest

import lib
from lib.experiments.store import Store, append_line, check_store_path, point_prefix
from lib.experiments.sweep import grid, sweep

distributed = pytest.importorskip("distributed", reason="dask[distributed] is in requirements.txt")

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


def grid_order(point):
    return point["V"], point["d"], point["L"], point["m"] or 0


def lines(path):
    return sum(1 for _ in open(path, "rb")) if os.path.exists(path) else 0


@pytest.fixture(scope="module")
def slow_reference():
    """The SLOW grid with one job, in this process (one torch thread, as every worker): what every
    other route must give."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [p.as_dict() for p in sweep(SLOW_CONFIGS, **SLOW_KW)]
    finally:
        torch.set_num_threads(threads)


def kill_mid_sweep(cmd, cache, at_least):
    """Start `cmd`, SIGKILL it (the parent only) once `cache` has `at_least` lines; the pids of its
    descendants at that moment and the number of lines then."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and lines(cache) < at_least:
        time.sleep(0.02)
    kids = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL                          # killed, not finished
    return kids


def assert_all_gone(kids, cache, within=10.0):
    """Every process in `kids` ends within `within` seconds, and the store then stops growing."""
    gone, alive = psutil.wait_procs(kids, timeout=within)
    for p in alive:                                                   # leave nothing behind, then fail
        p.kill()
    assert not alive, f"still running {within} s after the parent's SIGKILL: {[p.pid for p in alive]}"
    before = lines(cache)
    time.sleep(1.0)
    assert lines(cache) == before                                     # nobody appends any more


# ----------------------------------------------------------------------------- Dask

# two grid points of 17 evaluated N's each (d = 4, 5: the threshold is never reached, the search
# doubles up to n_max), each N slower than the last: 12 and 25 s per grid point with 20 seeds
LONG = ["--V", "16", "--d", "4", "5", "--L", "8", "--no-trigger-in-value", "--seeds", "20", "--device", "cpu",
        "--json"]


def _running(dask_worker):
    """The tasks a Dask worker is running (a cancelled task runs on until it returns)."""
    return [str(t.key) for t in dask_worker.state.tasks.values() if t.state in ("executing", "cancelled")]


@pytest.mark.slow
def test_a_dask_cluster_joined_by_address_gives_the_numbers_of_one_job_and_drops_a_killed_sweep(tmp_path):
    """A two-worker LocalCluster over loopback (processes, one thread each), joined by its address
    as `--scheduler` does: every grid point runs on its workers, and the points equal --jobs 1.
    A sweep killed (SIGKILL) while its tasks run there leaves the cluster's workers alive, and its
    tasks stop before their next point: within seconds no task of it runs on the workers and no line
    is appended (without the check each task went on to the end of its grid point: 12-25 s here)."""
    cs = grid(BASE, d=[24, 32], L=[4, 6])
    serial = sweep(cs, **FAST)
    cache, killed_cache = str(tmp_path / "p.jsonl"), str(tmp_path / "killed.jsonl")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        with distributed.get_task_stream(client) as stream:
            got = sweep(cs, backend="dask", scheduler=cluster.scheduler_address, cache=cache, **FAST)
        workers = {t["worker"] for t in stream.data}
        pids = client.run(os.getpid)
        cmd = [sys.executable, "-m", "lib", "sweep", *LONG, "--backend", "dask", "--scheduler",
               cluster.scheduler_address, "--cache", killed_cache]
        kill_mid_sweep(cmd, killed_cache, at_least=20)
        deadline = time.time() + 10
        while time.time() < deadline and any(client.run(_running).values()):
            time.sleep(0.2)
        still = {w: keys for w, keys in client.run(_running).items() if keys}
        stopped = lines(killed_cache)
        time.sleep(1.0)
        assert client.run(os.getpid) == pids                          # the cluster's workers are left alone
    assert strip(got) == strip(serial)
    assert len(stream.data) == len(cs) and workers <= set(pids) and os.getpid() not in pids.values()
    assert sum(p.computed for p in got) == lines(cache) == sum(len(p.points) for p in serial)
    assert not still, f"tasks of the killed sweep still running 10 s after: {still}"
    assert lines(killed_cache) == stopped < 2 * 17                    # nothing appended after, grid unfinished


@pytest.mark.slow
def test_a_killed_dask_sweep_leaves_no_worker_and_resumes(tmp_path, slow_reference):
    """`--backend dask --jobs 2` starts its own LocalCluster; SIGKILL to the command ends its workers
    within seconds (no line appended after), and the same command then finishes the grid from the
    store, computing only what is missing, with the numbers of --jobs 1."""
    cache = str(tmp_path / "points.jsonl")
    cmd = [sys.executable, "-m", "lib", "sweep", *SLOW, "--backend", "dask", "--jobs", "2", "--cache", cache]
    total = sum(len(p["points"]) for p in slow_reference)
    kids = kill_mid_sweep(cmd, cache, at_least=3)
    assert len(kids) >= 2                                             # the two worker processes, at least
    assert_all_gone(kids, cache)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                               # a record cut by the kill is allowed
        done = len(Store(cache))
    assert 0 < done < total
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    resumed = [json.loads(line) for line in out.stdout.splitlines()]         # in the order they finished
    assert sorted(strip(resumed), key=grid_order) == strip(slow_reference)
    assert sum(p["computed"] for p in resumed) == total - done        # nothing finished is recomputed


def test_cli_dask_errors_are_one_line(monkeypatch, capsys):
    """No cluster at the address: one line naming the scheduler, after the connect timeout."""
    from lib.cli import main
    monkeypatch.setattr(lib.experiments.workers, "CONNECT_TIMEOUT", "1s")
    rc = main(["sweep", "--V", "16", "--d", "8", "--L", "4", "--device", "cpu", "--backend", "dask",
               "--scheduler", "tcp://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--scheduler tcp://127.0.0.1:9" in err, err


def test_help_offers_the_backends_that_run_here(capsys):
    """--help lists what --backend accepts (each one run by a test), and nothing untested (ray)."""
    from lib.cli import main
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exit_.value.code == 0 and "loky, threading, dask" in out and "--scheduler" in out
    assert "ray" not in out.lower().replace("array", "")


@pytest.mark.parametrize("backend", [None, "dask"])
def test_more_workers_than_memory_are_refused_before_any_starts(backend):
    """jobs is capped at the number of configurations (no idle workers), and a number of worker
    processes that cannot fit in the memory available is refused, naming jobs, before one starts."""
    avail = lib.core.config.available_memory()
    configs = grid(BASE, V=range(16, 1016))                           # 1000 configurations
    if avail is None or avail > 1000 * lib.experiments.sweep.WORKER_BYTES:
        pytest.skip("the available memory is unknown here, or large enough for 1000 workers")
    before = psutil.Process().children(recursive=True)
    with pytest.raises(ValueError, match=r"^jobs = 1000 needs about .* GiB for 1000 worker processes"):
        sweep(configs, jobs=10 ** 6, backend=backend, **FAST)
    assert psutil.Process().children(recursive=True) == before


# ----------------------------------------------------------------------------- workers die with the parent

@pytest.mark.slow
def test_loky_workers_die_with_their_parent(tmp_path, slow_reference):
    """`--jobs 2` (loky): SIGKILL to the command while its workers compute ends every process it
    started within seconds, and the store stops growing (without the workers' watchdog they went on
    through the whole grid, appending)."""
    cache = str(tmp_path / "points.jsonl")
    cmd = [sys.executable, "-m", "lib", "sweep", *SLOW, "--jobs", "2", "--cache", cache]
    kids = kill_mid_sweep(cmd, cache, at_least=3)
    assert len(kids) >= 2
    assert_all_gone(kids, cache)
    assert lines(cache) < sum(len(p["points"]) for p in slow_reference)   # the grid was not finished


# ----------------------------------------------------------------------------- concurrent sweeps

@pytest.mark.slow
def test_a_task_reaching_a_worker_after_its_parent_died_ends_the_worker():
    """The parent of a worker can die while the worker still imports; the task it then receives
    must not run: die_with_parent of a parent that is gone ends the process at once (status 1,
    nothing after it runs), and a live parent starts the watchdog and returns."""
    code = ("import os, sys, lib.experiments.workers as s; s.die_with_parent(os.getppid()); print('watching'); "
            "sys.stdout.flush(); gone = subprocess.Popen(['true']); gone.wait(); "
            "s._watched = None; s.die_with_parent(gone.pid); print('computed anyway')")
    out = subprocess.run([sys.executable, "-c", "import subprocess; " + code], capture_output=True, text=True,
                         env=ENV, timeout=120)
    assert out.returncode == 1 and out.stdout.split() == ["watching"], (out.returncode, out.stdout, out.stderr)


def _sweep_at_once(barrier, queue, cache):
    import torch
    torch.set_num_threads(1)                                          # two processes, one core each
    barrier.wait(60)                                                  # both start computing together
    queue.put([p.as_dict() for p in sweep(SLOW_CONFIGS, cache=cache, **SLOW_KW)])


def test_checking_a_fresh_cache_from_many_writers_at_once_loses_no_line(tmp_path):
    """Opening a store checks that its cache can be written before any point is computed. Four
    writers opening one fresh cache at the same moment, then appending a line each, keep all four
    lines, round after round (a check that created and removed the cache itself deleted a file
    another writer had begun, or failed on one another had removed: CI saw the second)."""
    for r in range(60):
        path = str(tmp_path / f"c{r}.jsonl")
        barrier, errors = threading.Barrier(4), []

        def writer(i):
            barrier.wait()
            try:
                check_store_path(path)
                append_line(path, f"line {i}\n")
            except Exception as err:          # collected: a thread's exception would be lost
                errors.append(err)
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, (r, errors)
        with open(path) as f:
            assert sorted(f.read().splitlines()) == [f"line {i}" for i in range(4)], r
    assert sorted(os.listdir(tmp_path)) == sorted(f"c{r}.jsonl" for r in range(60))   # no probe left


@pytest.mark.slow
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
    results = [queue.get(timeout=120) for _ in procs]
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
