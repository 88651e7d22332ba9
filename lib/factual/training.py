"""Chapter 11 (factual recall, after Nichani, Lee and Bietti, ICLR 2025), training and its metrics:

`train_facts` is online mini-batch Adam or SGD (constant or cosine schedule, optional tqdm bar) that
logs, every `log_every` steps on a fixed test set, the loss, accuracy, relation accuracy (argmax in
the right answer block), subject accuracy (argmax at the right place within a block: their
`sub_accuracy`) and KL(q_r || p), the divergence of the model's output p from the relation-only
predictor q_r (`relation_only`).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

import torch

from ..core.config import check_choice, check_float, check_int
from .models import FactTransformer, LinearAttention
from .task import FactBatch, FactTask, fact_table, relation_only, sample


FACT_OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("constant", "cosine")


# ------------------------------------------------------------------------------------------ training

@dataclass(frozen=True)
class FactTrainConfig:
    """Online training: a fresh batch every step (stream "step-<i>"), a fixed test set."""

    steps: int = 400             # optimizer steps
    batch: int = 256             # samples per step
    lr: float = 1e-2             # learning rate (peak, with the cosine schedule)
    optimizer: str = "adam"      # "adam" or "sgd" (plain gradient steps, as their sequential study)
    schedule: str = "constant"   # "constant" or "cosine" (decay to 0 over `steps`)
    log_every: int = 25          # evaluate on the test set every this many steps (and at the end)
    n_test: int = 2048           # test samples (stream "test")
    stop_at: float | None = None  # stop once the test accuracy reaches this (None: never)

    def __post_init__(self):
        for name in ("steps", "batch", "log_every", "n_test"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), 1))
        object.__setattr__(self, "lr", check_float("lr", self.lr, 0.0, strict_min=True))
        check_choice("optimizer", self.optimizer, FACT_OPTIMIZERS)
        check_choice("schedule", self.schedule, SCHEDULES)
        if self.stop_at is not None:
            object.__setattr__(self, "stop_at", check_float("stop_at", self.stop_at, 0.0, 1.0))


@dataclass
class FactHistory:
    """What `train_facts` logged: one entry per evaluation."""

    step: list = field(default_factory=list)
    loss: list = field(default_factory=list)       # test cross-entropy (nats)
    acc: list = field(default_factory=list)        # argmax = a*(s, r)
    rel_acc: list = field(default_factory=list)    # argmax in the right answer block
    sub_acc: list = field(default_factory=list)    # argmax at the right place within a block
    kl: list = field(default_factory=list)         # KL(q_r || p), nats
    lr: list = field(default_factory=list)         # learning rate the next step would use
    seconds: float = 0.0

    def final(self) -> dict:
        return {k: getattr(self, k)[-1] for k in ("step", "loss", "acc", "rel_acc", "sub_acc", "kl")}


def metrics(logits: torch.Tensor, batch: FactBatch, task: FactTask, q: torch.Tensor) -> dict:
    """Loss, accuracy, relation and subject accuracy, KL(q_r || p) of logits (N, R D) on a batch; q is
    `relation_only(task)`. KL(p || q_r) would be infinite (q_r is zero outside r's block), hence this
    direction: the extra loss of the model against the relation-only predictor's targets."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    pred = logits.argmax(-1)
    D = task.D
    qr = q[batch.relation]                                                    # (N, R D)
    kl = (qr * (torch.log(qr.clamp_min(1e-300)) - logp)).sum(-1)
    return {"loss": float(-logp.gather(1, batch.y[:, None]).mean()),
            "acc": float((pred == batch.y).double().mean()),
            "rel_acc": float((pred // D == batch.y // D).double().mean()),
            "sub_acc": float((pred % D == batch.y % D).double().mean()),
            "kl": float(kl.mean())}


def train_facts(model: torch.nn.Module, cfg: FactTrainConfig, progress: bool = False, device: str = "cpu") -> FactHistory:
    """Train `model` on its task online; returns the FactHistory. Randomness: batch i is the stream
    "step-i" of the task's seed, the test set the stream "test" (drawn on the CPU, then moved to
    `device`, so a GPU sees the same data)."""
    if not isinstance(model, (FactTransformer, LinearAttention)):
        raise ValueError(f"model must be a FactTransformer or LinearAttention, got {type(model).__name__}")
    if not isinstance(cfg, FactTrainConfig):
        raise ValueError(f"cfg must be a FactTrainConfig, got {type(cfg).__name__}")
    from tqdm.auto import tqdm

    task = model.task
    table, q = fact_table(task), relation_only(task)
    test = _to(sample(task, cfg.n_test, "test", table), device)
    q = q.to(device)
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = (torch.optim.Adam(params, lr=cfg.lr) if cfg.optimizer == "adam" else torch.optim.SGD(params, lr=cfg.lr))
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps) if cfg.schedule == "cosine" else None)
    hist, t0 = FactHistory(), time.perf_counter()

    def log(i):
        with torch.no_grad():
            mt = metrics(model(test.x), test, task, q)
        hist.step.append(i)
        for k, v in mt.items():
            getattr(hist, k).append(v)
        hist.lr.append(float(opt.param_groups[0]["lr"]))
        return mt["acc"]

    for i in tqdm(range(cfg.steps + 1), disable=not progress, leave=False):
        if i % cfg.log_every == 0 or i == cfg.steps:
            acc = log(i)
            if not math.isfinite(hist.loss[-1]):
                raise FloatingPointError(f"test loss is not finite at step {i}: lower lr (got {cfg.lr})")
            if (cfg.stop_at is not None and acc >= cfg.stop_at) or i == cfg.steps:
                break
        b = _to(sample(task, cfg.batch, f"step-{i}", table), device)
        loss = torch.nn.functional.cross_entropy(model(b.x), b.y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    hist.seconds = time.perf_counter() - t0
    return hist


def _to(b: FactBatch, device: str) -> FactBatch:
    if device == "cpu":
        return b
    return FactBatch(*(t.to(device) for t in (b.x, b.y, b.subject, b.relation, b.s_pos, b.r_pos)))


def plateau(hist: FactHistory, kl_max: float = 0.1, acc_max: float = 0.5) -> dict:
    """The hallucination stage of a FactHistory: the logged steps at which the model's output is the
    relation-only predictor's, KL(q_r || p) <= kl_max nats, while its accuracy is <= acc_max (it knows
    the relation, not the subject). Returns the first and last such logged step, `length` = their
    number times the log spacing (0 if never; resolution: one spacing), the median KL and the median
    accuracy over them."""
    kl_max = check_float("kl_max", kl_max, 0.0, strict_min=True)
    acc_max = check_float("acc_max", acc_max, 0.0, 1.0)
    if not isinstance(hist, FactHistory) or not hist.step:
        raise ValueError("hist must be a non-empty FactHistory from train")
    idx = [i for i in range(len(hist.step)) if hist.kl[i] <= kl_max and hist.acc[i] <= acc_max]
    if not idx:
        return {"first": None, "last": None, "length": 0, "kl_median": math.nan, "acc_median": math.nan}
    gap = hist.step[1] - hist.step[0] if len(hist.step) > 1 else 1
    med = statistics.median                        # the mean of the two middle values for an even count
    return {"first": hist.step[idx[0]], "last": hist.step[idx[-1]], "length": len(idx) * gap,
            "kl_median": med([hist.kl[i] for i in idx]), "acc_median": med([hist.acc[i] for i in idx])}
