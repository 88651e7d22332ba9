"""lib: the exact models, gradients and three-step trainer behind the book.

Modules, one concept each, listed bottom-up: each imports only modules above it in this list
(tests/test_layers.py reads the imports and checks it). Chapter in brackets.
  featuremaps  the models as registered feature maps (phi, vjp, width); activations; MLP input  [3, 8]
  config       TaskConfig and argument validation                                              [all]
  _native_loops  the numba loops behind native (imported by it only where numba imports)  [7, 10]
  native       optional fused CPU loops (numba, compiled on first use) for the count routes [7, 10]
  seed         the one seed helper: named, explicit generators; the draw switch               [all]
  search       the one monotone search (doubling, then bisection)                              [2, 4-7]
  optim        the full-batch GD / Adam loop                                                   [2, 7]
  embeddings   random / orthogonal embeddings, the Problem (one named stream per object)       [2]
  task         the token-retrieval sampler (nested in N), keys and values                      [1]
  models       Params, the direct forward pass (materialises (N, L, d)), the loss              [3]
  tokens       the forward pass on token ids, chunked (shared by counts, evaluate, trainer);   [3-7]
               TokenIndex, the batch's ids inverted (the reverse of an embedding bag)
  steps        StepSizes and ThreeSteps: what the three steps are                              [4-6]
  gradients    closed-form gradients on the direct route, and the autograd reference           [3]
  counts       closed-form gradients on token ids (feature and logit-table routes); the        [4-7, 10]
               count-table limit and finite modes
  schedule     three_steps: the three-entry schedule on either route                           [4-6]
  evaluate     test, attention and oracle-attention accuracy                                   [all]
  decompose    a one-step memory's logits split into named terms that add up exactly        [4, 6]
  margins      step 2: where the attention direction k points, whether it finds the trigger    [5]
  memory       linear associative memories and their capacities                                [2]
  trainer      multi-step training of the transformers: autograd reference, and `train`        [7, 10]
               (GD / Adam on the count route, records, TrainSpec for trained N*)
  experiment   run(cfg, N, ...): the one-call experiment over seeds                            [4-7]
  store        the crash-safe, append-only store of evaluated points (JSON lines, checksums)   [4-7]
  capacity     critical sample size N* on that store (resumable)                               [4-7]
  sweep        N* over grids of configurations: resumable, parallel (joblib), bootstrap N*     [7]
  construct    a transformer built by hand, Bayes accuracy                                     [1]
  theory       closed-form predictions and fits                                                [2-9]
  mlp_budget   the one-step MLP memory's logits split into the error budget's terms            [8]
  lowerbound   counting and coverage bounds, first-gradient estimators and their heuristic N   [9]
  factual      factual recall (subjects, relations): task, one-layer models, training, capacity [11]
  plotting     figure helpers with the book's colours                                          [all]
  cli          `python -m lib train | nstar | sweep`
"""

from .config import TaskConfig, default_device
from .seed import derive_seed, generator, get_draw, numpy_generator, seed_everything, set_draw, torch_generator
from .embeddings import Problem, make_problem
from .task import Batch, keys_values, sample_batch
from .models import Params, activation, cross_entropy, features, forward, loss, zero_params
from .gradients import Gradients, autograd_gradients, gradients
from .steps import StepSizes, ThreeSteps
from .schedule import three_steps
from .evaluate import N_TEST, Accuracy, evaluate, predict
from .experiment import RunResult, run
from .trainer import TrainSpec, train
from . import (capacity, construct, counts, decompose, factual, featuremaps, lowerbound, margins, memory, native,  # noqa: F401
               plotting, search, store, sweep, theory, tokens, trainer)

__all__ = [
    "TaskConfig", "default_device", "derive_seed", "generator", "get_draw", "numpy_generator", "seed_everything", "set_draw",
    "torch_generator", "Problem",
    "make_problem", "Batch", "keys_values", "sample_batch", "Params", "activation", "cross_entropy",
    "features", "forward", "loss", "zero_params", "Gradients", "autograd_gradients", "gradients",
    "StepSizes", "ThreeSteps", "three_steps", "N_TEST", "Accuracy", "evaluate", "predict", "RunResult", "run", "TrainSpec", "train",
    "capacity", "construct", "counts", "decompose", "factual", "featuremaps", "lowerbound", "margins", "memory", "native",
    "plotting", "search", "store",
    "sweep", "theory", "tokens",
    "trainer",
]
__version__ = "0.2.0"
