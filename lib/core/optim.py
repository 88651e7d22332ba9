"""The optimisation loop shared by every trained model: full-batch gradient descent or Adam.

`fit(tensors, lrs, loss_and_hits, n, cfg)` runs `cfg.steps` full-batch steps; `loss_and_hits()`
accumulates the gradients into `.grad` and returns (mean loss, number of correct predictions).
It records a `History` of loss and training accuracy and can stop early at a target accuracy.
Used by `lib.learning.trainer` (linear associative memories and the transformers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import time

import torch
from tqdm.auto import tqdm

from .config import check_choice, check_float, check_int

OPTIMIZERS = ("gd", "adam")


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 500                 # maximum number of full-batch steps
    lr: float = 1.0                  # learning rate (both parameters unless lr_KQ is given)
    lr_KQ: float | None = None       # separate learning rate for W_KQ (transformer only)
    optimizer: str = "gd"            # "gd" (plain full-batch gradient descent) or "adam"
    target_acc: float | None = None  # stop as soon as training accuracy reaches this
    log_every: int = 1               # record the history every this many steps
    progress: bool = False           # show a tqdm progress bar
    chunk: int = 8192                # samples per autograd chunk (gradients are accumulated)

    def __post_init__(self):
        check_int("steps", self.steps, 0)
        check_float("lr", self.lr, 0.0, 1e12, strict_min=True)
        if self.lr_KQ is not None:
            check_float("lr_KQ", self.lr_KQ, 0.0, 1e12)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        if self.target_acc is not None:
            check_float("target_acc", self.target_acc, 0.0, 1.0)
        check_int("log_every", self.log_every, 1)
        check_int("chunk", self.chunk, 1)


@dataclass
class History:
    step: list = field(default_factory=list)
    loss: list = field(default_factory=list)
    acc: list = field(default_factory=list)
    stopped_early: bool = False
    seconds: float = 0.0               # wall time of the run


def fit(tensors: list, lrs: list, loss_and_hits, n: int, cfg: TrainConfig) -> History:
    """Generic loop: loss_and_hits() accumulates .grad and returns (mean loss, #correct)."""
    groups = [{"params": [t], "lr": lr} for t, lr in zip(tensors, lrs)]
    opt = torch.optim.SGD(groups) if cfg.optimizer == "gd" else torch.optim.Adam(groups)
    hist = History()
    t0 = time.perf_counter()
    bar = tqdm(range(cfg.steps + 1), disable=not cfg.progress, leave=False)
    for step in bar:
        opt.zero_grad(set_to_none=False)
        loss, hits = loss_and_hits()
        if not torch.isfinite(torch.tensor(loss)):
            raise FloatingPointError(f"loss became {loss} at step {step}: lower lr (got {cfg.lr})")
        acc = hits / n
        if step % cfg.log_every == 0 or step == cfg.steps:
            hist.step.append(step), hist.loss.append(loss), hist.acc.append(acc)
        bar.set_postfix(loss=f"{loss:.3g}", acc=f"{acc:.3f}")
        if cfg.target_acc is not None and acc >= cfg.target_acc:
            hist.stopped_early = step < cfg.steps
            if hist.step[-1] != step:
                hist.step.append(step), hist.loss.append(loss), hist.acc.append(acc)
            break
        if step < cfg.steps:
            opt.step()
    hist.seconds = time.perf_counter() - t0
    return hist
