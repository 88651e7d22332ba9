"""Fused CPU loops for the count routes, in C (`lib/native.c`), compiled on first use and optional.

Torch primitives make several passes over a batch's token ids or a chunk's logits where one loop
would do: the limit mode's three passes are bincounts, bags and lookups (9.5x one bincount, measured
in `bench/bench_three_steps.py`), and the logit-table step spends as long on its softmax rows as on
its forward bag. The loops here do each pass once, and `lib.counts` uses them when they load:

  pair_count   the limit mode's count table (pass 1)
  beta         the limit mode's beta_n and its token-weighted sum (pass 2)
  attend       the limit mode's hard attention, argmax with the first maximum winning (pass 3)
  rows         the logit-table step's softmax rows: logits, error, loss, hits and two dot products

The C file is compiled with the system's C compiler (`cc`, or $CC) into a cache folder
($RECALL_NATIVE_CACHE, else ~/.cache/recall-native), keyed by the source, the flags and the CPU;
`available()` says whether it loaded. Set RECALL_NATIVE=0 to turn it off (the torch route is then
used everywhere, as it is on GPUs, without a compiler, or for tokens that are not int32). The tests
bind each loop to its torch route (tests/test_native.py).

Threads: a call splits its samples into `torch.get_num_threads()` ranges, run by OpenMP. The library
links libgomp.so.1, which resolves to the copy torch has already loaded, so the loops run on torch's
own thread pool (a second pool would compete with torch's threads, which spin for a while after each
of torch's parallel regions). What a range adds up goes to its own accumulator, summed in a fixed
order, so results depend on the thread count as torch's own reductions do, and on nothing else."""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("native.c")
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC")

_state: dict = {}


def _cpu_key() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return platform.machine() + flags


def _build(cc: str) -> Path:
    """Compile native.c into the cache (once per source, flags and CPU) and return the library's path.
    Compiling and linking are two steps, so that -ffast-math does not link crtfastmath.o, which would
    flush subnormals for the whole process."""
    src = SOURCE.read_bytes()
    key = hashlib.sha256(src + " ".join((cc,) + FLAGS).encode() + _cpu_key().encode()).hexdigest()[:16]
    cache = Path(os.environ.get("RECALL_NATIVE_CACHE") or Path.home() / ".cache" / "recall-native")
    lib_path = cache / f"native-{key}.so"
    if lib_path.exists():
        return lib_path
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        obj, so = Path(tmp) / "native.o", Path(tmp) / "native.so"
        subprocess.run([cc, *FLAGS, "-c", str(SOURCE), "-o", str(obj)], check=True, capture_output=True)
        subprocess.run([cc, "-shared", "-fopenmp", str(obj), "-o", str(so), "-lm"], check=True, capture_output=True)
        os.replace(so, lib_path)                                       # atomic: concurrent builds agree
    return lib_path


def _load():
    if "lib" in _state:
        return _state["lib"]
    lib = None
    if os.environ.get("RECALL_NATIVE", "1") != "0":
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if cc:
            try:
                lib = ctypes.CDLL(str(_build(cc)))
            except (OSError, subprocess.CalledProcessError) as err:
                _state["error"] = err
                lib = None
    if lib is not None:
        i64, ptr, f64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
        lib.pair_count.argtypes = [ptr, ptr, i64, i64, i64, i64, i64, ptr]
        for suffix, real in (("f32", ctypes.c_float), ("f64", ctypes.c_double)):
            getattr(lib, "attend_" + suffix).argtypes = [ptr, ptr, ptr, i64, i64, i64, i64, i64, ptr, real, real, i64, ptr]
            getattr(lib, "beta_" + suffix).argtypes = [ptr, ptr, i64, i64, i64, i64, ptr, ptr, f64, ptr, ptr]
            getattr(lib, "rows_" + suffix).argtypes = [i64, i64, i64, ptr, ptr, i64, ptr, ptr, ptr, real, real, ptr,
                                                       i64, ptr, i64, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr]
            getattr(lib, "forward_bag_" + suffix).argtypes = [ptr, ptr, i64, i64, i64, i64, ptr, i64, ptr]
            getattr(lib, "reverse_bag_" + suffix).argtypes = [ptr, ptr, ptr, i64, i64, i64, i64, i64, ptr, i64,
                                                              ptr, ptr, ptr]
    _state["lib"] = lib
    return lib


def available() -> bool:
    """Whether the C loops compiled and loaded (False with RECALL_NATIVE=0 or without a compiler)."""
    return _load() is not None


@contextmanager
def disabled():
    """Within this block the routes take their torch primitives (the tests compare the two)."""
    before = _state.get("off", False)
    _state["off"] = True
    try:
        yield
    finally:
        _state["off"] = before


def usable(tokens: torch.Tensor, *tensors: torch.Tensor) -> bool:
    """Whether the loops apply to a batch's token ids (int32, on the CPU, fewer than 2^31 of them)
    and to the other tensors (on the CPU), and are not turned off."""
    return (not _state.get("off", False) and tokens.dtype == torch.int32 and tokens.numel() < 2 ** 31
            and all(t.device.type == "cpu" for t in (tokens, *tensors)) and available())


def _suffix(dtype: torch.dtype) -> str:
    if dtype == torch.float32:
        return "f32"
    if dtype == torch.float64:
        return "f64"
    raise TypeError(f"the native loops take float32 or float64 tensors, not {dtype}")


def _ptr(t: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr())


def _contiguous(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.to(dtype).contiguous()


def _parts(n: int) -> int:
    return max(1, min(torch.get_num_threads(), n))


def pair_count(tokens: torch.Tensor, informative: torch.Tensor, V: int, V_in: int) -> torch.Tensor:
    """(V, V_in) int64: entry (i, j) counts the positions holding token j in samples whose
    informative token is i (tokens (N, L) int32 with N L < 2^31, informative (N,))."""
    lib = _load()
    tok, inf = tokens.contiguous(), _contiguous(informative, torch.long)
    N, L = tok.shape
    parts = _parts(N)
    out = torch.zeros(parts, V, V_in, dtype=torch.int32)              # one table per thread
    lib.pair_count(_ptr(tok), _ptr(inf), N, parts, L, V, V_in, _ptr(out))
    return out.sum(0, dtype=torch.long)


def beta_counts(tokens: torch.Tensor, informative: torch.Tensor, D: torch.Tensor, s_w: torch.Tensor,
                K: int) -> tuple[torch.Tensor, float]:
    """((V_in,) sum_n beta_n c_n, sum_n beta_n) in float64, with beta_n = (sum_t D[x*_n, x_t] + s_w[x*_n]) / K
    (D (V, V_in), s_w (V,)): pass 2 of the limit mode."""
    lib = _load()
    tok, inf = tokens.contiguous(), _contiguous(informative, torch.long)
    D, s_w = D.contiguous(), _contiguous(s_w, D.dtype)
    fn = getattr(lib, "beta_" + _suffix(D.dtype))
    N, L = tok.shape
    parts = _parts(N)
    counts = torch.zeros(parts, D.shape[1], dtype=torch.float64)      # one accumulator per thread
    sums = torch.zeros(parts, dtype=torch.float64)
    fn(_ptr(tok), _ptr(inf), N, parts, L, D.shape[1], _ptr(D), _ptr(s_w), 1.0 / K, _ptr(counts), _ptr(sums))
    return counts.sum(0), float(sums.sum())


def attend(tokens: torch.Tensor, pos: torch.Tensor, informative: torch.Tensor, S: torch.Tensor, bonus: float,
           s_eos: float | None, V: int) -> torch.Tensor:
    """(N,) int64 ids x*_n + g_n V with g_n what hard attention reads (the attended token, V_in for
    the trigger's position, V_in + 1 for EOS; argmax's first maximum wins): pass 3 of the limit mode.
    The scores S (V_in,), bonus and s_eos must be finite."""
    lib = _load()
    tok, p, inf = tokens.contiguous(), _contiguous(pos, torch.long), _contiguous(informative, torch.long)
    S = S.contiguous()
    fn = getattr(lib, "attend_" + _suffix(S.dtype))
    N, L = tok.shape
    ids = torch.empty(N, dtype=torch.long)
    eos = 0.0 if s_eos is None else float(s_eos)
    fn(_ptr(tok), _ptr(p), _ptr(inf), N, _parts(N), L, V, S.numel(), _ptr(S), float(bonus), eos,
       int(s_eos is not None), _ptr(ids))
    return ids


def softmax_rows(xi_rest: torch.Tensor, table: torch.Tensor, informative: torch.Tensor, a_l: torch.Tensor,
                 xi_z: torch.Tensor, split: bool, tiv: float, labels: torch.Tensor, want_dots: bool,
                 err: torch.Tensor, r_rest: torch.Tensor, r_l: torch.Tensor, a_eos: torch.Tensor | None = None,
                 xi_q: torch.Tensor | None = None, sums: torch.Tensor | None = None,
                 r_q: torch.Tensor | None = None) -> tuple[float, int]:
    """The softmax rows of the logit-table step, for a chunk of B samples (one float dtype; rows of
    `table` and `err` may be padded, see `padded`; the rest contiguous): with
    xi_n = xi_rest_n + split a_n T[x*_n] + tiv a_n xi_z, writes err_n = softmax(xi_n) - e_{y_n} into err
    (B, V) and, if want_dots, err_n . xi_rest_n into r_rest and err_n . (T[x*_n] + tiv xi_z) into r_l (B,).
    With `sums` (2, V), adds sum_n tiv a_n err_n to sums[0] (if tiv) and sum_n a_eos[n] err_n to sums[1]
    (if a_eos is given), and with xi_q writes err_n . xi_q into r_q. Returns (sum of the losses, number
    of rows whose first maximum is the label)."""
    lib = _load()
    fn = getattr(lib, "rows_" + _suffix(xi_rest.dtype))
    B, V = xi_rest.shape
    parts = _parts(B)
    inf, lab = _contiguous(informative, torch.long), _contiguous(labels, torch.long)
    loss = torch.empty(B, dtype=torch.float64)
    hit = torch.empty(B, dtype=torch.long)
    w_trig = a_l if sums is not None and tiv else None
    w_eos = a_eos.contiguous() if sums is not None and a_eos is not None else None
    acc = torch.zeros(parts, 2, V, dtype=torch.float64) if sums is not None else None   # 10^6 rows: float64
    null = ctypes.c_void_p(None)
    opt = lambda t: null if t is None else _ptr(t)                     # noqa: E731
    fn(B, parts, V, _ptr(xi_rest), _ptr(table), table.stride(0), _ptr(inf), _ptr(a_l), _ptr(xi_z), float(split),
       float(tiv), _ptr(lab), int(want_dots), _ptr(err), err.stride(0), _ptr(r_rest), _ptr(r_l), _ptr(loss), _ptr(hit),
       opt(w_trig), opt(w_eos), opt(acc), opt(xi_q), opt(r_q))
    if sums is not None:
        sums += acc.sum(0).to(sums.dtype)
    return float(loss.sum()), int(hit.sum())


def forward_bag(tokens: torch.Tensor, a: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out (B, V) = sum_t a[n, t] table[tokens[n, t]]: `embedding_bag(tokens, table, mode="sum",
    per_sample_weights=a)`, column block by column block (tokens (B, L) int32, a (B, L), table (V_in, V),
    all contiguous and of one float dtype)."""
    lib = _load()
    fn = getattr(lib, "forward_bag_" + _suffix(table.dtype))
    B, L = tokens.shape
    fn(_ptr(tokens), _ptr(a), B, _parts(B), L, table.shape[1], _ptr(table), table.stride(0), _ptr(out))
    return out


def reverse_bag(order: torch.Tensor, offsets: torch.Tensor, a: torch.Tensor, err: torch.Tensor, P: torch.Tensor,
                work: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """P (V_in, V) += the reverse bag of a chunk: row j gains sum over the chunk's positions n L + t
    holding token j of a[n, t] err[n], from the positions sorted by token (`order` (B L,) int32) and
    each token's first place in it (`offsets` (V_in,) int32) of a `lib.tokens.TokenIndex`. `work`:
    int32 and float buffers of B L entries (`TokenIndex.work_buffers`). All contiguous, on the CPU."""
    lib = _load()
    fn = getattr(lib, "reverse_bag_" + _suffix(err.dtype))
    B, L = a.shape
    fn(_ptr(order), _ptr(offsets), _ptr(a), B, _parts(B), L, err.shape[1], P.shape[0], _ptr(err), err.stride(0),
       _ptr(P), _ptr(work[0]), _ptr(work[1]))
    return P


def padded(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """An empty (rows, cols) view whose rows lie 64 bytes further apart than cols entries: with V a
    power of two, rows V entries apart map onto few cache sets, and a column block read down them
    (forward_bag's table, reverse_bag's err) evicts itself (measured: 1.8 s against 0.85 s per 10^6
    samples for the forward bag at V = 1024, L = 64)."""
    pad = 64 // torch.tensor([], dtype=dtype).element_size()
    return torch.empty(rows, cols + pad, dtype=dtype)[:, :cols]
