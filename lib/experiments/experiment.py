"""The one-call experiment: `run(cfg, N, ...)` trains with the three steps and tests, over seeds.

For each seed s in seed, seed + 1, ..., seed + seeds - 1 it draws the problem `make_problem(cfg, s)`,
the training batch `sample_batch(problem, N, s)`, runs `three_steps` and evaluates on `n_test`
fresh samples of split "test" of seed s. With `training=` a `lib.learning.trainer.TrainSpec` (mode "finite"
only) the model evaluated is the one `lib.learning.trainer.train_with` reaches from the spec's start
(zero, or the finite-mode three steps) on the same batch: the trained N* of chapter 10. It returns the three accuracies' means over seeds, their
spreads (population standard deviation over seeds), the per-seed values and the gamma_W used. The
command line (`python -m lib train`) and the N* search (`lib.experiments.capacity`) both call it.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from ..core.config import TaskConfig, check_choice, check_int
from ..core.embeddings import make_problem
from ..learning.evaluate import N_TEST, evaluate
from ..learning.schedule import three_steps
from ..core.steps import MODES, StepSizes
from ..core.task import sample_batch
from ..learning.trainer import TrainSpec, check_training, train_with

METRICS = ("acc", "att_acc", "oracle_acc")


@dataclass
class RunResult:
    N: int
    seeds: int
    acc: float                 # mean over seeds of the test accuracy
    att_acc: float             # mean attention accuracy
    oracle_acc: float          # mean oracle-attention accuracy
    acc_std: float             # population standard deviation over seeds of acc
    att_acc_std: float
    oracle_acc_std: float
    per_seed: dict             # metric -> list of per-seed values (and "gamma_W")

    def as_dict(self) -> dict:
        return asdict(self)


def spread(values) -> float:
    """Population standard deviation of the per-seed values (0 for one seed)."""
    values = list(values)
    return statistics.pstdev(values) if len(values) > 1 else 0.0


def run(cfg: TaskConfig, N: int, *, mode: str = "limit", seeds: int = 3, seed: int = 0, n_test: int = N_TEST,
        step_sizes: StepSizes = StepSizes(), training: TrainSpec | None = None, on_seed=None) -> RunResult:
    """Mean (over `seeds` problems) accuracies of the three steps trained on N samples. `on_seed(i, accs)`,
    if given, is called after each seed's problem is trained and evaluated (i = 1 .. seeds; accs: its
    accuracies by metric): progress, without changing any number."""
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    N, seeds = check_int("N", N, 1), check_int("seeds", seeds, 1)
    seed, n_test = check_int("seed", seed, 0), check_int("n_test", n_test, 1)
    check_choice("mode", mode, MODES)
    if not isinstance(step_sizes, StepSizes):
        raise ValueError(f"step_sizes must be a StepSizes, got {type(step_sizes).__name__}")
    check_training(training, mode)
    if on_seed is not None and not callable(on_seed):
        raise ValueError(f"on_seed must be callable or None, got {type(on_seed).__name__}")
    per_seed = {k: [] for k in (*METRICS, "gamma_W")}
    for s in range(seed, seed + seeds):
        problem = make_problem(cfg, s)
        batch = sample_batch(problem, N, s)
        if training is None:
            res = three_steps(problem, batch, mode, step_sizes=step_sizes)
            gamma_W = res.gamma_W
        else:
            res, _ = train_with(problem, batch, training, step_sizes, n_test=0)
            gamma_W = None                     # no W step size: the trained model
        acc = evaluate(problem, res, n_test, s).as_dict()
        for k in METRICS:
            per_seed[k].append(acc[k])
        per_seed["gamma_W"].append(gamma_W)
        if on_seed is not None:
            on_seed(s - seed + 1, {k: acc[k] for k in METRICS})
    mean = {k: statistics.fmean(per_seed[k]) for k in METRICS}
    return RunResult(N, seeds, mean["acc"], mean["att_acc"], mean["oracle_acc"],
                     spread(per_seed["acc"]), spread(per_seed["att_acc"]), spread(per_seed["oracle_acc"]),
                     per_seed)
