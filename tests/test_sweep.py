"""The sweep engine (lib.sweep) and its point store (lib.experiments.store): N* equals a brute-force scan, a
killed sweep resumes without recomputing finished points, corrupt records are detected and
recomputed, parallel equals serial, and the cache key holds exactly what changes the numbers."""
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import fields

import numpy as np
import pytest

import lib
from lib.experiments.store import Store, append_line, point_prefix
from lib.experiments.sweep import SweepPoint, bootstrap_nstar, grid, recheck, sweep, table

# tiny problems: the trigger out of the value path reaches high accuracy at small N
BASE = lib.TaskConfig(V=16, d=32, L=4, trigger_in_value=False, device="cpu")
FAST = dict(seeds=3, n_test=512, threshold=0.9)
VOLATILE = ("seconds", "computed", "from_cache")


def same(points):
    """A SweepPoint's content without the fields that depend on the run (time, cache hits)."""
    return [{k: v for k, v in p.as_dict().items() if k not in VOLATILE} for p in points]


def n_records(path):
    return len(Store(path)) if os.path.exists(path) else 0


# ----------------------------------------------------------------------------- grid and table

def test_grid_is_the_cartesian_product_last_axis_fastest():
    cs = grid(lib.TaskConfig(V=64, d=32, L=8, device="cpu"), d=[32, 64], L=[8, 32])
    assert [(c.d, c.L) for c in cs] == [(32, 8), (32, 32), (64, 8), (64, 32)]
    assert all(c.V == 64 for c in cs)
    assert grid(BASE) == [BASE]


@pytest.mark.parametrize("axes,name", [(dict(D=[1]), "D"), (dict(d=5), "d"), (dict(L=[]), "L"),
                                       (dict(d="32"), "d"), (dict(V=[1]), "V")])
def test_grid_rejects_bad_axes_naming_them(axes, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        grid(BASE, **axes)


def test_sweep_point_carries_every_config_field_and_rebuilds_the_config():
    config_fields = {f.name for f in fields(lib.TaskConfig)} - {"device"}
    assert config_fields <= {f.name for f in fields(SweepPoint)}
    p = sweep([BASE.with_(L=3)], n_max=64, **FAST)[0]
    assert p.config(device="cpu") == BASE.with_(L=3)


def test_saturation_is_a_result_and_table_has_nan():
    sat = BASE.with_(d=8, trigger_in_value=True)
    pts = sweep([sat, BASE], n_max=256, **FAST)
    assert pts[0].nstar is None and pts[0].last_false == 256 and pts[0].points[-1]["N"] == 256
    assert isinstance(pts[1].nstar, int)
    cols = table(pts)
    assert np.isnan(cols["nstar"][0]) and cols["nstar"][1] == pts[1].nstar
    assert list(cols["d"]) == [8.0, 32.0] and np.isnan(cols["m"]).all() and list(cols["model"]) == ["attn"] * 2


# ----------------------------------------------------------------------------- correctness of N*

@pytest.mark.slow
@pytest.mark.parametrize("cfg", [BASE, BASE.with_(V=12, d=24, L=6), BASE.with_(V=8, d=16, L=3, embedding="sphere")])
def test_nstar_equals_a_brute_force_scan(cfg):
    """With resolution small enough to bracket to one sample, the engine's N* is exactly the first N
    of a scan over every N from which accuracy stays above the threshold."""
    p = sweep([cfg], resolution=1e-9, **FAST)[0]
    assert p.nstar is not None and p.nstar - p.last_false == 1
    top = max(q["N"] for q in p.points)
    scan = {N: lib.run(cfg, N, seeds=3, n_test=512).acc for N in range(cfg.V, top + 1)}
    ok = [N for N in scan if all(scan[M] >= 0.9 for M in range(N, top + 1))]
    assert p.nstar == min(ok)
    assert {q["N"]: q["acc"] for q in p.points}.items() <= scan.items()   # stored points are exact


def test_bootstrap_interval_on_known_per_seed_data():
    Ns = [1, 2, 4]
    clear = [[0, 0, 0], [1, 1, 1], [1, 1, 1]]
    assert bootstrap_nstar(Ns, clear, 0.5) == (2, 2, 1.0)
    # at N = 2 one seed of three fails: a resample passes there iff it draws that seed at most once,
    # probability (8 + 12) / 27
    shaky = [[0, 0, 0], [1, 1, 0], [1, 1, 1]]
    q10, q90, agree = bootstrap_nstar(Ns, shaky, 0.5)
    assert (q10, q90) == (2, 4) and abs(agree - 20 / 27) < 0.03
    # exactly: the resamples are the seeded draws of lib.sweep._randint, counted here one by one
    draws = lib.sweep._randint(3, (40, 3), lib.generator(0, "bootstrap", 3))
    passes_at_2 = [sum(shaky[1][j] for j in row) / 3 >= 0.5 for row in draws]
    assert bootstrap_nstar(Ns, shaky, 0.5, resamples=40)[2] == sum(passes_at_2) / 40   # agree: N* = 2 as with all seeds
    never = [[0, 0, 0], [0, 0, 0], [0, 0, 1]]
    assert bootstrap_nstar(Ns, never, 0.5)[1] is None            # most resamples never reach it
    with pytest.raises(ValueError, match="per_seed"):
        bootstrap_nstar(Ns, [[1, 1]], 0.5)


# ----------------------------------------------------------------------------- the store

@pytest.mark.slow
def test_cache_key_misses_on_step_sizes_code_n_test_and_hits_on_threshold(tmp_path, monkeypatch):
    path = str(tmp_path / "points.jsonl")
    first = sweep([BASE], cache=path, **FAST)[0]
    assert first.computed == len(first.points) > 2 and not first.from_cache
    again = sweep([BASE], cache=path, **FAST)[0]
    assert again.computed == 0 and again.from_cache                    # same everything: all hits
    other = sweep([BASE], cache=path, **{**FAST, "threshold": 0.8})[0]
    new_Ns = {q["N"] for q in other.points} - {q["N"] for q in first.points}
    assert other.computed == len(new_Ns) < len(other.points)          # shared N's are read back
    for change in (dict(step_sizes=lib.StepSizes(eta=0.02)), dict(n_test=256), dict(seeds=2), dict(seed=1),
                   dict(mode="finite")):
        p = sweep([BASE], cache=path, **{**FAST, **change})[0]
        assert p.computed == len(p.points), change
    from lib.experiments import codehash as st
    monkeypatch.setitem(st._HASHES, "points", "0" * 16)             # other code: every key misses
    p = sweep([BASE], cache=path, **FAST)[0]
    assert p.computed == len(p.points) and same([p]) == same([first])


def test_corrupt_and_truncated_records_are_reported_and_recomputed(tmp_path):
    path = tmp_path / "points.jsonl"
    ref = sweep([BASE], cache=str(path), **FAST)
    lines = path.read_text().splitlines(keepends=True)
    rec = json.loads(lines[1])
    rec["result"]["acc"] = 1.0                                       # a tampered value, checksum left
    lines[1] = json.dumps(rec) + "\n"
    lines[-1] = lines[-1][: len(lines[-1]) // 2]                     # a write cut by a kill
    path.write_text("".join(lines))
    with pytest.warns(RuntimeWarning) as caught:
        again = sweep([BASE], cache=str(path), **FAST)
    messages = [str(w.message) for w in caught]
    assert any(f"line 2: checksum mismatch" in m and str(path) in m for m in messages), messages
    assert any(f"line {len(lines)}: truncated" in m for m in messages), messages
    assert again[0].computed == 2 and same(again) == same(ref)
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        store = Store(str(path))
    assert len(later) == 2 and len(store) == len(ref[0].points)      # the repaired line 2 is still reported
    assert lib.experiments.store.compact(str(path)) == (len(ref[0].points), 2)  # drops them, keeps every point
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sweep([BASE], cache=str(path), **FAST)[0].computed == 0
    assert len(path.read_text().splitlines()) == len(ref[0].points)
    path.write_text("not json\n")
    with pytest.warns(RuntimeWarning, match="line 1: not valid JSON"):
        assert len(Store(str(path))) == 0


def _append_many(path, tag, n):
    for i in range(n):
        append_line(path, json.dumps({"tag": tag, "i": i, "pad": "x" * 20000}) + "\n")


def test_two_processes_appending_never_interleave_records(tmp_path):
    path = str(tmp_path / "shared.jsonl")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(path, t, 150)) for t in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    recs = [json.loads(line) for line in open(path)]                  # every line whole and valid
    assert sorted((r["tag"], r["i"]) for r in recs) == sorted((t, i) for t in "ab" for i in range(150))


def test_store_refuses_nan_and_bad_paths(tmp_path):
    prefix = point_prefix(BASE, seeds=1, seed=0, mode="limit", n_test=8, step_sizes=lib.StepSizes())
    bad = lib.RunResult(10, 1, float("nan"), 0.5, 0.5, 0.0, 0.0, 0.0, {"acc": [float("nan")]})
    with pytest.raises(ValueError, match="acc"):
        Store(str(tmp_path / "p.jsonl")).put(prefix, bad)
    with pytest.raises(ValueError, match="cache"):
        Store(str(tmp_path / "missing" / "p.jsonl"))
    with pytest.raises(ValueError, match="cache"):
        Store(str(tmp_path))


# ----------------------------------------------------------------------------- parallel and resume

@pytest.mark.slow
def test_two_jobs_give_the_same_results_as_one(tmp_path):
    cs = grid(BASE, d=[24, 32], L=[4, 6])
    serial = sweep(cs, **FAST)
    parallel = sweep(cs, jobs=2, cache=str(tmp_path / "p.jsonl"), **FAST)
    assert same(parallel) == same(serial)
    assert n_records(str(tmp_path / "p.jsonl")) == sum(len(p.points) for p in serial)


@pytest.mark.slow
def test_a_joblib_backend_context_runs_the_sweep_and_keeps_the_callers_threads():
    import joblib
    import torch
    cs = grid(BASE, d=[24, 32])
    threads = torch.get_num_threads()
    with joblib.parallel_backend("threading"):                   # the same one line as any joblib backend
        got = sweep(cs, jobs=2, **FAST)
    assert same(got) == same(sweep(cs, **FAST)) and torch.get_num_threads() == threads
    assert same(sweep(cs, jobs=2, backend="threading", **FAST)) == same(got)      # the same, by name


SWEEP_ARGS = ["--V", "64", "--d", "16", "24", "--L", "4", "8", "16", "--threshold", "0.99", "--seeds", "2",
              "--n-test", "1024", "--n-max", str(2 ** 17), "--device", "cpu", "--json"]


@pytest.mark.slow
def test_a_killed_sweep_resumes_without_recomputing_finished_points(tmp_path):
    cache = str(tmp_path / "points.jsonl")
    cmd = [sys.executable, "-m", "lib", "sweep", *SWEEP_ARGS, "--cache", cache]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    configs = grid(lib.TaskConfig(V=64, d=16, L=4, device="cpu"), d=[16, 24], L=[4, 8, 16])
    full = [p.as_dict() for p in sweep(configs, threshold=0.99, seeds=2, n_test=1024, n_max=2 ** 17)]
    total = sum(len(p["points"]) for p in full)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(cache) and sum(1 for _ in open(cache, "rb")) >= total // 3:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL                         # it was killed, not finished
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                              # a record cut mid-write is allowed
        done = n_records(cache)
    assert 0 < done < total
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    resumed = [json.loads(line) for line in out.stdout.splitlines()]
    assert sum(p["computed"] for p in resumed) == total - done       # nothing finished is recomputed
    strip = lambda ps: [{k: v for k, v in p.items() if k not in VOLATILE} for p in ps]  # noqa: E731
    assert strip(resumed) == strip(full)
    assert n_records(cache) == total


# ----------------------------------------------------------------------------- the command line

def test_cli_sweep_json_lines_equal_the_library(capsys, tmp_path):
    from lib.cli import main
    rc = main(["sweep", "--V", "16", "--d", "24", "32", "--L", "4", "--no-trigger-in-value", "--threshold", "0.9",
               "--seeds", "3", "--n-test", "512", "--device", "cpu", "--json", "--cache", str(tmp_path / "c.jsonl")])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and len(out) == 2
    got = [json.loads(line) for line in out]
    ref = sweep(grid(BASE, d=[24, 32]), **FAST)
    assert [{k: v for k, v in g.items() if k not in VOLATILE} for g in got] == same(ref)
    assert all(g["computed"] == len(g["points"]) and g["nstar"] is not None for g in got)


@pytest.mark.parametrize("bad,name", [(["--jobs", "0"], "jobs"), (["--threshold", "1.5"], "threshold"),
                                      (["--resolution", "0"], "resolution"), (["--n-max", "0"], "n_max"),
                                      (["--V", "16", "1"], "V"), (["--d", "x"], "d"), (["--seeds", "0"], "seeds"),
                                      (["--n-min", "64", "--n-max", "32"], "n_min"), (["--mode", "x"], "mode"),
                                      (["--cache", "/nonexistent/dir/c.jsonl"], "cache"),
                                      (["--backend", "nosuch", "--jobs", "2"], "backend"),
                                      (["--backend", "ray", "--jobs", "2"], "backend"),
                                      (["--scheduler", "tcp://127.0.0.1:9"], "scheduler"),
                                      (["--backend", "dask", "--scheduler", "tcp://127.0.0.1:9", "--jobs", "2"],
                                       "jobs")])
def test_cli_sweep_bad_values_exit_2_with_one_line(capsys, bad, name):
    from lib.cli import main
    base = {"--V": ["16"], "--d": ["8"], "--L": ["4"]}
    i = 0
    while i < len(bad):
        j = i + 1
        while j < len(bad) and not bad[j].startswith("--"):
            j += 1
        base[bad[i]] = bad[i + 1:j]
        i = j
    try:
        rc = main(["sweep", "--device", "cpu", "--n-test", "64", *[x for k, v in base.items() for x in (k, *v)]])
    except SystemExit as err:
        rc = err.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and name in lines[0] and "Traceback" not in err, err


@pytest.mark.filterwarnings("ignore:cache .*truncated")
def test_a_shipped_store_is_read_but_never_written(tmp_path):
    shipped, cache = str(tmp_path / "shipped.jsonl"), str(tmp_path / "cache.jsonl")
    first = sweep([BASE], cache=shipped, **FAST)[0]
    before = open(shipped, "rb").read()
    again = sweep([BASE], cache=cache, read_also=shipped, **FAST)[0]          # every point read from the shipped store
    assert again.computed == 0 and same([again]) == same([first]) and not os.path.exists(cache)
    other = sweep([BASE], cache=cache, read_also=shipped, **{**FAST, "threshold": 0.8})[0]
    new_Ns = {q["N"] for q in other.points} - {q["N"] for q in first.points}
    assert other.computed == len(new_Ns) > 0 and n_records(cache) == len(new_Ns)   # new points: the cache only
    assert open(shipped, "rb").read() == before
    both = Store(cache, read_also=shipped)
    assert len(both) == len(Store(shipped)) + len(Store(cache))
    assert len(both.subset(point_prefix(BASE, seeds=3, seed=0, mode="limit", n_test=512,
                                        step_sizes=lib.StepSizes()))) == len(both)   # a worker gets both
    with open(tmp_path / "cut.jsonl", "wb") as f:
        f.write(before[:-20])                                                # a shipped store must be whole
    for bad, name in [(str(tmp_path / "none.jsonl"), "no store"), (3, "read_also must be"),
                      (str(tmp_path / "cut.jsonl"), "invalid lines"), (cache, "another file")]:
        with pytest.raises(ValueError, match=name):
            Store(cache, read_also=bad)


def test_recheck_recomputes_a_stored_searchs_deciding_points(tmp_path):
    cache = str(tmp_path / "cache.jsonl")
    first = sweep([BASE], cache=cache, seed=4, **FAST)[0]
    pairs = recheck(BASE, cache=cache, seed=4, **FAST)
    deciding = [N for N in (first.nstar, first.last_false) if N is not None]
    assert len(pairs) == len(deciding) == 2 and n_records(cache) == len(first.points)   # read back, nothing added
    assert all(a == b for a, b in pairs)                           # this machine: the same numbers
    found = {q["N"]: q["acc"] for q in first.points}
    assert [a for a, _ in pairs] == [found[N] for N in deciding]
    assert pairs[0][0] >= FAST["threshold"] > pairs[1][0]          # N* passes, the last failure does not
    att = recheck(BASE, cache=cache, seed=4, metric="att_acc", **FAST)
    assert all(a == b for a, b in att)
    with pytest.raises(ValueError, match="cfg must be"):
        recheck("V=16", **FAST)
    with pytest.raises(ValueError, match="jobs"):
        recheck(BASE, jobs=2, **FAST)
    with pytest.raises(ValueError, match="threshold"):
        recheck(BASE, seeds=3, threshold=2.0)


def test_chapter_10s_shipped_store_is_whole_and_current():
    from lib.experiments.codehash import code_hash
    from lib.experiments.records import BOOK_DATA, read_records
    from lib.experiments.store import _point_shape
    path = os.path.join(BOOK_DATA, "ch10_points.jsonl")
    records, bad = read_records(path, _point_shape)
    assert not bad and len(records) > 1000                       # regenerate: bash scripts/ship_ch10_store.sh
    assert all(k["code"] == code_hash("points") and "draw" not in k for k, _ in records)   # draw 0, this lib
    assert {k["config"]["V"] for k, _ in records} == {128}      # the chapter's N* grid only
