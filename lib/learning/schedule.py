"""The three steps as a three-entry schedule of one generic gradient step (chapters 4-6).

`three_steps(problem, batch, mode, step_sizes=..., route=...)` runs the schedule of `lib.core.steps`:

  finite  V1 = -eta grad_V(0, 0);  W1 = -gamma_W grad_W(V1, 0);  V2 = V1 - gamma_V grad_V(V1, W1)
  limit   G1 = -grad_V(0, 0);  k q^T = -grad_W(G1, 0) at the output error u_bar - u_y (the eta -> 0
          limit, divided by eta);  G3 = -grad_V(0, k q^T) with hard attention

on one of two routes that compute the same numbers: "counts" (default; `lib.fast.counts`, token ids and
count tables, never an (N, L, d) tensor; the attention-only limit mode takes the dedicated
count-table fast paths `lib.fast.limit.limit_attn` and `finite_attn`) and "direct" (`lib.gradients`, the readable
reference on materialised tensors). Tests prove that all of them agree.
"""

from __future__ import annotations

import math

import torch

from ..core.config import check_choice
from ..fast.counts import _count_gradients
from ..fast.limit import _limit_attn, finite_attn
from ..core.embeddings import Problem
from ..core.gradients import direct_gradients
from ..core.models import Params, zero_params
from ..core.steps import MODES, ROUTES, StepSizes, ThreeSteps, direction, normalised_gamma_W
from ..core.task import Batch, check_batch


def three_steps(problem: Problem, batch: Batch, mode: str = "limit", *,
                step_sizes: StepSizes = StepSizes(), route: str = "counts") -> ThreeSteps:
    """Run the three steps on one fixed batch. See the module docstring for modes and routes."""
    check_choice("mode", mode, MODES)
    check_choice("route", route, ROUTES)
    if not isinstance(step_sizes, StepSizes):
        raise ValueError(f"step_sizes must be a StepSizes, got {type(step_sizes).__name__}")
    check_batch(problem, batch)
    if route == "counts" and problem.cfg.model == "attn" and mode == "limit":
        G1, k, G3 = _limit_attn(problem, batch)                     # the batch was checked above
        out = _limit_result(problem, G1, k, G3)
    elif route == "counts" and problem.cfg.model == "attn":
        s = step_sizes
        eta = s.eta_for(problem.cfg.tau)
        G1, W1, gamma_W, G3 = finite_attn(problem, batch, eta, s.gamma_W, s.attn_scale)
        V1 = eta * G1
        V2 = V1 + s.gamma_V * G3
        out = ThreeSteps("finite", V1, W1, V2, gamma_W, Params(V2, W1), direction(W1, problem.z_eos),
                         G1=G1, G3=G3)
    else:
        step = _count_gradients if route == "counts" else direct_gradients
        out = (_finite if mode == "finite" else _limit)(problem, batch, step, step_sizes)
    if not all(bool(torch.isfinite(t).all()) for t in (out.V1, out.W1, out.V2)):
        cfg = problem.cfg
        raise ValueError(
            f"dtype {cfg.dtype} overflowed in the three steps (non-finite V1, W1 or V2) with tau={cfg.tau}, "
            f"model={cfg.model}, activation={cfg.activation}: use dtype='float64', a smaller tau or smaller "
            "step sizes (polynomial activations grow like a power of tau)")
    return out


def _finite(problem: Problem, batch: Batch, step, s: StepSizes) -> ThreeSteps:
    q = problem.z_eos
    p0 = zero_params(problem.cfg)
    G1 = -step(problem, p0, batch, need_W=False).W_V                                  # step 1
    V1 = s.eta_for(problem.cfg.tau) * G1
    grad_W = step(problem, Params(V1, p0.W_KQ), batch, need_V=False).W_KQ            # step 2
    gamma_W = s.gamma_W if s.gamma_W is not None else normalised_gamma_W(grad_W, q, s.attn_scale)
    W1 = -gamma_W * grad_W
    G3 = -step(problem, Params(V1, W1), batch, need_W=False).W_V                      # step 3
    V2 = V1 + s.gamma_V * G3
    return ThreeSteps("finite", V1, W1, V2, gamma_W, Params(V2, W1), direction(W1, q), G1=G1, G3=G3)


def _limit(problem: Problem, batch: Batch, step, s: StepSizes) -> ThreeSteps:
    q = problem.z_eos
    p0 = zero_params(problem.cfg)
    G1 = -step(problem, p0, batch, need_W=False, uniform_error=True).W_V
    k = -direction(step(problem, Params(G1, p0.W_KQ), batch, need_V=False, uniform_error=True).W_KQ, q)
    hard = Params(p0.W_V, torch.outer(k, q), hard=True)
    G3 = -step(problem, hard, batch, need_W=False, uniform_error=True).W_V
    return _limit_result(problem, G1, k, G3)


def _limit_result(problem: Problem, G1: torch.Tensor, k: torch.Tensor, G3: torch.Tensor) -> ThreeSteps:
    W1 = torch.outer(k, problem.z_eos)
    return ThreeSteps("limit", G1, W1, G3, math.inf, Params(G3, W1, hard=True), k, G1=G1, G3=G3)
