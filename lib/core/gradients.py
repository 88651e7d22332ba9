"""Closed-form gradients of the empirical cross-entropy (chapter 3), on the direct route.

With p_n = softmax(xi_n) and g_n = U^T (p_n - e_{y_n}) (U stores the u_k as rows; with the u_k as columns this reads U (p_n - e_{y_n})):

  grad_{W_V}  = (1/N) sum_n g_n phi(o_n)^T
  grad_{W_KQ} = (1/N) sum_n sum_t a_{n,t} [r_n^T (v_{n,t} - o_n)] h_{n,t} q^T,
                r_n = J_n^T W_V^T g_n,   J_n = d phi / d o = I (attn) or diag(sigma'(F o_n)) F / sqrt(m)

(With the trigger in the value path v_t = h_t, and v_t - o_n reads h_t - o_n.)
At W_V = 0 the logits vanish, p_n is uniform, g_n = u-bar - u_{y_n} and r_n = 0, so grad_{W_KQ} = 0:
the value matrix must move first. `autograd_gradients` is the independent reference (torch
autograd through `lib.core.models.loss`) that the tests and chapter 3 compare the closed forms with;
`autograd_discrepancy` makes that comparison on one configuration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .config import TaskConfig, check_int
from .embeddings import Problem, make_problem
from .models import Params, check_params, cross_entropy, feature_jacobian_T, forward
from .seed import torch_generator
from .task import Batch, check_batch, sample_batch


@dataclass
class Gradients:
    loss: float
    W_V: torch.Tensor    # (d, width)
    W_KQ: torch.Tensor   # (d, d): always k q^T
    correct: int | None = None   # training samples predicted right at these params (count route)


def output_error(problem: Problem, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """g_n = U^T (softmax(xi_n) - e_{y_n}) for every sample: (N, d)."""
    err = torch.softmax(logits, -1)
    err[torch.arange(len(labels), device=labels.device), labels] -= 1.0
    return err @ problem.U


def gradients(problem: Problem, params: Params, batch: Batch) -> Gradients:
    """Loss and closed-form gradients of both trainable matrices (materialises (N, L, d))."""
    check_params(problem, params)
    check_batch(problem, batch)
    return direct_gradients(problem, params, batch)


def direct_gradients(problem: Problem, params: Params, batch: Batch, need_V: bool = True,
                     need_W: bool = True, uniform_error: bool = False) -> Gradients:
    """The closed forms on materialised tensors. `uniform_error=True` freezes the output error at
    its W_V = 0 value g_n = u_bar - u_{y_n} (the eta -> 0 linearisation of the limit mode); the
    loss is then that of the uniform prediction, log V. (`need_V`, `need_W` are accepted for the
    schedule's uniform interface; the reference route always computes both.)"""
    f = forward(problem, params, batch)
    N = batch.N
    if uniform_error:
        g = problem.u_bar - problem.U[batch.labels]                    # (N, d)
        loss = math.log(problem.cfg.V)
    else:
        g = output_error(problem, f.logits, batch.labels)              # (N, d)
        loss = float(cross_entropy(f.logits, batch.labels))
    grad_V = g.T @ f.phi / N                                           # (d, width)
    if params.hard:   # argmax attention is piecewise constant in W_KQ
        grad_W = torch.zeros_like(params.W_KQ)
    else:
        r = feature_jacobian_T(problem, f.o, g @ params.W_V)           # (N, d)
        ds = f.attn * torch.einsum("nd,ntd->nt", r, f.v - f.o[:, None])  # (N, n_keys): dL/ds
        k = torch.einsum("nt,ntd->d", ds, f.h) / N                     # (d,)
        grad_W = torch.outer(k, problem.z_eos)                         # (d, d) = k q^T
    return Gradients(loss, grad_V, grad_W)


def autograd_gradients(problem: Problem, params: Params, batch: Batch) -> Gradients:
    """The same gradients by torch autograd through the direct forward pass (the reference)."""
    check_params(problem, params)
    check_batch(problem, batch)
    W_V = params.W_V.detach().clone().requires_grad_(True)
    W_KQ = params.W_KQ.detach().clone().requires_grad_(True)
    loss = cross_entropy(forward(problem, Params(W_V, W_KQ, params.hard), batch).logits, batch.labels)
    loss.backward()
    return Gradients(float(loss.detach()), W_V.grad, W_KQ.grad)


def autograd_discrepancy(cfg: TaskConfig, seed: int, N: int = 25) -> tuple[float, float]:
    """How far the closed forms are from autograd on one configuration: the relative differences
    |closed - autograd| / |autograd| of grad_{W_V} and of grad_{W_KQ} (0.0 where the autograd
    attention gradient is exactly zero), on the problem of `cfg` drawn with `seed`, N training
    samples of `seed`, and standard normal weights from `lib.torch_generator(seed)`."""
    if not isinstance(cfg, TaskConfig) or cfg.dtype != "float64":
        raise ValueError(f"cfg must be a float64 TaskConfig, got {cfg!r}")
    N = check_int("N", N, 1)
    problem = make_problem(cfg, seed=seed)
    batch = sample_batch(problem, N=N, seed=seed)
    gen = torch_generator(seed)
    params = Params(torch.randn(cfg.d, cfg.width, generator=gen, dtype=torch.float64),
                    torch.randn(cfg.d, cfg.d, generator=gen, dtype=torch.float64))
    closed, ref = gradients(problem, params, batch), autograd_gradients(problem, params, batch)
    rel = lambda a, b: float((a - b).norm() / max(float(b.norm()), 1e-300))
    return rel(closed.W_V, ref.W_V), (rel(closed.W_KQ, ref.W_KQ) if float(ref.W_KQ.norm()) > 0 else 0.0)
