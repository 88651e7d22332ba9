"""The record format both stores share: JSON lines of {"key", "result", "sha256"}, appended whole.

`lib.experiments.store.Store` (the three steps' and trained points, chapters 4-7 and 10) and
`lib.factual.FactStore` (chapter 11's trained models) keep different keys and results in the same
format; this module is that format and nothing else: the canonical JSON of a record and its checksum
(`canonical`, `checksum`, `record_text`), one crash-safe append (`append_line`: one `os.write` on an
O_APPEND descriptor under `fcntl.flock`, then `os.fsync`), the reading that reports and skips every
invalid line (`read_records`), and the checks of a store's path and of a shipped, read-only store
(`check_store_path`, `read_shipped`); `check_line` checks one line, `BOOK_DATA` is where the shipped
stores live. Why JSON lines, and the crash cases, are told in
`lib.experiments.store`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
import warnings

from ..core.paths import data_dir

BOOK_DATA = data_dir()                            # shipped stores: book/data, or its copy installed with lib


def canonical(obj) -> str:
    """The canonical JSON text of `obj` (sorted keys, no spaces). Infinity is allowed (gamma_W of the
    limit mode is +inf); a NaN accuracy is refused by `Store.put`, never stored."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def checksum(key: dict, result: dict) -> str:
    """SHA-256 (hex) of the canonical JSON of one record's key and result."""
    return hashlib.sha256(canonical({"key": key, "result": result}).encode()).hexdigest()


def record_text(key: dict, result: dict) -> str:
    """The full line (with its newline) of one record: its key, its result and their checksum."""
    return canonical({"key": key, "result": result, "sha256": checksum(key, result)}) + "\n"


def append_line(path: str, line: str) -> None:
    """Append one complete line: one os.write on an O_APPEND fd, under flock, then fsync. After a
    line cut by a killed writer the record starts on a fresh line (that line stays one bad line)."""
    data = line.encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":   # a line cut by a killed writer: never join it
                data = b"\n" + data
            written = os.write(fd, data)
            if written != len(data):       # never seen for a regular file; refuse to leave half a line
                raise OSError(f"short write to {path}: {written} of {len(data)} bytes")
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def read_records(path: str, shape=None) -> tuple[list[tuple[dict, dict]], list[int]]:
    """The valid (key, result) records of a store file, in file order, and the 1-based numbers of
    the lines rejected: invalid JSON, not a {"key", "result", "sha256"} record, a checksum mismatch,
    a line without its newline (cut by a kill), or `shape(key, result)` False. Each rejected line is
    reported with `warnings.warn` naming the file and line (it is never trusted; its point is computed
    again). A file whose last line was cut is given its missing newline so the next record starts on
    a fresh line. Used by `Store` and by `lib.factual.FactStore`."""
    with open(path, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    complete = len(lines) - 1                          # the part after the last newline is unfinished
    records, bad = [], []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        why = check_line(line, shape) if i <= complete else "truncated (no newline)"
        if isinstance(why, str):
            bad.append(i)
            warnings.warn(f"cache {path}, line {i}: {why}; ignoring it, the point will be recomputed",
                          RuntimeWarning, stacklevel=3)
            continue
        records.append(why)
    if raw and not raw.endswith(b"\n"):               # start the next record on a fresh line
        append_line(path, "\n")
    return records, bad


def check_line(line: bytes, shape):
    """(key, result) of a valid record, else a string saying what is wrong."""
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError) as err:
        return f"not valid JSON ({err.__class__.__name__})"
    if not isinstance(rec, dict) or set(rec) != {"key", "result", "sha256"}:
        return "not a record (keys key, result, sha256 expected)"
    key, result = rec["key"], rec["result"]
    if not isinstance(key, dict) or not isinstance(result, dict):
        return "not a record (key and result must be objects)"
    try:
        ok = checksum(key, result) == rec["sha256"]
    except ValueError:
        ok = False
    if not ok:
        return "checksum mismatch"
    if shape is not None and not shape(key, result):
        return "record of the wrong shape"
    return key, result


def check_store_path(path) -> str | None:
    """A store's file path (None: memory only), made absolute: a path of a file in an existing folder,
    else a ValueError naming the cache. Used by `Store` and `lib.factual.FactStore`."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"cache must be a file path or None, got {path!r}")
    path = os.fspath(path)
    if not path.strip():
        raise ValueError(f"cache must be a file path or None, got an empty path {path!r}")
    path = os.path.abspath(path)           # absolute: a worker in another folder writes the same file
    folder = os.path.dirname(path)
    if os.path.isdir(path) or not os.path.isdir(folder):
        raise ValueError(f"cache must be a file in an existing folder, got {path!r}")
    try:                                   # can we write? (found now, not after the first computed point)
        if os.path.exists(path):
            with open(path, "a"):
                pass
        else:                              # probe the folder with a file of our own: creating and removing
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)   # the cache itself would race with
            os.close(fd)                   # a concurrent process that starts writing it (lost records)
            os.remove(probe)
    except OSError as err:
        raise ValueError(f"cache {path!r} cannot be written: {err.strerror or err}") from None
    return path


def read_shipped(read_also, path: str | None, shape) -> list[tuple[dict, dict]]:
    """The records of a read-only store shipped with the book (`read_also`; None: none), for `Store` and
    `lib.factual.FactStore`: a file that must exist, differ from the writable store `path`, and be whole
    (every line valid and of the record `shape`); it is only read, so it need not be writable. Anything
    else raises a ValueError naming read_also."""
    if read_also is None:
        return []
    if not isinstance(read_also, (str, os.PathLike)):
        raise ValueError(f"read_also must be a file path or None, got {read_also!r}")
    read_also = os.fspath(read_also)
    if not os.path.isfile(read_also):
        raise ValueError(f"read_also: no store at {read_also!r}")
    if path is not None and os.path.abspath(read_also) == os.path.abspath(path):
        raise ValueError(f"read_also must be another file than path, got {read_also!r} twice")
    records, bad = read_records(read_also, shape)
    if bad:
        raise ValueError(f"read_also: {read_also!r} has {len(bad)} invalid lines (first: line {bad[0]}); "
                         "a shipped store must be whole")
    return records
