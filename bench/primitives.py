"""The torch primitives the count routes are made of, timed alone on the benchmark's own token ids:
what a route cannot go below without fusing them in a custom kernel. Shared by bench_train.py and
bench_three_steps.py; every function returns the median of `repeat` timings in seconds."""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as Fn

import lib
from lib.fast.counts import table_chunk_size
from lib.fast.tokens import token_index


def timed(fn, repeat: int = 3):
    """(median of `repeat` wall times of fn() in seconds, the last call's result): the one timer of bench/."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def median_time(fn, repeat: int = 3) -> float:
    return timed(fn, repeat)[0]


def table_step_floor(problem: lib.core.embeddings.Problem, batch: lib.Batch, repeat: int = 3) -> dict:
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


def limit_floor(problem: lib.core.embeddings.Problem, batch: lib.Batch, repeat: int = 3) -> dict:
    """The cheapest form of each primitive the limit route's three dependent passes need, each over
    all N L token ids in one call (no chunking, pair ids precomputed, so a lower bound): pass 1 a
    bincount of the pair ids x*_n V_in + x_{n,t} into the V x V_in table; pass 2 an embedding_bag of
    the pair ids into a V x V_in float table (beta_n) and a bincount of the token ids weighted by it;
    pass 3 the scores, as the cheapest lookup we know (int16 ranks of the V_in scores) and their
    row maximum (amax), as the route reads them (`lib.fast.limit.attended_groups`)."""
    cfg = problem.cfg
    idt = lib.fast.limit.id_dtype(problem, batch)
    pairs = torch.add(batch.tokens.to(idt), batch.informative.to(idt)[:, None], alpha=cfg.V_in)
    g = torch.Generator().manual_seed(0)
    table = torch.randn(cfg.V * cfg.V_in, 1, dtype=problem.E.dtype, generator=g)
    ranks = torch.randperm(cfg.V_in, generator=g).to(torch.int16 if cfg.V_in < 2 ** 15 else torch.int32)
    w = torch.rand(batch.N, dtype=problem.E.dtype, generator=g)[:, None].expand(batch.N, cfg.L)
    flat = batch.tokens.reshape(-1)
    out = {
        "pair bincount": median_time(lambda: torch.bincount(pairs.view(-1), minlength=cfg.V * cfg.V_in), repeat),
        "pair bag": median_time(lambda: Fn.embedding_bag(pairs, table, mode="sum"), repeat),
        "weighted bincount": median_time(lambda: torch.bincount(flat, weights=w.reshape(-1), minlength=cfg.V_in), repeat),
        "score lookup": median_time(lambda: ranks.index_select(0, flat), repeat),
    }
    looked = ranks.index_select(0, flat).view(batch.N, cfg.L)
    out["row max"] = median_time(lambda: looked.amax(1), repeat)
    out["sum"] = sum(out.values())
    return out
