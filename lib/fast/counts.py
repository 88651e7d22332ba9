"""The fast route: gradients and the limit-mode steps from token ids and count tables (chapters 4-7).

Equal to the direct route (`lib.gradients`) to float precision (tests/test_counts.py), but it never
builds an (N, L, d) tensor: the forward pass runs on token ids, chunk by chunk (`lib.fast.tokens`).

`gradients(problem, params, batch)`: the loss and both gradients at any (W_V, W_KQ), on one of two
routes that compute the same numbers. The *feature route* (any model) forms the pooled value o_n and
the logits U W_V phi(o_n) per sample: O((V + V_in + d) d) per sample in GEMMs. The *logit-table route*
(`table_gradients`, the linear feature map of the attention-only model, soft attention) reads the
logits from a V_in x V table and sends the output error back through an inverted index of the batch
(`lib.fast.tokens.TokenIndex`): O(L V) per sample against O((V + d) d), taken when L <= d (measured
about as fast at L = d and 2-5x faster at L << d, bench/bench_train.py). The attention
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
Step 3.  scores h_t^T k = (E k)[x_t] + 1[t = l] z_trig . k; hard attention picks one value (read from
         the ranks of E k, `attended_groups`), and counting
         (informative, attended) pairs gives G3 = (U_Pi - u_bar)^T M3 / N.
O(N L + V^2 d) in total. `lib.learning.schedule.three_steps` uses this fast path for the attention-only limit
mode, `finite_attn` (step 1 from the count table, steps 2 and 3 the generic step) for its finite mode,
and the generic step otherwise; tests prove they agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as Fn

from ..core.embeddings import Problem
from ..core.gradients import Gradients, output_error
from ..core.models import Params, check_params, model_logits, readout_matrix
from ..core.task import Batch, check_batch
from .tokens import chunk_size, chunks, forward_chunk, pooled_values, position_scores, token_index


# ----------------------------------------------------------------------------- the generic step

def weighted_token_sum(problem: Problem, tokens: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(V_in,): sum over (n, t) of weight[n, t] 1[x_{n,t} = j], a weighted bincount (weight (B, L))."""
    out = torch.bincount(tokens.reshape(-1), weights=weight.reshape(-1), minlength=problem.cfg.V_in)
    return out.to(weight.dtype)


def gradients(problem: Problem, params: Params, batch: Batch) -> Gradients:
    """Loss and closed-form gradients of W_V and W_KQ at any params, on token ids (no (N, L, d) tensor)."""
    check_params(problem, params)
    check_batch(problem, batch)
    return _count_gradients(problem, params, batch)


def uses_tables(problem: Problem, params: Params) -> bool:
    """Does the generic step take the logit-table route (`table_gradients`)? For a linear feature map
    with soft attention, when its O(L V) per sample beats the O((V + V_in + d) d) of the feature route
    (L <= d: measured faster at V = 256, d = 128, L = 16 and V = 1024, d = 256, L = 64, see bench/)."""
    return problem.features.linear and not params.hard and problem.cfg.L <= problem.cfg.d


def count_gradients(problem: Problem, params: Params, batch: Batch, need_V: bool = True,
                    need_W: bool = True, uniform_error: bool = False, tables: bool | None = None) -> Gradients:
    """The generic step (`_count_gradients`, below) after checking the params and the batch."""
    check_params(problem, params)
    check_batch(problem, batch)
    return _count_gradients(problem, params, batch, need_V, need_W, uniform_error, tables)


def table_gradients(problem: Problem, params: Params, batch: Batch, need_V: bool = True,
                    need_W: bool = True) -> Gradients:
    """The logit-table route (`_table_gradients`, below) after checking the params and the batch."""
    check_params(problem, params)
    check_batch(problem, batch)
    return _table_gradients(problem, params, batch, need_V, need_W)


def _count_gradients(problem: Problem, params: Params, batch: Batch, need_V: bool = True,
                    need_W: bool = True, uniform_error: bool = False, tables: bool | None = None) -> Gradients:
    """The generic step. `need_V` / `need_W` skip a gradient that is not needed (it is returned as
    zeros); `uniform_error=True` freezes the output error at u_bar - u_y (loss reported: log V).
    `tables`: take the logit-table route (True), the feature route (False), or choose (None,
    `uses_tables`); both compute the same numbers (tests/test_count_gradients.py). The frozen output
    error (`uniform_error`, the limit mode's steps) has no table form: it always takes the feature route."""
    if tables is None:
        tables = uses_tables(problem, params)
    if tables and not uniform_error:
        if not problem.features.linear or params.hard:
            raise ValueError("tables=True needs a linear feature map (model 'attn') and soft attention")
        return _table_gradients(problem, params, batch, need_V, need_W)
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
    readout = readout_matrix(problem, W_V)                               # (width, V), formed once
    size = chunk_size(problem)
    for b in chunks(batch, size):
        if uniform_attention:
            a = torch.full((b.N, cfg.n_keys), 1.0 / cfg.n_keys, dtype=E.dtype, device=E.device)
            o = pooled_values(problem, b)
            phi = problem.features.phi(o, problem.F)
            logits = None if uniform_error else model_logits(problem, W_V, phi, readout)
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


# ----------------------------------------------------------------------------- linear features: logit tables

TABLE_ELEMENTS = 2 ** 20   # elements of a chunk's (B, V) logits in the table route (4 MiB in float32)


def table_chunk_size(problem: Problem) -> int:
    """Samples per chunk of the table route: (chunk, V) logits near 2^20 elements."""
    return max(1, TABLE_ELEMENTS // max(problem.cfg.V, problem.cfg.V_in))


def hits_and_max(logits: torch.Tensor, logit_y: torch.Tensor, labels: torch.Tensor) -> tuple[int, torch.Tensor]:
    """(number of rows whose argmax is the label, (B,) row maxima), for finite logits. The argmax is
    the first maximum, as `torch.argmax`; it is read from the largest other logit (`amax` with the label's entry masked
    in place and restored: 15x faster than argmax on CPU), and argmax itself runs only on rows where
    another logit ties the label's."""
    lab = labels[:, None]
    logits.scatter_(1, lab, -torch.inf)
    other = logits.amax(1)
    logits.scatter_(1, lab, logit_y[:, None])
    n = int((logit_y > other).sum())
    tied = logit_y == other
    if bool(tied.any()):
        n += int((logits[tied].argmax(1) == labels[tied]).sum())
    return n, torch.maximum(other, logit_y)


def cross_entropy_of(row_max: torch.Tensor, logit_y: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """sum_n -log softmax(xi_n)_{y_n} from the softmax `probs` (B, V): logsumexp(xi_n) = m_n - log p_max,n
    with m_n the largest logit and p_max,n = exp(m_n - logsumexp) >= 1/V its probability, which never
    underflows (log p_y would, at logit gaps beyond ~87 in float32)."""
    return (row_max - logit_y - torch.log(probs.amax(1))).sum()


def _table_gradients(problem: Problem, params: Params, batch: Batch, need_V: bool = True,
                    need_W: bool = True) -> Gradients:
    """The generic step for a linear feature map (phi(o) = o), through V_in x V logit tables.

    With M = U W_V (V, d) the logits are linear in the pooled value: xi_n = M o_n = sum_t a_{n,t} T[x_t]
    + a_{n,l} tiv M z_trig (+ a_{n,EOS} M z_EOS) with the table T = E M^T (V_in, V): one weighted
    bag of table rows per chunk, O(L V) per sample. With err_n = softmax(xi_n) - e_{y_n} and
    P = sum_{n,t} a_{n,t} e_{x_t} err_n^T (V_in, V), the reverse bag through the batch's `TokenIndex`:

      N grad_V = U^T (P^T E + tiv (sum_n a_{n,l} err_n) z_trig^T + (sum_n a_{n,EOS} err_n) z_EOS^T),
      r_n . v_{n,t} = err_n . T[x_t] (+ tiv err_n . M z_trig at t = l),   r_n . o_n = err_n . xi_n = beta_n,
      N k = sum_j e_j (T[j] . P[j]) + tiv E^T (sum_n a_{n,l} err_n . M z_trig e_{x*_n})
            - E^T (sum_{n,t} a_{n,t} beta_n e_{x_t}) + z_trig sum_n ds_{n,l} + z_EOS sum_n ds_{n,EOS},

    ds_{n,t} = a_{n,t} (r_n . v_{n,t} - beta_n). No (B, d) product with U or E per sample at all.
    With the attention gradient, the trigger's key is kept apart: xi_n = xi_rest,n + a_{n,l} T_l,n with
    T_l,n = T[x*_n] + tiv M z_trig the logits of v_{n,l}, and ds_{n,l} = a_{n,l} ((1 - a_{n,l}) err_n . T_l,n
    - err_n . xi_rest,n), 1 - a_{n,l} summed from the other keys' weights: no difference of two
    logit-sized numbers, so it keeps its digits in float32 when attention sits on the trigger (the
    feature route and autograd form r . v_l - beta and lose them; tests/test_count_gradients.py).
    The chunk loop (`_table_sums`) runs on torch primitives: fused numba loops for it were no faster
    (bench/bench_native.py)."""
    cfg = problem.cfg
    E, U, z, q = problem.E, problem.U, problem.z_trig, problem.z_eos
    N = batch.N
    tiv = float(cfg.trigger_in_value)
    need_W = need_W and cfg.n_keys > 1
    w = params.W_KQ @ q
    R = readout_matrix(problem, params.W_V)                            # (d, V): M^T
    T = model_logits(problem, params.W_V, E, R)                        # (V_in, V): each token's logits
    sums = _table_sums(problem, batch, w, R.T.contiguous(), T, need_V, need_W)
    if need_V:
        grad_V = U.T @ (sums.P.T @ E + tiv * torch.outer(sums.err_trig, z) + torch.outer(sums.err_eos, q)) / N
    else:
        grad_V = torch.zeros_like(params.W_V)
    if need_W:
        ds_tokens = sums.ds_tokens + (T * sums.P_plain).sum(1)        # + the plain positions' sum_j T_j . P_j
        k = (E.T @ ds_tokens + sums.ds_trig * z + sums.ds_eos * q) / N
        grad_W = torch.outer(k, q)
    else:
        grad_W = torch.zeros_like(params.W_KQ)
    return Gradients(sums.loss / N, grad_V, grad_W, sums.correct)


@dataclass
class TableSums:
    """What a logit-table step adds up over the batch (times N): the loss and the hits; P (every
    position) and P_plain (every position but l when the attention gradient is formed) (V_in, V);
    sum_n a_{n,l} err_n and sum_n a_{n,EOS} err_n (V,); the attention gradient's token sums (V_in,)
    (the trigger's positions and -beta_n a_{n,t} at every other one), its trigger and EOS sums."""
    loss: float
    correct: int
    P: torch.Tensor | None
    P_plain: torch.Tensor | None
    err_trig: torch.Tensor | None
    err_eos: torch.Tensor | None
    ds_tokens: torch.Tensor | None
    ds_trig: torch.Tensor | float
    ds_eos: torch.Tensor | float


def _table_sums(problem: Problem, batch: Batch, w, M, T, need_V: bool, need_W: bool) -> TableSums:
    """The chunk loop of `table_gradients`, on torch primitives."""
    cfg = problem.cfg
    E, z, q = problem.E, problem.z_trig, problem.z_eos
    dt, dev = E.dtype, E.device
    L, N, V = cfg.L, batch.N, cfg.V
    tiv = float(cfg.trigger_in_value)
    xi_z, xi_q = M @ z, M @ q                                          # (V,): the logits of z_trig, z_EOS
    s_tab = E @ w                                                      # (V_in,) token scores, once
    size = table_chunk_size(problem)
    index = token_index(problem, batch, size)
    P = torch.zeros(cfg.V_in, V, dtype=dt, device=dev)
    Q = torch.zeros(cfg.V_in, V, dtype=dt, device=dev) if need_W and need_V else None
    err_trig, err_eos = torch.zeros(V, dtype=dt, device=dev), torch.zeros(V, dtype=dt, device=dev)
    ds_tokens = torch.zeros(cfg.V_in, dtype=dt, device=dev)
    ds_trig, ds_eos, loss = E.new_zeros(()), E.new_zeros(()), E.new_zeros(())
    correct = 0
    err_buf = torch.empty(min(size, N), V, dtype=dt, device=dev)
    rows_buf = torch.empty(min(size, N), V, dtype=dt, device=dev) if need_W else None
    xi_buf = torch.empty(min(size, N), V, dtype=dt, device=dev) if need_W else None
    plain_buf = torch.empty(min(size, N), L, dtype=dt, device=dev) if need_W else None
    work = index.work_buffers(min(size, N) * L, dt)
    for c, (start, b) in enumerate(zip(range(0, N, size), chunks(batch, size, widen=False))):
        a = torch.softmax(position_scores(problem, b, w, s_tab), 1)   # (B, K)
        a_tok = a[:, :L].contiguous()
        a_l = a.gather(1, b.pos[:, None])[:, 0]                        # (B,)
        a_eos = a[:, L] if cfg.eos_key else None
        # with the attention gradient, the trigger's position is kept apart: xi = xi_rest + a_l T_l
        a_bag = plain_buf[:b.N].copy_(a_tok).scatter_(1, b.pos[:, None], 0.0) if need_W else a_tok
        xi = Fn.embedding_bag(b.tokens, T, mode="sum", per_sample_weights=a_bag)
        if cfg.eos_key:
            xi.addr_(a_eos, xi_q)
        if need_W:
            xi_rest = xi                                               # logits of every key but l
            T_l = torch.index_select(T, 0, b.informative, out=rows_buf[:b.N])   # logits of v_l:
            if tiv:
                T_l += xi_z                                            # T[x*_n] (+ tiv M z_trig)
            xi = torch.addcmul(xi_rest, a_l[:, None], T_l, out=xi_buf[:b.N])
        elif tiv:
            xi.addr_(a_l, xi_z)
        lab = b.labels[:, None]
        xi_y = xi.gather(1, lab)[:, 0]
        n_hit, row_max = hits_and_max(xi, xi_y, b.labels)
        correct += n_hit
        err = torch.softmax(xi, 1, out=err_buf[:b.N])                  # reused buffers: fewer page faults
        loss = loss + cross_entropy_of(row_max, xi_y, err)
        err.scatter_add_(1, lab, torch.full_like(lab, -1.0, dtype=dt))  # softmax - e_y
        P += index.scatter_rows(c, start, L, err, a_bag, work)         # every position (but l, if need_W)
        if need_W:
            if need_V:
                Q += index.scatter_informative(c, start, err, a_l)      # sum_n a_{n,l} e_{x*_n} err_n^T
            r_rest = xi_rest.mul_(err).sum(1)                          # err_n . xi_rest,n (xi_rest is spent)
            r_l = T_l.mul_(err).sum(1)                                 # r_n . v_{n,l}
            beta = r_rest + a_l * r_l                                  # r_n . o_n
            rest = a_bag.sum(1) + a_eos if cfg.eos_key else a_bag.sum(1)   # 1 - a_l, summed from the others
            # ds_{n,l} = a_l (r.v_l - beta) = a_l ((1 - a_l) r.v_l - r.xi_rest): no difference of large
            # terms, so it keeps its digits in float32 when attention sits on l (a_l -> 1)
            ds_l = a_l * (rest * r_l - r_rest)
            ds_tokens += torch.bincount(b.informative, weights=ds_l, minlength=cfg.V_in).to(dt)
            ds_tokens -= weighted_token_sum(problem, b.tokens, a_bag * beta[:, None])
            ds_trig = ds_trig + ds_l.sum()
            if cfg.eos_key:
                ds_eos = ds_eos + (a_eos * (err @ xi_q - beta)).sum()
        if tiv and need_V:
            err_trig += a_l @ err
        if cfg.eos_key and need_V:
            err_eos += a[:, L] @ err
    return TableSums(float(loss), correct, None if not need_V else (P + Q if Q is not None else P),
                     P if need_W else None, err_trig, err_eos, ds_tokens, ds_trig, ds_eos)
