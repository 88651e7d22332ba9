"""Draws (lib.core.seed.set_draw / RECALL_DRAW): draw 0 is the book's numbers, any other draw changes every
problem, batch, test set and global seed, and no randomness in the library or the book escapes it."""
import ast
import glob
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import lib
from conftest import small_cfg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def draw():
    """Set a draw for one test and always restore draw 0 (and RECALL_DRAW) afterwards."""
    before = os.environ.get("RECALL_DRAW")
    yield lib.set_draw
    lib.set_draw(0)
    if before is None:
        os.environ.pop("RECALL_DRAW", None)
    else:
        os.environ["RECALL_DRAW"] = before


def everything(seed=0):
    cfg = small_cfg(V=11, d=6, L=5, model="mlp", m=7)
    problem = lib.make_problem(cfg, seed)
    train = lib.sample_batch(problem, 300, seed, "train")
    test = lib.sample_batch(problem, 300, seed, "test")
    lib.seed_everything(seed)
    glob_draws = (torch.rand(3), np.random.rand(3))
    plain = (torch.rand(3, generator=lib.torch_generator(seed)), lib.numpy_generator(seed).random(3))
    return problem, train, test, glob_draws, plain


def test_draw_zero_is_the_books_numbers(draw):
    """Draw 0 reproduces the seeds written before draws existed (values pinned from that version)."""
    draw(0)
    text = "/".join(["5", "problem"])
    old = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1
    assert lib.derive_seed(5, "problem") == old
    assert torch.equal(torch.rand(4, generator=lib.torch_generator(9)),
                       torch.rand(4, generator=torch.Generator().manual_seed(9)))
    assert np.array_equal(lib.numpy_generator(9).random(4), np.random.default_rng(9).random(4))
    lib.seed_everything(4)
    a = torch.rand(2)
    torch.manual_seed(4)
    assert torch.equal(a, torch.rand(2))


def test_every_draw_changes_every_random_object(draw):
    draw(0)
    p0, tr0, te0, (gt0, gn0), (pt0, pn0) = everything()
    for k in (1, 2, 7):
        draw(k)
        pk, trk, tek, (gtk, gnk), (ptk, pnk) = everything()
        for name in ("E", "U", "z_trig", "z_eos", "perm", "F"):
            assert not torch.equal(getattr(p0, name), getattr(pk, name)), (k, name)
        assert not torch.equal(tr0.tokens, trk.tokens) and not torch.equal(tr0.pos, trk.pos)
        assert not torch.equal(te0.tokens, tek.tokens)
        assert not torch.equal(gt0, gtk) and not np.array_equal(gn0, gnk)
        assert not torch.equal(pt0, ptk) and not np.array_equal(pn0, pnk)
        again = everything()
        assert torch.equal(pk.E, again[0].E) and torch.equal(trk.tokens, again[1].tokens)


def test_draws_differ_from_each_other(draw):
    seeds = set()
    for k in range(5):
        draw(k)
        seeds.add(lib.derive_seed(0, "problem"))
    assert len(seeds) == 5


@pytest.mark.slow
def test_set_draw_validates_and_reaches_child_processes(draw):
    for bad in (-1, 1.5, "2", None, True):
        with pytest.raises(ValueError, match="draw"):
            lib.set_draw(bad)
    draw(3)
    assert os.environ["RECALL_DRAW"] == "3" and lib.get_draw() == 3
    out = subprocess.run([sys.executable, "-c", "import lib; print(lib.get_draw(), lib.derive_seed(0, 'x'))"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["3", str(lib.derive_seed(0, "x"))]


@pytest.mark.slow
def test_bad_environment_draw_is_refused_by_name():
    env = dict(os.environ, RECALL_DRAW="two")
    proc = subprocess.run([sys.executable, "-c", "import lib"], capture_output=True, text=True, env=env)
    assert proc.returncode != 0 and "RECALL_DRAW" in proc.stderr


def test_store_keys_carry_the_draw(draw):
    cfg = small_cfg()
    key = lambda: lib.experiments.store.point_prefix(cfg, seeds=1, seed=0, mode="limit", n_test=10,
                                         step_sizes=lib.StepSizes())
    draw(0)
    k0 = key()
    assert "draw" not in k0                      # draw 0 keeps the keys (and caches) written before
    draw(2)
    assert key()["draw"] == 2 and key() != k0


@pytest.mark.slow
def test_sweep_workers_use_the_parents_draw(draw, tmp_path):
    """A grid point computed in a joblib worker equals the same point computed in this process."""
    configs = lib.sweep.grid(lib.TaskConfig(V=16, d=16, L=4), d=[8, 16])
    draw(5)
    serial = lib.sweep.sweep(configs, threshold=0.5, seeds=1, n_max=256, n_test=256)
    parallel = lib.sweep.sweep(configs, threshold=0.5, seeds=1, n_max=256, n_test=256, jobs=2)
    draw(0)
    base = lib.sweep.sweep(configs, threshold=0.5, seeds=1, n_max=256, n_test=256)
    assert [p.points for p in serial] == [p.points for p in parallel]
    assert [p.points for p in serial] != [p.points for p in base]


GLOBAL_RANDOMNESS = ("manual_seed", "default_rng", "np.random.", "random.seed", "random.random",
                     "torch.Generator(")


def _offenders(path, src):
    out = []
    for name in GLOBAL_RANDOMNESS:
        for line in src.splitlines():
            if name in line and not line.lstrip().startswith("#"):
                out.append(f"{path}: {line.strip()}")
    return out


def test_no_randomness_escapes_the_seed_helper():
    """Only lib/core/seed.py seeds generators: library modules and chapters go through it."""
    bad = []
    for path in glob.glob(os.path.join(ROOT, "lib", "**", "*.py"), recursive=True):
        if os.path.basename(path) != "seed.py":
            bad += _offenders(path, open(path).read())
    for path in glob.glob(os.path.join(ROOT, "book", "*.ipynb")):
        for cell in json.load(open(path))["cells"]:
            if cell["cell_type"] == "code":
                bad += _offenders(path, "".join(cell["source"]))
    assert not bad, "\n".join(bad)


SAMPLERS = {"rand", "randn", "randint", "randperm", "multinomial", "normal", "bernoulli", "rand_like",
            "randn_like", "randint_like", "poisson"}


def test_library_samplers_take_an_explicit_generator():
    """Every torch sampler called in lib/ gets generator=...: none reads torch's global state."""
    bad = []
    for path in glob.glob(os.path.join(ROOT, "lib", "**", "*.py"), recursive=True):
        for node in ast.walk(ast.parse(open(path).read())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in SAMPLERS and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "torch"
                    and not any(k.arg == "generator" for k in node.keywords)):
                bad.append(f"{os.path.basename(path)}:{node.lineno}")
    assert not bad, bad
