"""The two one-layer models and the loss (chapter 3), on the direct (reference) route.

Attention (chapter 3): scores s_t = h_t^T W_KQ q with q = z_EOS, a = softmax(s) over the
keys, o = sum_t a_t v_t.  With `Params.hard` the softmax is replaced by its gamma -> infinity limit,
one-hot on argmax_t s_t (the limit mode of the three steps).

  logits xi = U W_V phi(o),   phi the model's feature map (`lib.core.featuremaps`):
  attention-only  phi(o) = o                                  W_V is (d, d)
  attention + MLP phi(o) = sigma(F n(o)) / sqrt(m)            W_V is (d, m), F frozen

(`U` stores u_k as rows, so U W_V o is the vector (u_k^T W_V o)_k of the book's U^T W_V o with the u_k as columns.)
`forward` materialises the (N, L, d) keys and values: it is the readable reference that the
token-id route (`lib.fast.tokens`) and the closed-form gradients are tested against.
W_KQ is stored as a full (d, d) matrix; the forward pass reads it only through W_KQ q, and every
gradient of it is rank one, k q^T.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as Fn

from .config import TaskConfig, check_choice
from .embeddings import Problem, check_problem
from .featuremaps import ACTIVATIONS
from .task import Batch, check_batch, keys_values


def activation(name: str):
    """(sigma, sigma') for an activation name in `lib.core.config.ACTIVATIONS`."""
    check_choice("activation", name, tuple(ACTIVATIONS))
    return ACTIVATIONS[name]


@dataclass
class Params:
    """Trainable parameters. `hard=True` means hard (argmax) attention: the limit-mode model."""

    W_V: torch.Tensor    # (d, d) for attn, (d, m) for mlp: the value matrix (V in [Vural et al.])
    W_KQ: torch.Tensor   # (d, d): key-query matrix; it only ever moves along k q^T
    hard: bool = False


def zero_params(cfg: TaskConfig) -> Params:
    """The initialisation of the three steps: W_V = 0, W_KQ = 0."""
    to = dict(device=cfg.device, dtype=cfg.torch_dtype)
    return Params(torch.zeros(cfg.d, cfg.width, **to), torch.zeros(cfg.d, cfg.d, **to))


def check_params(problem: Problem, params: Params) -> None:
    check_problem(problem)
    cfg = problem.cfg
    if not isinstance(params, Params):
        raise ValueError(f"params must be a Params, got {type(params).__name__}")
    for name in ("W_V", "W_KQ"):
        t = getattr(params, name)
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"params.{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != cfg.torch_dtype:
            raise ValueError(f"params.{name} has dtype {t.dtype}, the problem's is {cfg.torch_dtype} "
                             f"(TaskConfig dtype={cfg.dtype!r}): convert with .to({cfg.torch_dtype})")
        if t.device.type != torch.device(cfg.device).type:
            raise ValueError(f"params.{name} is on {t.device}, the problem on {cfg.device}")
    if tuple(params.W_V.shape) != (cfg.d, cfg.width):
        raise ValueError(f"W_V must have shape {(cfg.d, cfg.width)}, got {tuple(params.W_V.shape)}")
    if tuple(params.W_KQ.shape) != (cfg.d, cfg.d):
        raise ValueError(f"W_KQ must have shape {(cfg.d, cfg.d)}, got {tuple(params.W_KQ.shape)}")
    for name in ("W_V", "W_KQ"):
        if not torch.isfinite(getattr(params, name)).all():
            raise ValueError(f"{name} contains NaN or inf")


def features(problem: Problem, o: torch.Tensor) -> torch.Tensor:
    """phi(o) of the problem's model (`lib.core.featuremaps`): o (attn) or sigma(F n(o)) / sqrt(m) (mlp)."""
    return problem.features.phi(o, problem.F)


def feature_jacobian_T(problem: Problem, o: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """J(o)^T r for the problem's feature map: r itself (attn), n'(o)^T F^T diag(sigma'(F n(o))) r / sqrt(m) (mlp)."""
    return problem.features.vjp(o, problem.F, r)


def hard_attention(scores: torch.Tensor) -> torch.Tensor:
    """The one hard-attention rule of the book: the position of the largest score along the last axis,
    the FIRST such position when several tie (torch.argmax's rule). Every route attends by it: the
    direct route here, the chunked one (`lib.fast.tokens.hard_values`), the count-table limit mode
    (`lib.fast.limit.attended_groups`, which reads the same choice from score ranks) and the fused loop
    (`lib.fast.native.attend`); tests/test_count_gradients.py and tests/test_native.py bind them. The
    exact attention accuracy and the margins of `lib.analysis.margins` decide ties by it too
    (tests/test_margins.py)."""
    return scores.argmax(-1)


def attention(scores: torch.Tensor, hard: bool) -> torch.Tensor:
    """Softmax over the last axis, or its hard limit (one-hot on `hard_attention`)."""
    if hard:
        return Fn.one_hot(hard_attention(scores), scores.shape[-1]).to(scores.dtype)
    return torch.softmax(scores, -1)


def readout_matrix(problem: Problem, W_V: torch.Tensor) -> torch.Tensor:
    """W_V^T U^T (width, V): features to logits, formed once when many chunks are read out."""
    return W_V.T @ problem.U.T


def model_logits(problem: Problem, W_V: torch.Tensor, phi: torch.Tensor,
                 readout: torch.Tensor | None = None) -> torch.Tensor:
    """The one logits map of the book, xi = U W_V phi(o), for features phi (B, width): (B, V). Every
    route computes its logits here; a one-step memory G read at features phi is model_logits(problem,
    G, phi). `readout` = readout_matrix(problem, W_V) when it is reused over chunks."""
    return phi @ (readout_matrix(problem, W_V) if readout is None else readout)


@dataclass
class Forward:
    """All intermediate quantities of one forward pass (direct route)."""

    h: torch.Tensor        # (N, n_keys, d) keys
    v: torch.Tensor        # (N, n_keys, d) values
    scores: torch.Tensor   # (N, n_keys)
    attn: torch.Tensor     # (N, n_keys)
    o: torch.Tensor        # (N, d) attention output
    phi: torch.Tensor      # (N, width) features fed to W_V
    logits: torch.Tensor   # (N, V)


def forward(problem: Problem, params: Params, batch: Batch) -> Forward:
    """The model on a batch, materialising every (N, L, d) tensor (reference route). Params and batch
    are checked first."""
    check_params(problem, params)
    check_batch(problem, batch)
    h, v = keys_values(problem, batch)                                 # (N, n_keys, d)
    scores = h @ (params.W_KQ @ problem.z_eos)                         # (N, n_keys)
    a = attention(scores, params.hard)
    o = torch.einsum("nt,ntd->nd", a, v)                               # (N, d)
    phi = features(problem, o)                                         # (N, width)
    logits = model_logits(problem, params.W_V, phi)                    # (N, V)
    return Forward(h, v, scores, a, o, phi, logits)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the logits (N, V) against integer labels (N,)."""
    return Fn.cross_entropy(logits, labels)


def loss(problem: Problem, params: Params, batch: Batch) -> torch.Tensor:
    """Empirical cross-entropy L-hat(W_V, W_KQ) on a batch."""
    return cross_entropy(forward(problem, params, batch).logits, batch.labels)
