"""The token-retrieval task: its sampler and the sequences it produces (chapter 1).

One sample (chapter 1): a position l ~ Unif[L]; the informative token x_l ~ Unif[V];
the other L - 1 tokens i.i.d. uniform over the V content tokens (or over a separate noise
vocabulary, token ids V..V+V_noise-1, as in [NLB]); the label y = Pi*(x_l).

The model sees token vectors h_t = e_{x_t} + 1[t = l] z_trig (keys) and value vectors v_t = h_t,
or v_t = e_{x_t} when the trigger is kept out of the value path; with `eos_key` the query z_EOS is
appended as an extra key/value at position L + 1. `keys_values` materialises these (N, L, d)
tensors: it is the readable reference route. The fast route (`lib.fast.counts`) never builds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .config import check_int, check_memory
from .embeddings import Problem, check_problem
from .seed import generator


@dataclass
class Batch:
    """N samples of the task (token ids index rows of `Problem.E`)."""

    tokens: torch.Tensor   # (N, L) int32 from sample_batch (int64 accepted): ids in [0, V_in)
    pos: torch.Tensor      # (N,) int64 (int32 accepted): the informative position l in [0, L)
    labels: torch.Tensor   # (N,) int64 (int32 accepted): y = Pi*(x_l) in [0, V)
    _informative: torch.Tensor | None = field(default=None, repr=False)   # x_l, stored once
    _index: object = field(default=None, init=False, repr=False, compare=False)   # lib.fast.tokens.TokenIndex

    @property
    def N(self) -> int:
        return self.tokens.shape[0]

    @property
    def informative(self) -> torch.Tensor:
        """(N,) long: the informative token x_l of each sample (computed once, then stored)."""
        if self._informative is None:
            self._informative = self.tokens.gather(1, self.pos[:, None])[:, 0].long()
        return self._informative

    def slice_mask(self, mask: torch.Tensor) -> "Batch":
        """The samples where `mask` (N,) is True."""
        inf = None if self._informative is None else self._informative[mask]
        return Batch(self.tokens[mask], self.pos[mask], self.labels[mask], inf)

    def slice(self, start: int, stop: int) -> "Batch":
        inf = None if self._informative is None else self._informative[start:stop]
        return Batch(self.tokens[start:stop], self.pos[start:stop], self.labels[start:stop], inf)


SAMPLE_BLOCK = 4096   # samples per random block: the data of N samples are the first N of any larger N


def sample_block_bytes(cfg) -> int:
    """The bytes `sample_batch` holds beyond the batch while it draws: one block of SAMPLE_BLOCK L int64
    token ids (two with a noise vocabulary, whose ids are shifted by V into a new tensor)."""
    return 8 * SAMPLE_BLOCK * cfg.L * (2 if cfg.noise_vocab else 1)


def check_batch_memory(cfg, N: int, name: str = "N") -> None:
    """Refuse a batch of N samples that cannot fit in the memory still available (drawn on the CPU:
    N L int32 token ids and three int64 per sample, plus the block of SAMPLE_BLOCK L int64 ids being
    drawn, whatever N, and with a noise vocabulary its shifted copy), naming `name` (N, or n_test for a
    test set), or L when the sequence length is the larger factor."""
    what = f"{N} samples of L = {cfg.L} token ids"
    batch, block = N * (4 * cfg.L + 3 * 8), sample_block_bytes(cfg)
    if cfg.L > N or block > batch:
        check_memory("L", cfg.L, batch + block, what + f" ({name} = {N}, drawn {SAMPLE_BLOCK} at a time)")
    else:
        check_memory(name, N, batch + block, what)


def sample_batch(problem: Problem, N: int, seed: int = 0, split: str = "train") -> Batch:
    """Draw N samples of `problem`'s task. `split` ("train", "test", ...) names an independent stream.

    Nested in N: samples are drawn in blocks of `SAMPLE_BLOCK`, block j from its own stream
    `generator(seed, "data", split, j)`, so the first N samples of a batch of size N' >= N are exactly
    the batch of size N (N* curves are then monotone in the data, not re-drawn at every N).
    """
    check_problem(problem)
    N = check_int("N", N, 1)
    if not isinstance(split, str):
        raise ValueError(f"split must be a string, got {split!r}")
    cfg = problem.cfg
    B = SAMPLE_BLOCK
    check_batch_memory(cfg, N)
    tokens = torch.empty(N, cfg.L, dtype=torch.int32)   # stored as int32: half the memory of int64
    pos = torch.empty(N, dtype=torch.long)
    x_inf = torch.empty(N, dtype=torch.long)
    for j, start in enumerate(range(0, N, B)):
        stop = min(start + B, N)
        g = generator(seed, "data", split, j)
        pos[start:stop] = torch.randint(cfg.L, (B,), generator=g)[:stop - start]
        x_inf[start:stop] = torch.randint(cfg.V, (B,), generator=g)[:stop - start]
        if cfg.noise_vocab:
            block = cfg.V + torch.randint(cfg.noise_vocab, (B, cfg.L), generator=g)
        else:
            block = torch.randint(cfg.V, (B, cfg.L), generator=g)
        tokens[start:stop] = block[:stop - start]
    tokens.scatter_(1, pos[:, None], x_inf[:, None].to(torch.int32))
    dev = cfg.device
    x_inf = x_inf.to(dev)
    return Batch(tokens.to(dev), pos.to(dev), problem.perm[x_inf], x_inf)


def check_batch(problem: Problem, batch: Batch) -> None:
    """Raise a ValueError naming the field unless `batch` is a valid batch of `problem`'s task (on its
    device): see `check_ids`. Every public entry that takes a batch calls it first."""
    check_problem(problem)
    cfg = problem.cfg
    check_ids(batch, cfg.V_in, cfg.V, cfg.L, problem.E.device)


def check_ids(batch: Batch, V_in: int, V: int, L: int | None = None, device: torch.device | None = None) -> None:
    """Raise a ValueError naming the field unless the batch holds int32 or int64 ids (on `device`):
    tokens (N, L) in [0, V_in) (any L when L is None), pos and labels (N,) in [0, L) and [0, V),
    informative tokens in [0, V)."""
    if not isinstance(batch, Batch):
        raise ValueError(f"batch must be a Batch (see lib.sample_batch), got {type(batch).__name__}")
    for name in ("tokens", "pos", "labels"):
        t = getattr(batch, name)
        if not isinstance(t, torch.Tensor) or t.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"batch.{name} must be an int32 or int64 tensor, got "
                             f"{getattr(t, 'dtype', type(t).__name__)}")
        if device is not None and t.device.type != torch.device(device).type:
            raise ValueError(f"batch.{name} is on {t.device}, the problem on {device}")
    if batch.tokens.ndim != 2 or (L is not None and batch.tokens.shape[1] != L):
        raise ValueError(f"batch.tokens must have shape (N, L={'any' if L is None else L}), got {tuple(batch.tokens.shape)}")
    N = batch.N
    if N == 0:
        raise ValueError("N must be a positive integer, got 0 (batch.tokens has no rows)")
    lo, hi = torch.aminmax(batch.tokens)                          # one pass over the ids
    if int(lo) < 0 or int(hi) >= V_in:
        raise ValueError(f"batch.tokens must lie in [0, {V_in}), got values in [{int(lo)}, {int(hi)}]")
    for name, top in (("pos", batch.tokens.shape[1]), ("labels", V)):
        t = getattr(batch, name)
        if tuple(t.shape) != (N,):
            raise ValueError(f"batch.{name} must have shape (N,) = ({N},), one entry per row of batch.tokens, "
                             f"got {tuple(t.shape)}")
        lo, hi = torch.aminmax(t)
        if int(lo) < 0 or int(hi) >= top:
            raise ValueError(f"batch.{name} must lie in [0, {top}), got values in [{int(lo)}, {int(hi)}]")
    inf = batch.informative
    if tuple(inf.shape) != (N,) or int(inf.min()) < 0 or int(inf.max()) >= V:
        raise ValueError(f"the informative tokens (batch.tokens at batch.pos) must lie in [0, V={V})")


def keys_values(problem: Problem, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Direct route: keys h (N, n_keys, d) and values v (N, n_keys, d) of every position (the batch is
    checked first)."""
    check_batch(problem, batch)
    cfg = problem.cfg
    h = problem.E[batch.tokens]                                   # (N, L, d)
    trig = torch.zeros(batch.tokens.shape, dtype=h.dtype, device=h.device)
    trig.scatter_(1, batch.pos[:, None], 1.0)                     # (N, L): 1[t = l]
    h = h + trig[..., None] * problem.z_trig
    v = h if cfg.trigger_in_value else h - trig[..., None] * problem.z_trig
    if cfg.eos_key:
        eos = problem.z_eos.expand(batch.N, 1, cfg.d)
        h, v = torch.cat([h, eos], 1), torch.cat([v, eos], 1)     # (N, L + 1, d)
    return h, v
