"""The sweep engine: N* over a grid of configurations, resumable, parallel, with a confidence.

    configs = lib.experiments.sweep.grid(lib.TaskConfig(V=64, d=32, L=8), d=[32, 64], L=[8, 32])   # 4 configs
    points = lib.experiments.sweep.sweep(configs, threshold=0.99, seeds=3, cache="points.jsonl", jobs=2)
    cols = lib.experiments.sweep.table(points)          # {"V": array, "d": array, ..., "nstar": array (nan: not reached)}

Search. Each grid point runs `lib.experiments.capacity.nstar`: doubling from n_min (default V), then bisection
in N to a relative resolution; every N is evaluated on the same seeds (seeds share each N, and data
are nested in N). A threshold not reached by n_max gives nstar = None: a result, not an error.

Store. Every evaluated (configuration, N) is appended to the crash-safe JSON-lines store of
`lib.experiments.store` the moment it is computed (one fsynced line with a checksum; see that module for why
JSON lines and not SQLite). A kill at any moment loses only the point in flight; rerunning reads
every finished point back and recomputes none; a corrupt or truncated line is reported and
recomputed. The key holds the full configuration (not the device), the step sizes, the evaluation
settings and the code hash (`lib.experiments.codehash`; a worker with other code refuses), but not
the threshold, so sweeps at several thresholds share their points.

Parallelism. Grid points are independent; with jobs > 1 they run in joblib worker processes (the
loky backend by default) with one torch thread each (`torch.set_num_threads(1)`; K workers then use
K cores without oversubscription). Workers append to the same store: each record is one write of a
whole line on an O_APPEND descriptor under flock, so records never interleave.

Beyond one machine: backend="dask" (`python -m lib sweep --backend dask`) runs the grid points as
tasks of a Dask cluster (`dask[distributed]`, the `dask` extra). With scheduler=None it starts a
`distributed.LocalCluster` of `jobs` worker processes (one thread each, on 127.0.0.1) and closes
it at the end; with scheduler="tcp://host:8786" it joins that cluster (`distributed.Client`), whose
workers (`dask worker tcp://host:8786` on each machine) must import this `lib` and see the store's
file under the same path (a shared filesystem). A user's own `with joblib.parallel_backend(...)`
context (any joblib backend, after its setup) is used when backend=None and jobs != 1.

Workers die with their parent. A worker process the sweep started (loky, joblib's multiprocessing,
or the LocalCluster's) is a child of the sweeping process; it runs a watchdog thread that polls
`os.getppid()` every 0.1 s and ends the worker (`os._exit`) once the parent is gone, and a task
that reaches a worker after its parent died ends the worker before it computes anything. So a
parent killed by SIGKILL leaves no worker computing or appending (the store's line in flight is one
`os.write`: written whole or not at all). Workers of a cluster joined by address belong to that
cluster and are left running; there the scheduler cancels a killed sweep's tasks (about a second
after its client is gone), a task not started never starts, and a running one checks before each
point it would compute (`Store.guard`) and stops: at most the point in flight per worker is
appended after the kill.

Concurrent sweeps share work. Before computing a point, a worker claims it (an exclusive flock on
a file of `<cache>.claims/`, one per point) and re-reads what other processes appended to the store
since it last looked: a point another sweep finished is read, not recomputed, and a point another
sweep is computing is waited for, then read. A claim dies with its process (the kernel drops the
lock), so a killed sweep never blocks another. Two sweeps over one grid and one cache therefore
compute every point once (the second mostly waits on the first where their grids overlap).

Confidence of N*. With few seeds the mean accuracy near the threshold is noisy, and N* inherits
that noise. Each SweepPoint keeps the per-seed accuracies at every evaluated N and a bootstrap over
seeds: resample the seeds with replacement (B = 2000 times, from `lib.generator(seed, "bootstrap")`),
recompute the mean accuracy at every evaluated N, and take as that resample's N* the smallest
evaluated N from which on every evaluated N reaches the threshold (None when the largest does not).
`nstar_q10`, `nstar_q90` are the 10 % and 90 % quantiles of these N* (evaluated N's themselves;
None stands for "not reached by n_max"); `nstar_agree` is the fraction of resamples that give the
same N* as all seeds. The interval can only be as fine as the evaluated grid (a bisection step near
N*, a factor 2 further away), and it speaks of seed-to-seed variation only: with 3 seeds it is a
rough guide, read it as such.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from .bootstrap import BOOTSTRAP, _randint, bootstrap_nstar  # noqa: F401  (re-exported from lib.experiments.sweep)
from .capacity import METRICS, nstar as nstar_search
from .experiment import run
from ..core.config import TaskConfig, check_bool, check_float, check_int, check_memory
from ..learning.evaluate import N_TEST
from ..core.seed import get_draw, set_draw
from ..core.steps import StepSizes
from .store import Store, code_hash, point_prefix   # code_hash: lib.experiments.codehash

CONFIG_FIELDS = tuple(f.name for f in fields(TaskConfig) if f.name != "device")
BACKENDS = ("loky", "threading", "dask")    # the backends sweep() accepts by name
WATCH_SECONDS = 0.1                    # how often a worker checks that its parent is alive
CONNECT_TIMEOUT = "20s"                # how long to try to reach a Dask scheduler given by address
WORKER_BYTES = 380 * 2 ** 20           # one worker before its first point (347-416 MiB, bench/bench_point.py)


def grid(base: TaskConfig, **axes) -> list[TaskConfig]:
    """The cartesian product of `axes` (TaskConfig field -> list of values) around `base`.

    The last axis varies fastest: grid(base, d=[32, 64], L=[8, 32]) gives (32, 8), (32, 32), (64, 8),
    (64, 32). Every resulting configuration is validated by TaskConfig itself.
    """
    if not isinstance(base, TaskConfig):
        raise ValueError(f"base must be a TaskConfig, got {type(base).__name__}")
    allowed = {f.name for f in fields(TaskConfig)}
    configs = [base]
    for name, values in axes.items():
        if name not in allowed:
            raise ValueError(f"axis {name} is not a TaskConfig field (one of {', '.join(sorted(allowed))})")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise ValueError(f"axis {name} must be a list of values, got {values!r}")
        values = list(values)
        if not values:
            raise ValueError(f"axis {name} must have at least one value")
        configs = [c.with_(**{name: v}) for c in configs for v in values]
    return configs


@dataclass
class SweepPoint:
    """N* of one configuration, with the evaluated points and a bootstrap interval over seeds."""

    # the configuration (every TaskConfig field but the device)
    V: int
    d: int
    L: int
    model: str
    m: int | None
    activation: str
    mlp_input: str
    embedding: str
    tied: bool
    tau: float
    trigger_in_value: bool
    eos_key: bool
    noise_vocab: int | None
    dtype: str
    # the search
    threshold: float
    seeds: int
    seed: int
    mode: str
    n_test: int
    nstar: int | None                      # smallest evaluated N reaching the threshold (None: not by n_max)
    last_false: int | None                 # largest evaluated N below it (None if n_min already passed)
    points: list = field(default_factory=list)   # sorted by N: {"N", "acc", "acc_std", "per_seed", ...}
    nstar_q10: int | None = None           # bootstrap-over-seeds 10 % quantile of N* (None: not reached)
    nstar_q90: int | None = None           # 90 % quantile
    nstar_agree: float = 1.0               # fraction of resamples with the same N* as all seeds
    computed: int = 0                      # points computed by this call (the rest came from the cache)
    seconds: float = 0.0
    from_cache: bool = False               # True when nothing had to be computed
    training: dict | None = None           # the TrainSpec (as a dict) of a trained N*, None: three steps
    metric: str = "acc"                    # the accuracy that must reach the threshold (lib.experiments.capacity.METRICS)

    def config(self, device: str | None = None) -> TaskConfig:
        """The TaskConfig of this point (on `device`, default: the default device)."""
        kw = {k: getattr(self, k) for k in CONFIG_FIELDS}
        return TaskConfig(**kw) if device is None else TaskConfig(**kw, device=device)

    def as_dict(self) -> dict:
        return asdict(self)


def _one(cfg: TaskConfig, store: Store, opts: dict, parent: tuple | None = None) -> SweepPoint:
    """One grid point (runs in a worker process when jobs > 1: one torch thread there).

    parent: (host, pid, own) of the sweeping process; in another process the worker takes one torch
    thread and the parent's draw, and a worker the sweep started itself (own: its child) watches its
    parent and ends with it (see the module docstring)."""
    if opts.get("code") != code_hash("points"):        # other code would store wrong points under our keys
        raise ValueError(f"this worker's lib differs from the sweep's ({opts.get('code')}): use one checkout")
    if parent is not None and (socket.gethostname(), os.getpid()) != tuple(parent[:2]):   # another process
        import torch
        torch.set_num_threads(1)
        set_draw(opts["draw"])                             # the parent's draw, whenever the worker started
        if parent[2] and socket.gethostname() == parent[0]:
            _die_with_parent(parent[1])
        elif not parent[2]:
            store.guard = _dask_guard()                    # a cluster's worker: stop when the sweep is gone
    t0 = time.perf_counter()
    res = nstar_search(cfg, opts["threshold"], seeds=opts["seeds"], seed=opts["seed"], n_min=opts["n_min"],
                       n_max=opts["n_max"], mode=opts["mode"], n_test=opts["n_test"],
                       resolution=opts["resolution"], step_sizes=opts["step_sizes"], store=store,
                       training=opts["training"], metric=opts["metric"])
    by_n = {}
    for p in res.points:                   # per_seed: the searched metric's per-seed values (the bootstrap's)
        by_n[p.N] = {"N": p.N, "acc": p.acc, "acc_std": p.acc_std, "per_seed": list(p.per_seed[opts["metric"]]),
                     "att_acc": p.att_acc, "oracle_acc": p.oracle_acc}
    points = [by_n[n] for n in sorted(by_n)]
    q10, q90, agree = bootstrap_nstar([p["N"] for p in points], [p["per_seed"] for p in points],
                                      opts["threshold"], seed=opts["seed"])
    return SweepPoint(**{k: getattr(cfg, k) for k in CONFIG_FIELDS}, threshold=opts["threshold"],
                      seeds=opts["seeds"], seed=opts["seed"], mode=opts["mode"], n_test=opts["n_test"],
                      nstar=res.nstar, last_false=res.last_false, points=points, nstar_q10=q10, nstar_q90=q90,
                      nstar_agree=agree, computed=res.runs, seconds=time.perf_counter() - t0,
                      from_cache=res.runs == 0,
                      training=None if opts["training"] is None else asdict(opts["training"]), metric=opts["metric"])


def sweep(configs: list[TaskConfig], *, threshold: float = 0.99, seeds: int = 3, seed: int = 0,
          mode: str = "limit", step_sizes: StepSizes = StepSizes(), n_min: int | None = None,
          n_max: int = 2 ** 20, resolution: float = 0.05, n_test: int = N_TEST, cache: str | None = None,
          jobs: int = 1, progress: bool = False, backend: str | None = None, scheduler: str | None = None,
          training=None, metric: str = "acc", read_also: str | None = None) -> list[SweepPoint]:
    """N* of every configuration, in input order (see the module docstring for store and parallelism).

    jobs = 1 and no backend: in this process. jobs > 1 (or -1: all cores; never more workers than
    configurations, and refused when that many worker processes cannot fit in the memory
    available): joblib with `backend` (one of BACKENDS; default: joblib's current one, loky
    processes unless a `joblib.parallel_backend` context says otherwise).
    backend="dask": a LocalCluster of `jobs` workers, or the cluster at
    `scheduler` (an address such as "tcp://10.0.0.1:8786"; then jobs must be 1, the cluster's
    workers decide). progress: a tqdm bar over grid points on stderr. training: a
    `lib.learning.trainer.TrainSpec` (with mode="finite") sweeps the N* of the trained model instead;
    it is part of the store key. metric: the accuracy that must reach the threshold, "acc" (recall, the
    default), "att_acc" (attention alone) or "oracle_acc" (see lib.experiments.capacity.nstar); the store's
    points hold all three, so sweeps on different metrics share them. read_also: a second store file whose
    points are read but never written (a store shipped with the book; see `Store`).
    """
    if isinstance(configs, TaskConfig) or not isinstance(configs, (list, tuple)):
        raise ValueError(f"configs must be a list of TaskConfig, got {type(configs).__name__}")
    for i, c in enumerate(configs):
        if not isinstance(c, TaskConfig):
            raise ValueError(f"configs[{i}] must be a TaskConfig, got {type(c).__name__}")
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    n_max = check_int("n_max", n_max, 1)
    if n_min is not None:
        n_min = check_int("n_min", n_min, 1)
        if n_min > n_max:
            raise ValueError(f"n_min must be <= n_max, got n_min={n_min}, n_max={n_max}")
    resolution = check_float("resolution", resolution, 0.0, 1.0, strict_min=True)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs == 0 or jobs < -1:
        raise ValueError(f"jobs must be a positive integer or -1 (all cores), got {jobs!r}")
    check_bool("progress", progress)
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if backend is not None and (not isinstance(backend, str) or backend not in BACKENDS):
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)} (or None), got {backend!r}")
    if scheduler is not None:
        if backend != "dask":
            raise ValueError(f"scheduler is the address of a Dask cluster: it needs backend='dask', got backend={backend!r}")
        if not isinstance(scheduler, str) or not scheduler.strip():
            raise ValueError(f"scheduler must be an address such as 'tcp://10.0.0.1:8786', got {scheduler!r}")
        if jobs != 1:
            raise ValueError(f"jobs sets the size of a local cluster; the cluster at scheduler {scheduler} has its "
                             f"own workers: leave jobs at 1, got {jobs}")
    prefixes = [point_prefix(c, seeds=seeds, seed=seed, mode=mode, n_test=n_test, step_sizes=step_sizes,
                             training=training)
                for c in configs]                                     # validates seeds, seed, mode, n_test, step_sizes
    opts = dict(threshold=threshold, seeds=seeds, seed=seed, n_min=n_min, n_max=n_max, mode=mode,
                n_test=n_test, resolution=resolution, step_sizes=step_sizes, training=training, draw=get_draw(),
                metric=metric, code=code_hash("points"))
    if jobs != 1 and _own_workers(backend, jobs, scheduler):
        jobs = min((os.cpu_count() or 1) if jobs == -1 else jobs, max(1, len(configs)))   # no idle workers
        check_memory("jobs", jobs, jobs * WORKER_BYTES, f"{jobs} worker processes (Python with torch, "
                     f"{WORKER_BYTES / 2 ** 20:.0f} MiB each before their first point)")
    store = Store(cache, read_also=read_also)
    from tqdm import tqdm
    bar = tqdm(total=len(configs), desc="N* sweep", unit="point", disable=not progress)
    out: list = [None] * len(configs)
    parent = (socket.gethostname(), os.getpid(), _own_workers(backend, jobs, scheduler))
    results = None
    try:
        if backend == "dask":
            results = _dask_run(configs, store, prefixes, opts, parent, jobs, scheduler)
        elif jobs == 1 and backend is None:
            results = ((i, _one(c, store.subset(prefixes[i]), opts)) for i, c in enumerate(configs))
        else:
            from joblib import Parallel, delayed
            par = Parallel(n_jobs=jobs, backend=backend, return_as="generator_unordered")
            results = par(delayed(_indexed)(i, c, store.subset(prefixes[i]), opts, parent)
                          for i, c in enumerate(configs))
        for i, point in results:
            out[i] = point
            bar.update(1)
    finally:
        if hasattr(results, "close"):              # a generator: stop its workers / close its cluster now
            results.close()
        bar.close()
    return out


def recheck(cfg: TaskConfig, **search) -> list[tuple[float, float]]:
    """The two points that decide one search, `sweep([cfg], **search)` (its N* and the largest N that
    failed), as the sweep finds them (read from `cache` and `read_also` when they hold them) and computed
    again here by `lib.experiments.experiment.run` with no store: a list of (found, live) values of the
    search's metric, one pair per deciding point that exists (none when neither does). On the machine that
    computed the stored points the two agree to the last bit; elsewhere they may differ by rounding, which
    a caller bounds (chapter 10: the same decision and at most three test samples). `search`: `sweep`'s
    keyword arguments, checked there; jobs and backends are not needed for one configuration."""
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    for name in ("jobs", "backend", "scheduler", "progress"):
        if name in search:
            raise ValueError(f"{name}: recheck runs one search in this process; leave {name} out")
    sp = sweep([cfg], **search)[0]
    metric = search.get("metric", "acc")
    opts = {k: search[k] for k in ("mode", "seeds", "seed", "n_test", "step_sizes", "training") if k in search}
    return [(next(p[metric] for p in sp.points if p["N"] == N), float(getattr(run(cfg, N, **opts), metric)))
            for N in (sp.nstar, sp.last_false) if N is not None]


def _indexed(i, cfg, store, opts, parent):
    return i, _one(cfg, store, opts, parent)


def _dask_run(configs, store, prefixes, opts, parent, jobs, scheduler):
    """(index, SweepPoint) pairs as the tasks finish on a Dask cluster: a LocalCluster of `jobs`
    single-threaded worker processes started here (and closed at the end), or the cluster at
    `scheduler`. A generator: the cluster lives while the caller iterates."""
    try:
        import distributed
    except ImportError:
        raise ValueError("backend 'dask' needs dask[distributed]: pip install 'dask[distributed]' "
                         "(the 'dask' extra of this package)") from None
    import logging
    cluster = None
    if scheduler is None:
        n = (os.cpu_count() or 1) if jobs == -1 else jobs
        log = logging.getLogger("distributed")
        level = log.level
        log.setLevel(logging.ERROR)                                   # no start/stop chatter on stderr
        try:
            cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                               host="127.0.0.1", dashboard_address=None)
            client = distributed.Client(cluster)
        except BaseException:
            if cluster is not None:
                cluster.close()
            log.setLevel(level)
            raise
    else:
        try:
            client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as err:
            raise ValueError(f"scheduler {scheduler}: no Dask cluster answers there "
                             f"({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    try:
        futures = [client.submit(_indexed, i, c, store.subset(prefixes[i]), opts, parent, pure=False)
                   for i, c in enumerate(configs)]
        for future in distributed.as_completed(futures):
            yield future.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
            log.setLevel(level)


class Abandoned(RuntimeError):
    """The sweep that asked for a grid point is gone: its task stops before the next point."""


def _dask_guard():
    """On a Dask worker of a cluster the sweep does not own: a check, run before each point is
    computed, that raises Abandoned once the scheduler has cancelled this task (its client, the
    sweep, disconnected or was killed: about a second after). None elsewhere."""
    try:
        from distributed import get_worker
        from distributed.worker import thread_state
        worker, key = get_worker(), thread_state.key
    except (ImportError, ValueError, AttributeError):
        return None

    def guard():
        task = worker.state.tasks.get(key)
        if task is None or task.state == "cancelled":
            raise Abandoned(f"grid point task {key}: its sweep is gone; stopping before the next point")
    return guard


def _own_workers(backend, jobs, scheduler) -> bool:
    """Are the worker processes started by this sweep, as children of this process? loky (by name,
    or as joblib's active backend), joblib's multiprocessing (as the active backend) and the dask
    LocalCluster: yes. Threads, a cluster joined by address, or a user's other joblib backend: no
    (those workers are not ours to end)."""
    if backend == "dask":
        return scheduler is None
    if jobs == 1 and backend is None:
        return False
    if backend is None:
        from joblib.parallel import get_active_backend
        name = type(get_active_backend()[0]).__name__
        return name in ("LokyBackend", "MultiprocessingBackend")
    return backend == "loky"


_watched: int | None = None                    # the parent pid this process's watchdog watches


def _die_with_parent(parent: int) -> None:
    """End this worker process when `parent`, the process that started it, is gone: at once if it
    is gone already (a task can arrive after its sender died), else from a daemon thread (started
    once per process) polling every WATCH_SECONDS. A direct child (loky's workers, the
    LocalCluster's under the default "spawn") watches os.getppid(): a child outliving its parent is
    re-parented, so it changes, and no pid reuse can fool this; a worker started through an
    intermediary (a "forkserver") watches whether the pid still exists. os._exit: no cleanup that
    could block or append; the store's line in flight is one os.write, written whole or not at all."""
    global _watched
    direct = os.getppid() == parent
    if not _alive(parent, direct):
        os._exit(1)
    if _watched == parent:
        return
    _watched = parent

    def watch():
        while _alive(parent, direct):
            time.sleep(WATCH_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="lib-sweep-parent-watchdog", daemon=True).start()


def _alive(pid: int, direct: bool) -> bool:
    """Is the process `pid` still there (our parent when `direct`)?"""
    if direct:
        return os.getppid() == pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:                        # exists, under another user
        return True
    return True


def table(points: list[SweepPoint]) -> dict[str, np.ndarray]:
    """Columns for plots: one array per field, one row per point (None -> nan in numeric columns).

    Numeric columns (float arrays): V, d, L, m, tau, noise_vocab, threshold, nstar, last_false,
    nstar_q10, nstar_q90, nstar_agree, seeds, seed, n_test, computed, seconds. Others (object arrays):
    model, activation, mlp_input, embedding, tied, trigger_in_value, eos_key, dtype, mode, from_cache, metric.
    """
    if not isinstance(points, (list, tuple)) or not all(isinstance(p, SweepPoint) for p in points):
        raise ValueError("points must be a list of SweepPoint")
    numeric = ("V", "d", "L", "m", "tau", "noise_vocab", "threshold", "nstar", "last_false", "nstar_q10",
               "nstar_q90", "nstar_agree", "seeds", "seed", "n_test", "computed", "seconds")
    other = ("model", "activation", "mlp_input", "embedding", "tied", "trigger_in_value", "eos_key", "dtype",
             "mode", "from_cache", "metric")
    cols = {}
    for k in numeric:
        cols[k] = np.array([math.nan if getattr(p, k) is None else float(getattr(p, k)) for p in points],
                           dtype=np.float64)
    for k in other:
        cols[k] = np.array([getattr(p, k) for p in points], dtype=object)
    return cols
