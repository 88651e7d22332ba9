"""Chapter 11 (factual recall, after Nichani, Lee and Bietti, ICLR 2025), the task: subjects,
relations, the fact table, the sampler.

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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.config import check_bool, check_choice, check_float, check_int
from ..core.seed import generator
from ..core.task import SAMPLE_BLOCK            # samples per random block: nested in N, as lib.core.task


TABLES = ("random", "balanced", "structured")


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
    table: str = "random"        # "random": a*(s, r) uniform in r's block; "balanced": each answer as often as possible equally;
                                 # "structured": a*(s, r) = floor(s D / S) + r D (their sequential-learning.ipynb)
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
    (each answer used floor(S/D) or ceil(S/D) times); "structured": a*(s, r) = floor(s D / S) + r D, the
    same assignment for every relation and no randomness (their sequential-learning.ipynb's table)."""
    _check_task(task)
    g = generator(task.seed, "factual", "table")
    S, R, D = task.S, task.R, task.D
    if task.table == "random":
        local = torch.randint(D, (S, R), generator=g)
    elif task.table == "structured":
        local = ((torch.arange(S) * D) // S)[:, None].expand(S, R).clone()
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
