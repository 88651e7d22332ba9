"""Factual recall with subjects and relations (chapter 11), after Nichani, Lee and Bietti (ICLR 2025).

The task (their `task.py`, class `FactRecall`): S subjects, R relations, D answers per relation, the
answers of relation r forming their own block [r D, (r + 1) D) of the R D answers; a fixed fact table
a*(s, r) in that block. Token ids: subjects 0..S-1, relations S..S+R-1, noise S+R..S+R+n_noise-1, EOS
S+R+n_noise (vocabulary S + R + n_noise + 1). A sequence of T tokens holds noise, the subject at a
uniform position among the first T - 1 and the relation at the last position; with `eos=True` the
relation sits at a uniform position among the other T - 2 of the first T - 1 and EOS is last.
Subjects and relations are drawn with Zipf weights k^-alpha, k^-beta (alpha = beta = 0: uniform).

`sample` has the guarantees of `lib.core.task.sample_batch`: validated arguments, one named stream per
split and block of `SAMPLE_BLOCK` samples, so the first N samples of a larger batch are the batch of
size N.

The models (torch):

- `FactTransformer`: their `model.py`, class `TF_one_layer`. H softmax heads of dimension d_h whose
  query is the last position, scores (x_t K)(x_T Q)^T / sqrt(d_h); the heads' outputs concatenated and
  projected by O (H d_h x d); then an MLP of width m with a bias, sigma (ReLU by default, or any name
  of `lib.core.config.ACTIVATIONS`), and a residual: h = o + W2 sigma(W1 o + b1); logits u_a . h over the
  R D answers. Embeddings (vocabulary and answers) random N(0, I/d) or orthonormal, frozen by default
  (as in their `run.py`, where `wte` and `unembed` get `optax.set_to_zero`). m = 0: attention only.
- `LinearAttention`: the simplified model of their `sequential-learning.ipynb` (class `Simple_TF`):
  logits = (sum_t (x_t^T A x_T) x_t)^T W, linear attention, A (d x d) and W (d x R D) trained from a
  small constant, embeddings one-hot (orthogonal, d = vocabulary) or random unit vectors. Their
  `Simple_TF.lin_attn` scores x_T^T A x_t: our A is their A transposed. From a constant start (a
  symmetric A) the two parametrisations follow the same trajectory, up to that transposition.

`param_counts` gives the parameters per block, exactly. `train` is online mini-batch Adam or SGD
(constant or cosine schedule, optional tqdm bar) that logs, every `log_every` steps on a fixed test
set, the loss, accuracy, relation accuracy (argmax in the right answer block), subject accuracy
(argmax at the right place within a block: their `sub_accuracy`) and KL(q_r || p), the divergence of
the model's output p from the relation-only predictor q_r (`relation_only`).

Capacity (`smallest_model`): the smallest number of heads (attention block, m = 0) or the smallest
MLP width (one head kept fixed) whose trained model reaches a test-accuracy threshold, by
`lib.core.search.smallest_true`; every trained point is kept in a `FactStore` (the record format and the
crash-safe append of `lib.experiments.store`), so a rerun trains nothing. Why not `lib.experiments.store.Store` itself: the
sweep engine's store keys a result by (configuration prefix, N), N the number of training samples of
one run of `lib.experiments.sweep`, and holds `RunResult`s; a capacity point here is keyed by the task, the model
and the training configuration (no N: training is online), and holds a History summary. `FactStore`
keeps the engine's record format and checksums with these keys.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field

import torch

from .core.config import check_bool, check_choice, check_float, check_int
from .core.embeddings import draw_vectors
from .core.models import activation as _activation
from .core.search import threshold_search
from .core.seed import generator, get_draw
from .core.task import SAMPLE_BLOCK            # samples per random block: nested in N, as lib.core.task
from .experiments.store import append_line, canonical, check_store_path, library_version, read_records, record_text

TABLES = ("random", "balanced")
EMBEDDINGS = ("random", "orthogonal")
OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("constant", "cosine")
BLOCKS = ("attention", "mlp")
VALUES = ("trained", "identity")


# ----------------------------------------------------------------------------------------- the task

@dataclass(frozen=True)
class FactTask:
    """The factual-recall task. Validated at construction (errors name the parameter)."""

    S: int                       # subjects
    R: int                       # relations
    D: int                       # answers per relation (R D answers in all)
    T: int = 8                   # sequence length
    n_noise: int | None = None   # noise tokens; None: S + R (as in their run.py)
    eos: bool = False            # relation at a random position and EOS last (their EOS_token=True)
    alpha: float = 0.0           # Zipf exponent of the subjects (weights k^-alpha)
    beta: float = 0.0            # Zipf exponent of the relations
    table: str = "random"        # "random": a*(s, r) uniform in r's block; "balanced": each answer as often as possible equally
    seed: int = 0                # seed of the fact table and of the data streams

    def __post_init__(self):
        for name, lo in (("S", 1), ("R", 1), ("D", 1), ("seed", 0)):
            object.__setattr__(self, name, check_int(name, getattr(self, name), lo))
        object.__setattr__(self, "T", check_int("T", self.T, 3 if self.eos else 2))
        n = self.S + self.R if self.n_noise is None else self.n_noise
        object.__setattr__(self, "n_noise", check_int("n_noise", n, 1))
        check_bool("eos", self.eos)
        object.__setattr__(self, "alpha", check_float("alpha", self.alpha, 0.0))
        object.__setattr__(self, "beta", check_float("beta", self.beta, 0.0))
        check_choice("table", self.table, TABLES)

    @property
    def vocab(self) -> int:
        return self.S + self.R + self.n_noise + 1

    @property
    def n_answers(self) -> int:
        return self.R * self.D

    @property
    def eos_token(self) -> int:
        return self.S + self.R + self.n_noise

    @property
    def n_facts(self) -> int:
        return self.S * self.R


def zipf_weights(n: int, exponent: float) -> torch.Tensor:
    """(n,) float64: k^-exponent / sum, k = 1..n (uniform at exponent 0)."""
    n = check_int("n", n, 1)
    exponent = check_float("exponent", exponent, 0.0)
    w = torch.arange(1, n + 1, dtype=torch.float64) ** -exponent
    return w / w.sum()


def fact_table(task: FactTask) -> torch.Tensor:
    """(S, R) long: a*(s, r) in [r D, (r + 1) D). "random": uniform in the block, independently (their
    run.py); "balanced": per relation, subjects in a random order get answers 0, 1, ..., D-1, 0, ...
    (each answer used floor(S/D) or ceil(S/D) times)."""
    _check_task(task)
    g = generator(task.seed, "factual", "table")
    S, R, D = task.S, task.R, task.D
    if task.table == "random":
        local = torch.randint(D, (S, R), generator=g)
    else:
        local = torch.empty(S, R, dtype=torch.long)
        for r in range(R):
            local[torch.randperm(S, generator=g), r] = torch.arange(S) % D
    return local + D * torch.arange(R)[None, :]


@dataclass
class FactBatch:
    """N sequences of the task and what they were built from."""

    x: torch.Tensor          # (N, T) long token ids
    y: torch.Tensor          # (N,) long answer a*(s, r) in [0, R D)
    subject: torch.Tensor    # (N,) long in [0, S)
    relation: torch.Tensor   # (N,) long in [0, R)
    s_pos: torch.Tensor      # (N,) long: position of the subject, in [0, T - 1)
    r_pos: torch.Tensor      # (N,) long: position of the relation (T - 1 unless eos)

    @property
    def N(self) -> int:
        return self.x.shape[0]


def sample(task: FactTask, N: int, split: str = "train", table: torch.Tensor | None = None) -> FactBatch:
    """N samples; `split` names an independent stream ("train", "test", "step-17", ...). Nested in N:
    block j of SAMPLE_BLOCK samples comes from its own stream generator(seed, "factual", split, j)."""
    _check_task(task)
    N = check_int("N", N, 1)
    if not isinstance(split, str):
        raise ValueError(f"split must be a string, got {split!r}")
    table = fact_table(task) if table is None else table
    if not (isinstance(table, torch.Tensor) and table.shape == (task.S, task.R)):
        raise ValueError(f"table must be a (S, R) = ({task.S}, {task.R}) tensor from fact_table")
    S, R, T, B = task.S, task.R, task.T, SAMPLE_BLOCK
    p, q = zipf_weights(S, task.alpha), zipf_weights(R, task.beta)
    cols = {k: torch.empty(N, dtype=torch.long) for k in ("s", "r", "sp", "rp")}
    x = torch.empty(N, T, dtype=torch.long)
    for j, start in enumerate(range(0, N, B)):
        stop, g = min(start + B, N), generator(task.seed, "factual", split, j)
        s = torch.multinomial(p, B, replacement=True, generator=g)
        sp = torch.randint(T - 1, (B,), generator=g)
        r = torch.multinomial(q, B, replacement=True, generator=g)
        rp = torch.randint(max(T - 2, 1), (B,), generator=g)
        noise = S + R + torch.randint(task.n_noise, (B, T), generator=g)
        if task.eos:
            rp = rp + (rp >= sp).long()                  # uniform over the first T - 1 positions except sp
            noise[:, T - 1] = task.eos_token
        else:
            rp = torch.full((B,), T - 1, dtype=torch.long)
        rows = torch.arange(B)
        noise[rows, sp] = s
        noise[rows, rp] = S + r
        sl = slice(0, stop - start)
        x[start:stop] = noise[sl]
        cols["s"][start:stop], cols["r"][start:stop] = s[sl], r[sl]
        cols["sp"][start:stop], cols["rp"][start:stop] = sp[sl], rp[sl]
    return FactBatch(x, table[cols["s"], cols["r"]], cols["s"], cols["r"], cols["sp"], cols["rp"])


def relation_only(task: FactTask, table: torch.Tensor | None = None) -> torch.Tensor:
    """(R, R D) float64: q_r(a) = P(a*(s, r) = a | r), s drawn with the subject weights. The best
    prediction of a model that sees the relation and not the subject."""
    _check_task(task)
    table = fact_table(task) if table is None else table
    p = zipf_weights(task.S, task.alpha)
    q = torch.zeros(task.R, task.n_answers, dtype=torch.float64)
    for r in range(task.R):
        q[r].index_add_(0, table[:, r], p)
    return q


def relation_only_scores(task: FactTask, table: torch.Tensor | None = None) -> dict:
    """Exact accuracy and loss of the relation-only predictor: accuracy sum_r w_r max_a q_r(a), loss
    sum_r w_r H(q_r) (nats). With a balanced table and D | S they are 1/D and log D. The Bayes
    predictor, which sees subject and relation, has accuracy 1 and loss 0."""
    q = relation_only(task, table)
    w = zipf_weights(task.R, task.beta)
    ent = -(q * torch.log(q.clamp_min(1e-300))).sum(1)
    return {"acc": float((w * q.max(1).values).sum()), "loss": float((w * ent).sum())}


def _check_task(task) -> None:
    if not isinstance(task, FactTask):
        raise ValueError(f"task must be a FactTask, got {type(task).__name__}")


# ---------------------------------------------------------------------------------------- the models

@dataclass(frozen=True)
class FactModelConfig:
    """The one-layer transformer's sizes. Validated at construction."""

    d: int = 32                  # embedding dimension
    H: int = 1                   # attention heads
    d_h: int = 8                 # head dimension
    m: int = 0                   # MLP width (0: attention only)
    activation: str = "relu"     # MLP activation (a name of lib.core.config.ACTIVATIONS)
    embeddings: str = "random"   # "random" N(0, I/d) or "orthogonal" (orthonormal rows)
    train_embeddings: bool = False   # frozen, as in their run.py
    values: str = "trained"      # "trained" V, O; "identity": V = O = I_d (needs H = 1; d_h is then the
                                 # key/query dimension only), so attention routes (o = sum_t a_t e_t), never stores
    seed: int = 0                # seed of the embeddings and the initialisation

    def __post_init__(self):
        for name, lo in (("d", 1), ("H", 1), ("d_h", 1), ("m", 0), ("seed", 0)):
            object.__setattr__(self, name, check_int(name, getattr(self, name), lo))
        _activation(self.activation)
        check_choice("embeddings", self.embeddings, EMBEDDINGS)
        check_bool("train_embeddings", self.train_embeddings)
        check_choice("values", self.values, VALUES)
        if self.values == "identity" and self.H != 1:
            raise ValueError(f"values='identity' needs H = 1, got H={self.H}")


def embeddings(n: int, d: int, kind: str, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """(n, d): rows i.i.d. N(0, I/d) ("random") or orthonormal ("orthogonal", needs d >= n)."""
    check_choice("embeddings", kind, EMBEDDINGS)
    if kind == "random":
        return draw_vectors(n, d, "gaussian", g).to(dtype)           # chapter 1's Gaussian embeddings
    if d < n:
        raise ValueError(f"d must be >= {n} for orthogonal embeddings, got d={d}")
    q, _ = torch.linalg.qr(torch.randn(d, n, generator=g, dtype=torch.float64))
    return q.T.contiguous().to(dtype)


class FactTransformer(torch.nn.Module):
    """One layer of H softmax heads (query: the last position), output projection, MLP with residual,
    unembedding over the R D answers. forward(x: (N, T) long) -> logits (N, R D). With
    values='identity' the one head's values are the embeddings themselves (V = O = I_d, buffers)."""

    def __init__(self, task: FactTask, cfg: FactModelConfig, dtype=torch.float32):
        super().__init__()
        _check_task(task)
        if not isinstance(cfg, FactModelConfig):
            raise ValueError(f"cfg must be a FactModelConfig, got {type(cfg).__name__}")
        self.task, self.cfg = task, cfg
        d, H, dh, m = cfg.d, cfg.H, cfg.d_h, cfg.m
        ge, gi = generator(cfg.seed, "factual", "embed"), generator(cfg.seed, "factual", "init")
        wte = embeddings(task.vocab, d, cfg.embeddings, ge, dtype)        # (vocab, d)
        unembed = embeddings(task.n_answers, d, cfg.embeddings, ge, dtype)  # (R D, d)
        if cfg.train_embeddings:
            self.wte, self.unembed = torch.nn.Parameter(wte), torch.nn.Parameter(unembed)
        else:
            self.register_buffer("wte", wte)
            self.register_buffer("unembed", unembed)

        def normal(shape, std):
            return torch.nn.Parameter((torch.randn(*shape, generator=gi, dtype=torch.float64) * std).to(dtype))
        self.Q = normal((H, d, dh), 1 / math.sqrt(dh))       # their init: N(0, 1/d_h)
        self.K = normal((H, d, dh), 1 / math.sqrt(dh))
        if cfg.values == "trained":
            self.V = normal((H, d, dh), 1 / math.sqrt(dh))
            self.O = normal((H * dh, d), 1 / math.sqrt(d))
        else:                                                 # attention routes, never stores
            self.register_buffer("V", torch.eye(d, dtype=dtype)[None])
            self.register_buffer("O", torch.eye(d, dtype=dtype))
        self.sigma = _activation(cfg.activation)[0]
        if m > 0:
            self.W1 = normal((d, m), 1 / math.sqrt(d))        # flax Dense default: lecun normal
            self.b1 = torch.nn.Parameter(torch.zeros(m, dtype=dtype))
            self.W2 = normal((m, d), 1 / math.sqrt(m))

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """(N, T) ids -> the attention block's output o (N, d) and the weights (N, H, T)."""
        e = self.wte[x]                                               # (N, T, d)
        q = torch.einsum("nd,hdk->nhk", e[:, -1], self.Q)            # (N, H, d_h)
        k = torch.einsum("ntd,hdk->nhtk", e, self.K)                 # (N, H, T, d_h)
        v = torch.einsum("ntd,hdk->nhtk", e, self.V)
        a = torch.softmax(torch.einsum("nhtk,nhk->nht", k, q) / math.sqrt(self.cfg.d_h), dim=-1)
        o = torch.einsum("nht,nhtk->nhk", a, v).reshape(x.shape[0], -1) @ self.O   # (N, d); v is (N, H, T, d_v)
        return o, a

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.attention(x)
        if self.cfg.m > 0:
            h = h + self.sigma(h @ self.W1 + self.b1) @ self.W2     # residual MLP
        return h @ self.unembed.T                                     # (N, R D)


class LinearAttention(torch.nn.Module):
    """Their simplified model (sequential-learning.ipynb): logits = (sum_t (x_t^T A x_T) x_t)^T W.
    Their `Simple_TF.lin_attn` scores x_T^T A x_t, so this A is theirs transposed (the same dynamics from
    a constant start, up to that transposition).
    `embeddings="orthogonal"` uses one-hot rows (d = vocabulary, as theirs); "random" uses unit-norm
    Gaussian rows in dimension d. A and W start at the constant `init` (theirs: 1e-5)."""

    def __init__(self, task: FactTask, embeddings: str = "orthogonal", d: int | None = None,
                 init: float = 1e-5, seed: int = 0, dtype=torch.float32):
        super().__init__()
        _check_task(task)
        check_choice("embeddings", embeddings, EMBEDDINGS)
        init = check_float("init", init)
        seed = check_int("seed", seed, 0)
        if embeddings == "orthogonal":
            d = task.vocab if d is None else check_int("d", d, task.vocab)
            wte = torch.eye(task.vocab, d, dtype=dtype)
        else:
            d = check_int("d", d if d is not None else task.vocab, 1)
            wte = draw_vectors(task.vocab, d, "sphere", generator(seed, "factual", "embed")).to(dtype)
        self.register_buffer("wte", wte)
        self.A = torch.nn.Parameter(torch.full((d, d), init, dtype=dtype))
        self.W = torch.nn.Parameter(torch.full((d, task.n_answers), init, dtype=dtype))
        self.task, self.d = task, d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.wte[x]                                               # (N, T, d)
        s = (e * (e[:, -1] @ self.A.T)[:, None, :]).sum(-1)           # (N, T): x_t^T A x_T
        return (s[:, :, None] * e).sum(1) @ self.W                    # (N, R D)


def param_counts(model: torch.nn.Module) -> dict:
    """Parameters per block, by formula: attention 4 H d_h d (Q, K, V, O; 2 d_h d with values='identity'), MLP 2 m d + m (W1, b1, W2),
    embeddings (vocab + R D) d, and `trainable` (what the optimizer moves). Their sweeps count
    4 H d_h d + 2 m d (fact_recall_sweep.py): the MLP bias (m numbers) is left out there."""
    if isinstance(model, FactTransformer):
        c, t = model.cfg, model.task
        out = {"attention": (4 if c.values == "trained" else 2) * c.H * c.d_h * c.d, "mlp": 2 * c.m * c.d + c.m,
               "embeddings": (t.vocab + t.n_answers) * c.d}
        out["trainable"] = out["attention"] + out["mlp"] + (out["embeddings"] if c.train_embeddings else 0)
        return out
    if isinstance(model, LinearAttention):
        return {"attention": model.d * model.d, "output": model.d * model.task.n_answers,
                "trainable": model.d * (model.d + model.task.n_answers)}
    raise ValueError(f"model must be a FactTransformer or LinearAttention, got {type(model).__name__}")


# ------------------------------------------------------------------------------------------ training

@dataclass(frozen=True)
class TrainConfig:
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
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_choice("schedule", self.schedule, SCHEDULES)
        if self.stop_at is not None:
            object.__setattr__(self, "stop_at", check_float("stop_at", self.stop_at, 0.0, 1.0))


@dataclass
class History:
    """What `train` logged: one entry per evaluation."""

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


def train(model: torch.nn.Module, cfg: TrainConfig, progress: bool = False, device: str = "cpu") -> History:
    """Train `model` on its task online; returns the History. Randomness: batch i is the stream
    "step-i" of the task's seed, the test set the stream "test" (drawn on the CPU, then moved to
    `device`, so a GPU sees the same data)."""
    if not isinstance(model, (FactTransformer, LinearAttention)):
        raise ValueError(f"model must be a FactTransformer or LinearAttention, got {type(model).__name__}")
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    from tqdm.auto import tqdm

    task = model.task
    table, q = fact_table(task), relation_only(task)
    test = _to(sample(task, cfg.n_test, "test", table), device)
    q = q.to(device)
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = (torch.optim.Adam(params, lr=cfg.lr) if cfg.optimizer == "adam" else torch.optim.SGD(params, lr=cfg.lr))
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps) if cfg.schedule == "cosine" else None)
    hist, t0 = History(), time.perf_counter()

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


def plateau(hist: History, kl_max: float = 0.1, acc_max: float = 0.5) -> dict:
    """The hallucination stage of a History: the logged steps at which the model's output is the
    relation-only predictor's, KL(q_r || p) <= kl_max nats, while its accuracy is <= acc_max (it knows
    the relation, not the subject). Returns the first and last such logged step, `length` = their
    number times the log spacing (0 if never; resolution: one spacing), the median KL and the median
    accuracy over them."""
    kl_max = check_float("kl_max", kl_max, 0.0, strict_min=True)
    acc_max = check_float("acc_max", acc_max, 0.0, 1.0)
    if not isinstance(hist, History) or not hist.step:
        raise ValueError("hist must be a non-empty History from train")
    idx = [i for i in range(len(hist.step)) if hist.kl[i] <= kl_max and hist.acc[i] <= acc_max]
    if not idx:
        return {"first": None, "last": None, "length": 0, "kl_median": math.nan, "acc_median": math.nan}
    gap = hist.step[1] - hist.step[0] if len(hist.step) > 1 else 1
    med = lambda v: sorted(v)[len(v) // 2]
    return {"first": hist.step[idx[0]], "last": hist.step[idx[-1]], "length": len(idx) * gap,
            "kl_median": med([hist.kl[i] for i in idx]), "acc_median": med([hist.acc[i] for i in idx])}


# ------------------------------------------------------------------------------ capacity, with a cache

POINT_KEY = ("task", "model", "train", "kind", "version")
POINT_RESULT = ("step", "loss", "acc", "rel_acc", "sub_acc", "kl", "max_acc", "params", "seconds")


def _fact_shape(key: dict, result: dict) -> bool:
    """A trained point of `trained_point`: its key fields and its result fields, nothing else."""
    return set(key) - {"draw"} == set(POINT_KEY) and set(result) == set(POINT_RESULT)


class FactStore:
    """Trained points, keyed by everything that fixes their numbers. The record format, reader and
    appender of lib.experiments.store (`record_text`, `read_records`, `append_line`: one checksummed line per
    point, appended under flock and fsynced; invalid or cut lines reported and retrained).
    `path=None`: memory only."""

    def __init__(self, path: str | None = None):
        self.path = check_store_path(path)
        self.data: dict[str, dict] = {}
        self.computed = 0                      # points put (trained, not found) since construction
        if self.path is not None and os.path.exists(self.path):
            for key, result in read_records(self.path, _fact_shape)[0]:
                self.data[canonical(key)] = result

    def get(self, key: dict):
        return self.data.get(canonical(key))

    def put(self, key: dict, result: dict) -> None:
        self.data[canonical(key)] = result
        self.computed += 1
        if self.path is not None:
            append_line(self.path, record_text(key, result))

    def __len__(self):
        return len(self.data)


def trained_point(task: FactTask, model_cfg: FactModelConfig, train_cfg: TrainConfig,
                  store: FactStore | None = None, device: str = "cpu") -> dict:
    """Train one model (or read it from `store`): the final History entry, `params` (trainable),
    `max_acc` (best logged test accuracy) and `seconds`. The device is not part of the key."""
    key = {"task": asdict(task), "model": asdict(model_cfg), "train": asdict(train_cfg),
           "kind": "FactTransformer", "version": library_version()}
    if get_draw():                      # another draw (lib.core.seed.set_draw): other numbers, other key
        key["draw"] = get_draw()
    if store is not None and (hit := store.get(key)) is not None:
        return hit
    model = FactTransformer(task, model_cfg)
    hist = train(model, train_cfg, device=device)
    out = {**hist.final(), "max_acc": max(hist.acc), "params": param_counts(model)["trainable"],
           "seconds": hist.seconds}
    if store is not None:
        store.put(key, out)
    return out


def block_config(block: str, n: int, d: int, d_h: int, unit: int, seed: int = 0,
                 activation: str = "relu", heads: int = 0) -> FactModelConfig:
    """Model n of a block's search. "attention": n heads of dimension d_h, no MLP (the facts must sit
    in V and O). "mlp": an MLP of width n unit after one routing head (values='identity', query/key
    dimension d_h; the facts must sit in the MLP) when heads = 0, or after `heads` trained heads of dimension d_h
    (attention and MLP share the facts: the frontier between the blocks)."""
    check_choice("block", block, BLOCKS)
    n, unit = check_int("n", n, 1), check_int("unit", unit, 1)
    heads = check_int("heads", heads, 0)
    if block == "attention":
        return FactModelConfig(d=d, H=n, d_h=d_h, m=0, seed=seed, activation=activation)
    if heads:
        return FactModelConfig(d=d, H=heads, d_h=d_h, m=n * unit, seed=seed, activation=activation)
    return FactModelConfig(d=d, H=1, d_h=d_h, m=n * unit, values="identity", seed=seed, activation=activation)


def smallest_model(task: FactTask, block: str, threshold: float, train_cfg: TrainConfig, *, d: int,
                   d_h: int = 8, unit: int = 1, n_max: int = 64, resolution: float = 1e-9, seed: int = 0,
                   heads: int = 0,
                   store: FactStore | None = None, device: str = "cpu") -> dict:
    """Smallest n (heads, or MLP width in units of `unit`) whose trained model reaches `threshold`
    (best logged test accuracy), by lib.core.search.threshold_search (doubling, then bisection until the
    bracket is within `resolution` of n; the default is unit resolution, lib.core.search.smallest_true's);
    assumes success is monotone in n. Returns n (the first success found), the last failure below it,
    the model's trainable parameters and the grown block's own parameters; n = None when n_max is not
    enough. `heads`: see `block_config` (block "mlp" only)."""
    check_choice("block", block, BLOCKS)
    threshold = check_float("threshold", threshold, 0.0, 1.0)
    _check_task(task)
    if store is None:
        store = FactStore()

    def ok(n):
        return trained_point(task, block_config(block, n, d, d_h, unit, seed, heads=heads), train_cfg, store, device)["max_acc"] >= threshold
    br = threshold_search(ok, 1, check_int("n_max", n_max, 1), resolution)
    if br.first_true is None:
        return {"n": None, "last_false": br.last_false, "params": None, "block_params": None}
    c = param_counts(FactTransformer(task, block_config(block, br.first_true, d, d_h, unit, seed, heads=heads)))
    return {"n": br.first_true, "last_false": br.last_false, "params": c["trainable"], "block_params": c[block]}
