"""Capacities of linear associative memories (chapter 2; read again in 6, 7, 9, 10) and of the three steps'
population memory (chapters 7, 8).

Searches, not objects: each answers "how many associations fit" with the one monotone search of
`lib.core.search` over memories of `lib.core.memory`.
  hebbian_capacity     largest n a Hebbian memory W = sum_x u_{Pi x} e_x^T recalls to a threshold;
  trained_capacity     the same for a memory trained by Adam on the cross-entropy
                       (`lib.learning.trainer.train_memory`); threshold 1: every pair at once;
  shipped_every_pair   chapter 2's every-pair capacities as shipped (`scripts/every_pair_grid.py`);
  population_recall    the three steps' final memory at N = infinity with oracle attention (chapter 8);
  population_capacity  the largest V that memory recalls to a threshold.
"""

from __future__ import annotations

from ..core.config import EMBEDDINGS, check_choice, check_float, check_int
from ..core.memory import hebbian, make_memory, recall_accuracy
from ..core.models import model_logits
from ..core.optim import TrainConfig
from ..core.search import threshold_search
from ..learning.trainer import train_memory


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
    from ..core.paths import data_dir
    path = os.path.join(data_dir(), EVERY_PAIR_FILE)
    with open(path) as f:
        return json.load(f)


def population_recall(cfg, seed: int = 0) -> float:
    """Recall accuracy of the three steps' final memory in the limit of exact counts (every token
    informative N / V times) with oracle attention: G = (1/V) sum_j (u_{Pi j} - u_bar) phi(v_j)^T,
    v_j = e_j (+ z_trig with the trigger in the value path), accuracy over the V tokens of
    argmax_k u_k^T G phi(v_x). The N -> infinity limit of G3 for any model of `lib.core.featuremaps`."""
    from ..core.config import TaskConfig
    from ..core.embeddings import make_problem

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
    from ..core.config import TaskConfig

    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    seeds, v_max = check_int("seeds", seeds, 1), check_int("v_max", v_max, 2)
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)

    def too_many(V):
        c = cfg.with_(V=V)
        return sum(population_recall(c, s) for s in range(seeds)) / seeds < threshold

    found = threshold_search(too_many, 2, v_max, resolution)
    return found.last_false or 0
