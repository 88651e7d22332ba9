"""Critical sample size N*: the smallest N at which the three steps reach a target accuracy.

`nstar` asks `lib.run` (mean accuracy over seeds) at N = n_min, 2 n_min, ... until the threshold is
reached, then bisects to a relative resolution (default 5 %) with the one monotone search of
`lib.search`. Data are nested in N (`lib.sample_batch`), so the accuracy curve of one seed is a
curve of one growing data set. It returns nstar = None when `n_max` is reached first: with z_trig
in the value path accuracy can saturate below the threshold at any N, which is a result, not an
error. An optional JSON cache file stores every evaluated point under a key holding every field of
the configuration and of the step sizes, so an interrupted sweep resumes without redoing work.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from .config import TaskConfig, check_choice, check_float, check_int
from .evaluate import N_TEST
from .experiment import RunResult, run
from .search import threshold_search
from .steps import MODES, StepSizes


def cache_key(cfg: TaskConfig, N: int, seeds: int, seed: int, mode: str, n_test: int,
              step_sizes: StepSizes) -> str:
    """Every field that changes a point's numbers (the device does not)."""
    fields = {k: v for k, v in asdict(cfg).items() if k != "device"}
    return json.dumps([fields, N, seeds, seed, mode, n_test, asdict(step_sizes)], sort_keys=True)


class PointCache:
    """A JSON file of evaluated points; each new point is written at once (atomic replace)."""

    def __init__(self, path: str | None):
        self.path = path
        self.data = {}
        if path and os.path.exists(path):
            with open(path) as f:
                self.data = json.load(f)

    def get(self, key) -> RunResult | None:
        hit = self.data.get(key)
        return RunResult(**hit) if hit else None

    def put(self, key, point: RunResult):
        self.data[key] = point.as_dict()
        if self.path:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.data, f)
            os.replace(tmp, self.path)


@dataclass
class NStar:
    nstar: int | None                  # smallest N reaching the threshold, None if not by n_max
    threshold: float
    points: list = field(default_factory=list)   # every evaluated RunResult, in order
    runs: int = 0                                 # how many points were computed (not read from the cache)


def nstar(cfg: TaskConfig, threshold: float = 0.99, *, seeds: int = 3, seed: int = 0, n_min: int | None = None,
          n_max: int = 2 ** 20, mode: str = "limit", n_test: int = N_TEST, resolution: float = 0.05,
          step_sizes: StepSizes = StepSizes(), cache: str | None = None) -> NStar:
    """Critical sample size by doubling from n_min (default V) and bisection to `resolution`."""
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    n_max = check_int("n_max", n_max, 1)
    n_min = check_int("n_min", n_min if n_min is not None else min(cfg.V, n_max), 1)
    seeds, seed, n_test = check_int("seeds", seeds, 1), check_int("seed", seed, 0), check_int("n_test", n_test, 1)
    check_choice("mode", mode, MODES)
    store = PointCache(cache)
    out = NStar(None, threshold)

    def ok(N):
        key = cache_key(cfg, N, seeds, seed, mode, n_test, step_sizes)
        point = store.get(key)
        if point is None:
            point = run(cfg, N, mode=mode, seeds=seeds, seed=seed, n_test=n_test, step_sizes=step_sizes)
            out.runs += 1
            store.put(key, point)
        out.points.append(point)
        return point.acc >= threshold

    out.nstar = threshold_search(ok, n_min, n_max, resolution).first_true
    return out
