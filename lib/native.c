/* Fused CPU loops of the count routes (lib/native.py compiles and loads this file; lib/counts.py
 * falls back to torch primitives when it cannot). Each function splits its N samples into `parts`
 * contiguous ranges (part i: samples [i ceil(N / parts), ...)) run by OpenMP, the runtime torch
 * itself runs on, so its waiting threads take the work; what a part adds up goes into accumulator i,
 * which the caller sums in order. Token ids are int32 (N, L) row-major, informative tokens,
 * positions and labels int64.
 *
 * Compiled with -ffast-math so that the exp of the softmax vectorises (glibc's libmvec): sums may be
 * reassociated, and inputs must be finite (the callers check the results). */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* The samples [n0, n1) of part i of N samples in `parts` parts. */
#define RANGE(N, parts, i)                                                                              \
    const int64_t step_ = ((N) + (parts) - 1) / (parts), n0 = (i) * step_;                               \
    const int64_t n1 = n0 + step_ < (N) ? n0 + step_ : (N)

/* Pass 1 of the limit mode: out[x*_n V_in + x_{n,t}] += 1 for every position (the count table). */
void pair_count(const int32_t *tokens, const int64_t *inf, int64_t N, int64_t parts, int64_t L, int64_t V,
                int64_t V_in, int32_t *out) {            /* out: parts tables (V, V_in) */
    #pragma omp parallel for schedule(static, 1)
    for (int64_t i = 0; i < parts; i++) {
        RANGE(N, parts, i);
        int32_t *table = out + i * V * V_in;
        for (int64_t n = n0; n < n1; n++) {
            int32_t *row = table + inf[n] * V_in;
            const int32_t *x = tokens + n * L;
            for (int64_t t = 0; t < L; t++) row[x[t]] += 1;
        }
    }
}

/* Pass 3 of the limit mode: what hard attention reads in each sample, as argmax over the scores
 * S[x_t] (+ bonus at the trigger's position l, then s_eos for the EOS key if has_eos) with the first
 * maximum winning: ids[n] = x*_n + group V, group = the attended token, V_in (position l) or V_in + 1
 * (EOS). The scores must be finite. */
#define ATTEND(T, SUF)                                                                                  \
void attend_##SUF(const int32_t *tokens, const int64_t *pos, const int64_t *inf, int64_t N, int64_t parts,  \
                  int64_t L, int64_t V, int64_t V_in, const T *S, T bonus, T s_eos, int64_t has_eos,     \
                  int64_t *ids) {                                                                        \
    _Pragma("omp parallel for schedule(static, 1)")                                                      \
    for (int64_t i = 0; i < parts; i++) {                                                                \
    RANGE(N, parts, i);                                                                                  \
    for (int64_t n = n0; n < n1; n++) {                                                                  \
        const int32_t *x = tokens + n * L;                                                               \
        int64_t l = pos[n], best_t = 0;                                                                  \
        T best = S[x[0]] + (l == 0 ? bonus : (T)0);                                                      \
        for (int64_t t = 1; t < L; t++) {                                                                \
            T s = S[x[t]];                                                                               \
            if (t == l) s += bonus;                                                                      \
            if (s > best) { best = s; best_t = t; }                                                      \
        }                                                                                                \
        int64_t group = best_t == l ? V_in : x[best_t];                                                  \
        if (has_eos && s_eos > best) group = V_in + 1;                                                   \
        ids[n] = inf[n] + group * V;                                                                     \
    }                                                                                                    \
    }                                                                                                    \
}
ATTEND(float, f32)
ATTEND(double, f64)

/* Pass 2 of the limit mode: beta_n = (sum_t D[x*_n, x_t] + s_w[x*_n]) inv_K, and for every position
 * counts[x_{n,t}] += beta_n and sums[i] += beta_n (part i's accumulators, in double). */
#define BETA(T, SUF)                                                                                    \
void beta_##SUF(const int32_t *tokens, const int64_t *inf, int64_t N, int64_t parts, int64_t L,          \
                int64_t V_in, const T *D, const T *s_w, double inv_K, double *counts_all, double *sums) { \
    _Pragma("omp parallel for schedule(static, 1)")                                                      \
    for (int64_t i = 0; i < parts; i++) {                                                                \
    RANGE(N, parts, i);                                                                                  \
    double total = 0, *counts = counts_all + i * V_in;   /* part i's accumulators */                     \
    for (int64_t n = n0; n < n1; n++) {                                                                  \
        const T *row = D + inf[n] * V_in;                                                                \
        const int32_t *x = tokens + n * L;                                                               \
        double b0 = 0, b1 = 0, b2 = 0, b3 = 0;  /* four chains: the adds' latency, not one long chain */ \
        int64_t t = 0;                                                                                   \
        for (; t + 4 <= L; t += 4) {                                                                     \
            b0 += row[x[t]]; b1 += row[x[t + 1]]; b2 += row[x[t + 2]]; b3 += row[x[t + 3]];               \
        }                                                                                                \
        for (; t < L; t++) b0 += row[x[t]];                                                              \
        const double b = (((b0 + b1) + (b2 + b3)) + s_w[inf[n]]) * inv_K;                                \
        for (t = 0; t < L; t++) counts[x[t]] += b;                                                       \
        total += b;                                                                                      \
    }                                                                                                    \
    sums[i] += total;                                                                                    \
    }                                                                                                    \
}
BETA(float, f32)
BETA(double, f64)

/* The attention weights of a chunk of the logit-table step: for each sample the scores
 * s_t = S[x_t] (+ bonus at the trigger's position l) and, with has_eos, s_eos for the EOS key, and
 * their softmax a. Writes a_l[n] = a_{n,l}, a_eos[n] (if has_eos), a_bag[n] = a_{n,1..L} with a_{n,l}
 * set to 0 when split (the trigger's key kept apart), and rest[n] = sum_{t != l} a_{n,t} + a_{n,EOS}
 * (1 - a_{n,l}, summed from the other keys so that it keeps its digits when a_{n,l} -> 1). */
#define ATTN(T, SUF, EXP)                                                                               \
void attention_##SUF(const int32_t *tokens, const int64_t *pos, int64_t N, int64_t parts, int64_t L,     \
                     const T *S, T bonus, T s_eos, int64_t has_eos, int64_t split, T *a_bag, T *a_l,     \
                     T *a_eos, T *rest) {                                                                \
    _Pragma("omp parallel for schedule(static, 1)")                                                      \
    for (int64_t i = 0; i < parts; i++) {                                                                \
        RANGE(N, parts, i);                                                                              \
        for (int64_t n = n0; n < n1; n++) {                                                              \
            const int32_t *x = tokens + n * L;                                                           \
            T *a = a_bag + n * L;                                                                        \
            const int64_t l = pos[n];                                                                    \
            for (int64_t t = 0; t < L; t++) a[t] = S[x[t]];                                              \
            a[l] += bonus;                                                                               \
            T m = has_eos ? s_eos : a[0];                                                                \
            for (int64_t t = 0; t < L; t++) m = a[t] > m ? a[t] : m;                                     \
            T z = 0;                                                                                     \
            _Pragma("omp simd reduction(+:z)")                                                           \
            for (int64_t t = 0; t < L; t++) { T e = EXP(a[t] - m); a[t] = e; z += e; }                   \
            const T e_eos = has_eos ? EXP(s_eos - m) : (T)0;                                             \
            const T inv = (T)1 / (z + e_eos);                                                            \
            _Pragma("omp simd")                                                                          \
            for (int64_t t = 0; t < L; t++) a[t] *= inv;                                                 \
            const T al = a[l];                                                                           \
            a[l] = 0;                                 /* the others' sum, without a_l: no cancellation */ \
            T others = 0;                                                                                \
            _Pragma("omp simd reduction(+:others)")                                                      \
            for (int64_t t = 0; t < L; t++) others += a[t];                                              \
            a_l[n] = al;                                                                                 \
            rest[n] = others + e_eos * inv;                                                              \
            if (has_eos) a_eos[n] = e_eos * inv;                                                         \
            if (!split) a[l] = al;                                                                       \
        }                                                                                                \
    }                                                                                                    \
}
ATTN(float, f32, expf)
ATTN(double, f64, exp)

/* The softmax rows of the logit-table step, for a chunk (N, V), with what each row adds up going
 * to part i's accumulators (float64, each part's ld_acc entries apart (stats: 8) so that no two parts
 * write one cache line; stats[i] = (loss, hits); sums[i] = (2, V); ds[i] = (V_in + 2)):
 *   xi_n = xi_rest_n + c_split a_n T[x*_n] + c_tiv a_n xi_z + e_n xi_q     (the logits; e_n = a_eos[n],
 *                                                                         0 without a_eos)
 *   err_n = softmax(xi_n) - e_{y_n}                                       (written into err)
 *   stats[i] += (logsumexp(xi_n) - xi_{n,y_n}, [the first maximum of xi_n is at y_n])
 * and, where asked for:
 *   want_sums: sums[i][0] += c_tiv a_n err_n, sums[i][1] += e_n err_n      (the value gradient's trigger
 *                                                                         and EOS terms)
 *   ds (the attention gradient, want the split): with r_rest = err_n . (xi_rest_n + e_n xi_q) (the
 *     logits of every key but l), r_l = err_n . (T[x*_n] + c_tiv xi_z), beta = r_rest + a_n r_l,
 *     ds_l = a_n (rest_n r_l - r_rest): ds[i][x*_n] += ds_l, ds[i][x_{n,t}] -= a_bag[n,t] beta for
 *     every t, ds[i][V_in] += ds_l and, with a_eos, ds[i][V_in + 1] += e_n (err_n . xi_q - beta).
 * Three passes over the row, which stays in L1: max; exp and sum; normalise, dot and add. */
/* One entry of the rows' last pass: the probability, and (for the attention gradient) its dots. */
#define NORMALISE_AND_DOT(j)                                                                            \
    e[j] *= inv;                                                                                        \
    if (ds) {                                                                                           \
        rr += e[j] * xr[j];                                                                             \
        rl += e[j] * (tl[j] + c_tiv * xi_z[j]);                                                         \
        rq += e[j] * xi_q[j];                                                                           \
    }
#define ROWS(T, SUF, EXP, LOG, LOWEST, FLOOR)                                                           \
void rows_##SUF(int64_t N, int64_t parts, int64_t V, const T *xi_rest, const T *table, int64_t ldt,       \
                const int64_t *inf, const T *a_l, const T *xi_z, T c_split, T c_tiv, const T *a_eos,     \
                const T *xi_q, const int64_t *labels, T *err, int64_t lde, double *stats,                \
                int64_t want_sums, double *sums, T *scratch, double *ds, int64_t ld_acc,                 \
                const int32_t *tokens,                                                                   \
                int64_t L, int64_t V_in, const T *a_bag, const T *rest) {                                \
    _Pragma("omp parallel for schedule(static, 1)")                                                      \
    for (int64_t i = 0; i < parts; i++) {                                                                \
    RANGE(N, parts, i);                                                                                  \
    double *restrict at = sums + i * ld_acc, *restrict ae = at + V, *restrict dsi = ds + i * ld_acc;     \
    double loss_i = 0, hits_i = 0, ds_trig = 0, ds_eos = 0;  /* in registers: parts share cache lines */ \
    /* the trigger's sum of this part's rows in T (scratch, few hundred rows), added to the float64 total */ \
    T *ft = want_sums && c_tiv != 0 ? scratch + i * ld_acc : NULL;                                       \
    if (ft) for (int64_t j = 0; j < V; j++) ft[j] = 0;                                                   \
    for (int64_t n = n0; n < n1; n++) {                                                                  \
        const T *restrict xr = xi_rest + n * V;                                                          \
        const T *restrict tl = table + inf[n] * ldt;                                                     \
        T *restrict e = err + n * lde;                                                                   \
        const T an = a_l[n], c1 = an * c_split, c2 = an * c_tiv, ce = a_eos ? a_eos[n] : (T)0;          \
        T m = LOWEST;                 /* the stored logits' maximum, compared with them exactly below */ \
        _Pragma("omp simd reduction(max:m)")                                                             \
        for (int64_t j = 0; j < V; j++) {                                                                \
            T x = xr[j] + c1 * tl[j] + c2 * xi_z[j] + ce * xi_q[j];                                      \
            e[j] = x;                                                                                    \
            m = x > m ? x : m;                                                                           \
        }                                                                                                \
        const int64_t y = labels[n];                                                                     \
        const T xy = e[y];                                                                               \
        int64_t h = xy == m, ties = 0;          /* the label holds the maximum, and no earlier entry */ \
        if (h) {                                                                                         \
            _Pragma("omp simd reduction(+:ties)")                                                        \
            for (int64_t j = 0; j < y; j++) ties += e[j] == m;                                           \
            h = ties == 0;                                                                               \
        }                                                                                                \
        T s = 0;                                                                                         \
        _Pragma("omp simd reduction(+:s)")                                                               \
        for (int64_t j = 0; j < V; j++) {                                                                \
            const T u = e[j] - m;     /* below FLOOR, exp(u) is under 1e-34 of the sum (>= 1): 0, and */ \
            T p = u < FLOOR ? (T)0 : EXP(u > FLOOR ? u : FLOOR);   /* libmvec sees no out-of-range input */ \
            e[j] = p;                                                                                    \
            s += p;                                                                                      \
        }                                                                                                \
        const T inv = (T)1 / s;                                                                          \
        const T we = want_sums ? ce : (T)0;                                                              \
        T rr = 0, rl = 0, rq = 0;                                                                        \
        /* normalise, the dots and the trigger's sum, one pass; two loops, so that the dots are summed */ \
        /* in the same order whether or not the sum is wanted (need_V changes no digit of the rest)   */ \
        if (ft) {                                                                                        \
            _Pragma("omp simd reduction(+:rr, rl, rq)")                                                  \
            for (int64_t j = 0; j < V; j++) { NORMALISE_AND_DOT(j); ft[j] += c2 * e[j]; }                \
        } else {                                                                                         \
            _Pragma("omp simd reduction(+:rr, rl, rq)")                                                  \
            for (int64_t j = 0; j < V; j++) { NORMALISE_AND_DOT(j); }                                    \
        }                                                                                                \
        e[y] -= 1;                                                                                       \
        if (ft) ft[y] -= c2;                                                                             \
        if (want_sums && a_eos) {                                                                        \
            _Pragma("omp simd")                                                                          \
            for (int64_t j = 0; j < V; j++) ae[j] += (double)(we * e[j]);                                \
        }                                                                                                \
        loss_i += (double)LOG(s) + (double)m - (double)xy;                                               \
        hits_i += (double)h;                                                                             \
        if (ds) {                                                                                        \
            rr -= xr[y];                                                                                 \
            rl -= tl[y] + c_tiv * xi_z[y];                                                               \
            rq -= xi_q[y];                                                                               \
            const double r_rest = (double)rr + (double)ce * (double)rq, r_l = rl;                        \
            const double beta = r_rest + (double)an * r_l;                                               \
            const double ds_l = (double)an * ((double)rest[n] * r_l - r_rest);                           \
            const int32_t *x = tokens + n * L;                                                           \
            const T *ab = a_bag + n * L;                                                                 \
            dsi[inf[n]] += ds_l;                                                                         \
            for (int64_t t = 0; t < L; t++) dsi[x[t]] -= (double)ab[t] * beta;                           \
            ds_trig += ds_l;                                                                             \
            if (a_eos) ds_eos += (double)ce * ((double)rq - beta);                                       \
        }                                                                                                \
    }                                                                                                    \
    if (ft) {                                                                                            \
        for (int64_t j = 0; j < V; j++) at[j] += (double)ft[j];                                          \
    }                                                                                                    \
    stats[i * 8] += loss_i;                                                                              \
    stats[i * 8 + 1] += hits_i;                                                                          \
    if (ds) { dsi[V_in] += ds_trig; dsi[V_in + 1] += ds_eos; }                                           \
    }                                                                                                    \
}
ROWS(float, f32, expf, logf, -FLT_MAX, -80.0f)
ROWS(double, f64, exp, log, -DBL_MAX, -700.0)

/* 64-byte vectors (GCC's vector extension: one AVX-512 register, or two AVX2 ones), loaded and stored
 * unaligned; a column block is eight of them (CB = 128 floats or 64 doubles). */
typedef float vf32 __attribute__((vector_size(64)));
typedef float vf32u __attribute__((vector_size(64), aligned(4), may_alias));
typedef double vf64 __attribute__((vector_size(64)));
typedef double vf64u __attribute__((vector_size(64), aligned(8), may_alias));
#define GROUP 64
/* Eight vector sums s0..s7 (one column block): declare, add wt times a block of a row, store or add. */
#define BLOCK_DECL(VT) VT s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0}
#define BLOCK_ADD(VTU, LANES, row, wt)                                                                 \
    s0 += (wt) * *(const VTU *)(row);                 s1 += (wt) * *(const VTU *)((row) + LANES);      \
    s2 += (wt) * *(const VTU *)((row) + 2 * LANES);   s3 += (wt) * *(const VTU *)((row) + 3 * LANES);  \
    s4 += (wt) * *(const VTU *)((row) + 4 * LANES);   s5 += (wt) * *(const VTU *)((row) + 5 * LANES);  \
    s6 += (wt) * *(const VTU *)((row) + 6 * LANES);   s7 += (wt) * *(const VTU *)((row) + 7 * LANES)
#define BLOCK_PUT(VTU, LANES, out, OP)                                                                 \
    *(VTU *)(out) OP s0;                 *(VTU *)((out) + LANES) OP s1;                                \
    *(VTU *)((out) + 2 * LANES) OP s2;   *(VTU *)((out) + 3 * LANES) OP s3;                            \
    *(VTU *)((out) + 4 * LANES) OP s4;   *(VTU *)((out) + 5 * LANES) OP s5;                            \
    *(VTU *)((out) + 6 * LANES) OP s6;   *(VTU *)((out) + 7 * LANES) OP s7

/* The forward bag of the logit-table step: xi[n] = sum_t a[n, t] T[x_{n,t}] (T (V_in, V), xi (N, V)),
 * column block by column block: a block of T stays in L2 while a group of GROUP samples sweeps it,
 * and each sample's block sum stays in eight vector registers. */
#define FWD(T, SUF, VT, VTU, LANES)                                                                     \
void forward_bag_##SUF(const int32_t *tokens, const T *a, int64_t N, int64_t parts, int64_t L, int64_t V,  \
                       const T *table, int64_t ldt, T *xi) {                                             \
    const int64_t CB = 8 * LANES;                                                                        \
    _Pragma("omp parallel for schedule(static, 1)")                                                      \
    for (int64_t i = 0; i < parts; i++) {                                                                \
        RANGE(N, parts, i);                                                                              \
        for (int64_t g0 = n0; g0 < n1; g0 += GROUP) {                                                    \
            const int64_t g1 = g0 + GROUP < n1 ? g0 + GROUP : n1;                                        \
            int64_t c = 0;                                                                               \
            for (; c + CB <= V; c += CB) {                                                               \
                for (int64_t n = g0; n < g1; n++) {                                                      \
                    const int32_t *x = tokens + n * L;                                                   \
                    const T *w = a + n * L;                                                              \
                    BLOCK_DECL(VT);                                                                      \
                    for (int64_t t = 0; t < L; t++) {                                                    \
                        const T *row = table + (int64_t)x[t] * ldt + c;                                  \
                        const T wt = w[t];                                                               \
                        BLOCK_ADD(VTU, LANES, row, wt);                                                  \
                    }                                                                                    \
                    T *out = xi + n * V + c;                                                             \
                    BLOCK_PUT(VTU, LANES, out, =);                                                       \
                }                                                                                        \
            }                                                                                            \
            for (int64_t n = g0; c < V && n < g1; n++) {  /* the last, narrower block */                 \
                const int32_t *x = tokens + n * L;                                                       \
                const int64_t width = V - c;                                                             \
                T acc[8 * LANES] = {0};                                                                  \
                for (int64_t t = 0; t < L; t++) {                                                        \
                    const T *row = table + (int64_t)x[t] * ldt + c, wt = a[n * L + t];                   \
                    for (int64_t j = 0; j < width; j++) acc[j] += wt * row[j];                           \
                }                                                                                        \
                for (int64_t j = 0; j < width; j++) xi[n * V + c + j] = acc[j];                          \
            }                                                                                            \
        }                                                                                                \
    }                                                                                                    \
}
FWD(float, f32, vf32, vf32u, 16)
FWD(double, f64, vf64, vf64u, 8)

/* The reverse bag: P[j] += sum over the positions (n, t) with x_{n,t} = j of a[n, t] err[n], from a
 * chunk's positions n L + t sorted by token (`order`, token j's run starting at offsets[j], ending at
 * offsets[j + 1] or at N L). Each thread owns a run of tokens (rows of P: no private copies), chosen
 * so the threads get about as many positions each; column block by column block, a block of err
 * (N x CB) stays in L2 and each token's block sum in eight vector registers. */
#define REV(T, SUF, VT, VTU, LANES)                                                                     \
void reverse_bag_##SUF(const int32_t *order, const int32_t *offsets, const T *a, int64_t N, int64_t parts, \
                       int64_t L, int64_t V, int64_t V_in, const T *err, int64_t lde, T *P, int32_t *rows_buf, \
                       T *w_buf) {                                                                       \
    const int64_t total = N * L, CB = 8 * LANES;                                                         \
    _Pragma("omp parallel for schedule(static, 1)")                                                      \
    for (int64_t i = 0; i < parts; i++) {                                                                \
        int64_t j0 = 0, j1;                               /* tokens whose runs start in this share */    \
        const int64_t p_lo = i * total / parts, p_hi = (i + 1) * total / parts;                          \
        while (j0 < V_in && offsets[j0] < p_lo) j0++;                                                    \
        j1 = j0;                                                                                         \
        while (j1 < V_in && (i == parts - 1 || offsets[j1] < p_hi)) j1++;                                \
        if (j0 >= j1) continue;                                                                          \
        const int64_t q0 = offsets[j0], q1 = j1 < V_in ? offsets[j1] : total;                            \
        for (int64_t p = q0; p < q1; p++) {               /* rows and weights of the share, once */      \
            rows_buf[p] = order[p] / L;                                                                  \
            w_buf[p] = a[order[p]];                                                                      \
        }                                                                                                \
        int64_t c = 0;                                                                                   \
        for (; c + CB <= V; c += CB) {                                                                   \
            for (int64_t j = j0; j < j1; j++) {                                                          \
                const int64_t e0 = offsets[j], e1 = j + 1 < V_in ? offsets[j + 1] : total;               \
                if (e0 == e1) continue;                                                                  \
                BLOCK_DECL(VT);                                                                          \
                for (int64_t p = e0; p < e1; p++) {                                                      \
                    const T *row = err + (int64_t)rows_buf[p] * lde + c;                                 \
                    const T wt = w_buf[p];                                                               \
                    BLOCK_ADD(VTU, LANES, row, wt);                                                      \
                }                                                                                        \
                T *out = P + j * V + c;                                                                  \
                BLOCK_PUT(VTU, LANES, out, +=);                                                          \
            }                                                                                            \
        }                                                                                                \
        for (int64_t j = j0; c < V && j < j1; j++) {      /* the last, narrower block */                 \
            const int64_t e0 = offsets[j], e1 = j + 1 < V_in ? offsets[j + 1] : total, width = V - c;    \
            T acc[8 * LANES] = {0};                                                                      \
            for (int64_t p = e0; p < e1; p++) {                                                          \
                const T *row = err + (int64_t)rows_buf[p] * lde + c, wt = w_buf[p];                      \
                for (int64_t k = 0; k < width; k++) acc[k] += wt * row[k];                               \
            }                                                                                            \
            for (int64_t k = 0; k < width; k++) P[j * V + c + k] += acc[k];                              \
        }                                                                                                \
    }                                                                                                    \
}
REV(float, f32, vf32, vf32u, 16)
REV(double, f64, vf64, vf64u, 8)
