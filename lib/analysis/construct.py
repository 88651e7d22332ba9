"""A transformer built by hand, and the best achievable accuracy (chapter 1).

The construction writes the two matrices down instead of learning them:
  W_KQ = beta z_trig z_EOS^T / (|z_trig|^2 |z_EOS|^2)   so s_t = beta (h_t . z_trig) / |z_trig|^2,
                                                         = beta + noise at the trigger, noise elsewhere;
  W_V  = sum_i u_{Pi i} e_i^T                             a Hebbian memory of the permutation.
With exactly orthogonal embeddings every cross term vanishes and the model is exact for large beta;
with random embeddings of dimension d < V each cross term is of order 1/sqrt(d) and errors appear.
`hand_built_accuracies` measures the construction over independent problems, and
`trigger_bias_measured` the bias the trigger adds to every label when it passes through W_V.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..core.config import TaskConfig, check_bool, check_float, check_int
from ..core.embeddings import Problem, draw_vectors, make_problem
from ..core.models import Params
from ..core.seed import generator
from ..core.task import Batch, check_ids
from ..learning.evaluate import evaluate


def hand_built(problem: Problem, beta: float = 50.0) -> Params:
    """The attention-only model that selects the trigger and recalls through a Hebbian W_V."""
    beta = check_float("beta", beta, 0.0, 1e12)
    if problem.cfg.model != "attn":
        raise ValueError("model must be 'attn' for the hand-built construction")
    z, q = problem.z_trig, problem.z_eos
    if float(z.norm()) == 0.0:
        raise ValueError("tau must be > 0 for the hand-built construction (the trigger is zero)")
    W_KQ = beta * torch.outer(z, q) / (z.dot(z) * q.dot(q))
    W_V = problem.U_perm.T @ problem.E[: problem.cfg.V]                # sum_i u_{Pi i} e_i^T
    return Params(W_V, W_KQ)


def hand_built_predicted_accuracy(batch: Batch, V: int, beta: float) -> float:
    """Accuracy of `hand_built(problem, beta)` predicted by chapter 1's proposition for exactly
    orthogonal embeddings: a sample is right iff e^beta + c_{x_l} > max_{j != x_l} c_j, with c the
    token counts at the L - 1 uninformative positions (an equality is a tie, counted as wrong)."""
    V = check_int("V", V, 1)
    check_ids(batch, V, V)
    beta = check_float("beta", beta, 0.0, 1e12)
    tok = batch.tokens.to(torch.long, copy=True).scatter_(1, batch.pos[:, None], -1)      # drop the informative position (a copy)
    counts = torch.zeros(batch.N, V + 1, dtype=torch.float64, device=tok.device)
    counts.scatter_add_(1, tok + 1, torch.ones_like(tok, dtype=torch.float64))
    counts = counts[:, 1:]                                             # (N, V) noise counts
    own = counts.gather(1, batch.informative[:, None])[:, 0]
    rival = counts.scatter(1, batch.informative[:, None], -1.0).max(1).values
    return float((math.exp(beta) + own > rival).double().mean())


def bayes_accuracy_unmarked(batch: Batch, V: int) -> float:
    """Accuracy of the best predictor that knows Pi* but cannot see the trigger.

    Without the marker the informative position is uniform among the L positions, so the posterior
    of the label puts mass c_j / L on Pi*(j) for each token j of the sequence; the Bayes rule picks a
    most frequent token and is right with probability (max_j c_j) / L. With the trigger visible the
    label is a function of the input and the best accuracy is 1. Token ids must lie in [0, V).
    """
    V = check_int("V", V, 1)
    check_ids(batch, V, V)
    tok = batch.tokens.long()
    counts = torch.zeros(tok.shape[0], V, dtype=torch.long, device=tok.device)
    counts.scatter_add_(1, tok, torch.ones_like(tok))
    return float((counts.max(1).values.double() / tok.shape[1]).mean())


def hand_built_accuracies(V: int, d: int, L: int, beta: float, problems: int, trigger_in_value: bool = True,
                          n_test: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Test and attention accuracy of `hand_built(problem, beta)` with random embeddings, on
    `problems` independent problems: problem s = 0, 1, ... is drawn with seed s and tested on
    `n_test` fresh samples of seed s. Returns (acc, att_acc), two arrays with one value per problem."""
    problems = check_int("problems", problems, 1)
    n_test = check_int("n_test", n_test, 1)
    trigger_in_value = check_bool("trigger_in_value", trigger_in_value)
    runs = []
    for s in range(problems):
        p = make_problem(TaskConfig(V=V, d=d, L=L, trigger_in_value=trigger_in_value), seed=s)
        runs.append(evaluate(p, hand_built(p, beta), n_test=n_test, seed=s))
    return np.array([r.acc for r in runs]), np.array([r.att_acc for r in runs])


def trigger_bias_measured(V: int, d: int, problems: int = 2000, seed: int = 0) -> tuple[float, float]:
    """The trigger's per-label bias b_k = u_k^T W_V z_trig in the hand-built memory
    W_V = sum_j u_{Pi j} e_j^T (Gaussian embeddings; Pi the identity, as any Pi only relabels j),
    measured: the mean over `problems` independent problems, drawn at once, of (1/V) sum_k b_k^2, and
    its standard error. `lib.theory.trigger_bias_var(V, d)` predicts the mean."""
    V, d = check_int("V", V, 1), check_int("d", d, 1)
    problems = check_int("problems", problems, 2)
    g = generator(seed, "check-bias", V, d)
    E, U = (draw_vectors(problems * V, d, "gaussian", g).reshape(problems, V, d) for _ in range(2))
    z = draw_vectors(problems, d, "gaussian", g)                       # (P, d): one trigger per problem
    Wz = (U * (E @ z[:, :, None])).sum(1)                              # (P, d): W_V z_trig
    per = (U @ Wz[:, :, None])[:, :, 0].pow(2).mean(1)                 # (P,): (1/V) sum_k b_k^2
    return float(per.mean()), float(per.std()) / problems ** 0.5
