"""How many facts a memory recalls: the transformer trained from zero (against its three steps
with oracle attention) and chapter 2's linear associative memory, trained and Hebbian, on one
problem each (chapter 10's memory after training). Tested in tests/test_recall.py."""

from __future__ import annotations

import numpy as np

from ..core.config import TaskConfig, check_float, check_int
from ..core.embeddings import make_problem
from ..core.memory import hebbian, make_memory, recall_accuracy, train_memory
from ..core.optim import TrainConfig
from ..core.task import sample_batch
from ..learning.evaluate import evaluate
from ..learning.schedule import three_steps
from ..learning.trainer import train


def transformer_recall(cfg: TaskConfig, n_train: int, seed: int, *, steps: int, lr: float,
                       record_every: int, n_test: int = 2048) -> tuple[np.ndarray, float]:
    """Problem `seed` of `cfg`, n_train samples of seed `seed`, n_test fresh test samples of that
    seed: the test accuracy of Adam from zero (`lib.train`, rate `lr`) after every `record_every`
    steps up to `steps` (the records after step 0), and the three steps' oracle-attention accuracy
    (limit mode) on the same test samples."""
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    n_train, seed = check_int("n_train", n_train, 1), check_int("seed", seed, 0)
    steps, record_every = check_int("steps", steps, 1), check_int("record_every", record_every, 1)
    lr, n_test = check_float("lr", lr, 0.0, 1e12, strict_min=True), check_int("n_test", n_test, 1)
    prob = make_problem(cfg, seed)
    batch = sample_batch(prob, n_train, seed)
    test = sample_batch(prob, n_test, seed, split="test")
    _, rec = train(prob, batch, steps=steps, lr=lr, record_every=record_every, test_batch=test)
    return np.array(rec.test_acc[1:]), evaluate(prob, three_steps(prob, batch), batch=test).oracle_acc


def linear_memory_recall(n: int, d: int, seed: int, *, steps: int = 1000, lr: float = 3.0) -> tuple[float, float]:
    """Recall accuracy of chapter 2's linear memory of n pairs in dimension d (seed `seed`):
    trained (Adam, rate `lr`, at most `steps` steps, stopping at accuracy 1) and Hebbian."""
    n, d, seed = check_int("n", n, 1), check_int("d", d, 1), check_int("seed", seed, 0)
    steps, lr = check_int("steps", steps, 1), check_float("lr", lr, 0.0, 1e12, strict_min=True)
    mem = make_memory(n, d, seed=seed)
    W, _ = train_memory(mem, TrainConfig(steps=steps, lr=lr, optimizer="adam", target_acc=1.0))
    return recall_accuracy(mem, W), recall_accuracy(mem, hebbian(mem))
