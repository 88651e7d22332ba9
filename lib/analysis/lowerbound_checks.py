"""References for chapter 9's bounds, computed the long way: the first-gradient estimators' and the
three steps' N* problem by problem over a grid, the bits a memory of a permutation needs by
enumeration, and the look-up estimator simulated given the set of seen tokens. Tested in
tests/test_lowerbound_checks.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from ..core.config import TaskConfig, check_float, check_int
from ..core.seed import torch_generator
from .lowerbound import ESTIMATORS, estimator_nstars, three_steps_nstar


def estimator_nstar_grid(configs: list[TaskConfig], problems: int, threshold: float = 0.99, *, n_min: int = 16,
                         n_max: int = 2 ** 16, n_test: int = 2048) -> dict[str, np.ndarray]:
    """{estimator: (problems, len(configs)) array of N*} for every estimator of `ESTIMATORS` and
    "three" (the three steps, `three_steps_nstar` with n_test fresh samples); nan where N* is not
    reached by n_max. Problem s is seed s; for each problem the configurations are run in order."""
    problems = check_int("problems", problems, 1)
    if not isinstance(configs, (list, tuple)) or not configs or not all(isinstance(c, TaskConfig) for c in configs):
        raise ValueError("configs must be a non-empty list of TaskConfig")
    check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    est, thr = [[] for _ in configs], [[] for _ in configs]
    for s in range(problems):
        for j, c in enumerate(configs):
            est[j].append(estimator_nstars(c, threshold, seed=s, n_min=n_min, n_max=n_max))
            thr[j].append(three_steps_nstar(c, threshold, seed=s, n_min=n_min, n_max=n_max, n_test=n_test))
    nan = lambda x: np.nan if x is None else x
    ns = {e: np.array([[nan(r[e]) for r in est[j]] for j in range(len(configs))]).T for e in ESTIMATORS}
    ns["three"] = np.array([[nan(x) for x in thr[j]] for j in range(len(configs))]).T
    return ns


def enumerated_bits(V: int, k: int) -> float:
    """log2(V! / m), m the most permutations of [V] that any one map f: [V] -> [V] gets within k
    errors of, by enumerating every map against every permutation (V <= 6)."""
    V = check_int("V", V, 1)
    k = check_int("k", k, 0)
    if V > 6:
        raise ValueError(f"V must be at most 6 to enumerate V^V maps against V! permutations, got {V}")
    perms = np.array(list(itertools.permutations(range(V))))                  # (V!, V)
    maps = np.array(list(itertools.product(range(V), repeat=V)))              # (V^V, V)
    wrong = (maps[:, None, :] != perms[None, :, :]).sum(-1)                   # (V^V, V!)
    return math.log2(len(perms) / (wrong <= k).sum(1).max())


def permutation_bit_rows(brute_force=(4, 5), counted=((6, 2), (7, 3), (8, 1), (8, 5))):
    """Rows (V, k, exact, serves) for every k = 0 .. V at each V of `brute_force`, then each (V, k) of
    `counted`: exact is `enumerated_bits(V, k)` (inf for the counted rows: no enumeration), serves the
    number of permutations one map is within k errors of by the proof's count (the k tokens where it
    may err, the labels placed on them), counted by enumerating the ordered choices."""
    if not all(isinstance(v, int) and 1 <= v <= 6 for v in brute_force):
        raise ValueError(f"brute_force must list V between 1 and 6, got {brute_force!r}")
    if not all(isinstance(r, (tuple, list)) and len(r) == 2 and 0 <= r[1] <= r[0] for r in counted):
        raise ValueError(f"counted must list pairs (V, k) with 0 <= k <= V, got {counted!r}")
    rows = [(V, k, enumerated_bits(V, k)) for V in brute_force for k in range(V + 1)]
    rows += [(V, k, math.inf) for V, k in counted]
    return [(V, k, exact, sum(1 for _ in itertools.permutations(range(V), k))) for V, k, exact in rows]


def lookup_guess_accuracies(V: int, reps: int, seed: int) -> list[list[float]]:
    """For S = 0 .. V seen tokens: the accuracies of `reps` draws of the estimator that looks seen
    tokens up and guesses the unseen ones as a random bijection onto the unseen labels (a random
    permutation, a random seen set of size S; one generator `lib.torch_generator(seed)` for all)."""
    V, reps, seed = check_int("V", V, 1), check_int("reps", reps, 1), check_int("seed", seed, 0)
    g = torch_generator(seed)
    out = []
    for S in range(V + 1):
        acc = []
        for _ in range(reps):
            perm = torch.randperm(V, generator=g)
            seen = torch.zeros(V, dtype=torch.bool)
            seen[torch.randperm(V, generator=g)[:S]] = True
            free = perm[~seen]
            guess = perm.clone()
            guess[~seen] = free[torch.randperm(len(free), generator=g)]
            acc.append(float((guess == perm).double().mean()))
        out.append(acc)
    return out


def attention_nstar_grid(configs: list[TaskConfig], problems: int, threshold: float = 0.99, *, n_min: int = 1,
                         n_max: int = 2 ** 15) -> np.ndarray:
    """(problems, len(configs)) array of the three steps' attention N* (`lib.analysis.margins.measured_attention_nstar`:
    the smallest N of a grid n_min..n_max, four points per doubling, at which the exact attention accuracy
    of the three steps' key direction reaches `threshold`, limit mode, bisection on nested batches);
    nan where n_max does not reach it. Problem s is seed s, as in `estimator_nstar_grid`."""
    from .margins import measured_attention_nstar
    problems = check_int("problems", problems, 1)
    if not isinstance(configs, (list, tuple)) or not configs or not all(isinstance(c, TaskConfig) for c in configs):
        raise ValueError("configs must be a non-empty list of TaskConfig")
    check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    out = np.array([[measured_attention_nstar(c, seed=s, threshold=threshold, n_min=n_min, n_max=n_max) for c in configs]
                    for s in range(problems)], float)
    return np.where(np.isfinite(out), out, np.nan)
