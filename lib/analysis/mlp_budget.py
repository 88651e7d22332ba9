"""The one-step MLP memory's logits split into the terms of chapter 8's error budget, measured.

With oracle attention the limit-mode memory is G3 = sum_j f_j (u_{Pi j} - u_bar) phi(v_j)^T
(`lib.experiments.memory_capacity.population_recall` is its N -> infinity limit), f_j = n_j / N the fraction of samples
whose informative token is j. Since u_bar is the mean of the V labels and sum_j f_j = 1, the logit of
label k for input x is exactly

    xi_k(x) = (1/V) sum_j (u_k . u_{Pi j}) (nu_j kappa_jx - c_x),    nu_j = V f_j,
    c_x = sum_i f_i kappa_ix = mean_{j != x} nu_j kappa_jx + O(1/V),

and `measure_terms` splits the coefficient nu_j kappa_jx - c_x into the budget's pieces (each piece
taken relative to its mean over j != x, as c_x does; the O(1/V) difference is the residual "rest"), with kappa_jx = phi(v_j) . phi(v_x) (random features),
K_jx = K(rho_jx) its kernel (m -> infinity) and b_0 the kernel's constant:

    own pair (j = x)   nu_x kappa_xx - b_0                 -> signal (label y) and readout (k != y)
    kernel             K_jx - b_0                  j != x
    rf                 kappa_jx - K_jx             j != x
    finite             (nu_j - 1)(kappa_jx - b_0)  j != x
    mean_bias          (nu_j - 1) b_0              j != x

Each term alone is a (V labels, V inputs) matrix of logits; its second moment over the wrong labels,
in units of the mean signal (S / V)^2, is what `lib.theory.mlp_term_moments` predicts. The counts are
multinomial (N samples over V tokens); N = math.inf gives exact counts. Used by chapter 8 only.
"""
from __future__ import annotations

import math

import torch

from ..core.config import TaskConfig, check_int
from ..core.models import model_logits
from ..core.seed import torch_generator

TERMS = ("readout", "kernel", "rf", "finite", "mean_bias")


def measure_terms(cfg: TaskConfig, N: float, seed: int = 0) -> dict:
    """Second moments of each budget term of the wrong labels' logits (units (S / V)^2, averaged
    over the V inputs and their V - 1 wrong labels), the mean signal (units S / V), and "rest": the
    relative size of what the five terms and the signal leave out of the exact logits."""
    from .. import theory as T
    from ..core.embeddings import make_problem

    if not isinstance(cfg, TaskConfig) or cfg.model != "mlp":
        raise ValueError("cfg must be a TaskConfig with model='mlp'")
    if not (isinstance(N, (int, float)) and not isinstance(N, bool) and N > 0):
        raise ValueError(f"N must be a positive number (math.inf: exact counts), got {N!r}")
    seed = check_int("seed", seed, 0)
    problem = make_problem(cfg, seed)
    V = cfg.V
    values = problem.E[:V] + (problem.z_trig if cfg.trigger_in_value else 0.0)     # (V, d)
    phi = problem.features.phi(values, problem.F)                                    # (V, m)
    kappa = phi @ phi.T                                                              # (V, V): kappa_jx
    v_hat = values / values.norm(dim=1, keepdim=True)
    rho = (v_hat @ v_hat.T).clamp(-1, 1)
    K = torch.as_tensor(T.mlp_kernel(cfg.activation, rho.numpy()), dtype=kappa.dtype)
    p = T.mlp_signal_parts(cfg.activation, cfg.tau, cfg.trigger_in_value)
    b0, S = p["b0"], p["S"]
    if math.isinf(N):
        nu = torch.ones(V, dtype=kappa.dtype)
    else:
        g = torch_generator(10_000 + seed)
        draws = torch.randint(0, V, (int(N),), generator=g)
        nu = torch.bincount(draws, minlength=V).to(kappa.dtype) * V / int(N)        # (V,): n_j / lambda
    eye = torch.eye(V, dtype=torch.bool)
    off = (~eye).to(kappa.dtype)
    dnu = (nu - 1)[:, None]                                                          # (V, 1): over j
    coef = {"kernel": (K - b0) * off, "rf": (kappa - K) * off,
            "finite": dnu * (kappa - b0) * off, "mean_bias": dnu * b0 * off}
    # the centring: each input's coefficients enter relative to their mean over j (c_x), so a part
    # common to all j != x (a row offset of x's kernel values) cancels; subtract it term by term
    coef = {name: (c - c.sum(0, keepdim=True) / (V - 1)) * off for name, c in coef.items()}
    coef["own"] = torch.diag(nu * kappa.diagonal() - b0)
    A = problem.U @ problem.U_perm.T                                                 # (V, V): u_k . u_{Pi j}
    unit = S / V
    logits = {name: A @ c / V / unit for name, c in coef.items()}                    # (labels k, inputs x)
    labels = problem.perm[:V]
    wrong = torch.ones(V, V, dtype=torch.bool)
    wrong[labels, torch.arange(V)] = False
    out = {name: float(logits[name][wrong].pow(2).mean()) for name in ("kernel", "rf", "finite", "mean_bias")}
    out["readout"] = float(logits["own"][wrong].pow(2).mean())
    out["signal"] = float(logits["own"][labels, torch.arange(V)].mean())
    f = nu / V
    G = (problem.U_perm - problem.u_bar).T @ (f[:, None] * phi)                      # (d, m): G3
    exact = model_logits(problem, G, phi).T / unit                                   # (V, V): the model's logits
    total = sum(logits.values())
    out["rest"] = float((exact - total)[wrong].pow(2).mean() / sum(out[t] for t in TERMS))
    return out


def measured_term_moments(cfg: TaskConfig, N: float, seeds: int = 2) -> dict:
    """`measure_terms` averaged over problems 0 .. seeds - 1."""
    runs = [measure_terms(cfg, N, s) for s in range(check_int("seeds", seeds, 1))]
    return {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}
