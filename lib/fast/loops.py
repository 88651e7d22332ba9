"""The numba loops behind `lib.fast.native` (imported by it only when numba imports; see lib/fast/native.py).

Every kernel takes 1-dimensional C-contiguous NumPy views of the caller's tensors (zero-copy; a
matrix with padded rows is passed as its flat storage and a row stride, `ld*`), splits its N samples
into `parts` contiguous ranges (part i: samples [i ceil(N / parts), ...)) run by `prange`, and puts
what part i adds up into accumulator i, which the caller sums in order: the results depend on
`parts` (the torch thread count) and on nothing else, not on how many threads numba runs. Token ids
are int32, informative tokens, positions and labels int64. Ids are validated by the callers before
any loop (a raise inside a prange loop would turn parallelism off). No fast-math flag but
`contract` (fused multiply-adds, which change results by rounding only): NaN and infinity keep their
meaning, and the compiler keeps every sum's order. What makes the loops vectorise instead:
  - inner loops index views of a row by the loop counter alone (or by unsigned ids), so that numba
    emits no negative-index test (which stops LLVM's vectoriser);
  - exp in the softmax rows and attention weights is Cephes' polynomial (expf / exp, about one unit
    in the last place) times 2^k built from its bits, with no call in the loop;
  - long sums and maxima run in 8 (dots: 4) interleaved lanes added in a fixed tree: the same order,
    hence the same digits, on every machine (a maximum is exact in any order);
  - the bags add 4 table rows per sweep of a column block, in the order of one row at a time.
Measured against the C loops they replace: bench/bench_native.py."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

FAST = {"contract"}   # fused multiply-adds only: results change by rounding, nothing is assumed finite
OPTS = dict(cache=True, nogil=True, fastmath=FAST, error_model="numpy", boundscheck=False)
GROUP = 64            # samples sweeping one column block of the table in the forward bag
LANES = 8             # partial maxima of a row, so that its maximum vectorises (a maximum is exact in any order)


@njit(inline="always", cache=True)
def _exp_f32(u):
    """exp(u) of a float32 u <= 0 (not below -88) in float32 arithmetic, without a call (so that a loop of
    them vectorises): u = k ln 2 + r, |r| <= ln 2 / 2, Cephes' expf polynomial for e^r (an error of about
    one unit in the last place, as libm's), times 2^k made from its bits."""
    k = (u * np.float32(1.44269504088896341) + np.float32(12582912.0)) - np.float32(12582912.0)   # rounded: no call
    r = u - k * np.float32(0.693359375)
    r = r - k * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * (r * r) + r + np.float32(1.0)
    return p, np.int32(k)


@njit(inline="always", cache=True)
def _exp_f64(u):
    """exp(u) of a float64 u <= 0 (not below -708) as `_exp_f32`, with Cephes' exp (a Pade form)."""
    k = (u * 1.4426950408889634073599 + 6755399441055744.0) - 6755399441055744.0
    r = u - k * 6.93145751953125e-1
    r = r - k * 1.42860682030941723212e-6
    rr = r * r
    p = ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr + 9.99999999999999999910e-1) * r
    q = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr + 2.27265548208155028766e-1) * rr \
        + 2.00000000000000000009e0
    return 1.0 + 2.0 * p / (q - p), np.int64(np.int32(k))   # via int32: a vector conversion on AVX2


@njit(cache=True)
def _exp_rows(e, m, floor, zero, bits):
    """e[j] = exp(e[j] - m) (0 where e[j] - m < floor; floor >= -87 in float32, -708 in float64) for a
    row e, and their sum (`_scale_and_sum`); `bits`: a work row of e's integer width, viewed as floats."""
    V = e.shape[0]
    scale = bits.view(e.dtype)
    if bits.itemsize == 4:                        # float32
        for j in range(V):
            u32 = e[j] - m
            p32, k32 = _exp_f32(u32 if u32 > floor else floor)
            e[j] = p32
            bits[j] = ((k32 + np.int32(127)) << np.int32(23)) if u32 >= floor else np.int32(0)   # 2^k, or 0
    else:
        for j in range(V):
            u64 = e[j] - m
            p64, k64 = _exp_f64(u64 if u64 > floor else floor)
            e[j] = p64
            bits[j] = ((k64 + np.int64(1023)) << np.int64(52)) if u64 >= floor else np.int64(0)
    return _scale_and_sum(e, scale, zero)


@njit(inline="always", cache=True)
def _scale_and_sum(e, scale, zero):
    """e[j] *= scale[j], and the sum of the products in eight interleaved partial sums (j mod 8) added
    in a fixed tree: one chain of adds would wait on each add's latency; this order is the same on
    every machine (unlike a compiler's reassociation)."""
    V = e.shape[0]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = zero
    j = 0
    while j + 8 <= V:
        p0 = e[j] * scale[j]
        p1 = e[j + 1] * scale[j + 1]
        p2 = e[j + 2] * scale[j + 2]
        p3 = e[j + 3] * scale[j + 3]
        p4 = e[j + 4] * scale[j + 4]
        p5 = e[j + 5] * scale[j + 5]
        p6 = e[j + 6] * scale[j + 6]
        p7 = e[j + 7] * scale[j + 7]
        e[j] = p0
        e[j + 1] = p1
        e[j + 2] = p2
        e[j + 3] = p3
        e[j + 4] = p4
        e[j + 5] = p5
        e[j + 6] = p6
        e[j + 7] = p7
        s0 += p0
        s1 += p1
        s2 += p2
        s3 += p3
        s4 += p4
        s5 += p5
        s6 += p6
        s7 += p7
        j += 8
    s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    while j < V:
        p = e[j] * scale[j]
        e[j] = p
        s += p
        j += 1
    return s


@njit(inline="always", cache=True)
def _normalise_and_dot(e, inv, xr, tl, c_tiv, xi_z, xi_q, zero):
    """e[j] *= inv, and (e . xr, e . (tl + c_tiv xi_z), e . xi_q), each in four interleaved partial sums."""
    V = e.shape[0]
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = c0 = c1 = c2 = c3 = zero
    j = 0
    while j + 4 <= V:
        p0 = e[j] * inv
        p1 = e[j + 1] * inv
        p2 = e[j + 2] * inv
        p3 = e[j + 3] * inv
        e[j] = p0
        e[j + 1] = p1
        e[j + 2] = p2
        e[j + 3] = p3
        a0 += p0 * xr[j]
        a1 += p1 * xr[j + 1]
        a2 += p2 * xr[j + 2]
        a3 += p3 * xr[j + 3]
        b0 += p0 * (tl[j] + c_tiv * xi_z[j])
        b1 += p1 * (tl[j + 1] + c_tiv * xi_z[j + 1])
        b2 += p2 * (tl[j + 2] + c_tiv * xi_z[j + 2])
        b3 += p3 * (tl[j + 3] + c_tiv * xi_z[j + 3])
        c0 += p0 * xi_q[j]
        c1 += p1 * xi_q[j + 1]
        c2 += p2 * xi_q[j + 2]
        c3 += p3 * xi_q[j + 3]
        j += 4
    rr = (a0 + a1) + (a2 + a3)
    rl = (b0 + b1) + (b2 + b3)
    rq = (c0 + c1) + (c2 + c3)
    while j < V:
        p = e[j] * inv
        e[j] = p
        rr += p * xr[j]
        rl += p * (tl[j] + c_tiv * xi_z[j])
        rq += p * xi_q[j]
        j += 1
    return rr, rl, rq


@njit(inline="always", cache=True)
def _row_max(e, lowest, lanes):
    """The maximum of e (finite), from LANES partial maxima (`lanes`: a work array of LANES entries)."""
    V = e.shape[0]
    for q in range(LANES):
        lanes[q] = lowest
    j = 0
    while j + LANES <= V:
        for q in range(LANES):
            v = e[j + q]
            lanes[q] = v if v > lanes[q] else lanes[q]
        j += LANES
    m = lowest
    for q in range(LANES):
        m = lanes[q] if lanes[q] > m else m
    while j < V:
        m = e[j] if e[j] > m else m
        j += 1
    return m


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
