"""Where a sweep's grid points run, and how a sweep fails there: memory checked before any work, the
workers' watchdog, and the Dask cluster (started here or joined by address) with its failures as one
line. Used by `lib.experiments.sweep`.

Memory. `point_bytes` estimates one worker's peak memory at one grid point searched up to N = n_max
(the fit of bench/bench_point.py, README "What a sweep costs": 381 MiB + 4.6 B N L + 105 B V d).
Before any work `check_grid_memory` refuses, naming the parameter that makes the point large
(`point_culprit`: n_max, n_test, L, V, noise_vocab, d or m) or jobs, a grid whose largest point cannot
fit in the memory available (MemAvailable), or whose worker processes cannot fit together; on a
Dask cluster every worker's `memory_limit` (as its scheduler reports it) must hold the largest
point, else the sweep is refused before a task is submitted (a limit below what a worker holds before
its first point, about WORKER_BYTES, is reported as such). The estimate is the limit mode's on the
CPU; the finite mode counts the N L term four times (measured: 1.35 GiB at L = 64, N = 2^20, twice
the limit mode's 0.68); trained points (TrainSpec) are not counted beyond that.

Dask. backend="dask" runs the grid points as tasks of a Dask cluster (`dask[distributed]`, the `dask`
extra). With scheduler=None it starts a `distributed.LocalCluster` of `jobs` worker processes (one
thread each, on 127.0.0.1, their logs silenced, SIGINT ignored in them: a Ctrl-C reaches the sweep,
which closes them) and closes it at the end; with scheduler="tcp://host:8786" it joins that cluster,
whose workers (`dask worker tcp://host:8786` on each machine) must import the sweep's `lib` (the
same code hash: a worker with other code refuses the task) and see the store's file under the same
(absolute) path, a shared filesystem. Before joining, the address is probed: a Dask server speaks
first (its handshake, an 8-byte length then msgpack naming "pickle-protocol"), so a refused port,
silence or another server's reply (an HTTP server once made Dask try to allocate 3 EiB, or hang) is
a ValueError naming the scheduler within CONNECT_TIMEOUT. Mid-sweep, a lost scheduler or a worker
that died is a `ClusterError` (one line; the points finished so far are in the store and were already
passed on), and so is a cluster that has had no worker for `worker_wait` seconds (default
NO_WORKER_SECONDS; None: however long) while tasks wait or a result is read;
distributed's own log lines are silenced while the sweep runs.

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
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import struct
import threading
import time

from ..core.config import check_memory
from ..core.task import sample_block_bytes

WATCH_SECONDS = 0.1                    # how often a worker checks that its parent is alive
CONNECT_TIMEOUT = "20s"                # how long to try to reach a Dask scheduler given by address
NO_WORKER_SECONDS = 60.0               # a cluster with no worker this long fails the sweep (default)
WAIT_SECONDS = 1.0                     # how often a Dask sweep looks at its cluster while tasks wait
WORKER_BYTES = 380 * 2 ** 20           # one worker before its first point (347-416 MiB, bench/bench_point.py)
QUIET = ("distributed", "tornado", "asyncio")   # loggers silenced while a Dask sweep runs
IGNORE_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)"   # a preload (Dask runs its text)


class ClusterError(RuntimeError):
    """The Dask cluster failed the sweep mid-way (scheduler lost, worker died): one line; the points
    finished before are in the store."""


def point_name(cfg) -> str:
    """How a grid point is named in messages: "V=.. d=.. L=.." (and m)."""
    return f"V={cfg.V} d={cfg.d} L={cfg.L}" + (f" m={cfg.m}" if cfg.m is not None else "")


def _point_terms(cfg, n: int, n_test: int, mode: str) -> dict:
    """The terms of `point_bytes` above the interpreter, each keyed by the parameter (name, value) that
    makes it large: the training and test token ids (4.6 B each, x4 in the finite mode: n_max, n_test,
    or L when L is the larger factor), the tables (105 B per V d, scaled with n_test beyond 8192: V,
    noise_vocab or d, or n_test when n_test / 8192 is the larger factor), an MLP's frozen weights (m),
    and the block of ids `sample_batch` draws at a time (4096 L int64: L)."""
    per_id = 4.6 * (4 if mode == "finite" else 1)
    table = max(("V", cfg.V), ("noise_vocab", cfg.noise_vocab or 0), ("d", cfg.d), key=lambda t: t[1])
    if n_test / 8192 > table[1]:
        table = ("n_test", n_test)

    def ids(name, count):                                          # count L token ids: named by the larger factor
        return ("L", cfg.L) if cfg.L > count else (name, count), per_id * count * cfg.L
    terms = {}
    for key, nbytes in (ids("n_max", n), ids("n_test", n_test),
                        (table, 105.0 * cfg.V_in * cfg.d * max(1.0, n_test / 8192)),
                        (("m", cfg.m), 8.0 * cfg.m * (cfg.d + cfg.V_in) if cfg.m else 0.0),
                        (("L", cfg.L), float(sample_block_bytes(cfg)))):
        terms[key] = terms.get(key, 0.0) + nbytes                  # terms with one culprit add up
    return terms


def point_bytes(cfg, n: int, n_test: int, mode: str = "limit") -> int:
    """About the peak memory (bytes) of one worker process computing `cfg` at N = n with n_test test
    samples: the interpreter with torch and the terms of `_point_terms` (the fit of the docstring)."""
    return int(WORKER_BYTES + sum(_point_terms(cfg, n, n_test, mode).values()))


def point_culprit(cfg, n: int, n_test: int, mode: str = "limit") -> tuple[str, int]:
    """The parameter (name, value) that makes `point_bytes(cfg, n, n_test, mode)` large, the one a
    refusal names: the key of its largest term (see `_point_terms`)."""
    terms = _point_terms(cfg, n, n_test, mode)
    return max(terms, key=terms.get)


def check_grid_memory(names: list, need: list, n_max: int, processes: int = 0, threads: int = 1,
                      culprits: list | None = None) -> None:
    """Before any work: the grid's largest point (`need[i]` bytes, `names[i]`) must fit in the memory
    available, as one of `processes` worker processes started for the sweep (all of them at once), or
    (processes = 0) in this process, which already holds the interpreter, `threads` at a time. The
    refusal names `culprits[i]` (a (name, value) pair, see `point_culprit`; default n_max), or jobs
    when one point fits but the processes together do not."""
    if not need:
        return
    i = max(range(len(need)), key=need.__getitem__)
    name, value = culprits[i] if culprits is not None else ("n_max", n_max)
    where = f"grid point {names[i]} searched up to N = n_max" + (" (lower n_max)" if name == "n_max" else f" = {n_max}")
    if processes:
        check_memory(name, value, need[i], f"one worker process at {where}")
        check_memory("jobs", processes, processes * need[i], f"{processes} worker processes (Python with torch "
                     f"and the grid's largest point, about {need[i] / 2 ** 20:.0f} MiB each)")
    else:
        check_memory(name, value, threads * (need[i] - WORKER_BYTES), f"{threads} threads at {where}" if threads > 1
                     else where)


# ----------------------------------------------------------------------------- Dask

def dask_results(task, items: list, names: list, need: list, jobs: int, scheduler: str | None,
                 culprits: list | None = None, worker_wait: float | None = NO_WORKER_SECONDS):
    """(index, result) pairs, as the tasks `task(*item)` finish on a Dask cluster: a LocalCluster of
    `jobs` single-threaded worker processes started here (closed at the end), or the cluster at
    `scheduler`. `need[i]` (bytes) is checked against every worker's memory_limit before anything is
    submitted (a refusal names `culprits[i]`, see check_grid_memory). Results arrive through the
    futures' done callbacks (one queue: nothing is re-polled per pending task). While tasks wait, a
    cluster that has had no worker for `worker_wait` seconds (all of them died or left, or none joined;
    None: wait however long, as an adaptive cluster whose workers queue may need) is a ClusterError;
    a task's failure first passes on the points that finished beside it. A generator: the cluster
    lives while the caller iterates; failures as the docstring says."""
    try:
        import distributed
    except ImportError:
        raise ValueError("backend 'dask' needs dask[distributed]: pip install 'dask[distributed]' "
                         "(the 'dask' extra of this package)") from None
    levels = _silence()                                           # no chatter, no logged tracebacks
    cluster = client = None
    where = f"scheduler {scheduler}" if scheduler is not None else f"jobs = {jobs} (a local Dask cluster)"
    try:
        if scheduler is None:
            cluster = _local_cluster(distributed, jobs)
            client = distributed.Client(cluster)
        else:
            client = _join(distributed, scheduler)
        _check_worker_memory(client, names, need, where, culprits)
        futures = {client.submit(task, *item, pure=False): k for k, item in enumerate(items)}
        arrived = queue.Queue()                     # each future once, as it finishes (a callback's thread)
        for future in futures:
            future.add_done_callback(arrived.put)
        seen, lonely = set(), None                  # the futures passed on
        while len(seen) < len(items):
            try:
                future = arrived.get(timeout=WAIT_SECONDS)
            except queue.Empty:
                lonely = _lonely(client, lonely, worker_wait, where, len(seen), len(items))
                continue
            if future.key in seen:
                continue
            try:
                result = _result(future, client, worker_wait, where, len(seen), len(items))
            except ClusterError:
                raise
            except BaseException as err:
                # points that finished beside the failing one are stored: pass them on first
                for other in futures:
                    if other.key not in seen and other is not future and other.status == "finished":
                        seen.add(other.key)
                        yield _result(other, client, worker_wait, where, len(seen), len(items))
                if isinstance(err, (ValueError, KeyboardInterrupt, SystemExit)):   # the task's own refusal
                    raise
                raise ClusterError(_failure(err, where, names[futures[future]], len(seen), len(items))) from None
            seen.add(future.key)
            yield result
    finally:
        for closing in (client, cluster):
            if closing is not None:
                try:
                    closing.close()
                except Exception:                                 # a lost scheduler: nothing left to close
                    pass
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _result(future, client, worker_wait, where: str, done: int, total: int):
    """future.result(), read WAIT_SECONDS at a time: a finished task whose data died with its worker is
    recomputed, and with no worker left that is a ClusterError after worker_wait (see _lonely), not a
    wait without end."""
    lonely = None
    while True:
        try:
            return future.result(timeout=WAIT_SECONDS)
        except TimeoutError:
            lonely = _lonely(client, lonely, worker_wait, where, done, total)


def _lonely(client, since, worker_wait, where: str, done: int, total: int):
    """While tasks wait: the time since which the cluster has had no worker (None: it has one), or a
    ClusterError once that is worker_wait seconds (None: wait for workers however long)."""
    try:
        workers = client.scheduler_info(n_workers=-1).get("workers", {})
    except Exception:                                             # the scheduler is gone
        raise ClusterError(f"{where}: the connection to the Dask scheduler was lost; {done} of {total} grid "
                           "points had finished") from None
    now = time.monotonic()
    since = None if workers else (since if since is not None else now)
    if since is not None and worker_wait is not None and now - since >= worker_wait:
        raise ClusterError(f"{where}: the cluster has had no worker for {worker_wait:g} s (they died or left, or "
                           f"none joined; --worker-wait sets how long to wait); {done} of {total} grid points had "
                           "finished")
    return since


def _silence() -> dict:
    """Silence the QUIET loggers and their children that have a level of their own (distributed's
    config sets some); their previous levels, to restore."""
    names = [n for n in list(logging.root.manager.loggerDict) if n.split(".")[0] in QUIET] + list(QUIET)
    levels = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL + 1)
    return levels


def _failure(err: BaseException, where: str, name: str, done: int, total: int) -> str:
    what = str(err).splitlines()[0] if str(err) else type(err).__name__
    if "connection-lost" in what or type(err).__name__ in ("CommClosedError", "FutureCancelledError"):
        what = "the connection to the Dask scheduler was lost"
    elif type(err).__name__ == "KilledWorker":
        what = f"the workers running grid point {name} died (out of memory?)"
    else:
        what = f"grid point {name} failed: {type(err).__name__}: {what}"
    return f"{where}: {what}; {done} of {total} grid points had finished"


def _local_cluster(distributed, jobs: int):
    """A LocalCluster of `jobs` worker processes whose logs are silenced and which ignore SIGINT from
    their start (a preload: Ctrl-C in a terminal signals the whole process group; this process, not
    the workers, handles it, and closes them). No dashboard; the scheduler's own HTTP server (which it
    starts whatever the dashboard setting, at port 8787 unless told otherwise) takes a free local port,
    so a second cluster on the machine makes no "Port 8787 is already in use" warning."""
    n = (os.cpu_count() or 1) if jobs == -1 else jobs
    return distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                    dashboard_address=None, silence_logs=logging.CRITICAL, preload=[IGNORE_SIGINT],
                                    scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"})


def _join(distributed, scheduler: str):
    """A Client of the cluster at `scheduler`, after `probe` found a Dask scheduler there."""
    from dask.utils import parse_timedelta
    timeout = parse_timedelta(CONNECT_TIMEOUT, default="seconds")
    probe(scheduler, timeout)
    try:
        return distributed.Client(scheduler, timeout=CONNECT_TIMEOUT)
    except Exception as err:
        what = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"scheduler {scheduler}: no Dask cluster answers there ({what})") from None


def probe(scheduler: str, timeout: float) -> None:
    """Is a Dask scheduler listening at `scheduler`? A Dask server writes its handshake first (an
    8-byte frame length, then msgpack naming "pickle-protocol"): read it, retrying a refused
    connection (a scheduler starting) until `timeout` seconds; anything else is a ValueError naming
    the scheduler. Addresses of schemes other than tcp are left to distributed's connect."""
    from distributed.comm.addressing import parse_address, parse_host_port
    try:
        scheme, location = parse_address(scheduler)
        host, port = parse_host_port(location)
    except (ValueError, TypeError) as err:
        raise ValueError(f"scheduler {scheduler}: not an address such as tcp://10.0.0.1:8786 ({err})") from None
    if scheme != "tcp":
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic())) as s:
                head = _recv(s, 8, deadline)
                (length,) = struct.unpack("Q", head)
                body = _recv(s, length, deadline) if 0 < length <= 2 ** 20 else b""
            break
        except ConnectionRefusedError:
            if time.monotonic() + 0.2 >= deadline:
                raise ValueError(f"scheduler {scheduler}: no Dask scheduler answers there (connection refused "
                                 f"for {timeout:g} s)") from None
            time.sleep(0.2)
        except (socket.timeout, TimeoutError):
            raise ValueError(f"scheduler {scheduler}: no Dask scheduler answered within {timeout:g} s "
                             "(something listens there but stays silent)") from None
        except (OSError, EOFError) as err:
            raise ValueError(f"scheduler {scheduler}: no Dask scheduler answers there "
                             f"({getattr(err, 'strerror', None) or err})") from None
    if b"pickle-protocol" not in body:
        raise ValueError(f"scheduler {scheduler}: something answers there, but not a Dask scheduler "
                         f"(it began with {head!r})")


def _recv(s: socket.socket, n: int, deadline: float) -> bytes:
    data = b""
    while len(data) < n:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = s.recv(n - len(data))
        if not chunk:
            raise EOFError("the connection was closed before a handshake")
        data += chunk
    return data


def _check_worker_memory(client, names: list, need: list, where: str, culprits: list | None = None) -> None:
    """Every worker's memory_limit (0 or None: none) must hold the grid's largest point; the refusal
    says which parameter to lower (`culprits`, as for check_grid_memory)."""
    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    limits = {addr: w.get("memory_limit") for addr, w in workers.items() if w.get("memory_limit")}
    if not limits or not need:
        return
    addr = min(limits, key=limits.get)
    i = max(range(len(need)), key=need.__getitem__)
    if limits[addr] < WORKER_BYTES:
        raise ValueError(f"{where}: the memory_limit of worker {addr} ({limits[addr] / 2 ** 30:.3g} GiB) is less than "
                         f"a worker holds before its first point (Python with torch, about "
                         f"{WORKER_BYTES / 2 ** 20:.0f} MiB): give the workers more memory")
    if need[i] > limits[addr]:
        name = culprits[i][0] if culprits is not None else "n_max"
        raise ValueError(f"{where}: grid point {names[i]} needs about {need[i] / 2 ** 30:.3g} GiB searched up to "
                         f"N = n_max, more than the memory_limit of worker {addr} ({limits[addr] / 2 ** 30:.3g} "
                         f"GiB): lower {name} or give the workers more memory")


def worker_hash_check(expected: str | None) -> None:
    """On a worker, before a grid point: refuse (ValueError) a task sent by a sweep whose lib has other
    code (its points would be stored under keys this worker's code does not compute)."""
    from .codehash import code_hash
    mine = code_hash("points")
    if expected != mine:
        try:
            from distributed import get_worker
            here = f"worker {get_worker().address}"
        except (ImportError, ValueError):
            here = socket.gethostname()
        raise ValueError(f"code: this worker's lib differs from the sweep's (code hash {mine} on {here}, the "
                         f"sweep's {expected}): run every worker from the sweep's checkout")


class Abandoned(RuntimeError):
    """The sweep that asked for a grid point is gone: its task stops before the next point."""


def dask_guard():
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


# ----------------------------------------------------------------------------- workers die with the parent

_watched: int | None = None                    # the parent pid this process's watchdog watches


def ignore_sigint() -> None:
    """In a worker process the sweep started: ignore SIGINT (a terminal's Ctrl-C reaches the whole
    process group; the sweep answers it in one line and ends its workers). loky's workers run it as
    their initializer, before any import that could be interrupted; every such worker again before a
    point. Not in a thread other than the main one (a Dask worker's tasks: its preload did it)."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:
        pass


def die_with_parent(parent: int) -> None:
    """End this worker process when `parent`, the process that started it, is gone: at once if it
    is gone already (a task can arrive after its sender died), else from a daemon thread (started
    once per process) polling every WATCH_SECONDS. A direct child (loky's workers, the
    LocalCluster's under the default "spawn") watches os.getppid(): a child outliving its parent is
    re-parented, so it changes, and no pid reuse can fool this; a worker started through an
    intermediary (a "forkserver") watches whether the pid still exists. os._exit: no cleanup that
    could block or append; the store's line in flight is one os.write, written whole or not at all.
    The worker also ignores SIGINT from then on: Ctrl-C in a terminal signals the whole process group,
    and the sweep, not each worker, answers it (in one line; loky's workers printed their tracebacks)."""
    global _watched
    direct = os.getppid() == parent
    if not _alive(parent, direct):
        os._exit(1)
    if _watched == parent:
        return
    _watched = parent
    ignore_sigint()                            # Ctrl-C is the sweep's to handle: no traceback from here

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
