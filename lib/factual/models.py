"""Chapter 11 (factual recall, after Nichani, Lee and Bietti, ICLR 2025), the models (torch):

- `FactTransformer`: their `model.py`, class `TF_one_layer`. H softmax heads of dimension d_h whose
  query is the last position, scores (x_t K)(x_T Q)^T / sqrt(d_h); the heads' outputs concatenated and
  projected by O (H d_h x d); then an MLP of width m with a bias, sigma (ReLU by default, or any name
  of `lib.core.config.ACTIVATIONS`), and a residual: h = o + W2 sigma(W1 o + b1); logits u_a . h over the
  R D answers. Embeddings (vocabulary and answers) random N(0, I/d) or orthonormal, frozen by default
  (as in their `run.py`, where `wte` and `unembed` get `optax.set_to_zero`). m = 0: attention only.
- `LinearAttention`: the simplified model of their `sequential-learning.ipynb` (class `Simple_TF`):
  logits = (sum_t (x_t^T A x_T) x_t)^T W, linear attention, A (d x d) and W (d x R D) trained from a
  small constant, embeddings one-hot (orthogonal, d = vocabulary) or random unit vectors. Their
  `Simple_TF.lin_attn` scores x_T^T A x_t: our A is their A transposed. From a constant start (a
  symmetric A) the two parametrisations follow the same trajectory, up to that transposition.

`param_counts` gives the parameters per block, exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.config import check_bool, check_choice, check_float, check_int
from ..core.embeddings import draw_vectors
from ..core.models import activation as _activation
from ..core.seed import generator
from .task import FactTask, _check_task


FACT_EMBEDDINGS = ("random", "orthogonal")
VALUES = ("trained", "identity")


# ---------------------------------------------------------------------------------------- the models

@dataclass(frozen=True)
class FactModelConfig:
    """The one-layer transformer's sizes. Validated at construction."""

    d: int = 32                  # embedding dimension
    H: int = 1                   # attention heads
    d_h: int = 8                 # head dimension
    m: int = 0                   # MLP width (0: attention only)
    activation: str = "relu"     # MLP activation (a name of lib.core.config.ACTIVATIONS)
    embeddings: str = "random"   # "random" N(0, I/d) or "orthogonal" (orthonormal rows)
    train_embeddings: bool = False   # frozen, as in their run.py
    values: str = "trained"      # "trained" V, O; "identity": V = O = I_d (needs H = 1; d_h is then the
                                 # key/query dimension only), so attention routes (o = sum_t a_t e_t), never stores
    seed: int = 0                # seed of the embeddings and the initialisation

    def __post_init__(self):
        for name, lo in (("d", 1), ("H", 1), ("d_h", 1), ("m", 0), ("seed", 0)):
            object.__setattr__(self, name, check_int(name, getattr(self, name), lo))
        _activation(self.activation)
        check_choice("embeddings", self.embeddings, FACT_EMBEDDINGS)
        check_bool("train_embeddings", self.train_embeddings)
        check_choice("values", self.values, VALUES)
        if self.values == "identity" and self.H != 1:
            raise ValueError(f"values='identity' needs H = 1, got H={self.H}")


def embeddings(n: int, d: int, kind: str, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """(n, d): rows i.i.d. N(0, I/d) ("random") or orthonormal ("orthogonal", needs d >= n)."""
    check_choice("embeddings", kind, FACT_EMBEDDINGS)
    if kind == "random":
        return draw_vectors(n, d, "gaussian", g).to(dtype)           # chapter 1's Gaussian embeddings
    if d < n:
        raise ValueError(f"d must be >= {n} for orthogonal embeddings, got d={d}")
    q, _ = torch.linalg.qr(torch.randn(d, n, generator=g, dtype=torch.float64))
    return q.T.contiguous().to(dtype)


class FactTransformer(torch.nn.Module):
    """One layer of H softmax heads (query: the last position), output projection, MLP with residual,
    unembedding over the R D answers. forward(x: (N, T) long) -> logits (N, R D). With
    values='identity' the one head's values are the embeddings themselves (V = O = I_d, buffers)."""

    def __init__(self, task: FactTask, cfg: FactModelConfig, dtype=torch.float32):
        super().__init__()
        _check_task(task)
        if not isinstance(cfg, FactModelConfig):
            raise ValueError(f"cfg must be a FactModelConfig, got {type(cfg).__name__}")
        self.task, self.cfg = task, cfg
        d, H, dh, m = cfg.d, cfg.H, cfg.d_h, cfg.m
        ge, gi = generator(cfg.seed, "factual", "embed"), generator(cfg.seed, "factual", "init")
        wte = embeddings(task.vocab, d, cfg.embeddings, ge, dtype)        # (vocab, d)
        unembed = embeddings(task.n_answers, d, cfg.embeddings, ge, dtype)  # (R D, d)
        if cfg.train_embeddings:
            self.wte, self.unembed = torch.nn.Parameter(wte), torch.nn.Parameter(unembed)
        else:
            self.register_buffer("wte", wte)
            self.register_buffer("unembed", unembed)

        def normal(shape, std):
            return torch.nn.Parameter((torch.randn(*shape, generator=gi, dtype=torch.float64) * std).to(dtype))
        self.Q = normal((H, d, dh), 1 / math.sqrt(dh))       # their init: N(0, 1/d_h)
        self.K = normal((H, d, dh), 1 / math.sqrt(dh))
        if cfg.values == "trained":
            self.V = normal((H, d, dh), 1 / math.sqrt(dh))
            self.O = normal((H * dh, d), 1 / math.sqrt(d))
        else:                                                 # attention routes, never stores
            self.register_buffer("V", torch.eye(d, dtype=dtype)[None])
            self.register_buffer("O", torch.eye(d, dtype=dtype))
        self.sigma = _activation(cfg.activation)[0]
        if m > 0:
            self.W1 = normal((d, m), 1 / math.sqrt(d))        # flax Dense default: lecun normal
            self.b1 = torch.nn.Parameter(torch.zeros(m, dtype=dtype))
            self.W2 = normal((m, d), 1 / math.sqrt(m))

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """(N, T) ids -> the attention block's output o (N, d) and the weights (N, H, T)."""
        e = self.wte[x]                                               # (N, T, d)
        q = torch.einsum("nd,hdk->nhk", e[:, -1], self.Q)            # (N, H, d_h)
        k = torch.einsum("ntd,hdk->nhtk", e, self.K)                 # (N, H, T, d_h)
        v = torch.einsum("ntd,hdk->nhtk", e, self.V)
        a = torch.softmax(torch.einsum("nhtk,nhk->nht", k, q) / math.sqrt(self.cfg.d_h), dim=-1)
        o = torch.einsum("nht,nhtk->nhk", a, v).reshape(x.shape[0], -1) @ self.O   # (N, d); v is (N, H, T, d_v)
        return o, a

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.attention(x)
        if self.cfg.m > 0:
            h = h + self.sigma(h @ self.W1 + self.b1) @ self.W2     # residual MLP
        return h @ self.unembed.T                                     # (N, R D)


class LinearAttention(torch.nn.Module):
    """Their simplified model (sequential-learning.ipynb): logits = (sum_t (x_t^T A x_T) x_t)^T W.
    Their `Simple_TF.lin_attn` scores x_T^T A x_t, so this A is theirs transposed (the same dynamics from
    a constant start, up to that transposition).
    `embeddings="orthogonal"` uses one-hot rows (d = vocabulary, as theirs); "random" uses unit-norm
    Gaussian rows in dimension d. A and W start at the constant `init` (theirs: 1e-5)."""

    def __init__(self, task: FactTask, embeddings: str = "orthogonal", d: int | None = None,
                 init: float = 1e-5, seed: int = 0, dtype=torch.float32):
        super().__init__()
        _check_task(task)
        check_choice("embeddings", embeddings, FACT_EMBEDDINGS)
        init = check_float("init", init)
        seed = check_int("seed", seed, 0)
        if embeddings == "orthogonal":
            d = task.vocab if d is None else check_int("d", d, task.vocab)
            wte = torch.eye(task.vocab, d, dtype=dtype)
        else:
            d = check_int("d", d if d is not None else task.vocab, 1)
            wte = draw_vectors(task.vocab, d, "sphere", generator(seed, "factual", "embed")).to(dtype)
        self.register_buffer("wte", wte)
        self.A = torch.nn.Parameter(torch.full((d, d), init, dtype=dtype))
        self.W = torch.nn.Parameter(torch.full((d, task.n_answers), init, dtype=dtype))
        self.task, self.d = task, d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.wte[x]                                               # (N, T, d)
        s = (e * (e[:, -1] @ self.A.T)[:, None, :]).sum(-1)           # (N, T): x_t^T A x_T
        return (s[:, :, None] * e).sum(1) @ self.W                    # (N, R D)


def block_param_counts(cfg: FactModelConfig) -> dict:
    """The attention's and the MLP's parameters of a FactTransformer with this configuration, by the
    formulas of `param_counts`, without building the model."""
    if not isinstance(cfg, FactModelConfig):
        raise ValueError(f"cfg must be a FactModelConfig, got {type(cfg).__name__}")
    return {"attention": (4 if cfg.values == "trained" else 2) * cfg.H * cfg.d_h * cfg.d, "mlp": 2 * cfg.m * cfg.d + cfg.m}


def param_counts(model: torch.nn.Module) -> dict:
    """Parameters per block, by formula: attention 4 H d_h d (Q, K, V, O; 2 d_h d with values='identity'), MLP 2 m d + m (W1, b1, W2),
    embeddings (vocab + R D) d, and `trainable` (what the optimizer moves). Their sweeps count
    4 H d_h d + 2 m d (fact_recall_sweep.py): the MLP bias (m numbers) is left out there."""
    if isinstance(model, FactTransformer):
        c, t = model.cfg, model.task
        out = {**block_param_counts(c), "embeddings": (t.vocab + t.n_answers) * c.d}
        out["trainable"] = out["attention"] + out["mlp"] + (out["embeddings"] if c.train_embeddings else 0)
        return out
    if isinstance(model, LinearAttention):
        return {"attention": model.d * model.d, "output": model.d * model.task.n_answers,
                "trainable": model.d * (model.d + model.task.n_answers)}
    raise ValueError(f"model must be a FactTransformer or LinearAttention, got {type(model).__name__}")
