"""The crash-safe store of evaluated points behind `lib.experiments.capacity.nstar` and `lib.experiments.sweep`.

One record = one evaluated point (configuration, N) -> `RunResult`. That is the cache's unit: a
killed N* search resumes at the N it had reached, and searches for different thresholds share
every point (the threshold is not part of the key).

Format: JSON lines, append-only. Each line is

    {"key": {...}, "result": {...}, "sha256": "<hex>"}

where `key` holds every field of the configuration except the device (it does not change the
numbers), N, the evaluation settings (seeds, seed, n_test, mode), every step size, and `code`, the
hash of the lib source the numbers depend on (`code_hash`: computed from the modules' syntax trees, so a
changed formula gives new keys and stale points are never read back); `sha256` is the SHA-256 of the canonical JSON (sorted keys, no spaces,
infinity allowed, NaN accuracies refused) of {"key", "result"}. Why JSON lines and not SQLite: records are written once and never
updated, a reader needs nothing but a text editor or `json`, the file diffs and concatenates, and
the two crash cases are easy to state: a kill mid-write leaves at most one truncated last line,
which the checksum (or the JSON parser) rejects. SQLite would bring transactions we do not need and
a binary file, and its locking is unreliable on the network filesystems a cluster may share.

Durability and concurrency: each record is ONE `os.write` of a complete line on a file descriptor
opened with O_APPEND, under an exclusive `fcntl.flock`, followed by `os.fsync`. O_APPEND makes the
kernel place every write at the end of the file and the lock keeps two processes' records from
interleaving (on Linux a single write to a regular file is already atomic in practice; the lock
makes this hold on any POSIX filesystem that honours flock). Loading checks every line: invalid
JSON, a wrong checksum, a record of the wrong shape or a line without its newline is reported with
`warnings.warn` naming the file and line number and ignored, so that point is computed again and
appended; it is never trusted. A file whose last line was cut is first given its missing newline so
the next record starts on a fresh line.

Concurrent writers share work: `Store.claim(prefix, N)` holds an exclusive flock on a file of
`<cache>.claims/` named by the point's key (one small file per point computed; the folder can be
deleted whenever no sweep runs, and `compact` does), and `Store.refresh()` reads the lines other
processes appended since this store last read the file (under a shared flock, so never half a
line). `lib.experiments.capacity.nstar` computes a point missing from its store as: claim it,
refresh, compute only if it is still missing, append, release. A second process asking for the
same point waits on the claim and then reads the point; a claim dies with the process holding it
(the kernel releases a dead process's flocks), so a killed computation never blocks anyone and the
point is simply computed by the next claimant.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import warnings
from dataclasses import asdict, fields

from ..core.config import TaskConfig, check_choice, check_int
from .codehash import code_hash
from .records import append_line, canonical, check_line, check_store_path, read_records, read_shipped, record_text
from .experiment import RunResult
from ..core.seed import get_draw
from ..core.steps import MODES, StepSizes

RESULT_FIELDS = tuple(f.name for f in fields(RunResult))
CLAIMS = ".claims"                     # <cache>.claims/: one lock file per point being (or once) computed


def point_prefix(cfg: TaskConfig, *, seeds: int, seed: int, mode: str, n_test: int,
                 step_sizes: StepSizes, training=None) -> dict:
    """Everything that fixes a point's numbers except N (and except the device). A training recipe
    (`lib.learning.trainer.TrainSpec`, chapter 10) adds a "training" entry; without one the key is unchanged,
    so three-step points keep their keys and trained points never share one with them."""
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    if not isinstance(step_sizes, StepSizes):
        raise ValueError(f"step_sizes must be a StepSizes, got {type(step_sizes).__name__}")
    check_choice("mode", mode, MODES)
    prefix = {"config": {k: v for k, v in asdict(cfg).items() if k != "device"},
              "seeds": check_int("seeds", seeds, 1), "seed": check_int("seed", seed, 0),
              "mode": mode, "n_test": check_int("n_test", n_test, 1),
              "step_sizes": asdict(step_sizes), "code": code_hash("points")}
    if training is not None:
        from ..learning.trainer import check_training     # trainer sits above the store in the module order
        check_training(training, mode)
        prefix["training"] = asdict(training)
    if get_draw():                      # another draw (lib.core.seed.set_draw): other numbers, other key
        prefix["draw"] = get_draw()
    return prefix


def record_line(prefix: dict, result: RunResult) -> str:
    """The full line (with its newline) that stores `result` under `prefix` + N."""
    return record_text({**prefix, "N": result.N}, result.as_dict())


def compact(path: str) -> tuple[int, int]:
    """Rewrite the store at `path` with its valid records only (one per key); (kept, dropped).

    The append-only file keeps rejected lines, and each load reports them again; once their points
    have been recomputed, `compact` drops them. It writes a new file beside the old one, fsyncs it
    and renames it over the old (atomic), so a crash leaves either the old or the new file. Run it
    when no sweep is writing to the same file.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        store = Store(path)
    if store.path is None or not os.path.exists(store.path):
        raise ValueError(f"cache {path!r} does not exist")
    tmp = store.path + ".compact.tmp"
    with open(tmp, "w") as f:
        for prefix, points in store.data.items():
            for N in sorted(points):
                f.write(record_line(json.loads(prefix), _result(points[N])))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, store.path)
    claims = store.path + CLAIMS
    if os.path.isdir(claims):                         # no sweep runs: no claim is held
        for name in os.listdir(claims):
            os.remove(os.path.join(claims, name))
        os.rmdir(claims)
    return len(store), len(store.bad_lines)


def _point_shape(key: dict, result: dict) -> bool:
    """An evaluated point: a RunResult at the key's N."""
    return set(result) == set(RESULT_FIELDS) and isinstance(key.get("N"), int) and key["N"] == result["N"]


def _result(d: dict) -> RunResult:
    return RunResult(**d)


class Store:
    """The points of one cache file (or of memory only when `path` is None), and optionally those of a
    second, read-only one (`read_also`: a store shipped with the book; its points are found by `get` and
    carried by `subset`, but new points go to `path` only, and `refresh` reads `path` only).

    `get(prefix, N)` -> RunResult or None; `put(prefix, result)` records and appends at once.
    `subset(prefix)` is a small picklable Store holding one configuration's points, for a worker.
    `claim(prefix, N)` and `refresh()` let concurrent processes compute each point once (module docstring).
    """

    def __init__(self, path: str | None = None, *, read_also: str | None = None, _data: dict | None = None,
                 _offset: int = 0, _only: str | None = None):
        self.path = path if _data is not None else check_store_path(path)   # a subset's path was checked
        self.data: dict[str, dict[int, dict]] = {}       # canonical(prefix) -> {N: result dict}
        self.bad_lines: list[int] = []                    # 1-based line numbers rejected at load
        self.offset = _offset                             # bytes of the file read so far (whole lines)
        self.only = _only                                 # a subset's one prefix: refresh keeps only it
        self.guard = None                                 # called before each claim: raises to stop the work
        if _data is not None:
            self.data = _data
            return
        for key, result in read_shipped(read_also, self.path, _point_shape):
            self._add(key, result)
        if self.path is not None and os.path.exists(self.path):
            self._load()

    def _load(self) -> None:
        with open(self.path, "rb") as f:                  # the size between two appends: a line boundary
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)        # (or a killed writer's cut line, read as bad)
            try:
                size = os.fstat(f.fileno()).st_size
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        records, self.bad_lines = read_records(self.path, _point_shape)
        self.offset = size             # refresh() reads on from here (a record read twice is kept once)
        for key, result in records:
            self._add(key, result)

    def _add(self, key: dict, result: dict) -> None:
        prefix = canonical({k: v for k, v in key.items() if k != "N"})
        if self.only is None or prefix == self.only:
            self.data.setdefault(prefix, {}).setdefault(key["N"], result)

    def refresh(self) -> int:
        """Read the whole lines appended to the file since this store last read it (by other processes,
        or by this one); the number of valid records read. A line that fails its checks is skipped
        here (the next full load reports it). Under a shared flock: never half of another's line."""
        if self.path is None or not os.path.exists(self.path):
            return 0
        with open(self.path, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
            try:
                f.seek(self.offset)
                raw = f.read()
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        end = raw.rfind(b"\n") + 1                        # an unfinished tail waits for the next refresh
        self.offset += end
        n = 0
        for line in raw[:end].split(b"\n"):
            if line.strip() and not isinstance(rec := check_line(line, _point_shape), str):
                self._add(*rec)
                n += 1
        return n

    @contextlib.contextmanager
    def claim(self, prefix: dict, N: int):
        """Hold the point (prefix, N) for this process: an exclusive flock on its file in
        `<cache>.claims/`, waiting while another process holds it. Memory-only stores, a folder where
        the claims cannot be made (read-only) and a filesystem without locks claim nothing. The
        store's `guard` (if set) is called first: it raises when the work is no longer wanted."""
        if self.guard is not None:
            self.guard()
        if self.path is None:
            yield
            return
        folder = self.path + CLAIMS
        name = hashlib.sha256(canonical({**prefix, "N": N}).encode()).hexdigest()[:40]
        try:
            os.makedirs(folder, exist_ok=True)
            fd = os.open(os.path.join(folder, name), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            yield
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:                               # a filesystem without locks: no claim, no harm
                pass                                      # (the point may then be computed twice)
            yield
        finally:
            os.close(fd)                                  # releases the lock

    def get(self, prefix: dict, N: int) -> RunResult | None:
        hit = self.data.get(canonical(prefix), {}).get(N)
        return _result(hit) if hit is not None else None

    def put(self, prefix: dict, result: RunResult) -> None:
        for k in ("acc", "att_acc", "oracle_acc", "acc_std"):
            if not math.isfinite(getattr(result, k)):
                raise ValueError(f"{k} of the point N={result.N} is not finite ({getattr(result, k)}); not stored")
        line = record_line(prefix, result)
        self.data.setdefault(canonical(prefix), {})[result.N] = result.as_dict()
        if self.path is not None:
            append_line(self.path, line)

    def subset(self, prefix: dict) -> "Store":
        """The same file, holding only the points of `prefix` (cheap to send to a worker process)."""
        p = canonical(prefix)
        return Store(self.path, _data={p: dict(self.data.get(p, {}))}, _offset=self.offset, _only=p)

    def __len__(self) -> int:
        return sum(len(v) for v in self.data.values())
