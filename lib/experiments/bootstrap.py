"""The bootstrap over seeds of a critical sample size on its evaluated grid (the confidence of N* that
`lib.experiments.sweep` reports; see that module's docstring for what it means and what it does not)."""

from __future__ import annotations

import numpy as np

from ..core.config import check_int
from ..core.grid import stays_from
from ..core.seed import generator

BOOTSTRAP = 2000                       # resamples of the seeds for the N* interval


def bootstrap_nstar(Ns, per_seed, threshold: float, *, seed: int = 0, resamples: int = BOOTSTRAP):
    """Bootstrap over seeds of N* on the evaluated grid: (q10, q90, agree); see the module docstring.

    Ns: evaluated N's (increasing); per_seed: array (len(Ns), seeds) of per-seed accuracies.
    """
    Ns = np.asarray(Ns, dtype=np.int64)
    acc = np.asarray(per_seed, dtype=np.float64)
    if acc.ndim != 2 or acc.shape[0] != len(Ns) or len(Ns) == 0:
        raise ValueError(f"per_seed must have shape (len(Ns), seeds), got {acc.shape} for {len(Ns)} N's")
    if np.any(np.diff(Ns) <= 0):
        raise ValueError("Ns must be strictly increasing")
    resamples = check_int("resamples", resamples, 1)
    n_seeds = acc.shape[1]
    idx = np.zeros((1, n_seeds), dtype=np.int64) + np.arange(n_seeds)        # all seeds first
    g = generator(seed, "bootstrap", n_seeds)
    draws = _randint(n_seeds, (resamples, n_seeds), g)
    idx = np.concatenate([idx, draws])
    means = acc[:, idx].mean(axis=-1)                                     # (len(Ns), 1 + resamples)
    passed = means >= threshold
    # N* of a resample: the smallest N from which on every evaluated N passes
    first = stays_from(passed, axis=0)
    value = np.where(first < len(Ns), Ns[np.minimum(first, len(Ns) - 1)], np.iinfo(np.int64).max)
    ref, boot = value[0], value[1:]
    q10, q90 = (int(np.quantile(boot, q, method="inverted_cdf")) for q in (0.1, 0.9))
    none = np.iinfo(np.int64).max
    return (None if q10 == none else q10, None if q90 == none else q90, float(np.mean(boot == ref)))


def _randint(high: int, shape, g) -> np.ndarray:
    import torch
    return torch.randint(0, high, shape, generator=g).numpy()
