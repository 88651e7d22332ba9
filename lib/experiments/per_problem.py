"""N* problem by problem over a list of configurations: one sweep per problem seed, one row per
problem (chapters 7 and 10: exponents fitted over problems need the single problems' N*).
Tested in tests/test_per_problem.py.

By default row s searches every configuration with problem seed s: the grid points of one row share
their random numbers (the same permutation seed, nested batches from the same streams), which makes
differences along the grid less noisy but can also make them degenerate (chapter 10: a trained N*
set by which tokens the shared data happen to contain is then the same number at every grid point).
With `distinct=True` configuration j of row s uses the seed `j * problems + s` instead: every grid
point of every row gets its own problem and its own data, so the rows are still independent
replicates (the exponent fits over rows stay valid) but no two grid points share a draw."""

from __future__ import annotations

import numpy as np

from ..core.config import TaskConfig, check_bool, check_int
from .sweep import sweep, table


def point_seed(problems: int, row: int, column: int, distinct: bool) -> int:
    """The problem seed of row `row`, configuration `column`: `row`, or `column * problems + row` with
    `distinct` (no two cells of the (problems, configurations) table share a seed)."""
    return column * problems + row if distinct else row


def per_problem_nstars(configs: list[TaskConfig], problems: int, *, distinct: bool = False,
                       only: list[int] | None = None, **options) -> np.ndarray:
    """(problems, len(configs)) array: row s is `sweep(configs, seed=s, **options)`'s N* (nan where
    the search did not reach the threshold by n_max). `options` are sweep's (threshold, seeds, n_test,
    n_min, n_max, resolution, mode, training, metric, cache, ...); `seed` is set per row, or per cell with
    `distinct=True` (`point_seed`: every grid point its own problem and data). `only`: the indices of the
    configurations to search (the others' columns are nan), with the seeds they have in the whole table,
    so that another recipe can be searched on the same problems at some grid points."""
    problems = check_int("problems", problems, 1)
    check_bool("distinct", distinct)
    if "seed" in options:
        raise ValueError("seed is set per problem (0 .. problems - 1); do not pass it")
    if not isinstance(configs, (list, tuple)) or not configs or not all(isinstance(c, TaskConfig) for c in configs):
        raise ValueError("configs must be a non-empty list of TaskConfig")
    if only is None:
        only = list(range(len(configs)))
    elif (not isinstance(only, (list, tuple)) or not only or len(set(only)) != len(only)
          or not all(isinstance(j, int) and not isinstance(j, bool) and 0 <= j < len(configs) for j in only)):
        raise ValueError(f"only must be a non-empty list of distinct indices into configs (0 .. {len(configs) - 1}), "
                         f"got {only!r}")
    out = np.full((problems, len(configs)), np.nan)
    for s in range(problems):
        if not distinct:
            out[s, only] = table(sweep([configs[j] for j in only], seed=s, **options))["nstar"]
        else:
            out[s, only] = [table(sweep([configs[j]], seed=point_seed(problems, s, j, True), **options))["nstar"][0]
                            for j in only]
    return out
