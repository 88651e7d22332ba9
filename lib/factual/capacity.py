"""Chapter 11 (factual recall, after Nichani, Lee and Bietti, ICLR 2025), capacity with a store:

Capacity (`smallest_model`): the smallest number of heads (attention block, m = 0) or the smallest
MLP width (one head kept fixed) whose trained model reaches a test-accuracy threshold, by
`lib.core.search.smallest_true`; every trained point is kept in a `FactStore` (the record format and the
crash-safe append of `lib.experiments.records`), so a rerun trains nothing. Why not `lib.experiments.store.Store` itself: the
sweep engine's store keys a result by (configuration prefix, N), N the number of training samples of
one run of `lib.experiments.sweep`, and holds `RunResult`s; a capacity point here is keyed by the task, the model
and the training configuration (no N: training is online), and holds a FactHistory summary. `FactStore`
keeps the engine's record format and checksums with these keys.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, replace

import numpy as np

from ..core.config import check_choice, check_float, check_int
from ..core.search import threshold_search
from ..core.seed import get_draw
from ..experiments.codehash import code_hash
from ..experiments.records import (BOOK_DATA, append_line, canonical, check_store_path, read_records,
                                   read_shipped, record_text)
from .models import FactModelConfig, FactTransformer, block_param_counts, param_counts
from .stacked import BatchCache, batch_cache, stack_key, train_stacked
from .task import FactTask, _check_task
from .training import FactTrainConfig, train_facts


BLOCKS = ("attention", "mlp")
TRAIN_ROUTES = ("single", "stacked")   # how a point is trained (lib.factual.stacked.ROUTES: how a stack attends)


def route_code(route: str) -> str:
    """The part of lib (`lib.experiments.codehash.code_hash`) a point trained by `route` depends on: "factual",
    and for route "stacked" "factual_stacked" (the stacked trainer too). A stored key names its route ("route",
    absent for "single"), so `route_code(key.get("route", "single"))` is the code a stored point must carry."""
    check_choice("route", route, TRAIN_ROUTES)
    return "factual" if route == "single" else "factual_stacked"


# ------------------------------------------------------------------------------ capacity, with a cache

POINT_KEY = ("task", "model", "train", "kind", "code")
POINT_RESULT = ("step", "loss", "acc", "rel_acc", "sub_acc", "kl", "max_acc", "params", "seconds")


def _fact_shape(key: dict, result: dict) -> bool:
    """A trained point of `trained_point`: its key fields and its result fields, nothing else."""
    return set(key) - {"draw", "route"} == set(POINT_KEY) and set(result) == set(POINT_RESULT)


class FactStore:
    """Trained points, keyed by everything that fixes their numbers. The record format, reader and
    appender of lib.experiments.records (`record_text`, `read_records`, `append_line`: one checksummed line per
    point, appended under flock and fsynced; invalid or cut lines reported and retrained).
    `path=None`: memory only. `read_also`: another store's file whose points are read too but never
    written (a store shipped with the book, read by lib.experiments.records.read_shipped: it must be whole,
    and need not be writable): new points go to `path` only."""

    def __init__(self, path: str | None = None, read_also: str | None = None):
        self.path = check_store_path(path)
        self.data: dict[str, dict] = {}
        self.computed = 0                      # points put (trained, not found) since construction
        for key, result in read_shipped(read_also, self.path, _fact_shape):
            self.data[canonical(key)] = result
        if self.path is not None and os.path.exists(self.path):
            for key, result in read_records(self.path, _fact_shape)[0]:
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


def point_key(task: FactTask, model_cfg: FactModelConfig, train_cfg: FactTrainConfig, route: str = "single") -> dict:
    """The store key of a trained point: everything that fixes its numbers, up to float32 round-off (the order
    of summation: thread count, device, and on route "stacked" the padding of the stack the model trained in;
    small models can carry that round-off to another best accuracy). `route` "single" (`train_facts`, one model
    at a time) or "stacked" (`lib.factual.stacked.train_stacked`, chapter 11's shipped store: equal within float
    round-off, not bit for bit, so its points are kept apart, under that route's own code hash)."""
    key = {"task": asdict(task), "model": asdict(model_cfg), "train": asdict(train_cfg), "kind": "FactTransformer",
           "code": code_hash(route_code(route))}
    if route != "single":
        key["route"] = route
    if get_draw():                      # another draw (lib.core.seed.set_draw): other numbers, other key
        key["draw"] = get_draw()
    return key


def _result(model: FactTransformer, hist) -> dict:
    return {**hist.final(), "max_acc": max(hist.acc), "params": param_counts(model)["trainable"], "seconds": hist.seconds}


def trained_point(task: FactTask, model_cfg: FactModelConfig, train_cfg: FactTrainConfig,
                  store: FactStore | None = None, device: str = "cpu") -> dict:
    """Train one model (or read it from `store`): the final FactHistory entry, `params` (trainable),
    `max_acc` (best logged test accuracy) and `seconds`. The device is not part of the key."""
    key = point_key(task, model_cfg, train_cfg)
    if store is not None and (hit := store.get(key)) is not None:
        return hit
    model = FactTransformer(task, model_cfg)
    out = _result(model, train_facts(model, train_cfg, device=device))
    if store is not None:
        store.put(key, out)
    return out


def trained_points(requests, train_cfg: FactTrainConfig, store: FactStore | None = None, device: str = "cpu",
                   stack: int = 16, cache=None) -> list:
    """`trained_point` of every (task, model_cfg) of `requests`, route "stacked": the points not in `store` trained
    together by `lib.factual.stacked.train_stacked`, at most `stack` models a stack, models that can share one
    grouped and sorted by size (a stack pads every model to its largest). `cache`: the
    `lib.factual.stacked.BatchCache` the stacks read their batches from (None: a new one for this call)."""
    stack, cache = check_int("stack", stack, 1), batch_cache(cache)
    if not isinstance(train_cfg, FactTrainConfig):
        raise ValueError(f"train_cfg must be a FactTrainConfig, got {type(train_cfg).__name__}")
    requests = list(requests)
    for r in requests:
        if not (isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], FactTask) and isinstance(r[1], FactModelConfig)):
            raise ValueError("requests must be (FactTask, FactModelConfig) pairs")
    keys = [point_key(t, c, train_cfg, "stacked") for t, c in requests]
    out = [store.get(k) if store is not None else None for k in keys]
    groups: dict = {}
    for i, hit in enumerate(out):
        if hit is None:
            groups.setdefault(stack_key(*requests[i]), []).append(i)
    for idx in groups.values():
        idx.sort(key=lambda i: (requests[i][1].H, requests[i][1].m))
        for j in range(0, len(idx), stack):
            part = idx[j:j + stack]
            models = [FactTransformer(*requests[i]) for i in part]
            for i, m, h in zip(part, models, train_stacked(models, train_cfg, device=device, cache=cache)):
                out[i] = _result(m, h)
                if store is not None:
                    store.put(keys[i], out[i])
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


def smallest_model(task: FactTask, block: str, threshold: float, train_cfg: FactTrainConfig, *, d: int,
                   d_h: int = 8, unit: int = 1, n_max: int = 64, resolution: float = 1e-9, seed: int = 0,
                   heads: int = 0,
                   store: FactStore | None = None, device: str = "cpu", point=None) -> dict:
    """Smallest n (heads, or MLP width in units of `unit`) whose trained model reaches `threshold`
    (best logged test accuracy), by lib.core.search.threshold_search (doubling, then bisection until the
    bracket is within `resolution` of n; the default is unit resolution, lib.core.search.smallest_true's);
    assumes success is monotone in n. Returns n (the first success found), the last failure below it,
    the model's trainable parameters and the grown block's own parameters; n = None when n_max is not
    enough. `heads`: see `block_config` (block "mlp" only). `point`: what trains (or reads) one model, called as
    `trained_point` is (its default); `smallest_models` passes the one that trains many searches' models together."""
    check_choice("block", block, BLOCKS)
    threshold = check_float("threshold", threshold, 0.0, 1.0)
    _check_task(task)
    if store is None:
        store = FactStore()

    train = trained_point if point is None else point

    def ok(n):
        return train(task, block_config(block, n, d, d_h, unit, seed, heads=heads), train_cfg, store, device)["max_acc"] >= threshold
    br = threshold_search(ok, 1, check_int("n_max", n_max, 1), resolution)
    if br.first_true is None:
        return {"n": None, "last_false": br.last_false, "params": None, "block_params": None}
    c = param_counts(FactTransformer(task, block_config(block, br.first_true, d, d_h, unit, seed, heads=heads)))
    return {"n": br.first_true, "last_false": br.last_false, "params": c["trainable"], "block_params": c[block]}


def smallest_models(jobs, store: FactStore | None = None, device: str = "cpu", stack: int = 16, cache=None) -> list:
    """`smallest_model(**job)` for every job (a dict of its arguments: task, block, threshold, train_cfg, d and the
    optional ones), all searches at once: each runs as `smallest_model` does, but whenever every search waits
    for a model, the models they wait for are trained together (`trained_points`, route "stacked", at most
    `stack` a stack). The answers are those of the searches one at a time, up to the stacked route's float
    round-off (a model right at the threshold could land on the other side). The searches run in threads
    that only wait on each other; the training runs in the caller's thread. Every round reads its batches from
    one `lib.factual.stacked.BatchCache` (`cache`; None: a new one), so a search's task is drawn once, not once a round."""
    import threading

    jobs = list(jobs)
    if not all(isinstance(j, dict) for j in jobs):
        raise ValueError("jobs must be dicts of smallest_model's arguments")
    if any(k in j for j in jobs for k in ("store", "device", "point")):
        raise ValueError("jobs must not set store, device or point: smallest_models sets them")
    stack, cache = check_int("stack", stack, 1), batch_cache(cache)
    cond = threading.Condition()
    pending: list = []
    state = {"active": len(jobs)}
    results, errors = [None] * len(jobs), []

    def point(task, model_cfg, train_cfg, _store, _device):
        req = {"task": task, "model": model_cfg, "train": train_cfg, "out": None}
        with cond:
            pending.append(req)
            cond.notify_all()
            while req["out"] is None:
                cond.wait()
        if isinstance(req["out"], BaseException):
            raise req["out"]
        return req["out"]

    def run(i, job):
        try:
            results[i] = smallest_model(**job, store=store, device=device, point=point)
        except BaseException as e:                      # reported to the caller after every search has ended
            errors.append(e)
        finally:
            with cond:
                state["active"] -= 1
                cond.notify_all()

    threads = [threading.Thread(target=run, args=(i, j), daemon=True) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    while True:
        with cond:
            while state["active"] and len(pending) < state["active"]:
                cond.wait()
            if not state["active"]:
                break
            batch = list(pending)
            pending.clear()
        by_train: dict = {}
        for req in batch:
            by_train.setdefault(canonical(asdict(req["train"])), []).append(req)
        for reqs in by_train.values():
            try:
                got = trained_points([(r["task"], r["model"]) for r in reqs], reqs[0]["train"], store, device, stack, cache)
            except BaseException as e:                  # every search waiting on these gets the error
                got = [e] * len(reqs)
            with cond:
                for r, g in zip(reqs, got):
                    r["out"] = g
                cond.notify_all()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


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
    "train": FactTrainConfig(steps=1000, batch=256, lr=0.02, log_every=20, n_test=2048, stop_at=0.95),
    "budget_steps": 3000, "budget_S": {"attention": (16, 512)},   # the attention searches again, at this budget
}


def _grid_task(S: int, seed: int, T: int | None = None, n_noise: int | None = None) -> FactTask:
    """CAPACITY_GRID's task with S subjects and this seed (T: another length; n_noise: other noise tokens)."""
    g = CAPACITY_GRID
    return FactTask(S=check_int("S", S, 1), R=g["R"], D=g["D"], T=g["T"] if T is None else T,
                    seed=check_int("seed", seed, 0), n_noise=n_noise)


# The MLP's own capacity: the grid's "mlp" model and training with T = 2, so a sequence is (subject,
# relation) and holds no noise token for the routing head to filter out; widths to unit precision (unit 1)
# up to 256; the same searches at a second, larger step budget for the sizes in "budget_S". "noise": one
# trained point of the T = 6 model at S subjects and MLP width `width` with `n_noise` distinct noise tokens
# instead of S + R (`noise_point`), against the grid's own point there.
DIRECT_GRID = {"T": 2, "unit": 1, "S": (64, 128, 256, 512, 1024, 2048), "n_max": 256,
               "budget_steps": 3000, "budget_S": (64, 2048), "noise": {"S": 256, "n_noise": 4, "width": 256}}


def _direct_job(S: int, seed: int, steps: int | None = None) -> dict:
    """`smallest_model`'s arguments at one point of DIRECT_GRID (`steps`: another step budget; None: the grid's 1000)."""
    g, t = CAPACITY_GRID, DIRECT_GRID
    train_cfg = g["train"] if steps is None else replace(g["train"], steps=check_int("steps", steps, 1))
    return {"task": _grid_task(S, seed, T=t["T"]), "block": "mlp", "threshold": g["threshold"], "train_cfg": train_cfg,
            "d": g["d"], "d_h": g["d_h"], "unit": t["unit"], "n_max": t["n_max"], "resolution": g["resolution"], "seed": seed}


def direct_search(S: int, seed: int, steps: int | None = None, store: FactStore | None = None,
                  device: str = "cpu") -> dict:
    """`smallest_model` for the "mlp" block at one point of DIRECT_GRID: CAPACITY_GRID's task, model family and
    training with T = 2 and width unit 1 (`steps`: another step budget; None: the grid's 1000)."""
    return smallest_model(**_direct_job(S, seed, steps), store=store, device=device)


def grid_model(block: str, S: int, seed: int, n: int, n_noise: int | None = None) -> tuple:
    """(task, model config) of model n of CAPACITY_GRID's search for `block` at S subjects and this seed
    (`n_noise`: another number of distinct noise tokens; None: S + R, the grid's own)."""
    g = CAPACITY_GRID
    return _grid_task(S, seed, n_noise=n_noise), block_config(block, n, g["d"], g["d_h"], g["unit"], seed)


def _noise_model(S: int, seed: int, n_noise: int | None, width: int) -> tuple:
    """`grid_model` of the "mlp" block at MLP width `width`, which must be a multiple of the grid's unit."""
    unit, width = CAPACITY_GRID["unit"], check_int("width", width, 1)
    if width % unit:
        raise ValueError(f"width must be a multiple of {unit}, got {width}")
    return grid_model("mlp", S, seed, width // unit, n_noise)


def noise_point(S: int, seed: int, n_noise: int | None = None, width: int = 64, store: FactStore | None = None,
                device: str = "cpu") -> dict:
    """`trained_point` of CAPACITY_GRID's "mlp" model (T = 6, one routing head) at MLP width `width` (a
    multiple of the grid's unit) on the grid's task with S subjects and `n_noise` distinct noise tokens
    (None: S + R, the grid's own point)."""
    return trained_point(*_noise_model(S, seed, n_noise, width), CAPACITY_GRID["train"], store, device)


def grid_block_params(block: str, n: int) -> int:
    """The grown block's own parameters in model n of CAPACITY_GRID's search for `block` (no model is built)."""
    check_choice("block", block, BLOCKS)
    g = CAPACITY_GRID
    return block_param_counts(block_config(block, n, g["d"], g["d_h"], g["unit"]))[block]


def _grid_job(block: str, S: int, seed: int, steps: int | None = None) -> dict:
    """`smallest_model`'s arguments at one point of CAPACITY_GRID (`steps`: another step budget; None: the grid's 1000)."""
    check_choice("block", block, BLOCKS)
    g = CAPACITY_GRID
    train_cfg = g["train"] if steps is None else replace(g["train"], steps=check_int("steps", steps, 1))
    return {"task": _grid_task(S, seed), "block": block, "threshold": g["threshold"], "train_cfg": train_cfg, "d": g["d"],
            "d_h": g["d_h"], "unit": g["unit"], "n_max": g["n_max"][block], "resolution": g["resolution"], "seed": seed}


def grid_search(block: str, S: int, seed: int, store: FactStore | None = None, device: str = "cpu",
                steps: int | None = None) -> dict:
    """`smallest_model` at one point of CAPACITY_GRID: the task (S, R, D, T) with this seed, the block's
    model family and n_max, the grid's training (`steps`: another step budget; None: the grid's 1000); the
    result of `smallest_model`."""
    return smallest_model(**_grid_job(block, S, seed, steps), store=store, device=device)


def _search_jobs(points) -> list:
    """`smallest_model`'s arguments at each (block, S, seed[, steps]) point ("direct": DIRECT_GRID's search)."""
    points = list(points)
    if not all(isinstance(p, tuple) and len(p) in (3, 4) for p in points):
        raise ValueError("points must be (block, S, seed) or (block, S, seed, steps) tuples")
    return [_direct_job(*p[1:]) if p[0] == "direct" else _grid_job(*p) for p in points]


GRID_PARTS = ("all", "direct", "noise", "budget")


def capacity_grid_jobs(only: str = "all") -> list:
    """Everything chapter 11 trains under one draw, as jobs (kind, S, seed, extra): kind "attention" or "mlp"
    (`grid_search` at every size of CAPACITY_GRID, the sizes beyond the fit included; extra: the step budget,
    None for the grid's 1000, or CAPACITY_GRID["budget_steps"] for the attention searches at its "budget_S"),
    "direct" (`direct_search` at DIRECT_GRID's sizes and at its second budget) and "noise" (`noise_point`;
    extra: (n_noise, width): DIRECT_GRID["noise"] with its few noise tokens and with the grid's own, and the
    widest MLP at the first size beyond the fit). `only`: one part ("direct", "noise", "budget") or "all"."""
    check_choice("only", only, GRID_PARTS)
    g, t, nz = CAPACITY_GRID, DIRECT_GRID, DIRECT_GRID["noise"]
    jobs = []
    if only == "all":
        jobs += [(b, S, s, None) for b in BLOCKS for S in g["S"][b] + g["beyond"][b] for s in g["seeds"]]
    if only in ("all", "budget"):
        jobs += [("attention", S, s, g["budget_steps"]) for S in g["budget_S"]["attention"] for s in g["seeds"]]
    if only in ("all", "direct"):
        jobs += [("direct", S, s, None) for S in t["S"] for s in g["seeds"]]
        jobs += [("direct", S, s, t["budget_steps"]) for S in t["budget_S"] for s in g["seeds"]]
    if only in ("all", "noise"):
        jobs += [("noise", nz["S"], s, (k, nz["width"])) for k in (nz["n_noise"], None) for s in g["seeds"]]
        jobs += [("noise", S, s, (None, g["unit"] * g["n_max"]["mlp"])) for S in g["beyond"]["mlp"][:1]
                 for s in g["seeds"]]
    return jobs


def capacity_grid(jobs=None, store: FactStore | None = None, device: str = "cpu", stack: int = 16,
                  route: str = "stacked") -> dict:
    """Chapter 11's grid under the current draw: {job: result} for every job of `jobs` (default
    `capacity_grid_jobs()`), a search's result `smallest_model`'s, a point's `trained_point`'s. Route "stacked"
    (what the chapter reads): the searches all at once (`smallest_models`), the "noise" points by
    `trained_points`, at most `stack` models a stack. Route "single": each job one model at a time
    (`grid_search`, `direct_search`, `noise_point`). Every job is checked before anything trains; points
    `store` holds are read, the rest trained and put there."""
    jobs = capacity_grid_jobs() if jobs is None else list(jobs)
    check_choice("route", route, TRAIN_ROUTES)
    stack = check_int("stack", stack, 1)
    kinds = BLOCKS + ("direct", "noise")
    for j in jobs:
        if not (isinstance(j, tuple) and len(j) == 4 and j[0] in kinds):
            raise ValueError(f"jobs must be (kind, S, seed, extra) tuples with kind one of {', '.join(kinds)}, got {j!r}")
        if j[0] == "noise" and not (isinstance(j[3], tuple) and len(j[3]) == 2):
            raise ValueError(f"a noise job's extra must be (n_noise, width), got {j[3]!r}")
    points = [j for j in jobs if j[0] == "noise"]
    reqs = [_noise_model(S, s, *extra) for _, S, s, extra in points]
    searches = [j for j in jobs if j[0] != "noise"]
    searched = _search_jobs(j[:3] if j[3] is None else j for j in searches)
    if route == "single":
        return {**{j: smallest_model(**job, store=store, device=device) for j, job in zip(searches, searched)},
                **{j: trained_point(*r, CAPACITY_GRID["train"], store, device) for j, r in zip(points, reqs)}}
    cache = BatchCache()                             # the noise points share tasks with the searches
    out = dict(zip(searches, smallest_models(searched, store=store, device=device, stack=stack, cache=cache)))
    out.update(zip(points, trained_points(reqs, CAPACITY_GRID["train"], store, device, stack, cache)))
    return out


def budget_effect(short: dict, long: dict, sizes, seeds, steps=(1000, 3000)) -> tuple:
    """What a larger step budget changes in a search's answers: `short` and `long` map (S, seed) to the answer n
    at the budgets `steps` (the grid's and a larger one), at the two `sizes` (S_lo, S_hi) and every seed. Returns
    (ratio, ends, drop): ratio[S] = `theory.geometric_interval` of long / short over the seeds; ends[b] the per-seed
    log-log slope from S_lo to S_hi at budget b of `steps`; drop = `theory.t_interval` of ends[steps[0]] -
    ends[steps[1]], paired by seed."""
    from .. import theory
    lo, hi = sizes
    ratio = {S: theory.geometric_interval([long[S, s] / short[S, s] for s in seeds]) for S in sizes}
    ends = {b: np.log([w[hi, s] / w[lo, s] for s in seeds]) / math.log(hi / lo) for b, w in zip(steps, (short, long))}
    return ratio, ends, theory.t_interval(ends[steps[0]] - ends[steps[1]])
