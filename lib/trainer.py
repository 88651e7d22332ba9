"""Multi-step training of the transformers by autograd: full-batch gradient descent or Adam (chapter 7).

The three steps are an early-stage analysis; this module is what they are compared with. It trains
the attention-only or attention + MLP transformer (`train_transformer`) on one fixed batch, on the
empirical cross-entropy, with torch autograd through the token-id forward pass of `lib.tokens`
(chunked, gradients accumulated, so memory stays bounded). It is the independent reference for the
closed-form count-route step: `gd_counts` runs the same full-batch gradient descent with
`lib.counts.gradients`, and tests/test_trainer.py binds the two (float64, relative 1e-10).
The loop itself (`TrainConfig`, `History`) lives in `lib.optim`; linear associative memories are
trained by `lib.memory.train_memory` (re-exported here).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as Fn

from .counts import count_gradients
from .embeddings import Problem
from .memory import train_memory
from .models import Params, check_params, zero_params
from .optim import OPTIMIZERS, History, TrainConfig, fit
from .task import Batch, check_batch
from .tokens import chunks, forward_chunk

__all__ = ["OPTIMIZERS", "History", "TrainConfig", "train_memory", "train_transformer", "gd_counts"]


def _check(problem: Problem, batch: Batch, cfg: TrainConfig, init: Params | None) -> Params:
    check_batch(problem, batch)
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    init = init or zero_params(problem.cfg)
    check_params(problem, init)
    if init.hard:
        raise ValueError("init must use soft attention (hard=False): argmax attention has no gradient")
    return init


def train_transformer(problem: Problem, batch: Batch, cfg: TrainConfig = TrainConfig(),
                      init: Params | None = None) -> tuple[Params, History]:
    """Train (W_V, W_KQ) from `init` (default zero) on the batch by autograd; returns params, history."""
    init = _check(problem, batch, cfg, init)
    W_V = init.W_V.detach().clone().requires_grad_(True)
    W_KQ = init.W_KQ.detach().clone().requires_grad_(True)

    def loss_and_hits():
        total, hits = 0.0, 0
        w = W_KQ @ problem.z_eos
        for b in chunks(batch, cfg.chunk):
            logits = forward_chunk(problem, W_V, w, b).logits
            loss = Fn.cross_entropy(logits, b.labels, reduction="sum") / batch.N
            loss.backward(retain_graph=True)
            total += float(loss.detach())
            hits += int((logits.argmax(1) == b.labels).sum())
        return total, hits

    lr_KQ = cfg.lr if cfg.lr_KQ is None else cfg.lr_KQ
    hist = fit([W_V, W_KQ], [cfg.lr, lr_KQ], loss_and_hits, batch.N, cfg)
    return Params(W_V.detach(), W_KQ.detach()), hist


def gd_counts(problem: Problem, batch: Batch, steps: int, lr: float, lr_KQ: float | None = None,
              init: Params | None = None, log_every: int = 1) -> tuple[Params, History]:
    """Full-batch gradient descent with the closed-form count-route gradients (`lib.counts`):
    no autograd and no (N, L, d) tensor, so it runs at N = 10^6. The history records loss and
    training accuracy at each logged step (before that step's update) and the wall time."""
    cfg = TrainConfig(steps=steps, lr=lr, lr_KQ=lr_KQ, log_every=log_every)
    init = _check(problem, batch, cfg, init)
    W_V, W_KQ = init.W_V.clone(), init.W_KQ.clone()
    lr_KQ = cfg.lr if cfg.lr_KQ is None else cfg.lr_KQ
    hist = History()
    t0 = time.perf_counter()
    for step in range(cfg.steps + 1):
        g = count_gradients(problem, Params(W_V, W_KQ), batch)
        if not torch.isfinite(torch.tensor(g.loss)):
            raise FloatingPointError(f"loss became {g.loss} at step {step}: lower lr (got {lr})")
        if step % cfg.log_every == 0 or step == cfg.steps:
            hist.step.append(step), hist.loss.append(g.loss), hist.acc.append(g.correct / batch.N)
        if step < cfg.steps:
            W_V = W_V - cfg.lr * g.W_V
            W_KQ = W_KQ - lr_KQ * g.W_KQ
    hist.seconds = time.perf_counter() - t0
    return Params(W_V, W_KQ), hist
