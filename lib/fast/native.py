"""Fused CPU loops for the count routes, compiled with numba (`lib/fast/loops.py`, `lib/fast/table_loops.py`), and optional.

Torch primitives make several passes over a batch's token ids or a chunk's logits where one loop
would do: the limit mode's three passes are bincounts, bags and lookups (9x one bincount, measured
in `bench/bench_three_steps.py`), and the logit-table step spends as long on its softmax rows and
small (B, L) operations as on its bags. The loops here make each pass once, and `lib.fast.counts` uses them
when they load:

  pair_count    the limit mode's count table (pass 1)
  beta_counts   the limit mode's beta_n and its token-weighted sum (pass 2)
  attend        the limit mode's hard attention, argmax with the first maximum winning (pass 3)
  attention     the logit-table step's attention weights (softmax over the keys)
  forward_bag   its logits, sum_t a_t T[x_t], a block of columns at a time (the block stays in cache)
  softmax_rows  its error rows softmax(xi) - e_y with the loss, the hits and every per-sample sum
                of both gradients (into `RowSums`, one accumulator per part)
  reverse_bag   its reverse bag P_j = sum over positions holding j of a err_n, through the batch's
                `lib.fast.tokens.TokenIndex`, a block of columns at a time

The loops are numba functions (`@njit(parallel=True, cache=True)`): compiled on first use into
lib/fast/__pycache__ (or $NUMBA_CACHE_DIR), loaded from there by later processes; no C compiler is
needed. `available()` says whether they loaded. Set RECALL_NATIVE=0 to turn them off (the torch
route is then used everywhere, as it is on GPUs or for tokens that are not int32). Without numba,
or if it fails to compile the loops, the routes take the torch route after one warning. The tests
bind each loop to its torch route (tests/test_native.py).

Threads: a call splits its samples into `torch.get_num_threads()` parts, run by numba's `prange`
on as many of numba's threads (at most NUMBA_NUM_THREADS; set before each call, so numba follows
torch's setting). numba's threading layer here is OpenMP ("omp"); launching its pool sets the
OpenMP thread count torch reads to NUMBA_NUM_THREADS, so `_load` puts torch's count back. What a
part adds up goes to its own accumulator, summed in a fixed order, so results depend on torch's
thread count as torch's own reductions do, and on nothing else (not on numba's)."""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np
import torch

from ..core.config import check_int

PAIR_TABLE_ENTRIES = 2 ** 26   # pair_count's per-part int32 tables, all parts together (256 MiB)
BLOCK = {torch.float32: 128, torch.float64: 64}   # the bags' column blocks (512 bytes)
# exp(u) is taken as 0 below these u (softmax rows, attention weights): under 1e-34 of a row's sum in
# the rows (as the C loops had it); in the attention weights, where exp would leave the normal range
_INT = {np.float32: np.int32, np.float64: np.int64}
EXP_FLOOR = {np.float32: (-80.0, -87.0), np.float64: (-700.0, -708.0)}

LIMIT_LOOPS = ("pair_count", "beta_counts", "attend")                    # lib/fast/loops.py
TABLE_LOOPS = ("attention", "forward_bag", "softmax_rows", "reverse_bag")  # lib/fast/table_loops.py
_state: dict = {}


def _warm(loops) -> None:
    """Run every loop once on tiny inputs in both float dtypes: compiles them (or loads them from
    numba's cache) now, so that a failure shows here and not in the middle of a route."""
    i32, i64 = np.int32, np.int64
    tok, inf = np.zeros(4, i32), np.zeros(2, i64)
    loops.pair_count(tok, inf, 2, 1, 2, 1, 1, np.zeros(1, i32))
    for dt in (np.float32, np.float64):
        z, one = dt(0), np.ones(8, dt)
        loops.beta_counts(tok, inf, 2, 1, 2, 1, one, one, 1.0, np.zeros(1), np.zeros(1))
        loops.attend(tok, inf, inf, 2, 1, 2, 1, 1, one, z, z, True, np.zeros(2, i64))
        loops.attention(tok, inf, 2, 1, 2, one, z, z, True, True, np.zeros(4, dt), np.zeros(2, dt), np.zeros(2, dt),
                        np.zeros(2, dt), z, dt(-1e30), dt(-80), np.zeros(2, np.int32 if dt is np.float32 else np.int64))
        loops.softmax_rows(2, 1, 2, np.zeros(4, dt), one, 2, inf, np.zeros(2, dt), one, z, z, True, np.zeros(2, dt),
                           one, inf, np.zeros(4, dt), 2, np.zeros(8), True, np.zeros(16), np.zeros(16, dt), True,
                           np.zeros(16), 8, tok, 2, 1, np.zeros(4, dt), np.zeros(2, dt), dt(-1e30), dt(-80), z,
                           np.zeros(2, np.int32 if dt is np.float32 else np.int64))
        loops.forward_bag(tok, np.zeros(4, dt), 2, 1, 2, 2, one, 2, np.zeros(4, dt), np.zeros(4, dt))
        loops.reverse_bag(np.arange(4, dtype=i32), np.zeros(1, i32), np.zeros(4, dt), 2, 1, 2, 2, 1, one, 2,
                          np.zeros(2, dt), np.zeros(4, i32), np.zeros(4, dt), np.zeros(4, dt))


def _load():
    if "lib" in _state:
        return _state["lib"]
    loops = None
    if os.environ.get("RECALL_NATIVE", "1") != "0":
        threads = torch.get_num_threads()
        try:
            import numba
            from . import loops as limit_loops, table_loops
            loops = SimpleNamespace(**{name: getattr(m, name) for m, names in
                                       ((limit_loops, LIMIT_LOOPS), (table_loops, TABLE_LOOPS)) for name in names})
            _warm(loops)
            _state["numba"] = numba
            _state["max_threads"] = int(numba.config.NUMBA_NUM_THREADS)
        except Exception as err:                                      # no numba, a failing compile, ...: off
            _state["error"] = err
            loops = None
            warnings.warn(f"lib.fast.native: numba's fused loops are off ({type(err).__name__}: {err}); the count "
                          "routes take the slower torch route (pip install numba==0.68.1 for the fused loops)",
                          RuntimeWarning, stacklevel=3)
        if torch.get_num_threads() != threads:     # numba's OpenMP pool, launched, set torch's count to
            torch.set_num_threads(threads)          # NUMBA_NUM_THREADS (measured): torch keeps its own
    _state["lib"] = loops
    return loops


def _threads(parts: int) -> None:
    """numba's threads for the next call: torch's count, at most numba's pool (NUMBA_NUM_THREADS)."""
    numba = _state["numba"]
    n = max(1, min(parts, _state["max_threads"]))
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)


def available() -> bool:
    """Whether the numba loops compiled and loaded (False with RECALL_NATIVE=0 or without numba)."""
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
    """Whether the batch's ids lie where the loops index with them (they index without bounds checks:
    an id out of range must take the torch route, which reports it): positions in [0, L), labels and
    informative tokens in [0, V) and, with `tokens`, every token in [0, V_in) (one pass over the ids,
    which `lib.core.task.check_batch` already made for batches that came through the public functions)."""
    def inside(t: torch.Tensor, top: int) -> bool:
        lo, hi = torch.aminmax(t)
        return int(lo) >= 0 and int(hi) < top
    return (inside(batch.pos, L) and inside(batch.labels, V) and (not tokens or inside(batch.tokens, V_in))
            and inside(batch.informative, V))                          # the positions first: they index the tokens


def _real(dtype: torch.dtype):
    """The NumPy scalar type of the loops' float dtype (their scalars are passed in it)."""
    if dtype == torch.float32:
        return np.float32
    if dtype == torch.float64:
        return np.float64
    raise TypeError(f"the native loops take float32 or float64 tensors, not {dtype}")


def _np(t: torch.Tensor) -> np.ndarray:
    """A contiguous tensor as a flat NumPy array over the same memory (zero-copy: never a copy, which
    the loops would write into in vain)."""
    if not t.is_contiguous():
        raise ValueError(f"the loops take contiguous tensors, got strides {t.stride()} for shape {tuple(t.shape)}")
    return t.detach().view(-1).numpy()


def _rows(t: torch.Tensor) -> tuple[np.ndarray, int]:
    """A matrix whose rows may lie further apart than its width (`padded`) as the flat array from its
    first entry to its last, and its row stride (zero-copy)."""
    rows, cols = t.shape
    if t.stride(1) != 1 and cols > 1:
        raise ValueError(f"the loops read matrices with contiguous rows, got strides {t.stride()}")
    ld = t.stride(0) if rows > 1 else cols
    span = (rows - 1) * ld + cols if rows else 0
    return torch.as_strided(t.detach(), (span,), (1,)).numpy(), ld


def _check_ids(name: str, ids: torch.Tensor, ndim: int) -> None:
    """The loops read ids as int32 arrays: anything else would be read wrongly, so refuse it."""
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


def _loops(parts: int):
    """The loops, with numba's thread count set for a call split into `parts` parts."""
    loops = _load()
    if loops is None:
        raise RuntimeError(f"lib.fast.native's loops are off (available() is False): {_state.get('error')!r}")
    _threads(parts)
    return loops


def pair_count(tokens: torch.Tensor, informative: torch.Tensor, V: int, V_in: int, check: bool = True) -> torch.Tensor:
    """(V, V_in) int64: entry (i, j) counts the positions holding token j in samples whose
    informative token is i (tokens (N, L) int32 with N L < 2^31 in [0, V_in), informative (N,) in
    [0, V); checked unless `check` is False, for callers that checked the batch already)."""
    _check_ids("tokens", tokens, 2)
    if check:
        check_int("V", V, 1), check_int("V_in", V_in, V)
        _check_range("tokens", tokens, V_in)
        _check_range("informative", informative, V, (tokens.shape[0],))
    tok, inf = tokens, _contiguous(informative, torch.long)
    N, L = tok.shape
    parts = max(1, min(_parts(N), PAIR_TABLE_ENTRIES // (V * V_in)))  # one table per part, 256 MiB in all
    out = torch.zeros(parts, V, V_in, dtype=torch.int32)
    _loops(parts).pair_count(_np(tok), _np(inf), N, parts, L, V, V_in, _np(out))
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
    _real(D.dtype)
    tok, inf = tokens, _contiguous(informative, torch.long)
    D, s_w = D.contiguous(), _contiguous(s_w, D.dtype)
    N, L = tok.shape
    parts = _parts(N)
    counts = torch.zeros(parts, D.shape[1], dtype=torch.float64)      # one accumulator per part
    sums = torch.zeros(parts, dtype=torch.float64)
    _loops(parts).beta_counts(_np(tok), _np(inf), N, parts, L, D.shape[1], _np(D), _np(s_w), 1.0 / K, _np(counts),
                              _np(sums))
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
    real = _real(S.dtype)
    tok, p, inf = tokens, _contiguous(pos, torch.long), _contiguous(informative, torch.long)
    S = S.contiguous()
    N, L = tok.shape
    parts = _parts(N)
    ids = torch.empty(N, dtype=torch.long)
    eos = 0.0 if s_eos is None else float(s_eos)
    _loops(parts).attend(_np(tok), _np(p), _np(inf), N, parts, L, V, S.numel(), _np(S), real(bonus), real(eos),
                         s_eos is not None, _np(ids))
    return ids


def attention(tokens: torch.Tensor, pos: torch.Tensor, S: torch.Tensor, bonus: float, s_eos: float | None,
              split: bool, a_bag: torch.Tensor, a_l: torch.Tensor, a_eos: torch.Tensor | None,
              rest: torch.Tensor) -> None:
    """The attention weights of a chunk (tokens (B, L) int32): the softmax over the keys of the scores
    S[x_t] (+ bonus at the trigger's position) and s_eos (the EOS key, if not None). Writes the weights
    of the L positions into a_bag (B, L), with the trigger's set to 0 when `split`; a_{n,l} into a_l,
    the EOS key's into a_eos, and sum_{t != l} a_{n,t} + a_{n,EOS} into rest (B,)."""
    _check_ids("tokens", tokens, 2)
    real = _real(S.dtype)
    B, L = tokens.shape
    parts = _parts(B)
    pos, S = _contiguous(pos, torch.long), S.contiguous()
    eos = _np(a_eos) if a_eos is not None else np.zeros(1, real)
    _loops(parts).attention(_np(tokens), _np(pos), B, parts, L, _np(S), real(bonus),
                            real(0.0 if s_eos is None else s_eos), s_eos is not None, bool(split), _np(a_bag),
                            _np(a_l), eos, _np(rest), real(0), real(np.finfo(real).min), real(EXP_FLOOR[real][1]),
                            np.empty(parts * L, _INT[real]))


class RowSums:
    """What the softmax rows of a step add up, one accumulator per part (float64), summed by `totals`:
    the loss and the hits; with `sums`, sum_n tiv a_{n,l} err_n and sum_n a_{n,EOS} err_n (V,) each;
    with `ds`, the attention gradient's token sums (V_in,), its trigger and EOS sums."""

    def __init__(self, V: int, V_in: int, sums: bool, ds: bool, dtype: torch.dtype = torch.float64):
        P = torch.get_num_threads()
        self.V, self.V_in = V, V_in
        # one row per part, rows a multiple of 64 bytes long plus 64 more: no cache line is shared
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
    sums (sum_n tiv a_n err_n, sum_n a_eos[n] err_n), and the attention gradient's sums (which need
    `tokens`, `a_bag` and `rest` from `attention`, and split): with r_rest = err_n . (xi_rest_n +
    a_eos[n] xi_q), r_l = err_n . (T[x*_n] + tiv xi_z), beta = r_rest + a_n r_l and
    ds_l = a_n (rest_n r_l - r_rest): ds[x*_n] += ds_l, ds[x_{n,t}] -= a_bag[n, t] beta for every t,
    ds[V_in] += ds_l and ds[V_in + 1] += a_eos[n] (err_n . xi_q - beta)."""
    if tokens is not None:
        _check_ids("tokens", tokens, 2)
    real = _real(xi_rest.dtype)
    B, V = xi_rest.shape
    parts = _parts(B)
    if acc.stats.shape[0] < parts:
        raise ValueError(f"acc has {acc.stats.shape[0]} accumulators, the call needs {parts} "
                         "(a RowSums made under fewer torch threads)")
    f64 = np.zeros(1)
    opt = lambda t, empty: empty if t is None else _np(t)               # noqa: E731
    L = 0 if tokens is None else tokens.shape[1]
    inf, lab = _contiguous(informative, torch.long), _contiguous(labels, torch.long)
    table_np, ldt = _rows(table)
    err_np, lde = _rows(err)
    dummy = np.zeros(1, real)
    floor = EXP_FLOOR[real][0]
    _loops(parts).softmax_rows(
        B, parts, V, _np(xi_rest.contiguous()), table_np, ldt, _np(inf), _np(a_l), _np(xi_z), real(float(split)),
        real(tiv), a_eos is not None, opt(a_eos, dummy), _np(xi_q), _np(lab), err_np, lde, _np(acc.stats),
        acc.sums is not None, opt(acc.sums, f64), opt(acc.scratch, dummy), acc.ds is not None, opt(acc.ds, f64),
        acc.ld, opt(tokens, np.zeros(1, np.int32)), L, acc.V_in, opt(a_bag, dummy), opt(rest, dummy),
        real(np.finfo(real).min), real(floor), real(0), np.empty(parts * V, _INT[real]))


def forward_bag(tokens: torch.Tensor, a: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out (B, V) = sum_t a[n, t] table[tokens[n, t]]: `embedding_bag(tokens, table, mode="sum",
    per_sample_weights=a)`, column block by column block (tokens (B, L) int32, a (B, L), table (V_in, V)
    with rows that may be padded, out contiguous, all of one float dtype)."""
    _check_ids("tokens", tokens, 2)
    _real(table.dtype)
    if not out.is_contiguous():
        raise ValueError("out must be a contiguous (B, V) tensor")
    B, L = tokens.shape
    parts = _parts(B)
    a = a.contiguous()                                                 # (no copy when it is already)
    table_np, ldt = _rows(table)
    work = np.empty(parts * BLOCK[table.dtype], dtype=table_np.dtype)
    _loops(parts).forward_bag(_np(tokens), _np(a), B, parts, L, table.shape[1], table_np, ldt, _np(out), work)
    return out


def reverse_bag(order: torch.Tensor, offsets: torch.Tensor, a: torch.Tensor, err: torch.Tensor, P: torch.Tensor,
                work: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """P (V_in, V) += the reverse bag of a chunk: row j gains sum over the chunk's positions n L + t
    holding token j of a[n, t] err[n], from the positions sorted by token (`order` (B L,) int32) and
    each token's first place in it (`offsets` (V_in,) int32) of a `lib.fast.tokens.TokenIndex`. `work`:
    int32 and float buffers of B L entries (`TokenIndex.work_buffers`). All contiguous (err's rows
    may be padded), on the CPU."""
    _check_ids("order", order, 1)
    _check_ids("offsets", offsets, 1)
    _real(err.dtype)
    B, L = a.shape
    parts = _parts(B)
    a = a.contiguous()
    err_np, lde = _rows(err)
    acc = np.empty(parts * BLOCK[err.dtype], dtype=err_np.dtype)
    _loops(parts).reverse_bag(_np(order), _np(offsets), _np(a), B, parts, L, err.shape[1], P.shape[0], err_np, lde,
                              _np(P), _np(work[0]), _np(work[1]), acc)
    return P


def padded(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """An empty (rows, cols) view whose rows lie 64 bytes further apart than cols entries: with V a
    power of two, rows V entries apart map onto few cache sets, and a column block read down them
    (forward_bag's table, reverse_bag's err) evicts itself (measured with the C loops: 1.8 s against
    0.85 s per 10^6 samples for the forward bag at V = 1024, L = 64)."""
    pad = 64 // torch.tensor([], dtype=dtype).element_size()
    return torch.empty(rows, cols + pad, dtype=dtype)[:, :cols]
