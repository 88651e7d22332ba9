"""Linear associative memories: the storage device inside the value matrix (chapter 2).

A memory stores n associations x -> Pi(x) in one d x d matrix W and recalls by
argmax_k u_k^T W e_x. Two ways to write it:
  hebbian   W = sum_x u_{Pi x} e_x^T (one gradient step of the cross-entropy from W = 0, up to
            scale and a rank-one mean term, see chapter 2), and
  trained   W minimising the cross-entropy over the n pairs (`train_memory`, the loop of `lib.core.optim`).
With orthogonal embeddings (n <= d) the Hebbian memory has no cross-talk; with random embeddings
the cross-talk sum_{x' != x} (u_k^T u_{Pi x'}) (e_{x'}^T e_x) grows like sqrt(n)/d, which is what
limits the capacity to about d^2 / log n.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as Fn

from .config import EMBEDDINGS, DTYPES, check_choice, check_float, check_int, default_device
from .embeddings import draw_vectors
from .optim import History, TrainConfig, fit
from .search import threshold_search
from .seed import generator
from .models import model_logits


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


def train_memory(mem: Memory, cfg: TrainConfig = TrainConfig(), W0: torch.Tensor | None = None,
                 ) -> tuple[torch.Tensor, History]:
    """Train a linear associative memory W (d, d) on all n pairs (x, Pi x) from W0 (default 0)."""
    if not isinstance(mem, Memory):
        raise ValueError(f"mem must be a Memory (see lib.core.memory.make_memory), got {type(mem).__name__}")
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    W = torch.zeros(mem.d, mem.d, dtype=mem.E.dtype, device=mem.E.device) if W0 is None else W0.detach().clone()
    if tuple(W.shape) != (mem.d, mem.d):
        raise ValueError(f"W0 must have shape {(mem.d, mem.d)}, got {tuple(W.shape)}")
    W.requires_grad_(True)

    def loss_and_hits():
        logits = memory_logits(mem, W)
        loss = Fn.cross_entropy(logits, mem.perm)
        loss.backward()
        return float(loss.detach()), int((logits.argmax(1) == mem.perm).sum())

    hist = fit([W], [cfg.lr], loss_and_hits, mem.n, cfg)
    return W.detach(), hist


def _capacity(d: int, threshold: float, seeds: int, embedding: str, n_max: int | None, write,
              resolution: float, first_seed: int = 0) -> int:
    """Largest n whose memory W = write(mem) recalls >= threshold (mean over the memories of seeds
    first_seed .. first_seed + seeds - 1): the one monotone search of `lib.core.search` on
    "n associations are too many", to `resolution`."""
    d, seeds = check_int("d", d, 1), check_int("seeds", seeds, 1)
    first_seed = check_int("first_seed", first_seed, 0)
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    check_choice("embedding", embedding, EMBEDDINGS)
    n_max = check_int("n_max", n_max, 1) if n_max is not None else 64 * d * d

    def too_many(n):
        mems = (make_memory(n, d, embedding, s) for s in range(first_seed, first_seed + seeds))
        return sum(recall_accuracy(m, write(m)) for m in mems) / seeds < threshold

    found = threshold_search(too_many, 1, n_max, resolution)
    return found.last_false or 0


def hebbian_capacity(d: int, threshold: float = 0.99, seeds: int = 3, embedding: str = "gaussian",
                     n_max: int | None = None, resolution: float = 0.02, first_seed: int = 0) -> int:
    """Largest n whose Hebbian memory in dimension d recalls >= threshold (mean over seeds
    first_seed, first_seed + 1, ...). For orthogonal embeddings it is d (n > d orthogonal vectors
    do not exist)."""
    if embedding == "orthogonal":
        return check_int("d", d, 1)
    return _capacity(d, threshold, seeds, embedding, n_max, hebbian, resolution, first_seed)


def trained_capacity(d: int, threshold: float = 0.99, seeds: int = 2, embedding: str = "gaussian",
                     steps: int = 600, lr: float = 0.05, n_max: int | None = None, resolution: float = 0.02,
                     first_seed: int = 0) -> int:
    """Largest n that a memory trained by Adam on the cross-entropy (`train_memory`, `steps`
    full-batch steps, early stop at the threshold) recalls >= threshold, mean over seeds first_seed,
    first_seed + 1, ... (threshold 1: every pair at once)."""
    cfg = TrainConfig(steps=check_int("steps", steps, 1), lr=lr, optimizer="adam",
                      target_acc=check_float("threshold", threshold, 0.0, 1.0, strict_min=True))
    return _capacity(d, threshold, seeds, embedding, n_max, lambda m: train_memory(m, cfg)[0], resolution,
                     first_seed)


EVERY_PAIR_FILE = "ch02_every_pair.json"


def shipped_every_pair() -> dict:
    """Chapter 2's every-pair capacities shipped with the book (`scripts/every_pair_grid.py`, draw 0):
    {"provenance": {...}, "n": {str(d): [trained_capacity(d, 1.0, seeds=1, first_seed=s, steps, lr=3.0) for each
    memory seed s]}}."""
    import json
    import os
    from .paths import data_dir
    path = os.path.join(data_dir(), EVERY_PAIR_FILE)
    with open(path) as f:
        return json.load(f)


# ----------------------------------------------------------------------------- chapter 8

def population_recall(cfg, seed: int = 0) -> float:
    """Recall accuracy of the three steps' final memory in the limit of exact counts (every token
    informative N / V times) with oracle attention: G = (1/V) sum_j (u_{Pi j} - u_bar) phi(v_j)^T,
    v_j = e_j (+ z_trig with the trigger in the value path), accuracy over the V tokens of
    argmax_k u_k^T G phi(v_x). The N -> infinity limit of G3 for any model of `lib.core.featuremaps`."""
    from .config import TaskConfig
    from .embeddings import make_problem

    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    problem = make_problem(cfg, check_int("seed", seed, 0))
    V = cfg.V
    values = problem.E[:V] + (problem.z_trig if cfg.trigger_in_value else 0.0)
    phi = problem.features.phi(values, problem.F)                       # (V, width)
    G = (problem.U_perm - problem.u_bar).T @ phi / V                     # (d, width)
    hits = 0
    for s in range(0, V, 2048):
        logits = model_logits(problem, G, phi[s:s + 2048])              # (chunk, V)
        hits += int((logits.argmax(1) == problem.perm[s:s + 2048]).sum())
    return hits / V


def population_capacity(cfg, threshold: float = 0.99, seeds: int = 2, v_max: int = 2 ** 14,
                        resolution: float = 0.05) -> int:
    """Largest V whose `population_recall` (mean over seeds) is >= threshold, with every other field
    of cfg fixed (V of cfg is ignored): doubling then bisection (`lib.core.search`); 0 if not even V = 2."""
    from .config import TaskConfig

    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    seeds, v_max = check_int("seeds", seeds, 1), check_int("v_max", v_max, 2)
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)

    def too_many(V):
        c = cfg.with_(V=V)
        return sum(population_recall(c, s) for s in range(seeds)) / seeds < threshold

    found = threshold_search(too_many, 2, v_max, resolution)
    return found.last_false or 0


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
