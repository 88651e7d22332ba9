"""Fused CPU loops for the count routes, in C (`lib/native.c`), compiled on first use and optional.

Torch primitives make several passes over a batch's token ids or a chunk's logits where one loop
would do: the limit mode's three passes are bincounts, bags and lookups (9x one bincount, measured
in `bench/bench_three_steps.py`), and the logit-table step spends as long on its softmax rows and
small (B, L) operations as on its bags. The loops here make each pass once, and `lib.counts` uses them
when they load:

  pair_count    the limit mode's count table (pass 1)
  beta_counts   the limit mode's beta_n and its token-weighted sum (pass 2)
  attend        the limit mode's hard attention, argmax with the first maximum winning (pass 3)
  attention     the logit-table step's attention weights (softmax over the keys)
  forward_bag   its logits, sum_t a_t T[x_t], a block of columns at a time (the block stays in cache)
  softmax_rows  its error rows softmax(xi) - e_y with the loss, the hits and every per-sample sum
                of both gradients (into `RowSums`, one accumulator per thread)
  reverse_bag   its reverse bag P_j = sum over positions holding j of a err_n, through the batch's
                `lib.tokens.TokenIndex`, a block of columns at a time

The C file is compiled with the system's C compiler (gcc, else cc, or $CC) into a cache folder
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

from .config import check_int

SOURCE = Path(__file__).with_name("native.c")
PAIR_TABLE_ENTRIES = 2 ** 26   # pair_count's per-thread int32 tables, all threads together (256 MiB)
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
        subprocess.run([cc, *FLAGS, "-c", str(SOURCE), "-o", str(obj)], check=True, capture_output=True, timeout=300)
        subprocess.run([cc, "-shared", "-fopenmp", str(obj), "-o", str(so), "-lm"], check=True, capture_output=True,
                       timeout=300)
        os.replace(so, lib_path)                                       # atomic: concurrent builds agree
    return lib_path


def _load():
    if "lib" in _state:
        return _state["lib"]
    lib = None
    if os.environ.get("RECALL_NATIVE", "1") != "0":
        cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")   # gcc: torch's libgomp
        if cc:
            try:
                lib = ctypes.CDLL(str(_build(cc)))
            except Exception as err:                                  # no home, a failing compiler, ...: off
                _state["error"] = err
                lib = None
    if lib is not None:
        i64, ptr, f64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
        lib.pair_count.argtypes = [ptr, ptr, i64, i64, i64, i64, i64, ptr]
        for suffix, real in (("f32", ctypes.c_float), ("f64", ctypes.c_double)):
            getattr(lib, "attend_" + suffix).argtypes = [ptr, ptr, ptr, i64, i64, i64, i64, i64, ptr, real, real, i64, ptr]
            getattr(lib, "beta_" + suffix).argtypes = [ptr, ptr, i64, i64, i64, i64, ptr, ptr, f64, ptr, ptr]
            getattr(lib, "rows_" + suffix).argtypes = [i64, i64, i64, ptr, ptr, i64, ptr, ptr, ptr, real, real, ptr,
                                                       ptr, ptr, ptr, i64, ptr, i64, ptr, ptr, ptr, i64, ptr, i64,
                                                       i64, ptr, ptr]
            getattr(lib, "attention_" + suffix).argtypes = [ptr, ptr, i64, i64, i64, ptr, real, real, i64, i64, ptr,
                                                            ptr, ptr, ptr]
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
    return (not _state.get("off", False) and tokens.dtype == torch.int32 and tokens.is_contiguous()
            and tokens.numel() < 2 ** 31 and all(t.device.type == "cpu" for t in (tokens, *tensors)) and available())


def ids_in_range(batch, V: int, V_in: int, L: int, tokens: bool = True) -> bool:
    """Whether the batch's ids lie where the loops index with them (they read raw memory: an id out
    of range must take the torch route, which reports it): positions in [0, L), labels and informative
    tokens in [0, V) and, with `tokens`, every token in [0, V_in) (one pass over the ids, which
    `lib.task.check_batch` already made for batches that came through the public functions)."""
    def inside(t: torch.Tensor, top: int) -> bool:
        lo, hi = torch.aminmax(t)
        return int(lo) >= 0 and int(hi) < top
    return (inside(batch.pos, L) and inside(batch.labels, V) and (not tokens or inside(batch.tokens, V_in))
            and inside(batch.informative, V))                          # the positions first: they index the tokens


def _suffix(dtype: torch.dtype) -> str:
    if dtype == torch.float32:
        return "f32"
    if dtype == torch.float64:
        return "f64"
    raise TypeError(f"the native loops take float32 or float64 tensors, not {dtype}")


def _ptr(t: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr())


def _check_ids(name: str, ids: torch.Tensor, ndim: int) -> None:
    """The loops read ids as raw int32 memory: anything else would be read wrongly, so refuse it."""
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int32 or ids.dim() != ndim or not ids.is_contiguous() \
            or ids.device.type != "cpu":
        raise ValueError(f"{name} must be a contiguous int32 CPU tensor with {ndim} dimension(s), got "
                         f"{getattr(ids, 'dtype', type(ids))} {tuple(getattr(ids, 'shape', ()))}")


def _check_range(name: str, ids, top: int, shape=None) -> None:
    """Ids the loops index with must lie in [0, top) (and have `shape`): else a ValueError naming them."""
    if not isinstance(ids, torch.Tensor) or ids.dtype.is_floating_point or ids.dtype.is_complex \
            or ids.dtype == torch.bool or (shape is not None and tuple(ids.shape) != tuple(shape)):
        raise ValueError(f"{name} must be an integer tensor" + ("" if shape is None else f" of shape {tuple(shape)}")
                         + f", got {getattr(ids, 'dtype', type(ids))} {tuple(getattr(ids, 'shape', ()))}")
    if ids.numel():
        lo, hi = torch.aminmax(ids)
        if int(lo) < 0 or int(hi) >= top:
            raise ValueError(f"{name} must lie in [0, {top}), got values in [{int(lo)}, {int(hi)}]")


def _contiguous(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.to(dtype).contiguous()


def _parts(n: int) -> int:
    return max(1, min(torch.get_num_threads(), n))


def pair_count(tokens: torch.Tensor, informative: torch.Tensor, V: int, V_in: int, check: bool = True) -> torch.Tensor:
    """(V, V_in) int64: entry (i, j) counts the positions holding token j in samples whose
    informative token is i (tokens (N, L) int32 with N L < 2^31 in [0, V_in), informative (N,) in
    [0, V); checked unless `check` is False, for callers that checked the batch already)."""
    _check_ids("tokens", tokens, 2)
    if check:
        check_int("V", V, 1), check_int("V_in", V_in, V)
        _check_range("tokens", tokens, V_in)
        _check_range("informative", informative, V, (tokens.shape[0],))
    lib = _load()
    tok, inf = tokens, _contiguous(informative, torch.long)
    N, L = tok.shape
    parts = max(1, min(_parts(N), PAIR_TABLE_ENTRIES // (V * V_in)))  # one table per thread, 256 MiB in all
    out = torch.zeros(parts, V, V_in, dtype=torch.int32)
    lib.pair_count(_ptr(tok), _ptr(inf), N, parts, L, V, V_in, _ptr(out))
    return out.sum(0, dtype=torch.long)


def beta_counts(tokens: torch.Tensor, informative: torch.Tensor, D: torch.Tensor, s_w: torch.Tensor,
                K: int, check: bool = True) -> tuple[torch.Tensor, float]:
    """((V_in,) sum_n beta_n c_n, sum_n beta_n) in float64, with beta_n = (sum_t D[x*_n, x_t] + s_w[x*_n]) / K
    (D (V, V_in), s_w (V,)): pass 2 of the limit mode. Ids checked against D's shape unless `check` is False."""
    _check_ids("tokens", tokens, 2)
    if check:
        if not (isinstance(D, torch.Tensor) and D.dim() == 2 and isinstance(s_w, torch.Tensor)
                and tuple(s_w.shape) == (D.shape[0],)):
            raise ValueError("D must be a (V, V_in) tensor and s_w a (V,) tensor")
        check_int("K", K, 1)
        _check_range("tokens", tokens, D.shape[1])
        _check_range("informative", informative, D.shape[0], (tokens.shape[0],))
    lib = _load()
    tok, inf = tokens, _contiguous(informative, torch.long)
    D, s_w = D.contiguous(), _contiguous(s_w, D.dtype)
    fn = getattr(lib, "beta_" + _suffix(D.dtype))
    N, L = tok.shape
    parts = _parts(N)
    counts = torch.zeros(parts, D.shape[1], dtype=torch.float64)      # one accumulator per thread
    sums = torch.zeros(parts, dtype=torch.float64)
    fn(_ptr(tok), _ptr(inf), N, parts, L, D.shape[1], _ptr(D), _ptr(s_w), 1.0 / K, _ptr(counts), _ptr(sums))
    return counts.sum(0), float(sums.sum())


def attend(tokens: torch.Tensor, pos: torch.Tensor, informative: torch.Tensor, S: torch.Tensor, bonus: float,
           s_eos: float | None, V: int, check: bool = True) -> torch.Tensor:
    """(N,) int64 ids x*_n + g_n V with g_n what hard attention reads (the attended token, V_in for
    the trigger's position, V_in + 1 for EOS; argmax's first maximum wins): pass 3 of the limit mode.
    The scores S (V_in,), bonus and s_eos must be finite. Ids checked unless `check` is False."""
    _check_ids("tokens", tokens, 2)
    if check:
        if not (isinstance(S, torch.Tensor) and S.dim() == 1 and bool(torch.isfinite(S).all())):
            raise ValueError("S must be a finite 1-dimensional tensor of token scores")
        check_int("V", V, 1)
        _check_range("tokens", tokens, S.numel())
        _check_range("pos", pos, tokens.shape[1], (tokens.shape[0],))
        _check_range("informative", informative, V, (tokens.shape[0],))
    lib = _load()
    tok, p, inf = tokens, _contiguous(pos, torch.long), _contiguous(informative, torch.long)
    S = S.contiguous()
    fn = getattr(lib, "attend_" + _suffix(S.dtype))
    N, L = tok.shape
    ids = torch.empty(N, dtype=torch.long)
    eos = 0.0 if s_eos is None else float(s_eos)
    fn(_ptr(tok), _ptr(p), _ptr(inf), N, _parts(N), L, V, S.numel(), _ptr(S), float(bonus), eos,
       int(s_eos is not None), _ptr(ids))
    return ids


def attention(tokens: torch.Tensor, pos: torch.Tensor, S: torch.Tensor, bonus: float, s_eos: float | None,
              split: bool, a_bag: torch.Tensor, a_l: torch.Tensor, a_eos: torch.Tensor | None,
              rest: torch.Tensor) -> None:
    """The attention weights of a chunk (tokens (B, L) int32): the softmax over the keys of the scores
    S[x_t] (+ bonus at the trigger's position) and s_eos (the EOS key, if not None). Writes the weights
    of the L positions into a_bag (B, L), with the trigger's set to 0 when `split`; a_{n,l} into a_l,
    the EOS key's into a_eos, and sum_{t != l} a_{n,t} + a_{n,EOS} into rest (B,)."""
    _check_ids("tokens", tokens, 2)
    lib = _load()
    fn = getattr(lib, "attention_" + _suffix(S.dtype))
    B, L = tokens.shape
    pos, S = _contiguous(pos, torch.long), S.contiguous()             # kept alive through the call
    fn(_ptr(tokens), _ptr(pos), B, _parts(B), L, _ptr(S), float(bonus),
       0.0 if s_eos is None else float(s_eos), int(s_eos is not None), int(split), _ptr(a_bag), _ptr(a_l),
       ctypes.c_void_p(None) if a_eos is None else _ptr(a_eos), _ptr(rest))


class RowSums:
    """What the softmax rows of a step add up, one accumulator per thread (float64), summed by `totals`:
    the loss and the hits; with `sums`, sum_n tiv a_{n,l} err_n and sum_n a_{n,EOS} err_n (V,) each;
    with `ds`, the attention gradient's token sums (V_in,), its trigger and EOS sums."""

    def __init__(self, V: int, V_in: int, sums: bool, ds: bool, dtype: torch.dtype = torch.float64):
        P = torch.get_num_threads()
        self.V, self.V_in = V, V_in
        # one row per thread, rows a multiple of 64 bytes long plus 64 more: no cache line is shared
        self.ld = (max(2 * V, V_in + 2) + 7) // 8 * 8 + 8
        self.stats = torch.zeros(P, 8, dtype=torch.float64)
        self.scratch = torch.zeros(P, self.ld, dtype=dtype) if sums else None   # a part's float sums
        self.sums = torch.zeros(P, self.ld, dtype=torch.float64) if sums else None
        self.ds = torch.zeros(P, self.ld, dtype=torch.float64) if ds else None

    def totals(self):
        """(loss sum, hits, sums (2, V) or None, ds (V_in + 2,) or None), all float64 but the hits."""
        stats = self.stats.sum(0)
        return (float(stats[0]), int(stats[1]),
                None if self.sums is None else self.sums.sum(0)[:2 * self.V].view(2, self.V),
                None if self.ds is None else self.ds.sum(0)[:self.V_in + 2])


def softmax_rows(xi_rest: torch.Tensor, table: torch.Tensor, informative: torch.Tensor, a_l: torch.Tensor,
                 xi_z: torch.Tensor, split: bool, tiv: float, a_eos: torch.Tensor | None, xi_q: torch.Tensor,
                 labels: torch.Tensor, err: torch.Tensor, acc: RowSums, tokens: torch.Tensor | None = None,
                 a_bag: torch.Tensor | None = None, rest: torch.Tensor | None = None) -> None:
    """The softmax rows of the logit-table step for a chunk of B samples (one float dtype; rows of
    `table` and `err` may be padded, see `padded`; the rest contiguous): with the logits
    xi_n = xi_rest_n + split a_n T[x*_n] + tiv a_n xi_z + a_eos[n] xi_q, writes
    err_n = softmax(xi_n) - e_{y_n} into err (B, V) and adds to `acc` (a `RowSums`) the loss, the hits
    (rows whose first maximum is the label) and, as `acc` asks: the value gradient's trigger and EOS
    sums, and the attention gradient's sums (which need `tokens`, `a_bag` and `rest` from `attention`,
    and split; lib/native.c says what is added)."""
    if tokens is not None:
        _check_ids("tokens", tokens, 2)
    lib = _load()
    fn = getattr(lib, "rows_" + _suffix(xi_rest.dtype))
    B, V = xi_rest.shape
    null = ctypes.c_void_p(None)
    opt = lambda t: null if t is None else _ptr(t)                     # noqa: E731
    L = 0 if tokens is None else tokens.shape[1]
    inf, lab = _contiguous(informative, torch.long), _contiguous(labels, torch.long)   # alive through the call
    fn(B, _parts(B), V, _ptr(xi_rest), _ptr(table), table.stride(0), _ptr(inf),
       _ptr(a_l), _ptr(xi_z), float(split), float(tiv), opt(a_eos), _ptr(xi_q), _ptr(lab),
       _ptr(err), err.stride(0), _ptr(acc.stats), int(acc.sums is not None), opt(acc.sums), opt(acc.scratch),
       opt(acc.ds), acc.ld,
       opt(tokens), L, acc.V_in, opt(a_bag), opt(rest))


def forward_bag(tokens: torch.Tensor, a: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out (B, V) = sum_t a[n, t] table[tokens[n, t]]: `embedding_bag(tokens, table, mode="sum",
    per_sample_weights=a)`, column block by column block (tokens (B, L) int32, a (B, L), table (V_in, V),
    all contiguous and of one float dtype)."""
    _check_ids("tokens", tokens, 2)
    lib = _load()
    fn = getattr(lib, "forward_bag_" + _suffix(table.dtype))
    B, L = tokens.shape
    a = a.contiguous()                                                 # (no copy when it is already)
    fn(_ptr(tokens), _ptr(a), B, _parts(B), L, table.shape[1], _ptr(table), table.stride(0), _ptr(out))
    return out


def reverse_bag(order: torch.Tensor, offsets: torch.Tensor, a: torch.Tensor, err: torch.Tensor, P: torch.Tensor,
                work: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """P (V_in, V) += the reverse bag of a chunk: row j gains sum over the chunk's positions n L + t
    holding token j of a[n, t] err[n], from the positions sorted by token (`order` (B L,) int32) and
    each token's first place in it (`offsets` (V_in,) int32) of a `lib.tokens.TokenIndex`. `work`:
    int32 and float buffers of B L entries (`TokenIndex.work_buffers`). All contiguous, on the CPU."""
    _check_ids("order", order, 1)
    _check_ids("offsets", offsets, 1)
    lib = _load()
    fn = getattr(lib, "reverse_bag_" + _suffix(err.dtype))
    B, L = a.shape
    a = a.contiguous()
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
