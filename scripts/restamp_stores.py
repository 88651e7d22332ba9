"""Recheck the stores shipped with the book against the current lib, and stamp them with its code hash.

    .venv/bin/python scripts/restamp_stores.py [--check K] [--dry-run]

Every stored point's key carries `code`, the hash of the lib source its numbers depend on
(`lib.experiments.codehash.code_hash`). When that source changes, the shipped stores' keys no longer match
and `tests/test_store_code.py` fails. This script then recomputes K points of each stale store with the
current code (the cheapest ones: limit-mode and trained points of the smallest N for chapter 10, the
shortest trainings for chapter 11) and compares every result field. Only if all agree are the store's
keys rewritten with the new hash (and re-checksummed); otherwise it stops, names the points that moved,
and the store must be regenerated (`scripts/ship_ch10_store.sh`, `scripts/fact_capacity_grid.py`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

from lib.core.config import TaskConfig  # noqa: E402
from lib.core.seed import set_draw  # noqa: E402
from lib.core.steps import StepSizes  # noqa: E402
from lib.experiments.experiment import run  # noqa: E402
from lib.experiments.codehash import code_hash  # noqa: E402
from lib.experiments.records import BOOK_DATA, read_records, record_text  # noqa: E402
from lib.experiments.store import _point_shape  # noqa: E402
from lib.factual import FactModelConfig, FactTask, FactTrainConfig, route_code, trained_point, trained_points  # noqa: E402
from lib.factual.capacity import _fact_shape  # noqa: E402
from lib.learning.trainer import TrainSpec  # noqa: E402

def _stamped(shape):
    """The record shape, reading a key stamped with the old `version` as if it carried a `code`."""
    def check(key, result):
        key = {k: v for k, v in key.items() if k != "version"}
        return shape({**key, "code": key.get("code", "")}, result)
    return check


STORES = {"ch10_points.jsonl": ("points", _stamped(_point_shape)),
          "ch11_capacity_grid.jsonl": ("factual", _stamped(_fact_shape))}


def code_part(part: str, key: dict) -> str:
    """The code a record's numbers depend on: chapter 11's points by their route (`lib.factual.route_code`)."""
    return route_code(key.get("route", "single")) if part == "factual" else part


def same(a, b, tol=1e-5) -> bool:
    """Equal up to float32 round-off (1e-5 relative; an accuracy step is 1/n_test, far above it)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(same(a[k], b[k], tol) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return (math.isinf(a) and a == b) or abs(a - b) <= tol * max(1.0, abs(a))
    return a == b


def recompute_point(key: dict) -> dict:
    set_draw(key.get("draw", 0))
    cfg = TaskConfig(**key["config"])
    training = TrainSpec(**key["training"]) if "training" in key else None
    return run(cfg, key["N"], mode=key["mode"], seeds=key["seeds"], seed=key["seed"], n_test=key["n_test"],
               step_sizes=StepSizes(**key["step_sizes"]), training=training).as_dict()


def recompute_fact(key: dict) -> dict:
    set_draw(key.get("draw", 0))
    task, cfg, train = FactTask(**key["task"]), FactModelConfig(**key["model"]), FactTrainConfig(**key["train"])
    # a point of route "stacked" again by that route (a stack of one), one of route "single" one model at a time
    out = trained_points([(task, cfg)], train)[0] if key.get("route") == "stacked" else trained_point(task, cfg, train)
    return {k: v for k, v in out.items() if k != "seconds"}


def pick(part: str, records: list, k: int) -> list:
    """The records rechecked: the cheapest `k`, from each kind of point."""
    if part == "factual":
        return sorted(records, key=lambda r: r[1]["seconds"])[:k]
    limit = sorted((r for r in records if "training" not in r[0]), key=lambda r: r[0]["N"])
    trained = sorted((r for r in records if "training" in r[0]), key=lambda r: r[0]["N"])
    return limit[:k - k // 2] + trained[:k // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", type=int, default=4, help="points recomputed per stale store (>= 1)")
    ap.add_argument("--dry-run", action="store_true", help="recheck, but write nothing")
    args = ap.parse_args(argv)
    if args.check < 1:
        ap.error("--check must be at least 1")
    torch.set_num_threads(1)
    status = 0
    for name, (part, shape) in STORES.items():
        path = os.path.join(BOOK_DATA, name)
        want = lambda key: code_hash(code_part(part, key))          # noqa: E731
        records, bad = read_records(path, shape)
        if bad:
            print(f"{name}: {len(bad)} invalid lines (first {bad[0]}); regenerate it")
            status = 1
            continue
        stale = [r for r in records if r[0].get("code") != want(r[0])]
        if not stale:
            print(f"{name}: {len(records)} points, all stamped with the code they depend on")
            continue
        moved = []
        for key, result in pick(part, records, args.check):
            t0 = time.perf_counter()
            new = recompute_point(key) if part == "points" else recompute_fact(key)
            old = result if part == "points" else {k: v for k, v in result.items() if k != "seconds"}
            ok = same(old, new)
            print(f"{name}: recomputed N={key.get('N', '-')} in {time.perf_counter() - t0:.1f} s: "
                  f"{'same' if ok else 'MOVED'}")
            if not ok:
                moved.append((key, old, new))
                print("   stored  ", old, "\n   now     ", new)
        if moved:
            print(f"{name}: {len(moved)} rechecked points moved under the new code: regenerate the store")
            status = 1
            continue
        if args.dry_run:
            print(f"{name}: would stamp {len(stale)} of {len(records)} points with the current code")
            continue
        lines = []
        for key, result in records:
            key = {k: v for k, v in key.items() if k != "version"}
            key["code"] = want(key)
            lines.append(record_text(key, result))
        fd, tmp = tempfile.mkstemp(dir=BOOK_DATA, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.writelines(lines)
        os.replace(tmp, path)
        print(f"{name}: stamped {len(records)} points with the current code")
    return status


if __name__ == "__main__":
    sys.exit(main())
