"""The torch primitives the count routes are made of, timed alone on the benchmark's own token ids:
what a route cannot go below without fusing them in a custom kernel. Shared by bench_train.py and
bench_three_steps.py; every function returns the median of `repeat` timings in seconds."""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as Fn

import lib
from lib.counts import table_chunk_size
from lib.tokens import token_index


def median_time(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def table_step_floor(problem: lib.embeddings.Problem, batch: lib.Batch, repeat: int = 3) -> dict:
    """One pass of each primitive a logit-table step needs, over the whole batch in the route's
    chunks: the forward bag sum_t a_t T[x_t] (V_in x V table), the softmax of the (chunk, V) logits,
    and the reverse bag through the batch's TokenIndex. Returns seconds per primitive and their sum."""
    cfg = problem.cfg
    size = table_chunk_size(problem)
    index = token_index(problem, batch, size)
    g = torch.Generator().manual_seed(0)
    T = torch.randn(cfg.V_in, cfg.V, generator=g, dtype=problem.E.dtype)
    a = torch.full((size, cfg.L), 1.0 / cfg.L, dtype=T.dtype)
    X = torch.softmax(torch.randn(size, cfg.V, generator=g, dtype=T.dtype), 1)
    starts = range(0, batch.N, size)

    def forward():
        for s in starts:
            tok = batch.tokens[s:s + size]
            Fn.embedding_bag(tok, T, mode="sum", per_sample_weights=a[:len(tok)])

    def softmax():
        for s in starts:
            torch.softmax(X[:min(size, batch.N - s)], 1)

    def reverse():
        for c, s in enumerate(starts):
            n = min(size, batch.N - s)
            index.scatter_rows(c, s, cfg.L, X[:n], a[:n])

    out = {"forward bag": median_time(forward, repeat), "softmax": median_time(softmax, repeat),
           "reverse bag": median_time(reverse, repeat)}
    out["sum"] = sum(out.values())
    return out


def limit_floor(problem: lib.embeddings.Problem, batch: lib.Batch, repeat: int = 3) -> dict:
    """One pass of each primitive of the limit route's three passes over the N L token ids, in its
    chunks, with the pair ids x*_n V_in + x_{n,t} precomputed (a fused route would not store them):
    pass 1 a bincount of the pair ids into the V x V_in table; pass 2 an embedding_bag of the pair ids
    into a V x V_in float table and a weighted bincount of the token ids; pass 3 an index_select of
    the token ids from a V_in table and an argmax over the (chunk, L) scores."""
    cfg = problem.cfg
    size = lib.counts.PASS_SAMPLES
    idt = lib.counts.id_dtype(problem, batch)
    pairs = torch.add(batch.tokens.to(idt), batch.informative.to(idt)[:, None], alpha=cfg.V_in)
    table = torch.randn(cfg.V * cfg.V_in, 1, dtype=problem.E.dtype, generator=torch.Generator().manual_seed(0))
    S = table[:cfg.V_in, 0].contiguous()
    w = torch.rand(size, cfg.L, dtype=problem.E.dtype)
    starts = range(0, batch.N, size)

    def chunked(fn):
        return lambda: [fn(s, min(size, batch.N - s)) for s in starts]

    out = {
        "pair bincount": median_time(chunked(lambda s, n: torch.bincount(pairs[s:s + n].view(-1),
                                                                         minlength=cfg.V * cfg.V_in)), repeat),
        "pair bag": median_time(chunked(lambda s, n: Fn.embedding_bag(pairs[s:s + n], table, mode="sum")), repeat),
        "weighted bincount": median_time(chunked(lambda s, n: torch.bincount(
            batch.tokens[s:s + n].reshape(-1), weights=w[:n].reshape(-1), minlength=cfg.V_in)), repeat),
        "lookup + argmax": median_time(chunked(lambda s, n: S.index_select(0, batch.tokens[s:s + n].reshape(-1))
                                               .view(n, cfg.L).argmax(1)), repeat),
    }
    out["sum"] = sum(out.values())
    return out
