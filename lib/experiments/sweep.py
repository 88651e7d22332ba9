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
tasks of a Dask cluster, started here (`jobs` workers) or joined by address (scheduler=...); a user's
own `with joblib.parallel_backend(...)` context is used when backend=None and jobs != 1. Worker
processes the sweep started die with it; a cluster joined by address drops a killed sweep's tasks.
How (and memory checked before any work, failures as one line): `lib.experiments.workers`.

Results stream. `on_point(index, point)` is called as each grid point finishes (completion order;
input order with jobs = 1), so a caller keeps every finished point when a later one fails; the
store keeps them too, and a rerun reads them back.

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
import time
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from .bootstrap import BOOTSTRAP, _randint, bootstrap_nstar  # noqa: F401  (re-exported from lib.experiments.sweep)
from .capacity import METRICS, nstar as nstar_search
from .experiment import run
from ..core.config import TaskConfig, check_bool, check_float, check_int
from ..learning.evaluate import N_TEST
from ..core.seed import get_draw, set_draw
from ..core.steps import StepSizes
from .store import Store, code_hash, point_prefix   # code_hash: lib.experiments.codehash
from .workers import (NO_WORKER_SECONDS, WORKER_BYTES, Abandoned, ClusterError, check_grid_memory, dask_guard,  # noqa: F401
                      dask_results, die_with_parent, ignore_sigint, point_bytes, point_culprit, point_name,
                      worker_hash_check)

CONFIG_FIELDS = tuple(f.name for f in fields(TaskConfig) if f.name != "device")
BACKENDS = ("loky", "threading", "dask")    # the backends sweep() accepts by name


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
    worker_hash_check(opts.get("code"))                # other code would store wrong points under our keys
    if parent is not None and (socket.gethostname(), os.getpid()) != tuple(parent[:2]):   # another process
        import torch
        torch.set_num_threads(1)
        set_draw(opts["draw"])                             # the parent's draw, whenever the worker started
        if parent[2] and socket.gethostname() == parent[0]:
            die_with_parent(parent[1])
        elif not parent[2]:
            store.guard = dask_guard()                    # a cluster's worker: stop when the sweep is gone
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
          training=None, metric: str = "acc", read_also: str | None = None, on_point=None,
          worker_wait: float | None = NO_WORKER_SECONDS) -> list[SweepPoint]:
    """N* of every configuration, in input order (see the module docstring for store and parallelism).

    Before any work, the grid's largest point searched up to n_max must fit in the memory available
    (`lib.experiments.workers.check_grid_memory`), else a ValueError naming the parameter that makes it
    large (n_max, n_test, L, V, noise_vocab, d, m) or jobs.
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
    points are read but never written (a store shipped with the book; see `Store`). on_point: called
    as on_point(index, point) the moment each grid point finishes (with progress, the bar steps aside).
    worker_wait (backend="dask"): seconds the cluster may have no worker while tasks wait before the
    sweep fails (default 60; None: however long, for a cluster whose workers are still queued).
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
    if worker_wait is not None:
        worker_wait = check_float("worker_wait", worker_wait, 0.0, strict_min=True)
    if backend != "dask" and worker_wait != NO_WORKER_SECONDS:
        raise ValueError(f"worker_wait is how long a Dask cluster may have no worker: it needs backend='dask', "
                         f"got backend={backend!r}")
    if on_point is not None and not callable(on_point):
        raise ValueError(f"on_point must be a function of (index, point) or None, got {on_point!r}")
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
    if jobs != 1 and (_own_workers(backend, jobs, scheduler) or backend == "threading"):
        jobs = min((os.cpu_count() or 1) if jobs == -1 else jobs, max(1, len(configs)))   # no idle workers
    own = _own_workers(backend, jobs, scheduler)
    names = [point_name(c) for c in configs]
    need = [point_bytes(c, n_max, n_test, mode) for c in configs]
    culprits = [point_culprit(c, n_max, n_test, mode) for c in configs]
    if scheduler is None:                                             # a joined cluster: its workers' limits
        check_grid_memory(names, need, n_max, processes=jobs if own else 0,
                          threads=jobs if backend == "threading" else 1, culprits=culprits)
    store = Store(cache, read_also=read_also)
    from tqdm import tqdm
    bar = tqdm(total=len(configs), desc="N* sweep", unit="point", disable=not progress)
    out: list = [None] * len(configs)
    parent = (socket.gethostname(), os.getpid(), own)
    results = None
    try:
        if backend == "dask":
            results = dask_results(_indexed, [(i, c, store.subset(prefixes[i]), opts, parent)
                                              for i, c in enumerate(configs)], names, need, jobs, scheduler,
                                   culprits=culprits, worker_wait=worker_wait)
        elif jobs == 1 and backend is None:
            results = ((i, _one(c, store.subset(prefixes[i]), opts)) for i, c in enumerate(configs))
        else:
            from joblib import Parallel, delayed, parallel_config
            if _loky(backend):                        # loky's workers ignore SIGINT from their start
                with parallel_config(backend="loky", initializer=ignore_sigint):
                    par = Parallel(n_jobs=jobs, return_as="generator_unordered")
            else:
                par = Parallel(n_jobs=jobs, backend=backend, return_as="generator_unordered")
            results = par(delayed(_indexed)(i, c, store.subset(prefixes[i]), opts, parent)
                          for i, c in enumerate(configs))
        for i, point in results:
            out[i] = point
            if on_point is not None:
                with tqdm.external_write_mode():                      # the bar steps aside for the caller's line
                    on_point(i, point)
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


def _active_backend() -> str:
    """The class name of joblib's active backend (what backend=None runs on)."""
    from joblib.parallel import get_active_backend
    return type(get_active_backend()[0]).__name__


def _loky(backend) -> bool:
    """Will joblib run the sweep's jobs on loky (by name, or as its active backend)?"""
    return backend == "loky" or (backend is None and _active_backend() == "LokyBackend")


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
        return _active_backend() in ("LokyBackend", "MultiprocessingBackend")
    return backend == "loky"


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
