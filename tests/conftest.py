import pytest
import torch

import lib


def small_cfg(**kw):
    """A small float64 CPU configuration for exactness tests."""
    base = dict(V=7, d=5, L=4, dtype="float64", device="cpu")
    base.update(kw)
    if base.get("model") == "mlp" and base.get("m") is None:
        base["m"] = 6
    return lib.TaskConfig(**base)


@pytest.fixture
def cfg64():
    return small_cfg


def rel(a, b):
    """Relative difference |a - b| / |b| (|b| floored at 1e-300)."""
    return float((a - b).norm() / max(float(b.norm()), 1e-300))


def random_params(cfg, seed, scale=1.0):
    """Random float64 (W_V, W_KQ) of the right shapes, from an explicit generator."""
    g = torch.Generator().manual_seed(seed)
    return lib.Params(scale * torch.randn(cfg.d, cfg.width, generator=g, dtype=torch.float64),
                      scale * torch.randn(cfg.d, cfg.d, generator=g, dtype=torch.float64))


# The two files whose tests grade whole notebooks take minutes on one process (test_course_pipeline.py about 5,
# test_course.py about 2), every other file well under one. scripts/test.sh runs the tests in two processes, one
# file at a time each (pytest-xdist --dist loadfile --no-loadscope-reorder: files in this order); started first,
# these two end beside the many short files rather than after them, so both processes end near together.
def ctrl_c_group(proc, timeout=120):
    """A terminal's Ctrl-C: SIGINT to the whole process group of `proc` (started with
    start_new_session=True and SIGINT at its default). Returns (exit status, stderr text, the children
    still alive 10 s later, which are then killed). Reads stderr to its end; stdout is the caller's."""
    import os
    import signal
    import psutil
    kids = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        err = proc.stderr.read()
        rc = proc.wait(timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    gone, alive = psutil.wait_procs(kids, timeout=10)
    for p in alive:
        p.kill()
    return rc, err, alive


HEAVY_FIRST = ("test_course_pipeline.py", "test_course.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FIRST)))     # stable: the rest keep their order
