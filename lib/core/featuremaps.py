"""The models as feature maps: what the value matrix reads (chapters 3 and 8).

Both models of the book (chapter 3) compute logits xi = U W_V phi(o) from the attention output o; they
differ only in the feature map phi. A model is therefore one registered `FeatureMap` class holding

  width      the number of columns of W_V (d for attention-only, m for the MLP);
  phi(o)     the features, o of shape (..., d) -> (..., width);
  vjp(o, r)  the vector-Jacobian product J(o)^T r, r of shape (..., width) -> (..., d);
  frozen     how many frozen parameters it carries (F for the MLP),

looked up by the name in `TaskConfig.model`. Adding a variant is one small class with
`@register("name")`; the gradients (both routes), the trainer, the evaluation and the parameter
counts all go through this interface.

The MLP reads phi(o) = sigma(F n(o)) / sqrt(m) with F (m x d) frozen, rows i.i.d. N(0, I), and an
input normalisation n chosen by `TaskConfig.mlp_input`:
  "unit"  n(o) = o / |o|: every pre-activation (F n(o))_i is exactly N(0, 1) over F whatever the
          scale of o (the book's default: He_k(s x) mixes lower Hermite degrees when s != 1, and
          |o| differs by ~10x between uniform and focused attention); its Jacobian is
          (I - o_hat o_hat^T) / |o|;
  "raw"   n(o) = o.
The activations are the Hermite polynomials He_k / sqrt(k!) (E sigma(g) = 0, E sigma(g)^2 = 1 for
g ~ N(0, 1)), ReLU, and ReLU minus its Gaussian mean 1/sqrt(2 pi) (E sigma(g) = 0).
This module imports nothing from `lib`: `lib.core.config` validates names against it.
"""

from __future__ import annotations

import math

import torch

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

# name -> (sigma, sigma'). Hermite polynomials normalised so that E sigma(g)^2 = 1 for g ~ N(0, 1).
ACTIVATIONS = {
    "he2": (lambda x: (x * x - 1) / math.sqrt(2), lambda x: 2 * x / math.sqrt(2)),
    "he3": (lambda x: (x ** 3 - 3 * x) / math.sqrt(6), lambda x: (3 * x * x - 3) / math.sqrt(6)),
    "he4": (lambda x: (x ** 4 - 6 * x * x + 3) / math.sqrt(24),
            lambda x: (4 * x ** 3 - 12 * x) / math.sqrt(24)),
    "relu": (torch.relu, lambda x: (x > 0).to(x.dtype)),
    "centred_relu": (lambda x: torch.relu(x) - _INV_SQRT_2PI, lambda x: (x > 0).to(x.dtype)),
}
# the Gaussian moments each activation is built to have: E sigma(g), E sigma(g)^2 (None: not claimed)
ACTIVATION_MOMENTS = {
    "he2": (0.0, 1.0), "he3": (0.0, 1.0), "he4": (0.0, 1.0),
    "relu": (_INV_SQRT_2PI, 0.5), "centred_relu": (0.0, 0.5 - 1.0 / (2.0 * math.pi)),
}


def _unit(o: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(o / |o|, |o|) with |o| clamped away from 0 (o = 0 maps to 0, never NaN)."""
    norm = o.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(o.dtype).tiny)
    return o / norm, norm


def _unit_vjp(o: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """(d(o/|o|)/do)^T s = (s - o_hat (o_hat . s)) / |o|."""
    o_hat, norm = _unit(o)
    return (s - o_hat * (o_hat * s).sum(-1, keepdim=True)) / norm


# name -> (n(o), vjp of n): the MLP's input normalisation
MLP_INPUTS = {
    "unit": (lambda o: _unit(o)[0], _unit_vjp),
    "raw": (lambda o: o, lambda o, s: s),
}


class FeatureMap:
    """phi: R^d -> R^width and its vector-Jacobian product. Subclasses are built from a config."""

    name: str = ""
    needs_m: bool = False          # does the config need an MLP width m?
    linear: bool = False           # phi(o) = o? (then logits are linear in o: `lib.fast.counts.table_gradients`)

    def __init__(self, cfg):
        self.d, self.m = cfg.d, cfg.m

    @classmethod
    def widths(cls, d: int, m: int | None) -> tuple[int, int]:
        """(columns of W_V, number of frozen parameters)."""
        raise NotImplementedError

    @property
    def width(self) -> int:
        return self.widths(self.d, self.m)[0]

    def phi(self, o: torch.Tensor, F: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def vjp(self, o: torch.Tensor, F: torch.Tensor | None, r: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


REGISTRY: dict[str, type] = {}


def register(name: str):
    """Class decorator: make a FeatureMap subclass the model called `name`."""
    def deco(cls):
        cls.name = name
        REGISTRY[name] = cls
        return cls
    return deco


@register("attn")
class Identity(FeatureMap):
    """Attention-only: phi(o) = o, logits U W_V o, W_V is (d, d)."""

    linear = True

    @classmethod
    def widths(cls, d, m):
        return d, 0

    def phi(self, o, F):
        return o

    def vjp(self, o, F, r):
        return r


@register("mlp")
class MLP(FeatureMap):
    """Attention + MLP: phi(o) = sigma(F n(o)) / sqrt(m), W_V is (d, m), F (m, d) frozen."""

    needs_m = True

    def __init__(self, cfg):
        super().__init__(cfg)
        self.sigma, self.dsigma = ACTIVATIONS[cfg.activation]
        self.n, self.n_vjp = MLP_INPUTS[cfg.mlp_input]

    @classmethod
    def widths(cls, d, m):
        return m, m * d

    def phi(self, o, F):
        return self.sigma(self.n(o) @ F.T) / math.sqrt(self.m)                  # (..., m)

    def vjp(self, o, F, r):
        pre = self.n(o) @ F.T                                                    # (..., m)
        return self.n_vjp(o, (self.dsigma(pre) * r) @ F / math.sqrt(self.m))    # (..., d)


def feature_map(cfg) -> FeatureMap:
    """The registered feature map of `cfg.model`, built for this configuration."""
    return REGISTRY[cfg.model](cfg)
