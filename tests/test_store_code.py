"""Stored points follow the code: every key carries the hash of the lib source its numbers depend on.

A change to a formula changes the hash, so a stale point is never read back as valid; the shipped stores
must carry the hash of the code that reads them (`scripts/restamp_stores.py` rechecks and restamps them);
a sweep worker running other code refuses its task."""

import os
import re
import shutil

import pytest

import lib
from lib.experiments.experiment import RunResult
from lib.experiments.codehash import code_files, code_hash
from lib.factual import route_code
from lib.experiments.records import BOOK_DATA, read_records
from lib.experiments.store import Store, point_prefix, record_line
from lib.core.steps import StepSizes

SHIPPED = {"ch10_points.jsonl": "points", "ch11_capacity_grid.jsonl": "factual"}


def _part(name: str, key: dict) -> str:
    """The code a record depends on: chapter 11's points by their route (`lib.factual.route_code`)."""
    return route_code(key.get("route", "single")) if SHIPPED[name] == "factual" else SHIPPED[name]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_stores_carry_the_code_that_reads_them(name):
    records, bad = read_records(os.path.join(BOOK_DATA, name))
    want = {p: code_hash(p) for p in ("points", "factual", "factual_stacked")}
    stale = sum(k.get("code") != want[_part(name, k)] for k, _ in records)
    assert not bad and records
    if SHIPPED[name] == "factual":              # chapter 11 reads the stacked route's points only
        assert all(k.get("route") == "stacked" for k, _ in records)
    assert stale == 0, (f"{stale} of {len(records)} points of {name} were computed by other code than this lib's "
                        f"({want[_part(name, records[0][0])]}): run .venv/bin/python scripts/restamp_stores.py (it recomputes some and "
                        "restamps only if they agree) or regenerate the store")


def _copy_lib(tmp_path):
    root = tmp_path / "lib"
    shutil.copytree(os.path.dirname(lib.__file__), root, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return root


def _edit(path, pattern, repl):
    text = path.read_text()
    new, n = re.subn(pattern, repl, text, count=1, flags=re.M)
    assert n == 1, f"{pattern!r} not found in {path}"
    path.write_text(new)


@pytest.mark.slow
def test_the_hash_follows_formulas_not_comments(tmp_path):
    root = _copy_lib(tmp_path)
    base = code_hash("points")
    assert code_hash("points", root) == base and code_hash("factual", root) == code_hash("factual")
    assert "core.steps" in code_files("points") and "learning.trainer" in code_files("points")
    assert "theory.ch07_law" not in code_files("points") and "factual.models" in code_files("factual")
    # a comment, a docstring and the layout do not count
    _edit(root / "core" / "steps.py", r"^(\s*)(\S.*)$", r"\1# a new comment\n\1\2")
    _edit(root / "core" / "steps.py", r'"""', '"""Reworded. ')
    assert code_hash("points", root) == base
    # a module outside the closure does not count
    _edit(root / "theory" / "ch07_law.py", r"(^\s+\w+ = [^#\n]*\S) \* (\S)", r"\1 / \2")
    assert code_hash("points", root) == base
    # one character of a formula does: a product in the closed-form gradient, a sum in the trainer
    _edit(root / "core" / "gradients.py", r"(^[^#\n]*\S) \* (\S)", r"\1 / \2")
    changed = code_hash("points", root)
    assert changed != base and code_hash("factual", root) == code_hash("factual")
    root2 = _copy_lib(tmp_path / "b")
    _edit(root2 / "factual" / "training.py", r"(^[^#\n]*\w) \+ (\w)", r"\1 - \2")
    assert code_hash("factual", root2) != code_hash("factual") and code_hash("points", root2) == base


def test_a_point_of_other_code_is_never_read_back(tmp_path):
    cfg = lib.TaskConfig(V=16, d=8, L=4)
    prefix = point_prefix(cfg, seeds=1, seed=0, mode="limit", n_test=64, step_sizes=StepSizes())
    assert prefix["code"] == code_hash("points") and "version" not in prefix
    res = RunResult(N=32, acc=0.5, acc_std=0.0, att_acc=0.5, att_acc_std=0.0, oracle_acc=0.5, oracle_acc_std=0.0,
                    per_seed={"acc": [0.5], "att_acc": [0.5], "oracle_acc": [0.5], "gamma_W": [1.0]}, seeds=1)
    path = tmp_path / "points.jsonl"
    with open(path, "w") as f:
        f.write(record_line({**prefix, "code": "0" * 16}, res))
    assert Store(str(path)).get(prefix, 32) is None           # stale: computed again, never trusted
    with open(path, "a") as f:
        f.write(record_line(prefix, res))
    assert Store(str(path)).get(prefix, 32) == res


def test_a_sweep_worker_with_other_code_refuses():
    from lib.experiments import sweep
    cfg = lib.TaskConfig(V=16, d=8, L=4)
    for other in ({"code": "0" * 16}, {}):                      # another hash, or a sweep that sent none
        with pytest.raises(ValueError, match="differs from the sweep"):
            sweep._one(cfg, Store(None), other)


def test_trained_fact_points_carry_the_code():
    from lib.factual.capacity import POINT_KEY
    assert "code" in POINT_KEY and "version" not in POINT_KEY
    with pytest.raises(ValueError, match="part"):
        code_hash("everything")
