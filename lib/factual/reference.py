"""Chapter 11, Nichani, Lee and Bietti's sequential-learning run at their own settings, with the book's
model: `nichani_sequential_run`.

Their `sequential-learning.ipynb` (repository eshnich/factual-recall-iclr, commit 7c4d121d) trains
`Simple_TF` (our `LinearAttention`): one-hot embeddings, d = vocabulary = 41, linear attention from the
last position, A and W started at the constant 1e-5, on their EOS task with S = 16, R = 4, D = 8,
n_noise = 20, T = 32 and their "structured" table; plain gradient descent at the *constant* rate 0.1 (the
notebook builds a cosine schedule and never uses it), 2^13 steps of 2^10 fresh samples, logging every 64
steps (before the step) on 2^16 test samples. `scripts/nichani_reference.py` ran their code (their first
4544 steps) and stored the curve in `book/data/nichani_reference.json` (`load_nichani_reference`); the
book's runs on five seeds are in `book/data/nichani_book_seeds.json` (`scripts/nichani_seed_spread.py`).

Their model returns float32 probabilities and every accuracy takes the argmax of them. While the logits differ
by less than float32 resolves after exp (about 6e-8), the probabilities tie exactly and argmax returns
the first index: answer 0, or the first answer of a block once the relation's block is resolved. So
their early accuracies (relation accuracy 1 with accuracy 1/D) measure ties, not the model. The run
logs both rules: `acc` etc. (argmax of the float32 softmax, theirs) and `acc_logits` (argmax of the
logits, the book's `metrics`).

The faster route (equal, not approximate). With EOS always last and one-hot embeddings, the model's
logits depend on a sequence only through its token counts c (vocab,): xi = W^T (c * A[:, EOS]), which
is `LinearAttention.forward` summed by token instead of by position (`count_logits`; a test checks
equality). Training batches are drawn as counts (`sample_counts`): one subject, one relation, EOS and
T - 3 noise tokens i.i.d. uniform, which is their sampler's distribution of counts exactly (positions
do not enter the model). The test set is drawn with `lib.factual.sample` and counted. What is not
exact: the random draws. Theirs are JAX's threefry streams from RNG(64); ours are torch generators,
so the two runs see different samples of the same distribution and agree up to the spread over seeds.
"""

from __future__ import annotations

import json
import math
import os
import time

import torch

from ..core.config import check_float, check_int
from ..core.paths import data_dir
from ..core.seed import generator
from .models import LinearAttention
from .task import FactTask, _check_task, fact_table, sample

# Their settings (sequential-learning.ipynb, cells counted from one: 3 the task, 5 the initialisation, 7 the loop).
NICHANI_TASK = dict(S=16, R=4, D=8, T=32, n_noise=20, eos=True, table="structured")
NICHANI_RUN = dict(steps=2 ** 13, batch=2 ** 10, lr=0.1, init=1e-5, log_every=2 ** 13 // 128, n_test=2 ** 16)
REFERENCE_PATH = os.path.join(data_dir(), "nichani_reference.json")   # book/data, or its copy installed with lib


def nichani_task(seed: int = 0) -> FactTask:
    """Their task: S = 16, R = 4, D = 8, n_noise = 20, T = 32, EOS last, structured table."""
    return FactTask(**NICHANI_TASK, seed=check_int("seed", seed, 0))


def sequence_counts(task: FactTask, x: torch.Tensor) -> torch.Tensor:
    """(N, T) token ids -> (N, vocab) float32 token counts."""
    _check_task(task)
    if not (isinstance(x, torch.Tensor) and x.dtype == torch.long and x.dim() == 2 and x.shape[1] == task.T):
        raise ValueError(f"x must be an (N, T = {task.T}) long tensor of token ids")
    if x.numel() and (x.min() < 0 or x.max() >= task.vocab):
        raise ValueError(f"x must hold token ids in [0, {task.vocab})")
    c = torch.zeros(x.shape[0], task.vocab, dtype=torch.float32)
    return c.scatter_add_(1, x, torch.ones(x.shape, dtype=torch.float32))


def sample_counts(task: FactTask, N: int, g: torch.Generator, table: torch.Tensor) -> tuple:
    """N samples of the EOS task as token counts (N, vocab) float32 and labels (N,): the distribution of
    the counts of `sample(task, N)` (one subject, one relation, EOS, T - 3 uniform noise tokens)."""
    _check_task(task)
    if not task.eos:
        raise ValueError("task.eos must be True for sample_counts (their sequential-learning task)")
    N = check_int("N", N, 1)
    if not isinstance(g, torch.Generator):
        raise ValueError(f"g must be a torch.Generator, got {type(g).__name__}")
    if not (isinstance(table, torch.Tensor) and table.shape == (task.S, task.R)):
        raise ValueError(f"table must be a (S, R) = ({task.S}, {task.R}) tensor from fact_table")
    S, R, B = task.S, task.R, N
    s = torch.randint(S, (B,), generator=g)
    r = torch.randint(R, (B,), generator=g)
    noise = S + R + torch.randint(task.n_noise, (B, task.T - 3), generator=g)
    c = torch.zeros(B, task.vocab, dtype=torch.float32)
    c.scatter_add_(1, noise, torch.ones(noise.shape, dtype=torch.float32))
    rows = torch.arange(B)
    c[rows, s] += 1
    c[rows, S + r] += 1
    c[:, task.eos_token] += 1
    return c, table[s, r]


def count_logits(model: LinearAttention, c: torch.Tensor) -> torch.Tensor:
    """Logits (N, R D) of `model` from token counts (N, vocab): W^T (c * A[:, EOS]), one-hot embeddings
    and EOS last. Equal to model(x) for the sequences x with those counts."""
    if not isinstance(model, LinearAttention) or not model.task.eos or model.d != model.task.vocab \
            or not torch.equal(model.wte, torch.eye(model.task.vocab, dtype=model.wte.dtype)):
        raise ValueError("model must be a LinearAttention with one-hot embeddings on an EOS task")
    if not (isinstance(c, torch.Tensor) and c.dim() == 2 and c.shape[1] == model.task.vocab):
        raise ValueError(f"c must be an (N, vocab = {model.task.vocab}) tensor of token counts")
    return (c * model.A[:, model.task.eos_token]) @ model.W


def _logged(z: torch.Tensor, y: torch.Tensor, D: int) -> dict:
    """Both argmax rules on logits z (N, R D) float32, labels y (N,)."""
    p = torch.softmax(z, dim=-1)                                   # float32, as their model returns
    pred_p = p.argmax(-1)                                          # ties -> first index (as jnp.argmax)
    pred_z = z.argmax(-1)
    logp = torch.log_softmax(z.double(), dim=-1)
    top2 = torch.topk(z, 2, dim=-1).values.double()                 # the float32 values, exactly
    return {
        "loss": float(-torch.log(p.gather(1, y[:, None])).mean()),     # theirs: -log f[y], float32
        "loss_f64": float(-logp.gather(1, y[:, None]).mean()),
        "acc": float((pred_p == y).double().mean()),
        "rel_acc": float((pred_p // D == y // D).double().mean()),
        "sub_acc": float((pred_p % D == y % D).double().mean()),
        "acc_logits": float((pred_z == y).double().mean()),
        "rel_acc_logits": float((pred_z // D == y // D).double().mean()),
        "sub_acc_logits": float((pred_z % D == y % D).double().mean()),
        "frac_prob_ties": float(((p == p.max(-1, keepdim=True).values).sum(-1) > 1).double().mean()),
        "frac_pred_answer0": float((pred_p == 0).double().mean()),
        "frac_pred_block_first": float((pred_p % D == 0).double().mean()),   # argmax on a block's first answer
        # the median of the top-two gaps (for an even count, the mean of the two middle values, as np.median in
        # their loop, scripts/nichani_reference.py; torch's median would give the lower of the two)
        "median_logit_gap": float((top2[:, 0] - top2[:, 1]).quantile(0.5)),
    }


def nichani_sequential_run(steps: int = NICHANI_RUN["steps"], seed: int = 0, *, batch: int = NICHANI_RUN["batch"],
                           lr: float = NICHANI_RUN["lr"], init: float = NICHANI_RUN["init"],
                           log_every: int = NICHANI_RUN["log_every"], n_test: int = NICHANI_RUN["n_test"],
                           schedule: str = "constant") -> dict:
    """The book's `LinearAttention` trained at their sequential-learning settings (defaults: theirs).

    Logs before the step at steps 0, log_every, ... < steps, as their loop does. Returns a dict of lists
    keyed like the reference's `logged` rows (`step`, `loss`, `loss_f64`, `acc`, `rel_acc`, `sub_acc`
    under their float32-probability argmax, `acc_logits`, `rel_acc_logits`, `sub_acc_logits`,
    `frac_prob_ties`, `frac_pred_answer0`, `frac_pred_block_first`, `median_logit_gap`) and `seconds`. `schedule="cosine"`: the
    rate lr (1 + cos(pi i / steps)) / 2 at step i, optax's `cosine_decay_schedule(lr, steps)` that their
    notebook builds but does not apply. Randomness: test set = the task's "test" stream (seed `seed`),
    training batches = generator(seed, "factual", "nichani", "train")."""
    steps = check_int("steps", steps, 1)
    seed = check_int("seed", seed, 0)
    batch = check_int("batch", batch, 1)
    lr = check_float("lr", lr, 0.0, strict_min=True)
    init = check_float("init", init)
    log_every = check_int("log_every", log_every, 1)
    n_test = check_int("n_test", n_test, 1)
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"schedule must be one of constant, cosine; got {schedule!r}")

    task = nichani_task(seed)
    table = fact_table(task)
    model = LinearAttention(task, "orthogonal", init=init, dtype=torch.float32)
    test = sample(task, n_test, "test", table)
    c_test, y_test = sequence_counts(task, test.x), test.y
    g = generator(seed, "factual", "nichani", "train")
    A, W = model.A, model.W
    out = {"step": []}
    t0 = time.perf_counter()
    for i in range(steps):
        if i % log_every == 0:
            with torch.no_grad():
                row = _logged(count_logits(model, c_test), y_test, task.D)
            out["step"].append(i)
            for k, v in row.items():
                out.setdefault(k, []).append(v)
        c, y = sample_counts(task, batch, g, table)
        z = count_logits(model, c)
        loss = -torch.log(torch.softmax(z, dim=-1).gather(1, y[:, None])).mean()   # their criterion
        gA, gW = torch.autograd.grad(loss, (A, W))
        rate = lr if schedule == "constant" else lr * 0.5 * (1 + math.cos(math.pi * i / steps))
        with torch.no_grad():
            A.sub_(rate * gA)
            W.sub_(rate * gW)
    out["seconds"] = time.perf_counter() - t0
    return out


def load_nichani_reference(path: str | None = None) -> dict:
    """The stored run of their code (`scripts/nichani_reference.py`): provenance, settings, logged rows."""
    with open(path or REFERENCE_PATH) as fh:
        return json.load(fh)


STORED_BOOK_RUNS = ("nichani_book_seeds", "nichani_book_cosine")


def load_nichani_book_runs(name: str) -> dict:
    """A stored set of the book's runs at their settings (`scripts/nichani_seed_spread.py`):
    "nichani_book_seeds" (constant rate, seeds 0-4) or "nichani_book_cosine" (the cosine schedule, seed 0),
    both at draw 0. Returns the file's dict: `settings`, provenance fields and `runs` (seed -> logged lists)."""
    if name not in STORED_BOOK_RUNS:
        raise ValueError(f"name must be one of {', '.join(STORED_BOOK_RUNS)}; got {name!r}")
    with open(os.path.join(os.path.dirname(REFERENCE_PATH), name + ".json")) as fh:
        return json.load(fh)
