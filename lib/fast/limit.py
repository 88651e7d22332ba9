"""The count-table modes of the attention-only model (chapters 4-7): the limit mode's three passes
over the token ids, and the finite mode (step 1 from the count table, steps 2 and 3 the generic step
of `lib.fast.counts`). The formulas are in `lib.fast.counts`' docstring (steps 1-3); tests prove that
both modes equal the direct route (tests/test_counts.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as Fn

from . import native
from ..core.config import check_int
from ..core.embeddings import Problem
from ..core.models import Params, hard_attention
from ..core.steps import normalised_gamma_W
from ..core.task import Batch, check_batch
from .counts import _count_gradients, weighted_token_sum
from .tokens import chunks, value_offset


# ----------------------------------------------------------------------------- attn-only, limit mode

PASS_SAMPLES = 2 ** 14   # samples per chunk of the token passes: (chunk, L) ids stay in cache
TABLE_PASS_SAMPLES = 2 ** 16   # pass 1: each chunk's bincount allocates the whole V x V_in table, so fewer chunks


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

def native_applies(problem: Problem, batch: Batch, check_tokens: bool = True) -> bool:
    """Whether lib.fast.native's loops may run on this batch: they load, the ids are int32 on the CPU with
    the problem, and every id lies where the loops index with it (the tokens themselves are checked
    unless `check_tokens` is False, for callers behind `check_batch`, which made that pass already)."""
    cfg = problem.cfg
    return (native.usable(batch.tokens, problem.E)
            and native.ids_in_range(batch, cfg.V, cfg.V_in, cfg.L, tokens=check_tokens))


def count_tables(problem: Problem, batch: Batch, size: int = TABLE_PASS_SAMPLES, fused: bool | None = None):
    """A (V_in, V): A[j, i] = sum_n 1[x*_n = i] c_{n,j};  n (V,): informative-token counts.
    One bincount of the pair ids x*_n V_in + x_{n,t}, chunk by chunk through a reused buffer, or
    lib.fast.native's loop when `fused` (by default: when `native_applies`). The batch is checked first
    (`lib.core.task.check_batch`: a ValueError naming the field for ids out of range)."""
    check_batch(problem, batch)
    check_int("size", size, 1)
    return _count_tables(problem, batch, size, fused)


def _count_tables(problem: Problem, batch: Batch, size: int = TABLE_PASS_SAMPLES, fused: bool | None = None):
    """`count_tables` for a batch that `check_batch` has passed."""
    cfg = problem.cfg
    dt, dev = problem.E.dtype, batch.tokens.device
    n = torch.bincount(batch.informative, minlength=cfg.V).to(dt)
    if fused is None:
        fused = native_applies(problem, batch, check_tokens=False)
    if fused:
        return native.pair_count(batch.tokens, batch.informative, cfg.V, cfg.V_in, check=False).T.to(dt), n
    A_T = torch.zeros(cfg.V * cfg.V_in, dtype=torch.long, device=dev)  # (V, V_in), flattened
    buf = torch.empty(min(size, batch.N), cfg.L, dtype=id_dtype(problem, batch), device=dev)
    for b in chunks(batch, size, widen=False):                          # int32 ids: no widening copy
        A_T += torch.bincount(pair_ids(problem, b, buf).view(-1), minlength=A_T.numel())
    return A_T.view(cfg.V, cfg.V_in).T.to(dt), n


def step1_from_counts(problem: Problem, batch: Batch, fused: bool | None = None):
    """Step 1 of the attention-only model from the count table (at zero parameters the logits vanish):
    (G1, A, n, dU) with G1 = (U_Pi - u_bar)^T (A^T E + n s^T) / (N K) and dU = U_Pi - u_bar (V, d).
    The batch is checked first."""
    check_batch(problem, batch)
    return _step1_from_counts(problem, batch, fused)


def _step1_from_counts(problem: Problem, batch: Batch, fused: bool | None = None):
    """`step1_from_counts` for a batch that `check_batch` has passed."""
    A, n = _count_tables(problem, batch, fused=fused)
    dU = problem.U_perm - problem.u_bar
    G1 = dU.T @ (A.T @ problem.E + n[:, None] * value_offset(problem)) / (batch.N * problem.cfg.n_keys)
    return G1, A, n, dU


class ScoreRanks:
    """The ranks of the V_in token scores S, when they are distinct and finite (else `ok` is False):
    the largest score among a sample's positions is then the largest rank, an integer `amax`
    (10x faster than `argmax` over float scores, measured on (2^14, 64) chunks)."""

    def __init__(self, S: torch.Tensor):
        self.ok = bool(torch.isfinite(S).all()) and int(torch.unique(S).numel()) == S.numel()
        self.order = torch.argsort(S)                                  # token at each rank
        self.rank = torch.empty(S.numel(), dtype=torch.int16 if S.numel() < 2 ** 15 else torch.int32, device=S.device)
        self.rank[self.order] = torch.arange(S.numel(), device=S.device).to(self.rank.dtype)


def attended_groups(problem: Problem, b: Batch, S: torch.Tensor, bonus: torch.Tensor, s_eos: torch.Tensor,
                    ranks: ScoreRanks | None = None) -> torch.Tensor:
    """(B,) what hard attention along k reads in each sample: the attended token (a plain position),
    V_in (the trigger's position) or V_in + 1 (the EOS key), with the scores S[x_t] (+ bonus at l,
    s_eos for EOS) and argmax's rule that the first maximal position wins. With distinct scores the
    best other position comes from the ranks; rows where it ties the trigger's score are recomputed
    by argmax, which is also the whole computation when `ranks` is None or not `ok`."""
    cfg = problem.cfg
    L = cfg.L
    if ranks is not None and ranks.ok:
        R = ranks.rank.index_select(0, b.tokens.reshape(-1)).view(b.N, L)
        R.scatter_(1, b.pos[:, None], -1)                              # every position but the trigger's
        best = R.amax(1).long()                                        # -1: no other position (L = 1)
        token = ranks.order[best.clamp_min(0)]
        s_other = torch.where(best >= 0, S[token], -torch.inf)
        s_trig = S.index_select(0, b.informative) + bonus             # as the scores below: S[x*] + bonus
        group = torch.where(s_trig > s_other, cfg.V_in, token)
        if cfg.eos_key:
            group = torch.where(s_eos > torch.maximum(s_trig, s_other), cfg.V_in + 1, group)
        tied = s_trig == s_other
        if not bool(tied.any()):
            return group
        group[tied] = attended_groups(problem, b.slice_mask(tied), S, bonus, s_eos)
        return group
    sc = S.index_select(0, b.tokens.reshape(-1)).view(b.N, L)          # (B, L) table lookup (5x faster than S[ids])
    sc.scatter_add_(1, b.pos[:, None], bonus.expand(b.N, 1).contiguous())
    if cfg.eos_key:
        sc = torch.cat([sc, s_eos.expand(b.N, 1)], 1)
    t = hard_attention(sc)
    group = torch.where(t == b.pos, cfg.V_in, b.tokens.gather(1, t.clamp_max(L - 1)[:, None])[:, 0].long())
    if cfg.eos_key:
        group = torch.where(t == L, cfg.V_in + 1, group)
    return group


def limit_attn(problem: Problem, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(G1, k, G3) of the limit mode for the attention-only model, from count tables only:
    three passes over the token ids (the count table, beta_n, the hard attention). The batch is
    checked first (`lib.core.task.check_batch`)."""
    check_batch(problem, batch)
    return _limit_attn(problem, batch)


def _limit_attn(problem: Problem, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`limit_attn` for a batch that `check_batch` has passed."""
    cfg = problem.cfg
    N, K, V, L = batch.N, cfg.n_keys, cfg.V, cfg.L
    E, z, q = problem.E, problem.z_trig, problem.z_eos
    dt, dev = E.dtype, E.device
    tiv = 1.0 if cfg.trigger_in_value else 0.0
    size = count_chunk_size(problem)
    idt = id_dtype(problem, batch)
    buf = torch.empty(min(size, N), L, dtype=idt, device=dev)

    # step 1 (pass 1): G1 from the count table
    fused = native_applies(problem, batch, check_tokens=False)        # lib.fast.native for all three passes
    G1, A, n, dU = _step1_from_counts(problem, batch, fused)
    s = value_offset(problem)
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
        if fused:
            counts64, sum64 = native.beta_counts(batch.tokens, batch.informative, D, s_w, K, check=False)
            beta_counts, beta_sum = counts64.to(dt), torch.tensor(sum64, dtype=dt, device=dev)
        else:
            D_flat = D.reshape(-1, 1)
            beta_counts = torch.zeros(cfg.V_in, dtype=dt, device=dev)  # sum_n beta_n c_n
            beta_sum = E.new_zeros(())
            for b in chunks(batch, size, widen=False):
                beta = (Fn.embedding_bag(pair_ids(problem, b, buf), D_flat, mode="sum")[:, 0]
                        + s_w[b.informative]) / K                      # (B,): obar_n . r_n
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
    finite = bool(torch.isfinite(S).all()) and math.isfinite(float(bonus)) and math.isfinite(float(s_eos))
    if fused and finite:
        ids = native.attend(batch.tokens, batch.pos, batch.informative, S, float(bonus),
                            float(s_eos) if cfg.eos_key else None, V, check=False)
    else:
        ids = torch.empty(N, dtype=idt, device=dev)
        ranks = ScoreRanks(S)
        for start, b in zip(range(0, N, size), chunks(batch, size, widen=False)):
            group = attended_groups(problem, b, S, bonus, s_eos, ranks)
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

    Step 1 (at zero parameters the logits vanish) comes from the count table A, as in `limit_attn`;
    steps 2 and 3 are the generic step at (V1, 0) and (V1, W1), on the logit-table route when it is
    the faster one (`uses_tables`), both through one `TokenIndex` of the batch. The batch is checked
    first (`lib.core.task.check_batch`)."""
    check_batch(problem, batch)
    q = problem.z_eos
    G1 = _step1_from_counts(problem, batch)[0]                                       # step 1
    V1 = eta * G1
    grad_W = _count_gradients(problem, Params(V1, torch.zeros_like(V1)), batch, need_V=False).W_KQ   # step 2
    if gamma_W is None:
        gamma_W = normalised_gamma_W(grad_W, q, attn_scale)
    W1 = -gamma_W * grad_W
    G3 = -_count_gradients(problem, Params(V1, W1), batch, need_W=False).W_V                         # step 3
    return G1, W1, gamma_W, G3
