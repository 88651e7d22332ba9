"""Closed-form gradients of the empirical cross-entropy (chapter 3), on the direct route.

With p_n = softmax(xi_n) and g_n = U^T (p_n - e_{y_n}) (U stores the u_k as rows; with the u_k as columns this reads U (p_n - e_{y_n})):

  grad_{W_V}  = (1/N) sum_n g_n phi(o_n)^T
  grad_{W_KQ} = (1/N) sum_n sum_t a_{n,t} [r_n^T (v_{n,t} - o_n)] h_{n,t} q^T,
                r_n = J_n^T W_V^T g_n,   J_n = d phi / d o = I (attn) or diag(sigma'(F o_n)) F / sqrt(m)

(With the trigger in the value path v_t = h_t, and v_t - o_n reads h_t - o_n.)
At W_V = 0 the logits vanish, p_n is uniform, g_n = u-bar - u_{y_n} and r_n = 0, so grad_{W_KQ} = 0:
the value matrix must move first. `autograd_gradients` is the independent reference (torch
autograd through `lib.core.models.loss`) that the tests and chapter 3 compare the closed forms with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .embeddings import Problem
from .models import Params, check_params, cross_entropy, feature_jacobian_T, forward
from .task import Batch, check_batch


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
