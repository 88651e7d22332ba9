"""Multi-step training of the transformers by autograd: full-batch gradient descent or Adam (chapter 7).

The three steps are an early-stage analysis; this module is what they are compared with. It trains
the attention-only or attention + MLP transformer (`train_transformer`) on one fixed batch, on the
empirical cross-entropy, with torch autograd through the token-id forward pass of `lib.fast.tokens`
(chunked, gradients accumulated, so memory stays bounded). It is the independent reference for the
closed-form count-route step: `train` below runs full-batch GD or Adam on `lib.fast.counts.count_gradients`
(`gd_counts` is its gradient-descent form), and tests/test_train.py and tests/test_count_gradients.py
bind the two (float64, relative 1e-10).
The loop itself (`TrainConfig`, `History`) lives in `lib.core.optim`; `train_memory` runs it on a linear
associative memory of `lib.core.memory` (chapter 2).

`train` (chapter 10) is the count-route trainer for many steps: full-batch gradient descent or Adam
on both blocks (W_V and the full d x d W_KQ, whose gradient is rank one, k q^T), from zero or from
the finite-mode three-step solution, with a tqdm bar and a `TrainRecord` every `record_every` steps:
training loss and accuracy (from the gradient pass itself, before that step's update), and on fresh
test samples the accuracy, the attention accuracy (argmax_t s_t = l) and the attention entropy
(mean over samples of -sum_t a_t log a_t, in nats; log K for uniform attention). Adam is
torch.optim.Adam (betas (0.9, 0.999), eps 1e-8, no weight decay), stepped on the closed-form
gradients; tests/test_train.py binds it and GD to `train_transformer` (autograd) to 1e-10 in float64.
`TrainSpec` names one training recipe; `lib.experiments.experiment.run(..., training=spec)` and the N* search
and sweep (`lib.experiments.capacity`, `lib.experiments.sweep`) evaluate trained models with it, the spec being part of
the store key so that trained and three-step points never mix.
`choose_lr` is chapter 10's rule for Adam's rate: validate every rate of a grid on fresh samples and
take the smallest of those that the validation cannot tell from the best (`tied_best`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as Fn
from tqdm.auto import tqdm

from ..core.config import check_bool, check_choice, check_float, check_int
from ..fast.counts import _count_gradients
from ..core.embeddings import Problem
from .evaluate import N_TEST
from ..core.memory import Memory, memory_logits
from ..core.models import Params, check_params, hard_attention, readout_matrix, zero_params
from ..core.optim import OPTIMIZERS, History, TrainConfig, fit
from .schedule import three_steps
from ..core.steps import StepSizes, ThreeSteps
from ..core.task import Batch, check_batch, sample_batch
from ..fast.tokens import chunk_size, chunks, forward_chunk

__all__ = ["OPTIMIZERS", "History", "TrainConfig", "train_memory", "train_transformer", "gd_counts",
           "TrainSpec", "TrainRecord", "train", "train_with", "check_training", "attention_summary", "INITS",
           "tied_best", "choose_lr"]

INITS = ("zero", "three_steps")


def train_memory(mem: Memory, cfg: TrainConfig = TrainConfig(), W0: torch.Tensor | None = None,
                 ) -> tuple[torch.Tensor, History]:
    """Train a linear associative memory W (d, d) on all n pairs (x, Pi x) from W0 (default 0)."""
    if not isinstance(mem, Memory):
        raise ValueError(f"mem must be a Memory (see lib.core.memory.make_memory), got {type(mem).__name__}")
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    W = torch.zeros(mem.d, mem.d, dtype=mem.E.dtype, device=mem.E.device) if W0 is None else W0.detach().clone()
    if tuple(W.shape) != (mem.d, mem.d):
        raise ValueError(f"W0 must have shape {(mem.d, mem.d)}, got {tuple(W.shape)}")
    W.requires_grad_(True)

    def loss_and_hits():
        logits = memory_logits(mem, W)
        loss = Fn.cross_entropy(logits, mem.perm)
        loss.backward()
        return float(loss.detach()), int((logits.argmax(1) == mem.perm).sum())

    hist = fit([W], [cfg.lr], loss_and_hits, mem.n, cfg)
    return W.detach(), hist


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
    """Full-batch gradient descent with the closed-form count-route gradients (`lib.fast.counts`):
    no autograd and no (N, L, d) tensor, so it runs at N = 10^6. `train` with optimizer "gd" and no
    test metrics, its record returned as the `History` of the autograd trainer (loss and training
    accuracy at each logged step, before that step's update, and the wall time)."""
    params, rec = train(problem, batch, optimizer="gd", steps=steps, lr=lr, lr_KQ=lr_KQ,
                        init="zero" if init is None else init, record_every=log_every, n_test=0)
    hist = History(step=rec.step, loss=rec.loss, acc=rec.acc)
    hist.seconds = rec.seconds
    return params, hist


# ----------------------------------------------------------------------------- many steps, count route

@dataclass(frozen=True)
class TrainSpec:
    """One training recipe: optimizer, steps, learning rates, start ("zero" or "three_steps": the
    finite-mode three steps, with the step sizes `train_with` is given, by default `StepSizes()`).
    Part of the store key of trained points, beside those step sizes."""

    optimizer: str = "adam"
    steps: int = 200
    lr: float = 0.01
    lr_KQ: float | None = None       # None: the same as lr
    init: str = "zero"

    def __post_init__(self):
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_int("steps", self.steps, 0)
        check_float("lr", self.lr, 0.0, 1e12, strict_min=True)
        if self.lr_KQ is not None:
            check_float("lr_KQ", self.lr_KQ, 0.0, 1e12)
        check_choice("init", self.init, INITS)


@dataclass
class TrainRecord:
    """What `train` records every `record_every` steps (and at the last step), before that step's update."""

    step: list = field(default_factory=list)
    loss: list = field(default_factory=list)       # training cross-entropy
    acc: list = field(default_factory=list)        # training accuracy
    test_acc: list = field(default_factory=list)   # accuracy on fresh test samples
    att_acc: list = field(default_factory=list)    # attention argmax on the informative position (test)
    entropy: list = field(default_factory=list)    # mean attention entropy in nats (test)
    seconds: float = 0.0                           # wall time of the whole run, records included


def attention_summary(problem: Problem, params: Params, batch: Batch) -> dict:
    """Accuracy, attention accuracy and mean attention entropy (nats) of soft-attention params on a
    batch, on token ids (no (N, L, d) tensor)."""
    check_params(problem, params)
    check_batch(problem, batch)
    if params.hard:
        raise ValueError("params must use soft attention (hard=False) for an attention entropy")
    w = params.W_KQ @ problem.z_eos
    readout = readout_matrix(problem, params.W_V)
    hits = att = 0
    ent = 0.0
    for b in chunks(batch, chunk_size(problem)):
        f = forward_chunk(problem, params.W_V, w, b, False, readout)
        hits += int((f.logits.argmax(1) == b.labels).sum())
        att += int((hard_attention(f.scores) == b.pos).sum())
        logp = torch.log_softmax(f.scores, 1)
        ent += float(-(logp.exp() * logp).sum())
    return {"acc": hits / batch.N, "att_acc": att / batch.N, "entropy": ent / batch.N}


def _initial(problem: Problem, batch: Batch, init) -> Params:
    if isinstance(init, str):
        check_choice("init", init, INITS)
        if init == "zero":
            return zero_params(problem.cfg)
        init = three_steps(problem, batch, "finite", step_sizes=StepSizes())
    if isinstance(init, ThreeSteps):
        if init.mode != "finite":
            raise ValueError("init from ThreeSteps needs the finite mode (limit mode attention is hard)")
        init = init.params
    if not isinstance(init, Params):
        raise ValueError(f"init must be 'zero', 'three_steps', a Params or a ThreeSteps, got {type(init).__name__}")
    check_params(problem, init)
    if init.hard:
        raise ValueError("init must use soft attention (hard=False): argmax attention has no gradient")
    return init


def train(problem: Problem, batch: Batch, *, optimizer: str = "adam", steps: int = 200, lr: float = 0.01,
          lr_KQ: float | None = None, init="zero", record_every: int = 10, n_test: int = N_TEST,
          test_seed: int = 0, test_batch: Batch | None = None, progress: bool = False,
          betas: tuple = (0.9, 0.999), eps: float = 1e-8) -> tuple[Params, TrainRecord]:
    """Full-batch GD or Adam on the empirical cross-entropy of `batch`, with the closed-form
    count-route gradients (`lib.fast.counts.count_gradients`: token ids, no (N, L, d) tensor).

    init: "zero", "three_steps" (finite mode, default step sizes, on this batch), a soft Params or a
    finite-mode ThreeSteps. Records every `record_every` steps and at the end (see `TrainRecord`);
    the test metrics use `test_batch`, or `n_test` fresh samples of split "test" of `test_seed`
    (n_test = 0: no test metrics, NaN recorded). Returns the final params (after `steps` updates)."""
    check_batch(problem, batch)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    steps = check_int("steps", steps, 0)
    lr = check_float("lr", lr, 0.0, 1e12, strict_min=True)
    lr_KQ = lr if lr_KQ is None else check_float("lr_KQ", lr_KQ, 0.0, 1e12)
    record_every = check_int("record_every", record_every, 1)
    n_test = check_int("n_test", n_test, 0)
    test_seed = check_int("test_seed", test_seed, 0)
    if test_batch is not None and not isinstance(test_batch, Batch):
        raise ValueError(f"test_batch must be a Batch (see lib.sample_batch) or None, got {type(test_batch).__name__}")
    check_bool("progress", progress)
    if (not isinstance(betas, (tuple, list)) or len(betas) != 2
            or not all(isinstance(x, (int, float)) and 0.0 <= x < 1.0 for x in betas)):
        raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
    eps = check_float("eps", eps, 0.0, 1.0, strict_min=True)
    p = _initial(problem, batch, init)
    if test_batch is None and n_test > 0:
        test_batch = sample_batch(problem, n_test, test_seed, split="test")
    if test_batch is not None:
        check_batch(problem, test_batch)
    W = [p.W_V.clone(), p.W_KQ.clone()]
    lrs = [lr, lr_KQ]
    adam = (torch.optim.Adam([{"params": [x], "lr": a} for x, a in zip(W, lrs)], betas=tuple(betas), eps=eps)
            if optimizer == "adam" else None)            # updates W in place from the .grad set below
    rec = TrainRecord()
    t0 = time.perf_counter()
    bar = tqdm(range(steps + 1), disable=not progress, leave=False, desc=f"{optimizer} (count route)")
    for step in bar:
        g = _count_gradients(problem, Params(W[0], W[1]), batch)
        if not math.isfinite(g.loss):
            raise FloatingPointError(f"loss became {g.loss} at step {step}: lower lr (got lr={lr}, lr_KQ={lr_KQ})")
        if step % record_every == 0 or step == steps:
            rec.step.append(step), rec.loss.append(g.loss), rec.acc.append(g.correct / batch.N)
            if test_batch is not None:
                summ = attention_summary(problem, Params(W[0], W[1]), test_batch)
            else:
                summ = {"acc": math.nan, "att_acc": math.nan, "entropy": math.nan}
            rec.test_acc.append(summ["acc"]), rec.att_acc.append(summ["att_acc"]), rec.entropy.append(summ["entropy"])
            bar.set_postfix(loss=f"{g.loss:.3g}", acc=f"{g.correct / batch.N:.3f}")
        if step == steps:
            break
        grads = [g.W_V, g.W_KQ]
        if adam is None:
            W = [x - a * gr for x, a, gr in zip(W, lrs, grads)]
        else:
            for x, gr in zip(W, grads):
                x.grad = gr
            adam.step()
    rec.seconds = time.perf_counter() - t0
    return Params(W[0].detach().clone(), W[1].detach().clone()), rec


def check_training(training, mode: str) -> None:
    """A training recipe for a trained N* (`lib.experiments.experiment.run`, the store key): a TrainSpec or None,
    and only with the finite mode (soft attention is what gets trained)."""
    if training is None:
        return
    if not isinstance(training, TrainSpec):
        raise ValueError(f"training must be a lib.learning.trainer.TrainSpec or None, got {type(training).__name__}")
    if mode != "finite":
        raise ValueError(f"mode must be 'finite' with training (soft attention is trained), got {mode!r}")


def train_with(problem: Problem, batch: Batch, spec: TrainSpec, step_sizes: StepSizes = StepSizes(),
               **kw) -> tuple[Params, TrainRecord]:
    """`train` with the recipe of a `TrainSpec` (extra keywords: record_every, n_test, progress, ...).
    A recipe starting from "three_steps" starts from the finite mode with `step_sizes`, so that the
    step sizes in a trained point's store key are the ones that made it."""
    if not isinstance(spec, TrainSpec):
        raise ValueError(f"spec must be a TrainSpec, got {type(spec).__name__}")
    if not isinstance(step_sizes, StepSizes):
        raise ValueError(f"step_sizes must be a StepSizes, got {type(step_sizes).__name__}")
    init = three_steps(problem, batch, "finite", step_sizes=step_sizes) if spec.init == "three_steps" else spec.init
    return train(problem, batch, optimizer=spec.optimizer, steps=spec.steps, lr=spec.lr, lr_KQ=spec.lr_KQ,
                 init=init, **kw)


def tied_best(accuracies, rates, n_val: int) -> list[float]:
    """The rates whose validation accuracy lies within two binomial standard errors of the best one,
    2 sqrt(p (1 - p) / n_val) with p = (a n_val + 2) / (n_val + 4) the Agresti-Coull estimate of the best
    accuracy a on `n_val` samples, in the order given (a validation of that size cannot tell them apart
    from the best). The estimate keeps the tolerance above 0 at a = 1 (about three samples in 2048)."""
    n_val = check_int("n_val", n_val, 1)
    if not isinstance(rates, (list, tuple)) or not rates:
        raise ValueError(f"rates must be a non-empty list of learning rates, got {rates!r}")
    try:
        acc = [float(a) for a in accuracies]
    except (TypeError, ValueError):
        raise ValueError(f"accuracies must be numbers, got {accuracies!r}") from None
    if len(acc) != len(rates) or not all(0.0 <= a <= 1.0 for a in acc):
        raise ValueError(f"accuracies must be {len(rates)} numbers in [0, 1] (one per rate), got {acc!r}")
    p = (max(acc) * n_val + 2) / (n_val + 4)
    tol = 2 * math.sqrt(p * (1 - p) / n_val)
    return [r for r, a in zip(rates, acc) if a >= max(acc) - tol]


def choose_lr(problem: Problem, rates, *, n: int, steps: int = 100, n_val: int = 2048,
              seed: int = 0) -> tuple[float, list[float], list[float]]:
    """Chapter 10's choice of Adam's learning rate. For each rate of the increasing grid `rates`: `steps`
    Adam steps from zero on `n` samples (seed `seed`), then the accuracy on `n_val` fresh samples of the
    test split (seed `seed + 1`). Returns (the smallest rate of `tied_best`, the accuracies by rate, the
    tied rates): a validation that several rates pass alike does not choose the largest of them."""
    if (not isinstance(rates, (list, tuple)) or not rates
            or not all(isinstance(r, (int, float)) and not isinstance(r, bool) and 0 < r < 1e12 for r in rates)
            or any(b <= a for a, b in zip(rates, rates[1:]))):
        raise ValueError(f"rates must be a non-empty increasing list of positive numbers, got {rates!r}")
    n, steps, n_val = check_int("n", n, 1), check_int("steps", steps, 1), check_int("n_val", n_val, 1)
    seed = check_int("seed", seed, 0)
    batch = sample_batch(problem, n, seed)
    val_batch = sample_batch(problem, n_val, seed + 1, split="test")
    acc = [train(problem, batch, steps=steps, lr=float(r), record_every=steps, test_batch=val_batch)[1].test_acc[-1]
           for r in rates]
    tied = tied_best(acc, list(rates), n_val)
    return tied[0], acc, tied
