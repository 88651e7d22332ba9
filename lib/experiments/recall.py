"""How many facts a memory recalls: the transformer trained from zero (against its three steps
with oracle attention) and chapter 2's linear associative memory, trained and Hebbian, on one
problem each (chapter 10's memory after training); where attention focuses, after the three
steps and after training from three starts (chapter 10's attention after training); and the N* of the
coverage learner, which recalls every fact its batch contains (chapter 10's trained recall beside it).
Tested in tests/test_recall.py."""

from __future__ import annotations

import numpy as np
import torch

from ..core.config import TaskConfig, check_bool, check_float, check_int
from ..core.embeddings import make_problem
from ..core.memory import hebbian, make_memory, recall_accuracy
from ..learning.trainer import train_memory
from ..core.models import Params
from ..core.optim import TrainConfig
from ..core.search import threshold_search
from ..core.task import sample_batch
from ..learning.evaluate import evaluate
from ..learning.schedule import three_steps
from ..learning.trainer import attention_summary, train


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


def attention_starts(cfg: TaskConfig, problems: int, n_three: list, n_trained: list, n_small: int, *,
                     lr: float, steps: int = 100, long_steps: int = 300, long_every: int = 50,
                     n_test: int = 2048) -> dict:
    """Chapter 10's attention after training, on problems 0 .. problems - 1 of `cfg` (problem s:
    training samples of seed s, `n_test` fresh test samples of seed s).

    For each N of `n_three`: the three steps' (finite mode) attention accuracy and mean attention
    entropy, arrays "att_three" and "ent_three" of shape (problems, len(n_three)). For each N of
    `n_trained` (a subset of `n_three`): the same after `steps` Adam steps (rate `lr`) from zero,
    "att_zero" and "ent_zero". At N = `n_small` (in `n_trained`), three trainings on the same batch,
    one record per problem in lists: "long", `long_steps` steps from the three steps (recorded every
    `long_every`); "smallV", `steps` steps from the three steps with W_V divided by 1000; "reset",
    `steps` steps from the three steps' W_V with W_KQ = 0; and "w_norm", the start's |W_KQ q_EOS|."""
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    problems = check_int("problems", problems, 1)
    for name, grid in (("n_three", n_three), ("n_trained", n_trained)):
        if not isinstance(grid, (list, tuple)) or not grid:
            raise ValueError(f"{name} must be a non-empty list of sample sizes")
        for n in grid:
            check_int(name, n, 1)
    if not set(n_trained) <= set(n_three):
        raise ValueError("n_trained must be a subset of n_three")
    n_small = check_int("n_small", n_small, 1)
    if n_small not in n_trained:
        raise ValueError("n_small must be one of n_trained")
    lr = check_float("lr", lr, 0.0, 1e12, strict_min=True)
    steps, long_steps = check_int("steps", steps, 1), check_int("long_steps", long_steps, 1)
    long_every, n_test = check_int("long_every", long_every, 1), check_int("n_test", n_test, 1)
    out = {key: np.zeros((problems, len(grid))) for key, grid in
           (("att_three", n_three), ("ent_three", n_three), ("att_zero", n_trained), ("ent_zero", n_trained))}
    out |= {key: [] for key in ("long", "smallV", "reset", "w_norm")}
    for s in range(problems):
        prob = make_problem(cfg, s)
        test = sample_batch(prob, n_test, s, split="test")
        for j, n in enumerate(n_three):
            batch = sample_batch(prob, n, s)
            start = three_steps(prob, batch, "finite").params
            summary = attention_summary(prob, start, test)
            out["att_three"][s, j], out["ent_three"][s, j] = summary["att_acc"], summary["entropy"]
            if n in n_trained:
                _, rec = train(prob, batch, steps=steps, lr=lr, record_every=steps, test_batch=test)
                i = list(n_trained).index(n)
                out["att_zero"][s, i], out["ent_zero"][s, i] = rec.att_acc[-1], rec.entropy[-1]
            if n == n_small:
                out["w_norm"].append(float((start.W_KQ @ prob.z_eos).norm()))
                out["long"].append(train(prob, batch, steps=long_steps, lr=lr, init=start,
                                         record_every=long_every, test_batch=test)[1])
                for key, init in (("smallV", Params(start.W_V / 1000, start.W_KQ)),
                                  ("reset", Params(start.W_V, start.W_KQ.new_zeros(start.W_KQ.shape)))):
                    out[key].append(train(prob, batch, steps=steps, lr=lr, init=init, record_every=steps,
                                          test_batch=test)[1])
    return out


def coverage_learner_nstar(cfg: TaskConfig, seed: int, *, threshold: float = 0.99, n_test: int = 1024,
                           n_min: int = 16, n_max: int = 2 ** 13, resolution: float = 0.1,
                           guess: bool = False) -> int | None:
    """N* of a coverage learner on problem `seed` of `cfg`: it recalls every fact whose informative token
    its batch contains and no other (`guess=True`: for any other token it guesses uniformly among the
    labels the batch has not shown, the best any learner can do on these data when the permutation is
    uniform; the expectation over its guesses is taken). Its accuracy is counted on the same `n_test`
    test samples (split "test" of `seed`), with the same nested batches (seed `seed`) and the same
    search (`lib.core.search.threshold_search` from n_min to n_max at `resolution`) as
    `lib.experiments.capacity.nstar` with seeds=1, seed=seed, so that a model searched that way can be
    compared with it search by search. None when the threshold is not reached by n_max."""
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    seed, n_test = check_int("seed", seed, 0), check_int("n_test", n_test, 1)
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    check_bool("guess", guess)
    prob = make_problem(cfg, seed)
    x_test = sample_batch(prob, n_test, seed, split="test").informative

    def accuracy(N: int) -> float:
        seen = torch.zeros(cfg.V, dtype=torch.bool)
        seen[sample_batch(prob, N, seed).informative] = True
        unseen = cfg.V - int(seen.sum())
        other = 1.0 / unseen if guess and unseen else 0.0
        return float(torch.where(seen[x_test], 1.0, other).mean())

    return threshold_search(lambda N: accuracy(N) >= threshold, n_min, n_max, resolution).first_true


def per_problem_coverage(configs: list[TaskConfig], problems: int, *, distinct: bool = False, guess: bool = False,
                         threshold: float = 0.99, n_test: int = 1024, n_min: int = 16, n_max: int = 2 ** 13,
                         resolution: float = 0.1) -> np.ndarray:
    """(problems, len(configs)) array of the coverage learner's N* (`coverage_learner_nstar`, `guess` as
    there; nan where not reached by n_max) on the problems, batches and test samples that `per_problem_nstars`
    with the same `distinct` and search options gives each cell, so the two tables compare cell by cell."""
    from .per_problem import point_seed
    problems = check_int("problems", problems, 1)
    check_bool("distinct", distinct)
    if not isinstance(configs, (list, tuple)) or not configs or not all(isinstance(c, TaskConfig) for c in configs):
        raise ValueError("configs must be a non-empty list of TaskConfig")
    found = [[coverage_learner_nstar(c, point_seed(problems, s, j, distinct), threshold=threshold, n_test=n_test,
                                     n_min=n_min, n_max=n_max, resolution=resolution, guess=guess)
              for j, c in enumerate(configs)] for s in range(problems)]
    return np.array([[np.nan if n is None else n for n in row] for row in found], float)
