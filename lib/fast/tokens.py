"""The forward pass on token ids, chunk by chunk: shared by the count route, evaluation and trainer.

Equal to `lib.core.models.forward` (tests/test_guards.py::test_both_forward_routes_equal_the_formulas), but it never builds an (N, L, d) tensor:

  scores  s_t = h_t^T w (w = W_KQ q) = (E w)[x_t] + 1[t = l] z_trig . w   a lookup in the table E w;
  values  o = sum_t a_t v_t = embedding_bag(x, E, weights a) + a_l [trigger in value] z_trig
          (+ a_EOS z_EOS with an EOS key);   hard attention reads one row of E;
  logits  xi = U W_V phi(o), phi the model's feature map (`lib.core.featuremaps`).

Write K = n_keys (L, or L + 1 with the EOS key). Memory stays O(chunk (L + V + width + d)).
Every function here is differentiable in w and W_V, so the autograd trainer runs on it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as Fn

from ..core.embeddings import Problem
from ..core.task import Batch, check_batch
from ..core.models import features, hard_attention, model_logits

CHUNK_ELEMENTS = 2 ** 22   # elements of the largest per-chunk temporary (16 MiB in float32)


def chunk_size(problem: Problem, extra: int = 0) -> int:
    """Samples per chunk so that (chunk, max(8 K, V, width, d, extra)) temporaries stay near 2^22 elements."""
    cfg = problem.cfg
    widest = max(cfg.n_keys * 8, cfg.V_in, cfg.width, cfg.d, extra)
    return max(1, CHUNK_ELEMENTS // widest)


def chunks(batch: Batch, size: int, widen: bool = True):
    """The batch in consecutive slices of `size` samples, token ids as int64 (the batch may store
    them as int32; gather, take and index arithmetic want int64, and one chunk's copy is small).
    widen=False keeps the stored dtype, for passes whose every op takes int32 ids (the limit route)."""
    for start in range(0, batch.N, size):
        b = batch.slice(start, min(start + size, batch.N))
        if widen and b.tokens.dtype != torch.long:
            b = Batch(b.tokens.long(), b.pos, b.labels, b._informative)
        yield b


def value_offset(problem: Problem) -> torch.Tensor:
    """s = [trigger in value] z_trig + [EOS key] z_EOS: what the uniform average adds to E^T c_n."""
    cfg = problem.cfg
    s = torch.zeros_like(problem.z_trig)
    if cfg.trigger_in_value:
        s = s + problem.z_trig
    if cfg.eos_key:
        s = s + problem.z_eos
    return s


def position_scores(problem: Problem, b: Batch, w: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
    """Attention scores h_t^T w of every key (B, K), from the table E w (`table`, if the caller has
    it already, e.g. once for all chunks): no (B, L, d) tensor."""
    table = problem.E @ w if table is None else table
    s = table.index_select(0, b.tokens.reshape(-1)).view(b.tokens.shape)   # (B, L) table lookup
    s = s.scatter_add(1, b.pos[:, None], (problem.z_trig @ w).expand(b.N, 1))          # the trigger's bonus
    if problem.cfg.eos_key:
        s = torch.cat([s, (problem.z_eos @ w).expand(b.N, 1)], 1)       # (B, L + 1)
    return s


def pooled_values(problem: Problem, b: Batch, a: torch.Tensor | None = None) -> torch.Tensor:
    """o_n = sum_t a_{n,t} v_{n,t} (B, d) for attention weights a (B, K); None = uniform."""
    cfg = problem.cfg
    L = cfg.L
    if a is None:
        a = torch.full((b.N, cfg.n_keys), 1.0 / cfg.n_keys, dtype=problem.E.dtype, device=problem.E.device)
    o = Fn.embedding_bag(b.tokens, problem.E, mode="sum", per_sample_weights=a[:, :L].contiguous())
    if cfg.trigger_in_value:
        o = o + a.gather(1, b.pos[:, None]) * problem.z_trig
    if cfg.eos_key:
        o = o + a[:, L:] * problem.z_eos
    return o


def hard_values(problem: Problem, b: Batch, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Value at argmax_t of the scores (B, d), and the argmax position (B,) (L means EOS)."""
    cfg = problem.cfg
    t = hard_attention(scores)
    tok = b.tokens.gather(1, t.clamp_max(cfg.L - 1)[:, None])[:, 0]
    o = problem.E[tok]
    if cfg.trigger_in_value:
        o = o + (t == b.pos)[:, None].to(o.dtype) * problem.z_trig
    if cfg.eos_key:
        o = torch.where((t == cfg.L)[:, None], problem.z_eos.expand_as(o), o)
    return o, t


def informative_values(problem: Problem, b: Batch) -> torch.Tensor:
    """v_l (B, d): the value vector of the informative position (oracle attention). The batch is checked
    (`lib.core.task.check_batch`): an id out of range raises a ValueError naming its field."""
    check_batch(problem, b)
    o = problem.E[b.informative]
    return o + problem.z_trig if problem.cfg.trigger_in_value else o


@dataclass
class ChunkForward:
    """The forward pass of one chunk on token ids."""

    scores: torch.Tensor   # (B, K)
    attn: torch.Tensor     # (B, K) softmax weights, or one-hot for hard attention
    o: torch.Tensor        # (B, d)
    phi: torch.Tensor      # (B, width)
    logits: torch.Tensor   # (B, V)


def forward_chunk(problem: Problem, W_V: torch.Tensor, w: torch.Tensor, b: Batch, hard: bool = False,
                  readout: torch.Tensor | None = None) -> ChunkForward:
    """Scores, attention, pooled value, features and logits of one chunk; w = W_KQ q.
    `readout` = W_V^T U^T (width, V) may be passed in when it is reused over chunks."""
    s = position_scores(problem, b, w)
    if hard:
        o, t = hard_values(problem, b, s)
        a = Fn.one_hot(t, s.shape[1]).to(s.dtype)
    else:
        a = torch.softmax(s, 1)
        o = pooled_values(problem, b, a)
    phi = features(problem, o)
    return ChunkForward(s, a, o, phi, model_logits(problem, W_V, phi, readout))


@dataclass
class TokenIndex:
    """The token ids of a batch inverted, chunk by chunk: for chunk c (samples c size ..), `order(c)`
    lists its flat positions n L + t (n counted inside the chunk) sorted by token id, and
    `offsets(c)` (V_in,) where each token's run starts. With it, sum_{(n, t): x_{n,t} = j} a_{n,t} X[n]
    for every token j is one `embedding_bag` of the chunk's rows X (`scatter_rows`): the reverse of the
    forward bag sum_t a_{n,t} T[x_{n,t}], without a per-step sort. Built once per batch and size
    (`token_index`); it holds N L int32 ids, as many as the batch's tokens, and remembers which
    tensors (and versions of them) it was built from, so that a changed batch gets a new index."""

    size: int
    V_in: int
    order: torch.Tensor          # (N L,) int32: chunk by chunk, positions sorted by token id
    offsets: torch.Tensor        # (chunks, V_in) int32
    inf_order: torch.Tensor      # (N,) int32: chunk by chunk, samples sorted by informative token
    inf_offsets: torch.Tensor    # (chunks, V_in) int32
    source: tuple = field(repr=False)   # (tokens, pos, their versions): what the index describes

    def describes(self, problem: Problem, batch: Batch, size: int) -> bool:
        tokens, pos, versions = self.source
        return (self.size == size and self.V_in == problem.cfg.V_in and tokens is batch.tokens
                and pos is batch.pos and versions == (batch.tokens._version, batch.pos._version))

    def work_buffers(self, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Buffers for `scatter_rows` on chunks of up to n positions (one pair per caller: no sharing)."""
        return (torch.empty(n, dtype=self.order.dtype, device=self.order.device),
                torch.empty(n, dtype=dtype, device=self.order.device))

    def scatter_rows(self, c: int, start: int, L: int, X: torch.Tensor, a: torch.Tensor,
                     work: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """(V_in, X.shape[1]): row j = sum over the chunk's positions (n, t) with x_{n,t} = j of
        a[n, t] X[n], for chunk c starting at sample `start` (a: (B, L) weights, X: (B, width)).
        `work` (from `work_buffers`) avoids two allocations per chunk."""
        n = a.numel()
        order = self.order[start * L:start * L + n]
        if work is None:
            work = self.work_buffers(n, a.dtype)
        rows = torch.div(order, L, rounding_mode="floor", out=work[0][:n])
        weights = torch.index_select(a.reshape(-1), 0, order, out=work[1][:n])
        return Fn.embedding_bag(rows, X, self.offsets[c], mode="sum", per_sample_weights=weights)

    def scatter_informative(self, c: int, start: int, X: torch.Tensor, a_l: torch.Tensor) -> torch.Tensor:
        """(V_in, X.shape[1]): row j = sum over the chunk's samples n with x*_n = j of a_l[n] X[n]."""
        order = self.inf_order[start:start + a_l.numel()]
        return Fn.embedding_bag(order, X, self.inf_offsets[c], mode="sum", per_sample_weights=a_l.index_select(0, order))


def token_index(problem: Problem, batch: Batch, size: int) -> TokenIndex:
    """The `TokenIndex` of `batch` for chunks of `size` samples, built once and kept on the batch
    (rebuilt if the batch's tokens or positions were replaced or changed in place since)."""
    cached = batch._index
    if isinstance(cached, TokenIndex) and cached.describes(problem, batch, size):
        return cached
    dev = batch.tokens.device
    V_in = problem.cfg.V_in
    order = torch.empty(batch.tokens.numel(), dtype=torch.int32, device=dev)
    inf_order = torch.empty(batch.N, dtype=torch.int32, device=dev)
    informative = batch.tokens.gather(1, batch.pos[:, None])[:, 0].long()   # from the tokens, not a cache
    offsets, inf_offsets = [], []
    for start in range(0, batch.N, size):
        for ids, out, offs, at in ((batch.tokens[start:start + size].reshape(-1), order, offsets, start * batch.tokens.shape[1]),
                                   (informative[start:start + size], inf_order, inf_offsets, start)):
            out[at:at + ids.numel()] = torch.argsort(ids, stable=True)
            counts = torch.bincount(ids, minlength=V_in)
            offs.append(counts.cumsum(0) - counts)
    index = TokenIndex(size, V_in, order, torch.stack(offsets).to(torch.int32), inf_order,
                       torch.stack(inf_offsets).to(torch.int32),
                       (batch.tokens, batch.pos, (batch.tokens._version, batch.pos._version)))
    batch._index = index
    return index
