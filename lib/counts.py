"""The fast route: gradients and the limit-mode steps from token ids and count tables (chapters 4-7).

Equal to the direct route (`lib.gradients`) to float precision (tests/test_counts.py), but it never
builds an (N, L, d) tensor: the forward pass runs on token ids, chunk by chunk (`lib.tokens`).

`gradients(problem, params, batch)`: the loss and both gradients at any (W_V, W_KQ). The attention
gradient is k q^T (rank one) with, for r_n = J_n^T W_V^T g_n and ds_{n,t} = a_{n,t} r_n.(v_{n,t} - o_n),

    N k = sum_n sum_t ds_{n,t} h_{n,t} = E^T (sum_n sum_t ds_{n,t} 1[x_t = j])_j + z_trig sum_n ds_{n,l}
          (+ z_EOS sum_n ds_{n,EOS}):   one weighted bincount over the token ids.

The limit mode of the attention-only model needs no per-sample d-vector at all. Write c_n for the
token-count vector of sample n, x*_n for its informative token, K = L (+1 with an EOS key),
s = [trigger in value] z_trig + [EOS key] z_EOS, and tiv = [trigger in value]:

Step 1.  G1 = (U_Pi - u_bar)^T (A^T E + n s^T) / (N K), with the V_in x V table
         A[j, i] = sum_n 1[x*_n = i] c_{n,j} (one bincount of pair ids) and n_i the number of samples
         whose informative token is i.
Step 2.  r_n = w_{x*_n} with w_i = G1^T (u_{Pi i} - u_bar): N K k = pair_term - E^T beta_counts
         - (sum_n beta_n) (z_trig [+ z_EOS]), where pair_term = sum_j e_j (e_j . Q_j) + trigger/EOS
         terms, Q = A W, and beta_n = obar_n . r_n = (sum_t D[x*_n, x_t] + s . w_{x*_n}) / K with the
         table D = W E^T; beta_counts = sum_n beta_n c_n is a weighted bincount.
Step 3.  scores h_t^T k = (E k)[x_t] + 1[t = l] z_trig . k; hard attention picks one value, and counting
         (informative, attended) pairs gives G3 = (U_Pi - u_bar)^T M3 / N.
O(N L + V^2 d) in total. `lib.schedule.three_steps` uses this fast path for the attention-only limit
mode and the generic `gradients` step otherwise; tests prove the two agree.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as Fn

from .embeddings import Problem
from .gradients import Gradients, output_error
from .models import Params, check_params
from .task import Batch, check_batch
from .tokens import chunk_size, chunks, forward_chunk, pooled_values, position_scores, value_offset


# ----------------------------------------------------------------------------- the generic step

def weighted_token_sum(problem: Problem, tokens: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(V_in,): sum over (n, t) of weight[n, t] 1[x_{n,t} = j], a weighted bincount (weight (B, L))."""
    out = torch.bincount(tokens.reshape(-1), weights=weight.reshape(-1), minlength=problem.cfg.V_in)
    return out.to(weight.dtype)


def gradients(problem: Problem, params: Params, batch: Batch) -> Gradients:
    """Loss and closed-form gradients of W_V and W_KQ at any params, on token ids (no (N, L, d) tensor)."""
    check_params(problem, params)
    check_batch(problem, batch)
    return count_gradients(problem, params, batch)


def count_gradients(problem: Problem, params: Params, batch: Batch, need_V: bool = True,
                    need_W: bool = True, uniform_error: bool = False) -> Gradients:
    """The generic step. `need_V` / `need_W` skip a gradient that is not needed (it is returned as
    zeros); `uniform_error=True` freezes the output error at u_bar - u_y (loss reported: log V)."""
    cfg = problem.cfg
    E, U, z, q = problem.E, problem.U, problem.z_trig, problem.z_eos
    W_V, w = params.W_V, params.W_KQ @ q
    # argmax attention is piecewise constant in W_KQ; with one key attention is constant: grad exactly 0
    need_W = need_W and not params.hard and cfg.n_keys > 1
    uniform_attention = not params.hard and not bool(w.any())
    L, N = cfg.L, batch.N
    grad_V = torch.zeros_like(W_V)
    ds_tokens = torch.zeros(cfg.V_in, dtype=E.dtype, device=E.device)   # sum ds_{n,t} 1[x_t = j]
    ds_trig = E.new_zeros(())                                            # sum_n ds_{n,l}
    ds_eos = E.new_zeros(())                                             # sum_n ds_{n,EOS}
    loss = E.new_zeros(()) if not uniform_error else None
    correct = 0
    readout = W_V.T @ U.T                                                # (width, V), formed once
    size = chunk_size(problem)
    for b in chunks(batch, size):
        if uniform_attention:
            a = torch.full((b.N, cfg.n_keys), 1.0 / cfg.n_keys, dtype=E.dtype, device=E.device)
            o = pooled_values(problem, b)
            phi = problem.features.phi(o, problem.F)
            logits = None if uniform_error else phi @ readout
        else:
            f = forward_chunk(problem, W_V, w, b, params.hard, readout)
            a, o, phi, logits = f.attn, f.o, f.phi, f.logits
        if uniform_error:
            g = problem.u_bar - U[b.labels]                                # (B, d)
        else:
            loss = loss + Fn.cross_entropy(logits, b.labels, reduction="sum")
            correct += int((logits.argmax(1) == b.labels).sum())
            g = output_error(problem, logits, b.labels)                    # (B, d)
        if need_V:
            grad_V += g.T @ phi
        if need_W:
            r = problem.features.vjp(o, problem.F, g @ W_V)               # (B, d)
            r_dot_v = (r @ E.T).gather(1, b.tokens)                        # (B, L): r . e_{x_t}
            r_dot_v = r_dot_v + Fn.one_hot(b.pos, L).to(r.dtype) * (r @ z)[:, None] * float(cfg.trigger_in_value)
            if cfg.eos_key:
                r_dot_v = torch.cat([r_dot_v, (r @ q)[:, None]], 1)        # (B, L + 1)
            ds = a * (r_dot_v - (r * o).sum(1, keepdim=True))               # (B, K): dL/ds, times N
            ds_tokens += weighted_token_sum(problem, b.tokens, ds[:, :L])
            ds_trig = ds_trig + ds[:, :L].gather(1, b.pos[:, None]).sum()
            if cfg.eos_key:
                ds_eos = ds_eos + ds[:, L].sum()
    grad_V /= N
    if need_W:
        k = (E.T @ ds_tokens + ds_trig * z + ds_eos * q) / N
        grad_W = torch.outer(k, q)
    else:
        grad_W = torch.zeros_like(params.W_KQ)
    loss_value = math.log(cfg.V) if uniform_error else float(loss) / N
    return Gradients(loss_value, grad_V, grad_W, None if uniform_error else correct)


# ----------------------------------------------------------------------------- attn-only, limit mode

PASS_SAMPLES = 2 ** 14   # samples per chunk of the token passes: (chunk, L) ids stay in cache


def count_chunk_size(problem: Problem) -> int:
    """Samples per chunk for passes whose temporaries are (chunk, L) token ids."""
    return PASS_SAMPLES


def id_dtype(problem: Problem, batch: Batch) -> torch.dtype:
    """int32 for the flat ids of the count tables when the batch stores int32 tokens and every id
    fits (V (V_in + 2) < 2^31): bincount and embedding_bag read int32 ids several times faster than
    int64 ones (one bincount over 64 M ids: 0.03 s against 0.17 s on 2 cores)."""
    small = problem.cfg.V * (problem.cfg.V_in + 2) < 2 ** 31
    return torch.int32 if small and batch.tokens.dtype == torch.int32 else torch.long


def pair_ids(problem: Problem, b: Batch, buf: torch.Tensor) -> torch.Tensor:
    """(B, L) flat ids x*_n V_in + x_{n,t} into a (V, V_in) table, written into a reused buffer
    (of the dtype `id_dtype` chose)."""
    return torch.add(b.tokens.to(buf.dtype), b.informative.to(buf.dtype)[:, None], alpha=problem.cfg.V_in,
                     out=buf[: b.N])


def count_tables(problem: Problem, batch: Batch, size: int = PASS_SAMPLES):
    """A (V_in, V): A[j, i] = sum_n 1[x*_n = i] c_{n,j};  n (V,): informative-token counts.
    One bincount of the pair ids x*_n V_in + x_{n,t}, chunk by chunk through a reused buffer."""
    cfg = problem.cfg
    dt, dev = problem.E.dtype, batch.tokens.device
    A_T = torch.zeros(cfg.V * cfg.V_in, dtype=torch.long, device=dev)  # (V, V_in), flattened
    buf = torch.empty(min(size, batch.N), cfg.L, dtype=id_dtype(problem, batch), device=dev)
    for b in chunks(batch, size, widen=False):                          # int32 ids: no widening copy
        A_T += torch.bincount(pair_ids(problem, b, buf).view(-1), minlength=A_T.numel())
    n = torch.bincount(batch.informative, minlength=cfg.V).to(dt)
    return A_T.view(cfg.V, cfg.V_in).T.to(dt), n


def limit_attn(problem: Problem, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(G1, k, G3) of the limit mode for the attention-only model, from count tables only:
    three passes over the token ids (the count table, beta_n, the hard attention)."""
    cfg = problem.cfg
    N, K, V, L = batch.N, cfg.n_keys, cfg.V, cfg.L
    E, z, q = problem.E, problem.z_trig, problem.z_eos
    dt, dev = E.dtype, E.device
    tiv = 1.0 if cfg.trigger_in_value else 0.0
    size = count_chunk_size(problem)
    idt = id_dtype(problem, batch)
    buf = torch.empty(min(size, N), L, dtype=idt, device=dev)

    # step 1 (pass 1): G1 from the count table
    A, n = count_tables(problem, batch, size)
    dU = problem.U_perm - problem.u_bar                                # (V, d): u_{Pi i} - u_bar
    s = value_offset(problem)
    G1 = dU.T @ (A.T @ E + n[:, None] * s) / (N * K)                   # (d, d)
    if K == 1:                # one key: attention is constant, the W_KQ gradient exactly zero
        k = torch.zeros_like(z)
    else:
        # step 2 (pass 2): r_n = w_{x*_n}, w_i = G1^T (u_{Pi i} - u_bar), D[i, j] = w_i . e_j
        W = dU @ G1                                                    # (V, d): rows w_i
        D = W @ E.T                                                    # (V, V_in)
        E_content = E[:V]
        z_w, e_w = W @ z, (E_content * W).sum(1)                       # (V,), (V,)
        pair_term = (E.T @ (A * D.T).sum(1) + tiv * (E_content.T @ (n * z_w)) + (n @ e_w) * z
                     + tiv * (n @ z_w) * z)
        s_w = W @ s                                                    # (V,)
        D_flat = D.reshape(-1, 1)
        beta_counts = torch.zeros(cfg.V_in, dtype=dt, device=dev)      # sum_n beta_n c_n
        beta_sum = E.new_zeros(())
        for b in chunks(batch, size, widen=False):
            beta = (Fn.embedding_bag(pair_ids(problem, b, buf), D_flat, mode="sum")[:, 0]
                    + s_w[b.informative]) / K                          # (B,): obar_n . r_n
            beta_counts += weighted_token_sum(problem, b.tokens, beta[:, None].expand(b.tokens.shape))
            beta_sum = beta_sum + beta.sum()
        shift = z.clone()
        if cfg.eos_key:
            pair_term = pair_term + (n @ (W @ q)) * q
            shift = shift + q
        k = (pair_term - E.T @ beta_counts - beta_sum * shift) / (N * K)   # (d,)

    # step 3 (pass 3): hard attention along k; count (attended, informative) pairs in one bincount
    # with ids  attended_token V + x*  (a plain position),  V_in V + x*  (the trigger),  (V_in + 1) V + x*  (EOS)
    S = E @ k                                                          # (V_in,): scores of plain tokens
    bonus, s_eos = z @ k, q @ k
    ids = torch.empty(N, dtype=idt, device=dev)
    for start, b in zip(range(0, N, size), chunks(batch, size, widen=False)):
        sc = S.index_select(0, b.tokens.reshape(-1)).view(b.N, L)      # (B, L) table lookup (5x faster than S[ids])
        sc.scatter_add_(1, b.pos[:, None], bonus.expand(b.N, 1).contiguous())
        if cfg.eos_key:
            sc = torch.cat([sc, s_eos.expand(b.N, 1)], 1)
        t = sc.argmax(1)
        group = torch.where(t == b.pos, cfg.V_in, b.tokens.gather(1, t.clamp_max(L - 1)[:, None])[:, 0])
        if cfg.eos_key:
            group = torch.where(t == L, cfg.V_in + 1, group)
        torch.add(b.informative.to(idt), group.to(idt), alpha=V, out=ids[start:start + b.N])
    counts = torch.bincount(ids, minlength=(cfg.V_in + 2) * V)
    counts = counts.view(cfg.V_in + 2, V).to(dt)
    M3 = (counts[:cfg.V_in].T @ E + counts[cfg.V_in][:, None] * (E[:V] + tiv * z)
          + counts[cfg.V_in + 1][:, None] * q)                          # (V, d)
    G3 = dU.T @ M3 / N
    return G1, k, G3


# ----------------------------------------------------------------------------- attn-only, finite mode

def finite_attn(problem: Problem, batch: Batch, eta: float, gamma_W: float | None, attn_scale: float):
    """(G1, W1, gamma_W, G3) of the finite mode for the attention-only model, from token ids.

    With V1 = eta G1 the logits read the V_in x V table T1 = E V1^T U^T (T1[j] = the logits that
    token j adds): xi_n = sum_t a_{n,t} T1[x_t] + a_l tiv U V1 z_trig (+ a_EOS U V1 z_EOS), one
    `embedding_bag` over the token ids, O(L V) per sample instead of O((L + V) d). In step 2
    (uniform attention) err_n = softmax(xi_n) - e_{y_n}, r_n = V1^T U^T err_n, r_n . obar_n = err_n . xi_n
    and r_n . e_{x_t} is a gather from r_n E^T. Step 3 needs sum_n err_n o_n^T (one GEMM)."""
    cfg = problem.cfg
    N, K, L, V = batch.N, cfg.n_keys, cfg.L, cfg.V
    E, U, z, q = problem.E, problem.U, problem.z_trig, problem.z_eos
    tiv = 1.0 if cfg.trigger_in_value else 0.0
    A, n = count_tables(problem, batch, count_chunk_size(problem))
    dU = problem.U_perm - problem.u_bar
    G1 = dU.T @ (A.T @ E + n[:, None] * value_offset(problem)) / (N * K)          # step 1
    V1 = eta * G1
    UV1 = U @ V1                                                       # (V, d)
    T1 = E @ UV1.T                                                     # (V_in, V): logits of token j
    xi_z, xi_q = UV1 @ z, UV1 @ q                                      # (V,): logits of z_trig, z_EOS
    size = max(1, (2 ** 22) // max(V, cfg.V_in, L, cfg.d))

    # step 2: uniform attention, W_V = V1
    ds_tokens = torch.zeros(cfg.V_in, dtype=E.dtype, device=E.device)
    ds_trig, ds_eos = E.new_zeros(()), E.new_zeros(())
    offset = tiv * xi_z + (xi_q if cfg.eos_key else 0.0)
    for b in chunks(batch, size):
        xi = (Fn.embedding_bag(b.tokens, T1, mode="sum") + offset) / K                # (B, V)
        err = torch.softmax(xi, 1)
        err[torch.arange(b.N, device=E.device), b.labels] -= 1.0
        r = err @ UV1                                                   # (B, d): r_n = V1^T U^T err_n
        dots = (r @ E.T).gather(1, b.tokens)                            # (B, L): r_n . e_{x_t}
        beta = (err * xi).sum(1)                                        # r_n . obar_n
        r_z = err @ xi_z                                                # r_n . z_trig
        ds_tokens += weighted_token_sum(problem, b.tokens, dots)
        ds_tokens += tiv * torch.bincount(b.informative, weights=r_z, minlength=cfg.V_in).to(E.dtype)
        ds_tokens -= weighted_token_sum(problem, b.tokens, beta[:, None].expand(b.tokens.shape))
        r_inf = (err * T1[b.informative]).sum(1)                        # r_n . e_{x*_n}
        ds_trig = ds_trig + (r_inf + tiv * r_z - beta).sum()
        if cfg.eos_key:
            ds_eos = ds_eos + (err @ xi_q - beta).sum()
    k_grad = (E.T @ ds_tokens + ds_trig * z + ds_eos * q) / (N * K) if K > 1 else torch.zeros_like(z)
    grad_W = torch.outer(k_grad, q)
    if gamma_W is None:
        norm = float(k_grad.norm() * q.dot(q))
        gamma_W = attn_scale / norm if norm > 0 else 0.0
    W1 = -gamma_W * grad_W

    # step 3: softmax attention along W1 q, W_V = V1
    w = W1 @ q
    err_o = torch.zeros(V, cfg.d, dtype=E.dtype, device=E.device)      # sum_n err_n o_n^T
    for b in chunks(batch, size):
        a = torch.softmax(position_scores(problem, b, w), 1)            # (B, K)
        xi = Fn.embedding_bag(b.tokens, T1, mode="sum", per_sample_weights=a[:, :L].contiguous())
        a_l = a.gather(1, b.pos[:, None])
        xi = xi + tiv * a_l * xi_z
        if cfg.eos_key:
            xi = xi + a[:, L:] * xi_q
        err = torch.softmax(xi, 1)
        err[torch.arange(b.N, device=E.device), b.labels] -= 1.0
        err_o += err.T @ pooled_values(problem, b, a)
    G3 = -(U.T @ err_o) / N
    return G1, W1, gamma_W, G3
