"""The numba loops of the logit-table step (`lib.fast.counts.table_gradients`): attention weights,
the forward bag, the softmax rows with every per-sample sum, and the reverse bag. How they are split
into parts, vectorise and keep one order of summation: lib/fast/loops.py, which also holds the
shared pieces (exp without a call, row maxima in lanes) and the limit mode's loops."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .loops import GROUP, LANES, OPTS, _exp_rows, _normalise_and_dot, _row_max, _span


# ------------------------------------------------------------------------------ the logit-table step

@njit(**OPTS)
def _attention_part(tok, pos, N, parts, L, S, bonus, s_eos, has_eos, split, a_bag, a_l, a_eos, rest, zero, lowest,
                    floor, bits_all, i):
    n0, n1 = _span(N, parts, i)
    one = zero + 1
    lanes = np.full(LANES, lowest)
    bits = bits_all[i * L:(i + 1) * L]
    for n in range(n0, n1):
        x = n * L
        a = a_bag[x:x + L]
        l = pos[n]
        for t in range(L):
            a[t] = S[np.uint32(tok[x + t])]
        a[l] += bonus
        m = _row_max(a, lowest, lanes)
        if has_eos and s_eos > m:
            m = s_eos
        z = _exp_rows(a, m, floor, zero, bits)   # below floor (the least normal number's log): 0
        e_eos = np.exp(s_eos - m) if has_eos else zero
        inv = one / (z + e_eos)
        for t in range(L):
            a[t] *= inv
        al = a[l]
        a[l] = zero                               # the others' sum, without a_l: no cancellation
        others = zero
        for t in range(L):
            others += a[t]
        a_l[n] = al
        rest[n] = others + e_eos * inv
        if has_eos:
            a_eos[n] = e_eos * inv
        if not split:
            a[l] = al


@njit(parallel=True, **OPTS)
def attention(tok, pos, N, parts, L, S, bonus, s_eos, has_eos, split, a_bag, a_l, a_eos, rest, zero, lowest, floor,
              bits_all):
    """The attention weights of a chunk: softmax over s_t = S[x_t] (+ bonus at l) and s_eos (with
    has_eos). a_bag[n] = a_{n,1..L} (a_{n,l} set to 0 when split), a_l[n] = a_{n,l}, a_eos[n] (with
    has_eos), rest[n] = sum_{t != l} a_{n,t} + a_{n,EOS}, summed from the other keys. `zero`, `lowest`
    and `floor` in the float dtype; bits_all: parts work rows of L integers of its width."""
    for i in prange(parts):
        _attention_part(tok, pos, N, parts, L, S, bonus, s_eos, has_eos, split, a_bag, a_l, a_eos, rest, zero,
                        lowest, floor, bits_all, i)


@njit(**OPTS)
def _rows_part(N, parts, V, xi_rest, table, ldt, inf, a_l, xi_z, c_split, c_tiv, has_eos, a_eos, xi_q, labels,
               err, lde, stats, want_sums, sums, scratch, want_ds, ds, ld_acc, tok, L, V_in, a_bag, rest,
               lowest, floor, zero, bits_all, i):
    n0, n1 = _span(N, parts, i)
    one = zero + 1
    at = i * ld_acc                               # this part's rows of sums (trigger, then EOS), ds, scratch
    st = sums[at:at + V]                          # (inner loops index views by the loop counter alone: no
    se = sums[at + V:at + 2 * V]                  # wraparound test, so that they vectorise)
    dsi = ds[at:at + ld_acc]
    ft = scratch[at:at + V]                       # the trigger's sum of this part's rows in the float dtype
    loss_i = 0.0
    hits_i = 0.0
    ds_trig = 0.0
    ds_eos = 0.0
    use_ft = want_sums and c_tiv != 0
    lanes = np.full(LANES, lowest)
    bits = bits_all[i * V:(i + 1) * V]
    if use_ft:
        for j in range(V):
            ft[j] = zero
    for n in range(n0, n1):
        xr = xi_rest[n * V:(n + 1) * V]
        tl = table[inf[n] * ldt:inf[n] * ldt + V]
        e = err[n * lde:n * lde + V]
        an = a_l[n]
        c1 = an * c_split
        c2 = an * c_tiv
        ce = a_eos[n] if has_eos else zero
        for j in range(V):
            e[j] = xr[j] + c1 * tl[j] + c2 * xi_z[j] + ce * xi_q[j]
        m = _row_max(e, lowest, lanes)            # the stored logits' maximum, compared with them exactly
        y = labels[n]
        xy = e[y]
        h = xy == m                               # the label holds the maximum, and no earlier entry
        if h:
            for j in range(y):
                if e[j] == m:
                    h = False
                    break
        s = _exp_rows(e, m, floor, zero, bits)    # below floor, exp is under 1e-34 of the sum (>= 1): 0
        inv = one / s
        rr = rl = rq = zero
        if want_ds:
            rr, rl, rq = _normalise_and_dot(e, inv, xr, tl, c_tiv, xi_z, xi_q, zero)
        else:
            for j in range(V):
                e[j] *= inv
        if use_ft:
            for j in range(V):
                ft[j] += c2 * e[j]
            ft[y] -= c2
        e[y] -= one
        if want_sums and has_eos:
            for j in range(V):
                se[j] += np.float64(ce * e[j])
        loss_i += np.float64(np.log(s)) + np.float64(m) - np.float64(xy)
        hits_i += 1.0 if h else 0.0
        if want_ds:
            rr -= xr[y]
            rl -= tl[y] + c_tiv * xi_z[y]
            rq -= xi_q[y]
            r_rest = np.float64(rr) + np.float64(ce) * np.float64(rq)
            r_l = np.float64(rl)
            beta = r_rest + np.float64(an) * r_l
            ds_l = np.float64(an) * (np.float64(rest[n]) * r_l - r_rest)
            dsi[inf[n]] += ds_l
            x = n * L
            for t in range(L):
                dsi[tok[x + t]] -= np.float64(a_bag[x + t]) * beta
            ds_trig += ds_l
            if has_eos:
                ds_eos += np.float64(ce) * (np.float64(rq) - beta)
    if use_ft:
        for j in range(V):
            st[j] += np.float64(ft[j])
    stats[i * 8] += loss_i
    stats[i * 8 + 1] += hits_i
    if want_ds:
        dsi[V_in] += ds_trig
        dsi[V_in + 1] += ds_eos


@njit(parallel=True, **OPTS)
def softmax_rows(N, parts, V, xi_rest, table, ldt, inf, a_l, xi_z, c_split, c_tiv, has_eos, a_eos, xi_q, labels,
                 err, lde, stats, want_sums, sums, scratch, want_ds, ds, ld_acc, tok, L, V_in, a_bag, rest,
                 lowest, floor, zero, bits_all):
    """The softmax rows of a chunk (lib/fast/native.py's `softmax_rows` says what is computed): logits into
    err, softmax minus the label's one-hot, and part i's accumulators (float64, ld_acc entries apart;
    stats[i] = (loss, hits), sums[i] = (2, V), ds[i] = (V_in + 2)). Passes over a row (in L1): the
    logits; their maximum; exp; its scale and sum; normalise and the dots. bits_all: parts work rows
    of V integers of the float dtype's width."""
    for i in prange(parts):
        _rows_part(N, parts, V, xi_rest, table, ldt, inf, a_l, xi_z, c_split, c_tiv, has_eos, a_eos, xi_q, labels,
                   err, lde, stats, want_sums, sums, scratch, want_ds, ds, ld_acc, tok, L, V_in, a_bag, rest,
                   lowest, floor, zero, bits_all, i)


@njit(**OPTS)
def _forward_part(tok, a, N, parts, L, V, table, ldt, xi, acc, i):
    n0, n1 = _span(N, parts, i)
    CB = acc.shape[0] // parts
    s = acc[i * CB:(i + 1) * CB]                  # the block's sums (inner loops index views by the loop
    zero = acc[0] * 0                             # counter alone: no wraparound test, so they vectorise)
    for g0 in range(n0, n1, GROUP):
        g1 = min(g0 + GROUP, n1)
        for c in range(0, V, CB):
            w = min(CB, V - c)
            for n in range(g0, g1):
                for k in range(w):
                    s[k] = zero
                x = n * L
                t = 0
                while t + 4 <= L:                 # four rows per sweep of the block: a quarter of the
                    r0 = table[tok[x + t] * ldt + c:]     # block's loads and stores, the same order of adds
                    r1 = table[tok[x + t + 1] * ldt + c:]
                    r2 = table[tok[x + t + 2] * ldt + c:]
                    r3 = table[tok[x + t + 3] * ldt + c:]
                    w0 = a[x + t]
                    w1 = a[x + t + 1]
                    w2 = a[x + t + 2]
                    w3 = a[x + t + 3]
                    for k in range(w):
                        s[k] = (((s[k] + w0 * r0[k]) + w1 * r1[k]) + w2 * r2[k]) + w3 * r3[k]
                    t += 4
                while t < L:
                    r0 = table[tok[x + t] * ldt + c:]
                    w0 = a[x + t]
                    for k in range(w):
                        s[k] += w0 * r0[k]
                    t += 1
                out = xi[n * V + c:]
                for k in range(w):
                    out[k] = s[k]


@njit(parallel=True, **OPTS)
def forward_bag(tok, a, N, parts, L, V, table, ldt, xi, acc):
    """xi[n] = sum_t a[n, t] T[x_{n,t}] (T (V_in, V) rows ldt apart, xi (N, V)), column block by column
    block (acc: parts blocks of CB entries): a block of T stays in cache while GROUP samples sweep it."""
    for i in prange(parts):
        _forward_part(tok, a, N, parts, L, V, table, ldt, xi, acc, i)


@njit(**OPTS)
def _reverse_part(order, offsets, a, N, parts, L, V, V_in, err, lde, P, rows_buf, w_buf, acc, i):
    total = N * L
    CB = acc.shape[0] // parts
    zero = acc[0] * 0
    p_lo = i * total // parts
    p_hi = (i + 1) * total // parts
    j0 = 0                                        # the tokens whose runs start in this share
    while j0 < V_in and offsets[j0] < p_lo:
        j0 += 1
    j1 = j0
    while j1 < V_in and (i == parts - 1 or offsets[j1] < p_hi):
        j1 += 1
    if j0 >= j1:
        return
    q0 = offsets[j0]
    q1 = offsets[j1] if j1 < V_in else total
    for p in range(q0, q1):                       # the rows and weights of the share, once
        rows_buf[p] = order[p] // L
        w_buf[p] = a[order[p]]
    s = acc[i * CB:(i + 1) * CB]
    for c in range(0, V, CB):
        w = min(CB, V - c)
        for j in range(j0, j1):
            e0 = offsets[j]
            e1 = offsets[j + 1] if j + 1 < V_in else total
            if e0 == e1:
                continue
            for k in range(w):
                s[k] = zero
            p = e0
            while p + 4 <= e1:                    # four rows per sweep of the block, the same order of adds
                r0 = err[rows_buf[p] * lde + c:]
                r1 = err[rows_buf[p + 1] * lde + c:]
                r2 = err[rows_buf[p + 2] * lde + c:]
                r3 = err[rows_buf[p + 3] * lde + c:]
                w0 = w_buf[p]
                w1 = w_buf[p + 1]
                w2 = w_buf[p + 2]
                w3 = w_buf[p + 3]
                for k in range(w):
                    s[k] = (((s[k] + w0 * r0[k]) + w1 * r1[k]) + w2 * r2[k]) + w3 * r3[k]
                p += 4
            while p < e1:
                r0 = err[rows_buf[p] * lde + c:]
                w0 = w_buf[p]
                for k in range(w):
                    s[k] += w0 * r0[k]
                p += 1
            out = P[j * V + c:]
            for k in range(w):
                out[k] += s[k]


@njit(parallel=True, **OPTS)
def reverse_bag(order, offsets, a, N, parts, L, V, V_in, err, lde, P, rows_buf, w_buf, acc):
    """P[j] += sum over the positions (n, t) holding token j of a[n, t] err[n], from the positions sorted
    by token (`order`, token j's run from offsets[j] to offsets[j + 1] or N L). Each part owns a run
    of tokens (rows of P) with about as many positions as the others; column block by column block."""
    for i in prange(parts):
        _reverse_part(order, offsets, a, N, parts, L, V, V_in, err, lde, P, rows_buf, w_buf, acc, i)
