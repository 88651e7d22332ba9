"""N* problem by problem over a list of configurations: one sweep per problem seed, one row per
problem (chapters 7 and 10: exponents fitted over problems need the single problems' N*).
Tested in tests/test_per_problem.py."""

from __future__ import annotations

import numpy as np

from ..core.config import TaskConfig, check_int
from .sweep import sweep, table


def per_problem_nstars(configs: list[TaskConfig], problems: int, **options) -> np.ndarray:
    """(problems, len(configs)) array: row s is `sweep(configs, seed=s, **options)`'s N* (nan where
    the search did not reach the threshold by n_max). `options` are sweep's (threshold, seeds, n_test,
    n_min, n_max, resolution, mode, training, cache, ...); `seed` is set per row."""
    problems = check_int("problems", problems, 1)
    if "seed" in options:
        raise ValueError("seed is set per problem (0 .. problems - 1); do not pass it")
    if not isinstance(configs, (list, tuple)) or not configs or not all(isinstance(c, TaskConfig) for c in configs):
        raise ValueError("configs must be a non-empty list of TaskConfig")
    return np.array([table(sweep(list(configs), seed=s, **options))["nstar"] for s in range(problems)])
