"""Fused CPU loops for the limit mode's passes over the token ids, compiled with numba
(`lib/fast/loops.py`), and optional.

Torch primitives make several passes over a batch's token ids where one loop would do: the limit
mode's three passes are bincounts, bags and lookups (9x one bincount, measured in
`bench/bench_three_steps.py`). The loops here make each pass once, and `lib.fast.limit` uses them
when they load:

  pair_count    the count table (pass 1)
  beta_counts   beta_n and its token-weighted sum (pass 2)
  attend        the hard attention, argmax with the first maximum winning (pass 3)

(The logit-table step of `lib.fast.counts` had fused loops too, in C and then in numba; its torch
route measured as fast or faster at the sizes in bench/bench_native.py's docstring, so it runs on
torch alone.)

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

import numpy as np
import torch

from ..core.config import check_int

PAIR_TABLE_ENTRIES = 2 ** 26   # pair_count's per-part int32 tables, all parts together (256 MiB)
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



def _load():
    if "lib" in _state:
        return _state["lib"]
    loops = None
    if os.environ.get("RECALL_NATIVE", "1") != "0":
        threads = torch.get_num_threads()
        try:
            import numba
            from . import loops
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
