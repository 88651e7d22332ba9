"""The one seed helper: all randomness in `lib` and the book flows through here.

`seed_everything(s)` fixes Python's, NumPy's and torch's global generators (a notebook's first cell
calls it). Library code never uses the global state: it asks `generator(seed, *tags)` for an
explicit `torch.Generator`, where the tags name the purpose ("problem", "train", "test", ...). So
the same seed gives the same problem and data on every run and every device (draws are made on
the CPU and then moved), and the training and test sets of one seed never share draws. Notebook
cells that want a plain seeded generator ask `torch_generator(s)` / `numpy_generator(s)`.

Draws. Every seed above is mixed with the *draw* `k` (`set_draw(k)`, or `RECALL_DRAW=k` in the
environment; default 0). Draw 0 gives exactly the numbers the book was written with; draw k != 0
changes every problem, batch, test set and global seed at once, so a chapter rerun under another
draw tests whether its conclusions are properties of the task or of one random draw
(`scripts/replicate.sh` runs the book that way). `set_draw` also sets `RECALL_DRAW` so that worker
processes started afterwards draw the same way.
"""

from __future__ import annotations

import hashlib
import os
import random

import numpy as np
import torch

from .config import check_int

_ENV = "RECALL_DRAW"


def _draw_from_env() -> int:
    text = os.environ.get(_ENV, "0").strip() or "0"
    try:
        k = int(text)
    except ValueError:
        raise ValueError(f"{_ENV} must be a non-negative integer, got {text!r}") from None
    return check_int(_ENV, k, 0)


_draw = _draw_from_env()


def set_draw(k: int) -> int:
    """Mix draw `k` into every seed from now on (0: the book's own numbers); returns k."""
    global _draw
    _draw = check_int("draw", k, 0)
    os.environ[_ENV] = str(_draw)
    return _draw


def get_draw() -> int:
    """The draw now in force (0 unless `set_draw` or RECALL_DRAW said otherwise)."""
    return _draw


def derive_seed(seed: int, *tags) -> int:
    """A 63-bit seed determined by `seed`, the tags and the draw (stable across runs and platforms)."""
    seed = check_int("seed", seed, 0)
    parts = [str(seed), *map(str, tags)]
    if _draw:
        parts.insert(0, f"draw={_draw}")
    return int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:8], "little") >> 1


def _plain(seed: int, kind: str) -> int:
    """`seed` itself at draw 0 (the book's numbers), a draw-dependent 63-bit seed otherwise."""
    seed = check_int("seed", seed, 0)
    return seed if _draw == 0 else derive_seed(seed, kind)


def generator(seed: int, *tags) -> torch.Generator:
    """A CPU `torch.Generator` seeded from `seed`, the purpose tags and the draw."""
    g = torch.Generator(device="cpu")
    g.manual_seed(derive_seed(seed, *tags))
    return g


def torch_generator(seed: int) -> torch.Generator:
    """`torch.Generator().manual_seed(seed)` at draw 0; another stream for every other draw."""
    return torch.Generator(device="cpu").manual_seed(_plain(seed, "torch-plain"))


def numpy_generator(seed: int) -> np.random.Generator:
    """`np.random.default_rng(seed)` at draw 0; another stream for every other draw."""
    return np.random.default_rng(_plain(seed, "numpy-plain"))


def seed_everything(seed: int = 0) -> int:
    """Fix Python's, NumPy's and torch's global seeds (mixed with the draw); returns the seed."""
    seed = check_int("seed", seed, 0)
    s = _plain(seed, "global")
    random.seed(s)
    np.random.seed(s % 2**32)
    torch.manual_seed(s)
    return seed
