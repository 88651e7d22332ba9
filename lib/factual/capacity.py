"""Chapter 11 (factual recall, after Nichani, Lee and Bietti, ICLR 2025), capacity with a store:

Capacity (`smallest_model`): the smallest number of heads (attention block, m = 0) or the smallest
MLP width (one head kept fixed) whose trained model reaches a test-accuracy threshold, by
`lib.core.search.smallest_true`; every trained point is kept in a `FactStore` (the record format and the
crash-safe append of `lib.experiments.store`), so a rerun trains nothing. Why not `lib.experiments.store.Store` itself: the
sweep engine's store keys a result by (configuration prefix, N), N the number of training samples of
one run of `lib.experiments.sweep`, and holds `RunResult`s; a capacity point here is keyed by the task, the model
and the training configuration (no N: training is online), and holds a History summary. `FactStore`
keeps the engine's record format and checksums with these keys.
"""

from __future__ import annotations

import os
from dataclasses import asdict

from ..core.config import check_choice, check_float, check_int
from ..core.search import threshold_search
from ..core.seed import get_draw
from ..experiments.store import BOOK_DATA, append_line, canonical, check_store_path, library_version, read_records, record_text
from .models import FactModelConfig, FactTransformer, block_param_counts, param_counts
from .task import FactTask, _check_task
from .training import TrainConfig, train


BLOCKS = ("attention", "mlp")


# ------------------------------------------------------------------------------ capacity, with a cache

POINT_KEY = ("task", "model", "train", "kind", "version")
POINT_RESULT = ("step", "loss", "acc", "rel_acc", "sub_acc", "kl", "max_acc", "params", "seconds")


def _fact_shape(key: dict, result: dict) -> bool:
    """A trained point of `trained_point`: its key fields and its result fields, nothing else."""
    return set(key) - {"draw"} == set(POINT_KEY) and set(result) == set(POINT_RESULT)


class FactStore:
    """Trained points, keyed by everything that fixes their numbers. The record format, reader and
    appender of lib.experiments.store (`record_text`, `read_records`, `append_line`: one checksummed line per
    point, appended under flock and fsynced; invalid or cut lines reported and retrained).
    `path=None`: memory only. `read_also`: another store's file whose points are read too but never
    written (a store shipped with the book): new points go to `path` only."""

    def __init__(self, path: str | None = None, read_also: str | None = None):
        self.path = check_store_path(path)
        self.data: dict[str, dict] = {}
        self.computed = 0                      # points put (trained, not found) since construction
        if read_also is not None:
            read_also = check_store_path(read_also)
            if not os.path.exists(read_also):
                raise ValueError(f"read_also: no store at {read_also!r}")
        for source in (read_also, self.path):
            if source is not None and os.path.exists(source):
                for key, result in read_records(source, _fact_shape)[0]:
                    self.data[canonical(key)] = result

    def get(self, key: dict):
        return self.data.get(canonical(key))

    def put(self, key: dict, result: dict) -> None:
        self.data[canonical(key)] = result
        self.computed += 1
        if self.path is not None:
            append_line(self.path, record_text(key, result))

    def __len__(self):
        return len(self.data)


def trained_point(task: FactTask, model_cfg: FactModelConfig, train_cfg: TrainConfig,
                  store: FactStore | None = None, device: str = "cpu") -> dict:
    """Train one model (or read it from `store`): the final History entry, `params` (trainable),
    `max_acc` (best logged test accuracy) and `seconds`. The device is not part of the key."""
    key = {"task": asdict(task), "model": asdict(model_cfg), "train": asdict(train_cfg),
           "kind": "FactTransformer", "version": library_version()}
    if get_draw():                      # another draw (lib.core.seed.set_draw): other numbers, other key
        key["draw"] = get_draw()
    if store is not None and (hit := store.get(key)) is not None:
        return hit
    model = FactTransformer(task, model_cfg)
    hist = train(model, train_cfg, device=device)
    out = {**hist.final(), "max_acc": max(hist.acc), "params": param_counts(model)["trainable"],
           "seconds": hist.seconds}
    if store is not None:
        store.put(key, out)
    return out


def block_config(block: str, n: int, d: int, d_h: int, unit: int, seed: int = 0,
                 activation: str = "relu", heads: int = 0) -> FactModelConfig:
    """Model n of a block's search. "attention": n heads of dimension d_h, no MLP (the facts must sit
    in V and O). "mlp": an MLP of width n unit after one routing head (values='identity', query/key
    dimension d_h; the facts must sit in the MLP) when heads = 0, or after `heads` trained heads of dimension d_h
    (attention and MLP share the facts: the frontier between the blocks)."""
    check_choice("block", block, BLOCKS)
    n, unit = check_int("n", n, 1), check_int("unit", unit, 1)
    heads = check_int("heads", heads, 0)
    if block == "attention":
        return FactModelConfig(d=d, H=n, d_h=d_h, m=0, seed=seed, activation=activation)
    if heads:
        return FactModelConfig(d=d, H=heads, d_h=d_h, m=n * unit, seed=seed, activation=activation)
    return FactModelConfig(d=d, H=1, d_h=d_h, m=n * unit, values="identity", seed=seed, activation=activation)


def smallest_model(task: FactTask, block: str, threshold: float, train_cfg: TrainConfig, *, d: int,
                   d_h: int = 8, unit: int = 1, n_max: int = 64, resolution: float = 1e-9, seed: int = 0,
                   heads: int = 0,
                   store: FactStore | None = None, device: str = "cpu") -> dict:
    """Smallest n (heads, or MLP width in units of `unit`) whose trained model reaches `threshold`
    (best logged test accuracy), by lib.core.search.threshold_search (doubling, then bisection until the
    bracket is within `resolution` of n; the default is unit resolution, lib.core.search.smallest_true's);
    assumes success is monotone in n. Returns n (the first success found), the last failure below it,
    the model's trainable parameters and the grown block's own parameters; n = None when n_max is not
    enough. `heads`: see `block_config` (block "mlp" only)."""
    check_choice("block", block, BLOCKS)
    threshold = check_float("threshold", threshold, 0.0, 1.0)
    _check_task(task)
    if store is None:
        store = FactStore()

    def ok(n):
        return trained_point(task, block_config(block, n, d, d_h, unit, seed, heads=heads), train_cfg, store, device)["max_acc"] >= threshold
    br = threshold_search(ok, 1, check_int("n_max", n_max, 1), resolution)
    if br.first_true is None:
        return {"n": None, "last_false": br.last_false, "params": None, "block_params": None}
    c = param_counts(FactTransformer(task, block_config(block, br.first_true, d, d_h, unit, seed, heads=heads)))
    return {"n": br.first_true, "last_false": br.last_false, "params": c["trainable"], "block_params": c[block]}


# ------------------------------------------------------------------------------ chapter 11's capacity grid

# The grid of chapter 11's capacity fits, shared by the chapter and scripts/fact_capacity_grid.py (which
# trains it into a store, book/data/ch11_capacity_grid.jsonl): R = 4 relations, D = 4 answers, T = 6,
# d = 128. Attention: H heads of dimension d_h = 2 and no MLP, at most d / d_h = 64 heads, so the
# heads' total rank H d_h never exceeds d. MLP: one routing head (values = identity) and an MLP of width
# 4 n, at most 512. Online Adam at 0.02, batches of 256, at most 1000 steps, stopped once the test
# accuracy (2048 samples, every 20 steps) reaches the threshold 0.95; searches to unit precision in n.
CAPACITY_STORE = os.path.join(BOOK_DATA, "ch11_capacity_grid.jsonl")   # the shipped store (draws 0-3)
CAPACITY_GRID = {
    "R": 4, "D": 4, "T": 6, "d": 128, "d_h": 2, "unit": 4, "threshold": 0.95, "resolution": 1e-9,
    "S": {"attention": (16, 32, 64, 128, 256, 512), "mlp": (4, 8, 16, 32, 64, 128)},
    "beyond": {"attention": (), "mlp": (256,)},     # searched too, outside the fitted range
    "n_max": {"attention": 64, "mlp": 128},
    "seeds": (0, 1, 2),
    "train": TrainConfig(steps=1000, batch=256, lr=0.02, log_every=20, n_test=2048, stop_at=0.95),
}


def grid_block_params(block: str, n: int) -> int:
    """The grown block's own parameters in model n of CAPACITY_GRID's search for `block` (no model is built)."""
    check_choice("block", block, BLOCKS)
    g = CAPACITY_GRID
    return block_param_counts(block_config(block, n, g["d"], g["d_h"], g["unit"]))[block]


def grid_search(block: str, S: int, seed: int, store: FactStore | None = None, device: str = "cpu") -> dict:
    """`smallest_model` at one point of CAPACITY_GRID: the task (S, R, D, T) with this seed, the block's
    model family and n_max, the grid's training; the result of `smallest_model`."""
    check_choice("block", block, BLOCKS)
    g = CAPACITY_GRID
    task = FactTask(S=check_int("S", S, 1), R=g["R"], D=g["D"], T=g["T"], seed=check_int("seed", seed, 0))
    return smallest_model(task, block, g["threshold"], g["train"], d=g["d"], d_h=g["d_h"], unit=g["unit"],
                          n_max=g["n_max"][block], resolution=g["resolution"], seed=seed, store=store, device=device)
