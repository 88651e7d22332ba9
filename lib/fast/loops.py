"""The numba loops behind `lib.fast.native` (imported by it only when numba imports; see lib/fast/native.py):
the limit mode's three passes over the token ids.

Every kernel takes 1-dimensional C-contiguous NumPy views of the caller's tensors (zero-copy), splits
its N samples into `parts` contiguous ranges (part i: samples [i ceil(N / parts), ...)) run by
`prange`, and puts what part i adds up into accumulator i, which the caller sums in order: the
results depend on `parts` (the torch thread count) and on nothing else, not on how many threads
numba runs. Token ids are int32, informative tokens and positions int64. Ids are validated by the
callers before any loop (a raise inside a prange loop would turn parallelism off). No fast-math flag
but `contract` (fused multiply-adds, which change results by rounding only): NaN and infinity keep
their meaning. Measured against the C loops they replace and against torch: bench/bench_native.py."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

FAST = {"contract"}   # fused multiply-adds only: results change by rounding, nothing is assumed finite
OPTS = dict(cache=True, nogil=True, fastmath=FAST, error_model="numpy", boundscheck=False)


@njit(inline="always", cache=True)
def _span(N, parts, i):
    step = (N + parts - 1) // parts
    n0 = i * step
    return n0, min(n0 + step, N)


# --------------------------------------------------------------------------------- the limit mode

@njit(**OPTS)
def _pair_count_part(tok, inf, N, parts, L, V, V_in, out, i):
    n0, n1 = _span(N, parts, i)
    base = i * V * V_in
    for n in range(n0, n1):
        row = out[base + inf[n] * V_in:]
        x = tok[n * L:(n + 1) * L]
        for t in range(L):
            row[np.uint32(x[t])] += 1            # unsigned: no negative-index test (ids checked >= 0)


@njit(parallel=True, **OPTS)
def pair_count(tok, inf, N, parts, L, V, V_in, out):
    """Pass 1: out[i][x*_n V_in + x_{n,t}] += 1 for every position (parts int32 tables (V, V_in))."""
    for i in prange(parts):
        _pair_count_part(tok, inf, N, parts, L, V, V_in, out, i)


@njit(**OPTS)
def _beta_part(tok, inf, N, parts, L, V_in, D, s_w, inv_K, counts, sums, i):
    n0, n1 = _span(N, parts, i)
    cnt = counts[i * V_in:(i + 1) * V_in]
    total = 0.0
    for n in range(n0, n1):
        row = inf[n] * V_in
        x = n * L
        b0 = 0.0
        b1 = 0.0
        b2 = 0.0
        b3 = 0.0                                  # four chains: the adds' latency, not one long chain
        t = 0
        while t + 4 <= L:
            b0 += D[row + tok[x + t]]
            b1 += D[row + tok[x + t + 1]]
            b2 += D[row + tok[x + t + 2]]
            b3 += D[row + tok[x + t + 3]]
            t += 4
        while t < L:
            b0 += D[row + tok[x + t]]
            t += 1
        b = (((b0 + b1) + (b2 + b3)) + s_w[inf[n]]) * inv_K
        for t in range(L):
            cnt[np.uint32(tok[x + t])] += b
        total += b
    sums[i] += total


@njit(parallel=True, **OPTS)
def beta_counts(tok, inf, N, parts, L, V_in, D, s_w, inv_K, counts, sums):
    """Pass 2: beta_n = (sum_t D[x*_n, x_t] + s_w[x*_n]) inv_K (in float64); counts[i][x_{n,t}] += beta_n
    and sums[i] += beta_n (part i's accumulators)."""
    for i in prange(parts):
        _beta_part(tok, inf, N, parts, L, V_in, D, s_w, inv_K, counts, sums, i)


@njit(**OPTS)
def _attend_part(tok, pos, inf, N, parts, L, V, V_in, S, bonus, s_eos, has_eos, ids, i):
    n0, n1 = _span(N, parts, i)
    for n in range(n0, n1):
        x = n * L
        l = pos[n]
        best_t = 0
        best = S[np.uint32(tok[x])]
        if l == 0:
            best += bonus
        for t in range(1, L):
            s = S[np.uint32(tok[x + t])]
            if t == l:
                s += bonus
            if s > best:
                best = s
                best_t = t
        group = V_in if best_t == l else np.int64(tok[x + best_t])
        if has_eos and s_eos > best:
            group = V_in + 1
        ids[n] = inf[n] + group * V


@njit(parallel=True, **OPTS)
def attend(tok, pos, inf, N, parts, L, V, V_in, S, bonus, s_eos, has_eos, ids):
    """Pass 3: ids[n] = x*_n + group V, group the argmax of S[x_t] (+ bonus at position l; then the EOS
    key s_eos if has_eos) with the first maximum winning: the token, V_in (position l) or V_in + 1 (EOS).
    S, bonus and s_eos of one float dtype, compared in it."""
    for i in prange(parts):
        _attend_part(tok, pos, inf, N, parts, L, V, V_in, S, bonus, s_eos, has_eos, ids, i)
