"""Critical sample size N*: the smallest N at which the three steps reach a target accuracy.

`nstar` asks `lib.run` (mean accuracy over seeds; every N uses the same seeds, and data are nested
in N by `lib.sample_batch`, so the accuracy curve of one seed is a curve of one growing data set)
at N = n_min, 2 n_min, ... until the threshold is reached, then bisects to a relative resolution
(default 5 %) with the one monotone search of `lib.core.search`. It returns nstar = None when `n_max` is
reached first: with z_trig in the value path accuracy can saturate below the threshold at any N,
which is a result, not an error.

Every evaluated point can be kept in the crash-safe store of `lib.experiments.store` (`cache=` a file path, or
`store=` an open `Store`): a point already there is read, never recomputed, so an interrupted
search resumes where it stopped and searches at other thresholds reuse the points. A point
missing from the store is claimed and the store re-read first (`Store.claim`, `Store.refresh`), so
concurrent searches over one cache file compute each point once. Grids of
configurations, in parallel, are `lib.experiments.sweep`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.config import TaskConfig, check_float, check_int
from ..learning.evaluate import N_TEST
from .experiment import METRICS, run
from ..core.search import threshold_search
from ..core.steps import StepSizes
from .store import Store, point_prefix
from .workers import check_grid_memory, point_bytes, point_culprit, point_name


@dataclass
class NStar:
    nstar: int | None                  # smallest N reaching the threshold, None if not by n_max
    threshold: float
    points: list = field(default_factory=list)   # every evaluated RunResult, in order
    runs: int = 0                                 # how many points were computed (not read from the cache)
    last_false: int | None = None                 # largest evaluated N below the threshold (None if n_min passed)


def nstar(cfg: TaskConfig, threshold: float = 0.99, *, seeds: int = 3, seed: int = 0, n_min: int | None = None,
          n_max: int = 2 ** 20, mode: str = "limit", n_test: int = N_TEST, resolution: float = 0.05,
          step_sizes: StepSizes = StepSizes(), cache: str | None = None, store: Store | None = None,
          training=None, metric: str = "acc", on_point=None) -> NStar:
    """Critical sample size by doubling from n_min (default V) and bisection to `resolution`.
    `training` (a `lib.learning.trainer.TrainSpec`, mode "finite"): N* of the trained model instead.
    `metric`: which mean accuracy of the `RunResult` must reach the threshold: "acc" (test accuracy,
    the default), "att_acc" (attention picks the marked position: the attention requirement alone)
    or "oracle_acc" (recall with oracle attention at test). The store's points hold all three, so
    searches on different metrics share them. `on_point(N, point, reached)`, if given, is called as each
    evaluated N is known (computed or read from the store), in the search's order. Before any point,
    the search's largest (N = n_max) must fit in the memory available (`lib.experiments.workers.
    check_grid_memory`, as a sweep checks its grid), else a ValueError naming n_max, n_test, L, V or d."""
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    n_max = check_int("n_max", n_max, 1)
    n_min = check_int("n_min", n_min if n_min is not None else min(cfg.V, n_max), 1)
    prefix = point_prefix(cfg, seeds=seeds, seed=seed, mode=mode, n_test=n_test, step_sizes=step_sizes,
                          training=training)
    # before any point: the search's largest, at n_max, must fit (as a sweep checks its grid)
    check_grid_memory([point_name(cfg)], [point_bytes(cfg, n_max, n_test, mode)], n_max,
                      culprits=[point_culprit(cfg, n_max, n_test, mode)])
    if store is not None and cache is not None:
        raise ValueError("cache and store cannot both be given")
    if store is not None and not isinstance(store, Store):
        raise ValueError(f"store must be a lib.experiments.store.Store, got {type(store).__name__}")
    if on_point is not None and not callable(on_point):
        raise ValueError(f"on_point must be callable or None, got {type(on_point).__name__}")
    store = store if store is not None else Store(cache)
    out = NStar(None, threshold)

    def ok(N):
        point = store.get(prefix, N)
        if point is None:
            with store.claim(prefix, N):        # another process computing it: wait, then read it
                store.refresh()
                point = store.get(prefix, N)
                if point is None:
                    point = run(cfg, N, mode=mode, seeds=seeds, seed=seed, n_test=n_test,
                                step_sizes=step_sizes, training=training)
                    out.runs += 1
                    store.put(prefix, point)
        out.points.append(point)
        reached = getattr(point, metric) >= threshold
        if on_point is not None:
            on_point(N, point, reached)
        return reached

    bracket = threshold_search(ok, n_min, n_max, resolution)
    out.nstar, out.last_false = bracket.first_true, bracket.last_false
    return out


def problem_nstars(cfg: TaskConfig, threshold: float, problems: int, *, seed0: int = 0, **search) -> list:
    """N* of `problems` independent problems (seeds seed0, seed0 + 1, ...), one `nstar` search each with
    one seed (`search`: nstar's keyword arguments, e.g. metric, store, n_min, n_max, resolution); a list
    of ints, None where a problem did not reach the threshold by n_max."""
    problems, seed0 = check_int("problems", problems, 1), check_int("seed0", seed0, 0)
    for key in ("seeds", "seed"):
        if key in search:
            raise ValueError(f"{key} is set by problem_nstars (one seed per problem, from seed0)")
    return [nstar(cfg, threshold, seeds=1, seed=seed0 + i, **search).nstar for i in range(problems)]
