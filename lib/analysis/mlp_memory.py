"""The one-step MLP memory of chapter 8, measured one problem at a time: how far its random
features are from their kernel, and its capacity.

  rf_kernel_gap   rms over token pairs j != x of kappa_jx - K(rho_jx): random features against the kernel
  capacity        V* of one problem: the largest V whose memory recalls a fraction >= threshold of its tokens
"""

from __future__ import annotations

import math

import torch

from ..core.config import TaskConfig, check_float, check_int
from ..core.embeddings import make_problem
from ..experiments.memory_capacity import population_recall
from ..core.models import features
from ..core.search import threshold_search
from ..theory import mlp_kernel


def rf_kernel_gap(cfg: TaskConfig, seed: int) -> float:
    """The rms over the pairs j != x of the V content tokens of problem `seed` of `cfg` (an MLP) of
    kappa_jx - K(rho_jx): kappa_jx = phi(e_j) . phi(e_x) with the problem's m random features, K the
    activation's kernel (`lib.theory.mlp_kernel`) at the cosine rho_jx of the two embeddings."""
    if cfg.model != "mlp":
        raise ValueError(f"cfg must describe an MLP (model='mlp'), got model={cfg.model!r}")
    seed = check_int("seed", seed, 0)
    V = cfg.V
    prob = make_problem(cfg, seed=seed)
    phi = features(prob, prob.E[:V])                 # (V, m): phi(e_j)
    E_hat = prob.E[:V] / prob.E[:V].norm(dim=1, keepdim=True)
    kernel = torch.as_tensor(mlp_kernel(cfg.activation, (E_hat @ E_hat.T).clamp(-1, 1).numpy()))
    off = ~torch.eye(V, dtype=torch.bool)            # pairs j != x
    return float((phi @ phi.T - kernel)[off].pow(2).mean().sqrt())


def capacity(cfg: TaskConfig, seed: int, start: int, threshold: float, resolution: float) -> float:
    """V* of one problem: the largest V whose memory (exact counts, oracle attention) recalls a
    fraction >= `threshold` of its tokens, bracketed by doubling from `start` and bisection to
    `resolution` (`lib.core.search`, as `lib.experiments.memory_capacity.population_capacity` does for a mean over
    problems); the bracket's geometric midpoint. Starting at a V where the threshold allows one wrong
    token (not at V = 2) keeps a single unlucky token at a small V from ending the doubling early."""
    start = check_int("start", start, 1)
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    resolution = check_float("resolution", resolution, 0.0, strict_min=True)
    too_many = lambda V_: V_ > 1 and population_recall(cfg.with_(V=V_), seed) < threshold   # one token: recalled
    br = threshold_search(too_many, start, 2 ** 14, resolution)
    return math.sqrt((br.last_false or 1) * (br.first_true or 2 * br.last_false))
