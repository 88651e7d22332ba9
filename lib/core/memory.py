"""Linear associative memories: the storage device inside the value matrix (chapter 2).

A memory stores n associations x -> Pi(x) in one d x d matrix W and recalls by
argmax_k u_k^T W e_x. Two ways to write it:
  hebbian   W = sum_x u_{Pi x} e_x^T (one gradient step of the cross-entropy from W = 0, up to
            scale and a rank-one mean term, see chapter 2), and
  trained   W minimising the cross-entropy over the n pairs (`lib.learning.trainer.train_memory`).
With orthogonal embeddings (n <= d) the Hebbian memory has no cross-talk; with random embeddings
the cross-talk sum_{x' != x} (u_k^T u_{Pi x'}) (e_{x'}^T e_x) grows like sqrt(n)/d, which is what
limits the capacity to about d^2 / log n. The searches for that capacity (Hebbian, trained, every
pair) live in `lib.experiments.memory_capacity`; this module holds the memory itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import EMBEDDINGS, DTYPES, check_choice, check_int, default_device
from .embeddings import draw_vectors
from .seed import generator


@dataclass
class Memory:
    """n associations between input vectors e_x (rows of E) and output vectors u_{Pi x}."""

    E: torch.Tensor       # (n, d) input embeddings
    U: torch.Tensor       # (n, d) output embeddings
    perm: torch.Tensor    # (n,) long: x is associated with label perm[x]

    @property
    def n(self) -> int:
        return self.E.shape[0]

    @property
    def d(self) -> int:
        return self.E.shape[1]


def make_memory(n: int, d: int, embedding: str = "gaussian", seed: int = 0,
                dtype: str = "float32", device: str | None = None) -> Memory:
    """Draw n input and n output vectors in R^d (independent) and a random permutation."""
    n, d = check_int("n", n, 1), check_int("d", d, 1)
    check_choice("embedding", embedding, EMBEDDINGS)
    check_choice("dtype", dtype, tuple(DTYPES))
    g = generator(seed, "memory", n, d)
    vecs = draw_vectors(2 * n if embedding != "orthogonal" else n, d, embedding, g)
    if embedding == "orthogonal":          # inputs and outputs may share one orthonormal frame
        E, U = vecs, draw_vectors(n, d, embedding, g)
    else:
        E, U = vecs[:n], vecs[n:]
    perm = torch.randperm(n, generator=g)
    to = dict(dtype=DTYPES[dtype], device=device or default_device())
    return Memory(E.to(**to), U.to(**to), perm.to(to["device"]))


def hebbian(mem: Memory) -> torch.Tensor:
    """W = sum_x u_{Pi x} e_x^T: (d, d)."""
    return mem.U[mem.perm].T @ mem.E


def memory_logits(mem: Memory, W: torch.Tensor) -> torch.Tensor:
    """Scores u_k^T W e_x for every stored x (rows) and candidate k (columns): (n, n)."""
    return mem.E @ W.T @ mem.U.T


def recall_accuracy(mem: Memory, W: torch.Tensor, chunk: int = 4096) -> float:
    """Fraction of the n stored associations recalled exactly by argmax."""
    hits = 0
    for s in range(0, mem.n, chunk):
        sub = Memory(mem.E[s:s + chunk], mem.U, mem.perm[s:s + chunk])
        hits += int((memory_logits(sub, W).argmax(1) == sub.perm).sum())
    return hits / mem.n


def hebbian_scores(n: int, d: int, seeds, embedding: str = "gaussian") -> tuple[torch.Tensor, torch.Tensor]:
    """The scores s_k = u_k^T W e_x of one-step memories W = hebbian(mem), mem = make_memory(n, d,
    embedding, seed) in float64 on the CPU, for each seed of `seeds` in turn (an iterable of ints):
    the correct scores s_{Pi x}, shape (S n,), and the n - 1 wrong scores of each stored x, in the
    order of k, shape (S n, n - 1), for S seeds (rows: the memories one after the other)."""
    n = check_int("n", n, 2)
    if isinstance(seeds, (int, str)) or not hasattr(seeds, "__iter__"):
        raise ValueError(f"seeds must be an iterable of seeds (e.g. range(10)), got {seeds!r}")
    seeds = [check_int("seeds", s, 0) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed, got none")
    correct, wrong = [], []
    for seed in seeds:
        mem = make_memory(n, d, embedding, seed=seed, dtype="float64", device="cpu")
        S = memory_logits(mem, hebbian(mem))
        is_y = torch.zeros_like(S, dtype=torch.bool)
        is_y[torch.arange(n), mem.perm] = True
        correct.append(S[is_y])
        wrong.append(S[~is_y].reshape(n, n - 1))
    return torch.cat(correct), torch.cat(wrong)


def hebbian_margins(n: int, d: int, memories: int, embedding: str = "gaussian") -> tuple[torch.Tensor, float]:
    """The margins s_{Pi x} - s_k (k != Pi x) of `memories` one-step memories (seeds 0, 1, ...; see
    `hebbian_scores`), all of them in one tensor, and the standard error over memories of their
    variance: the standard deviation over memories of each memory's mean squared deviation from the
    overall mean, divided by sqrt(memories)."""
    memories = check_int("memories", memories, 2)
    per = [(c[:, None] - w).flatten() for c, w in (hebbian_scores(n, d, [s], embedding) for s in range(memories))]
    margins = torch.cat(per)
    se = float(torch.stack([((x - margins.mean()) ** 2).mean() for x in per]).std()) / len(per) ** 0.5
    return margins, se
