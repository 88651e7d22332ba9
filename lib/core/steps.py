"""What the three early gradient steps of [Vural et al.] are (chapters 4-6): step sizes and results.

From W_V = 0, W_KQ = 0 on one fixed batch (chapter 3), the schedule is

  1.  V1 = -eta     grad_{W_V}  L(0, 0)    = eta G1,   G1 = (1/N) sum_n (u_{y_n} - u_bar) phi(obar_n)^T
  2.  W1 = -gamma_W grad_{W_KQ} L(V1, 0)   ~ gamma_W eta k q^T
  3.  V2 = V1 - gamma_V grad_{W_V} L(V1, W1) = V1 + gamma_V G3

finite mode  explicit step sizes and exact gradients; G1 and G3 are the negative W_V-gradients of
             steps 1 and 3, k = W1 q / |q|^2. `gamma_W=None` normalises the W step so that
             |W1 q| = attn_scale (the attention logits then have a fixed scale whatever V, L).
limit mode   eta -> 0, gamma -> infinity: k is the eta -> 0 limit of -grad_{W_KQ} L(eta G1, 0) q / (eta |q|^2)
             (the output error frozen at its uniform value u_bar - u_y), attention is hard
             (argmax_t h_t^T k), and G3 = (1/N) sum_n (u_{y_n} - u_bar) phi(o_n)^T. Parameter-free:
             V1 = G1, W1 = k q^T, V2 = G3, and the returned params are (G3, k q^T, hard=True).

This module only defines the step sizes and the result; the routes that compute them
(`lib.gradients`: direct, `lib.fast.counts`: count tables) and the schedule (`lib.learning.schedule`) sit above it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import check_float
from .models import Params

MODES = ("limit", "finite")
ROUTES = ("counts", "direct")


@dataclass(frozen=True)
class StepSizes:
    """Step sizes of the finite mode (ignored in limit mode). Defaults sit in [Vural et al.]'s
    regime "eta ~ 0, gamma >> 0" while staying a genuine finite step.

    attn_scale = 20 (the book's choice, measured): with gamma_W normalised so that |W1 q| = 20 the
    attention logits separate the trigger from the other positions by a gap of order 10-20, so the
    softmax is sharp but not saturated (the MLP at V = 64, d = 32, L = 8 puts 0.998 of its weight
    on the informative position; gamma_W is about 1.4e8 at V = d = 256, L = 16). The former 1e5 (gamma_W ~ 7e11) made every off-trigger weight underflow:
    the limit mode plus O(eta). At the tested configurations (attention-only V = 256, d = 64 and
    256, L = 16; MLP V = 64, d = 32, L = 8) finite and limit mode predict the same label on >= 99.99 %
    of test samples; attn_scale = 10 drops below 99.9 % at V = 256, d = 64.
    """

    eta: float = 0.01              # step 1 (value matrix) at tau <= 1: small, so softmax(U V1 o) stays ~ uniform
    gamma_W: float | None = None   # step 2 (key-query): None = normalised by attn_scale
    gamma_V: float = 1e3           # step 3 (value matrix again): large
    attn_scale: float = 20.0       # |W1 q| when gamma_W is None: see the class docstring

    def eta_for(self, tau: float) -> float:
        """The step-1 size used at trigger scale tau: eta / max(1, tau)^2. With the trigger in the
        value path the logits U V1 o grow like eta tau^2 (G1 and o each carry a tau z term), so an
        unscaled eta = 0.01 saturates the softmax from tau ~ 100 on (at tau = 1000 attention
        accuracy 0 where the limit mode has 1); scaled, the finite mode stays the limit plus O(eta)."""
        return self.eta / max(1.0, float(tau)) ** 2

    def __post_init__(self):
        check_float("eta", self.eta, 0.0, 1e12, strict_min=True)
        check_float("gamma_V", self.gamma_V, 0.0, 1e12)
        check_float("attn_scale", self.attn_scale, 0.0, 1e12, strict_min=True)
        if self.gamma_W is not None:
            check_float("gamma_W", self.gamma_W, 0.0, 1e12)


@dataclass
class ThreeSteps:
    """Output of the three steps. Finite mode: V1, W1, V2 are the iterates. Limit mode: V1 = G1,
    W1 = k q^T, V2 = G3 (the directions), so code written for either mode reads the same fields."""

    mode: str
    V1: torch.Tensor       # (d, width)
    W1: torch.Tensor       # (d, d)
    V2: torch.Tensor       # (d, width)
    gamma_W: float         # the W step size used (inf in limit mode)
    params: Params         # the trained model: (V2, W1), hard attention in limit mode
    k: torch.Tensor        # (d,): attention direction W1 q / |q|^2 (scores are h_t^T k |q|^2)
    G1: torch.Tensor | None = None   # (d, width): -grad_{W_V} L(0, 0)
    G3: torch.Tensor | None = None   # (d, width): -grad_{W_V} at step 3 (limit: at uniform output error)


def direction(W1: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """k = W1 q / |q|^2: the key direction that W1 = k q^T attends along."""
    return W1 @ q / q.dot(q)


def normalised_gamma_W(grad_W: torch.Tensor, q: torch.Tensor, attn_scale: float) -> float:
    """The gamma_W for which |W1 q| = attn_scale, where W1 = -gamma_W grad_W (0 if grad_W = 0)."""
    norm = float((grad_W @ q).norm())
    return attn_scale / norm if norm > 0 else 0.0
