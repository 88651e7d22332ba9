"""Chapter 3's measurements of the two models at chosen weights (the models themselves are in
lib.core).

`linear_coefficient`: the linear Hermite coefficient c_1 = E[sigma(p) p / s] of the MLP's activation
at the scale s of its actual pre-activations p, per sample, for either input map (`mlp_input`) and
either attention (uniform, or focused on the marked token).
`attention_gradient_sweep`: the attention gradient grad_{W_KQ} after a first step W_V = eta G_1 from
zero, over step sizes eta: its norm per unit of eta, the mean largest output probability, and on
more problems how the gradient's size and direction change from the smallest eta to the largest.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.config import TaskConfig, check_choice, check_int
from ..core.embeddings import make_problem
from ..core.gradients import gradients
from ..core.models import Params, features, forward, zero_params
from ..core.task import keys_values, sample_batch


def linear_coefficient(mlp_input: str, attention: str, V: int = 64, d: int = 32, L: int = 8, m: int = 4096,
                       N: int = 256, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The MLP's linear Hermite coefficient c_1 = E[sigma(p) p / s] over its m pre-activations p of
    each of N samples, s their scale (|o| for the raw input, 1 for the unit input), with the
    attention output o uniform over the positions or on the marked token (`attention`); the model
    is the float64 CPU MLP of (V, d, L, m) drawn with `seed`. Returns per sample: the scale s, c_1
    and its standard error over the m units."""
    check_choice("attention", attention, ("uniform", "focused"))
    cfg = TaskConfig(V=V, d=d, L=L, model="mlp", m=m, mlp_input=mlp_input, dtype="float64", device="cpu")
    prob = make_problem(cfg, seed)
    batch = sample_batch(prob, check_int("N", N, 1), seed)
    _, v = keys_values(prob, batch)
    o = v.mean(1) if attention == "uniform" else v[torch.arange(batch.N), batch.pos]
    scale = o.norm(dim=1)                                           # s = |o| of each sample
    pre = o @ prob.F.T / (scale[:, None] if mlp_input == "unit" else 1.0)
    sigma_pre = features(prob, o) * cfg.m ** 0.5                    # sigma(pre), from lib's feature map
    s_eff = scale if mlp_input == "raw" else torch.ones_like(scale)
    prod = sigma_pre * pre / s_eff[:, None]                         # (samples, m): one estimate of c_1 per unit
    return s_eff.numpy(), prod.mean(1).numpy(), (prod.std(1) / cfg.m ** 0.5).numpy()


def _first_step(model: str, seed: int, V: int, d: int, L: int, m: int, N: int):
    cfg = TaskConfig(V=V, d=d, L=L, model=model, m=m if model == "mlp" else None, mlp_input="raw",
                     dtype="float64", device="cpu")
    prob, p0 = make_problem(cfg, seed=seed), zero_params(cfg)
    bat = sample_batch(prob, N=N, seed=seed)
    return prob, bat, p0, -gradients(prob, p0, bat).W_V             # ..., G1


def attention_gradient_sweep(model: str, etas, problems: int, V: int = 64, d: int = 32, L: int = 8, m: int = 256,
                             N: int = 1024) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The attention gradient at W_V = eta G_1, W_KQ = 0 (G_1 the first gradient step from zero on N
    samples; raw MLP input; float64), for every eta of `etas` on the problem of seed 0, and at the
    smallest and largest eta on the problems of seeds 0, ..., problems - 1. Returns
    (|grad_{W_KQ}| / eta per eta, the mean max_k p_{n,k} per eta, per problem the factor |grad| / eta
    at the largest eta over the one at the smallest, per problem the cosine between those two gradients)."""
    check_choice("model", model, ("attn", "mlp"))
    problems = check_int("problems", problems, 1)
    etas = np.asarray(etas, float)
    if etas.ndim != 1 or etas.size < 2 or not (etas > 0).all():
        raise ValueError(f"etas must be a 1-d array of at least two positive step sizes, got {etas!r}")
    prob, bat, p0, G1 = _first_step(model, 0, V, d, L, m, N)        # the figure: one problem, every eta
    params = [Params(eta * G1, p0.W_KQ) for eta in etas]
    grads = [gradients(prob, par, bat).W_KQ for par in params]
    grad_per_eta = np.array([float(g.norm()) / eta for g, eta in zip(grads, etas)])
    p_max = np.array([float(torch.softmax(forward(prob, par, bat).logits, 1).max(1).values.mean()) for par in params])
    ends = [(grads[0], grads[-1])]
    for s in range(1, problems):                                     # more problems: the two ends of the range only
        prob_s, bat_s, p0_s, G1_s = _first_step(model, s, V, d, L, m, N)
        ends.append(tuple(gradients(prob_s, Params(eta * G1_s, p0_s.W_KQ), bat_s).W_KQ for eta in (etas[0], etas[-1])))
    drop = np.array([float(hi.norm() / lo.norm()) * etas[0] / etas[-1] for lo, hi in ends])
    direction = np.array([float(torch.nn.functional.cosine_similarity(lo.flatten(), hi.flatten(), dim=0)) for lo, hi in ends])
    return grad_per_eta, p_max, drop, direction
