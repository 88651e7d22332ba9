"""The count route's training against the autograd reference: how far apart the gradients are
along a run, and the parameters two runs reach (chapter 10's check of `train` against
`train_transformer`). Tested in tests/test_crosscheck.py."""

from __future__ import annotations

import torch

from ..core.config import check_int
from ..core.gradients import autograd_gradients
from ..core.models import zero_params
from ..core.task import Batch
from ..core.embeddings import Problem
from ..fast.counts import count_gradients
from .schedule import three_steps
from .trainer import OPTIMIZERS, TrainConfig, train, train_transformer


def relative_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """|a - b| / |b| (Frobenius norms), or |a| when b = 0."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        raise ValueError("a and b must be tensors of one shape")
    return float((a - b).norm() / b.norm()) if b.norm() > 0 else float(a.norm())


def count_route_vs_autograd(problem: Problem, batch: Batch, runs, steps: int = 20,
                            grad_at=(0, 10, 19)) -> dict:
    """For each run (init, optimizer, lr), init "zero" or "three_steps" (finite mode): the largest
    relative gap between the count route's and autograd's gradients (both blocks together, W_V and
    W_KQ as one vector) where the count route's run (`train`) stands after each number of steps in
    `grad_at`; and the relative gap between the parameters (together) that `train` and
    `train_transformer` reach after `steps`. Both blocks together: where attention saturates, the
    W_KQ gradient alone can be so small that float64 rounding is a visible fraction of it, and its own
    relative gap then measures mostly rounding.
    Returns {(init, optimizer): {"grad": ..., "params": ...}} in the order of `runs`."""
    steps = check_int("steps", steps, 0)
    if not isinstance(grad_at, (tuple, list)) or not grad_at:
        raise ValueError(f"grad_at must be a non-empty list of step counts, got {grad_at!r}")
    grad_at = [check_int("grad_at", k, 0) for k in grad_at]
    if not isinstance(runs, (tuple, list)) or not runs:
        raise ValueError(f"runs must be a non-empty list of (init, optimizer, lr), got {runs!r}")
    starts, out = {}, {}
    for run in runs:
        if not isinstance(run, (tuple, list)) or len(run) != 3:
            raise ValueError(f"runs must hold (init, optimizer, lr) triples, got {run!r}")
        init, opt, lr = run
        if init not in ("zero", "three_steps"):
            raise ValueError(f"init must be 'zero' or 'three_steps', got {init!r}")
        if opt not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {opt!r}")
        if init not in starts:
            starts[init] = (zero_params(problem.cfg) if init == "zero"
                            else three_steps(problem, batch, "finite").params)
        grad = 0.0
        for k in grad_at:
            par, _ = train(problem, batch, optimizer=opt, steps=k, lr=lr, init=init, n_test=0)
            g_c, g_a = count_gradients(problem, par, batch), autograd_gradients(problem, par, batch)
            grad = max(grad, relative_gap(_joint(g_c.W_V, g_c.W_KQ), _joint(g_a.W_V, g_a.W_KQ)))
        ref, _ = train_transformer(problem, batch, TrainConfig(steps=steps, lr=lr, optimizer=opt), init=starts[init])
        got, _ = train(problem, batch, optimizer=opt, steps=steps, lr=lr, init=init, n_test=0)
        out[(init, opt)] = {"grad": grad, "params": relative_gap(_joint(got.W_V, got.W_KQ), _joint(ref.W_V, ref.W_KQ))}
    return out


def _joint(*blocks: torch.Tensor) -> torch.Tensor:
    return torch.cat([b.reshape(-1) for b in blocks])
