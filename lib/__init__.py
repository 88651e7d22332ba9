"""lib: the exact models, gradients and three-step trainer behind the book.

Subpackages, read top-down: each module imports only modules listed above it here, its own
package's included (tests/test_layers.py reads every import, those inside functions too, and checks
it). Chapter in brackets.

  core/         the objects the book defines, written as it writes them (the direct route)
    paths          where the shipped data lives: book/data, or its copy installed with lib  [2, 7, 9-11]
    featuremaps    the models as registered feature maps (phi, vjp, width); activations; MLP input [3, 8]
    config         TaskConfig and argument validation                                        [all]
    seed           the one seed helper: named, explicit generators; the draw switch          [all]
    search         the one monotone search (doubling, then bisection; on a given grid, bisection) [2, 4-7]
    grid           the two rules that read a threshold off an evaluated grid (first / stays) [6, 7, 9]
    optim          the full-batch GD / Adam loop                                             [2, 7]
    embeddings     random / orthogonal embeddings, the Problem, the one problem check        [2]
    task           the token-retrieval sampler (nested in N), keys and values                [1]
    models         Params, the direct forward pass (materialises (N, L, d)), the loss; the
                   one logits map and the one hard-attention rule                            [3]
    memory         linear associative memories, their recall and their scores                [2]
    gradients      closed-form gradients on the direct route, and the autograd reference     [3]
    steps          StepSizes and ThreeSteps: what the three steps are                        [4-6]
  fast/         the same computations on token ids, never an (N, L, d) tensor
    loops          numba loops of the limit mode's three passes (imported by native only)  [4-7]
    native         the fused CPU loops, validated and optional (without numba: the torch route) [4-7]
    tokens         the forward pass on token ids, chunked; TokenIndex (the batch inverted)   [3-7]
    counts         closed-form gradients on token ids (feature and logit-table routes)       [4-7, 10]
    limit          the count-table limit and finite modes of the attention-only model        [4-7]
  learning/     the three steps as a schedule, evaluation, multi-step training
    schedule       three_steps: the three-entry schedule on either route                     [4-6]
    evaluate       test, attention and oracle-attention accuracy                             [all]
    trainer        multi-step training: autograd reference, `train_memory` (linear memories),
                   and `train` (GD / Adam on the count route, records, TrainSpec)            [2, 7, 10]
    crosscheck     the count route's training against autograd: gradient and parameter gaps [10]
  experiments/  experiments over seeds and grids, with a crash-safe store
    experiment     run(cfg, N, ...): the one-call experiment over seeds                      [4-7]
    codehash       the hash of the lib source a stored point depends on (part of its key)    [4-7]
    records        the record format both stores share (JSON lines, checksums, appends)      [4-7, 11]
    store          the append-only store of evaluated points (JSON lines, checksums)          [4-7]
    workers        memory checks of a search or grid, where points run: the watchdog, the
                   Dask cluster (probed, memory limits, failures as one line)                [4-7]
    capacity       critical sample size N* on that store (resumable)                         [4-7]
    bootstrap      the bootstrap over seeds of N* on its evaluated grid                      [7]
    sweep          N* over grids of configurations: resumable, parallel, bootstrap N*        [7]
    per_problem    N* problem by problem over a grid (one sweep per problem seed)           [7, 10]
    memory_capacity  capacities of linear memories (Hebbian, trained, every pair) and of the
                   three steps' population memory (N = infinity, oracle attention)           [2, 6-10]
    recall         facts recalled: the trained transformer, the linear memory (trained, Hebbian);
                   attention after the three steps and after training from three starts      [10]
  theory/       closed-form predictions and fits, one module per chapter (re-exported by lib.theory)
    fits           power-law fits, a law's constant, Student-t intervals, parameter counts  [2, 3, 7+]
    ch02_interference  inner-product moments, coherence, the Hebbian memory's capacity      [1-3]
    ch04_value_step    step 1: the one-step memory's logit terms, bag accuracies, coverage  [4]
    ch05_attention_step  step 2: the attention direction, its signal-to-noise ratio and N   [5]
    ch06_refined_memory  step 3: the refined memory's moments, accuracy and N*             [6]
    ch07_law           the attention law calibrated at d < V, its constants and provenance [7]
    ch07_derived       the attention requirement derived from k's moments, its moment laws [7]
    ch07_capacity      the capacity law N* ~ max(N_mem, N_att)                             [7]
    ch08_kernels       Hermite coefficients, the MLP kernel, random-feature variances      [8]
    ch08_mlp_memory    the MLP memory's signal and noise, predicted accuracy, width, N*     [8]
  analysis/     measurements that take a trained model apart
    construct      a transformer built by hand, its accuracy over problems, Bayes accuracy   [1]
    decompose      a one-step memory's logits split into named terms that add up exactly     [4, 6]
    step1          chapter 4's step-1 terms over problems and sweeps, step-1 accuracy, coverage [4]
    step3          chapter 6's centred step-3 terms; the oracle-attention memory             [6]
    refined        chapter 6's experiments over problems: leakage, terms, knock-outs, N*     [6]
    margins        step 2: where the attention direction k points, whether it finds the trigger [5]
    k_noise        step 2 on a finite batch: k's exact mean factor and batch-to-batch variance [5]
    attention_curve  step 2's exact accuracy curve in N, its prediction from moments, the requirement [7]
    step2          chapter 5's experiments over problems: bonus, beta, noise, critical N, pools [5]
    mlp_budget     the one-step MLP memory's logits split into the error budget's terms      [8]
    mlp_memory     chapter 8's random-feature kernel gap and the MLP memory's capacity search [8]
    lowerbound_attention  the attention lower bound: embedding-blind functions of the step-2 direction [9]
    lowerbound_pairs  the attention lower bound for every pair statistic of the batch           [9]
    lowerbound     counting and coverage bounds, first-gradient estimators, their heuristic N [9]
    lowerbound_beyond  learners outside the pair class: maps of G1 before step 2, told Pi*   [9]
    model_probes   the MLP's linear Hermite coefficient at its input's scale; the attention
                   gradient after a first step W_V = eta G_1, over eta                       [3]
    lowerbound_checks  chapter 9's references the long way: estimator N* grids, enumerations  [9]
  factual/      factual recall with subjects and relations (re-exported by lib.factual)     [11]
    task           subjects, relations, the fact table, the sampler
    models         FactTransformer (one layer, heads, MLP), LinearAttention, parameter counts
    training       online Adam / SGD with logged metrics
    stacked        many models trained as one stack (equal to one at a time within round-off)
    capacity       the smallest model reaching a threshold (many searches at once), trained points in a FactStore
    reference      their sequential-learning run at their settings; their stored curve
  plotting      figure helpers with the book's colours                                       [all]
  cli           `python -m lib train | nstar | sweep`

The public API is imported here: `lib.TaskConfig`, `make_problem`, `sample_batch`, `three_steps`,
`run`, `evaluate`, `train`, ...; `lib.theory`, `lib.plotting`, `lib.factual`; and `lib.lowerbound`
and `lib.sweep`, short attribute names for the modules `lib.analysis.lowerbound` and
`lib.experiments.sweep` (`from lib import lowerbound`; import their own paths to import from them).
"""

from .core.config import TaskConfig, default_device
from .core.seed import derive_seed, generator, get_draw, numpy_generator, seed_everything, set_draw, torch_generator
from .core.embeddings import Problem, make_problem
from .core.task import Batch, keys_values, sample_batch
from .core.models import Params, activation, cross_entropy, features, forward, loss, zero_params
from .core.gradients import Gradients, autograd_gradients, gradients
from .core.steps import StepSizes, ThreeSteps
from .learning.schedule import three_steps
from .learning.evaluate import N_TEST, Accuracy, evaluate, predict
from .experiments.experiment import RunResult, run
from .learning.trainer import TrainSpec, train
from . import analysis, core, experiments, factual, fast, learning, plotting, theory  # noqa: F401
from .analysis import lowerbound
from .experiments import sweep

__all__ = [
    "TaskConfig", "default_device", "derive_seed", "generator", "get_draw", "numpy_generator", "seed_everything", "set_draw",
    "torch_generator", "Problem",
    "make_problem", "Batch", "keys_values", "sample_batch", "Params", "activation", "cross_entropy",
    "features", "forward", "loss", "zero_params", "Gradients", "autograd_gradients", "gradients",
    "StepSizes", "ThreeSteps", "three_steps", "N_TEST", "Accuracy", "evaluate", "predict", "RunResult", "run", "TrainSpec", "train",
    "analysis", "core", "experiments", "factual", "fast", "learning", "lowerbound", "plotting", "sweep", "theory",
]
__version__ = "0.2.0"
