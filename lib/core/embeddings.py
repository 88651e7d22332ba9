"""Random embeddings and everything else that is fixed once per problem (chapter 2).

A `Problem` bundles the frozen random objects of chapter 1: input embeddings e_1..e_V (rows of `E`,
followed by a separate noise vocabulary when asked for), output embeddings u_1..u_V (rows of `U`),
the trigger z_trig = tau * z and the query z_EOS, the label permutation Pi*, and the MLP's frozen
first layer F (rows i.i.d. N(0, I)).

Three ways to draw vectors (`TaskConfig.embedding`):
  "gaussian"   i.i.d. N(0, I/d): E|e|^2 = 1, <e_i, e_j> has mean 0 and variance 1/d;
  "sphere"     uniform on the unit sphere;
  "orthogonal" distinct rows of a random orthogonal matrix: zero cross-talk (needs d >= 2V + 2).
`tied=True` sets u_k = e_k.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import TaskConfig, check_memory
from .featuremaps import feature_map
from .seed import generator


@dataclass
class Problem:
    """The fixed random objects of one recall problem (all on `cfg.device`, dtype `cfg.dtype`)."""

    cfg: TaskConfig
    E: torch.Tensor               # (V_in, d): input embeddings; rows V.. are the noise vocabulary
    U: torch.Tensor               # (V, d): output (unembedding) vectors u_k
    z_trig: torch.Tensor          # (d,): trigger vector, added to the informative token
    z_eos: torch.Tensor           # (d,): the query q
    perm: torch.Tensor            # (V,) long: Pi*, label of content token i is perm[i]
    F: torch.Tensor | None        # (m, d): frozen MLP first layer, or None for the attn model

    @property
    def features(self):
        """The model's feature map (`lib.core.featuremaps`): phi, its vjp and its width."""
        fm = self.__dict__.get("_features")
        if fm is None:
            fm = self.__dict__["_features"] = feature_map(self.cfg)
        return fm

    @property
    def U_perm(self) -> torch.Tensor:
        """(V, d): row i is u_{Pi*(i)}, the output vector that token i must recall."""
        return self.U[self.perm]

    @property
    def u_bar(self) -> torch.Tensor:
        """(d,): mean output vector (1/V) sum_k u_k; the uniform prediction's gradient uses it."""
        return self.U.mean(0)


def draw_vectors(n: int, d: int, kind: str, g: torch.Generator) -> torch.Tensor:
    """(n, d) float64 random vectors of the given kind (see module docstring)."""
    if n == 0:
        return torch.zeros(0, d, dtype=torch.float64)
    if kind == "orthogonal":
        if n > d:
            raise ValueError(f"d must be >= {n} for {n} exactly orthogonal vectors, got {d}")
        Q, R = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
        Q = Q * torch.sign(torch.diagonal(R))        # Haar-distributed orthogonal matrix
        return Q.T[:n].contiguous()
    x = torch.randn(n, d, generator=g, dtype=torch.float64) / d ** 0.5
    if kind == "sphere":
        x = x / x.norm(dim=1, keepdim=True).clamp_min(1e-300)
    return x


def make_problem(cfg: TaskConfig, seed: int = 0) -> Problem:
    """Draw the embeddings, trigger, query, permutation and F of one problem from `seed`.

    Paired randomness: each object draws from its own named stream (`generator(seed, "problem",
    name)`), so switching `tied`, `tau`, `trigger_in_value`, `eos_key`, the model or the activation
    leaves every other object identical, and comparisons across switches are paired. Orthogonal
    embeddings are rows of one Haar matrix (stream "orthogonal") in fixed slots: E, z, z_EOS, the
    noise vocabulary, then U (unused when tied).
    """
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    V, d, Vn = cfg.V, cfg.d, cfg.noise_vocab or 0
    vectors = 2 * d * d if cfg.embedding == "orthogonal" else (2 * V + Vn + 2) * d
    # name the parameter that makes it large: the largest count of d-vectors (V, noise_vocab, the
    # MLP width m), or d itself when it is the larger factor (or the embedding is orthogonal: d x d)
    counts = {"V": 2 * V + 2, "noise_vocab": Vn, "m": cfg.n_frozen // d if d else 0}
    name = max(counts, key=counts.get)
    if cfg.embedding == "orthogonal" or d > counts[name]:
        name = "d"
    sizes = ", ".join(f"{k} = {getattr(cfg, k)}" for k in ("V", "d", "noise_vocab", "m") if getattr(cfg, k))
    check_memory(name, getattr(cfg, name), 2 * 4 * (vectors + cfg.n_frozen * d) + 8 * V,   # drawn in float32, then converted
                 f"the embeddings and frozen weights ({sizes})", cfg.device)

    def stream(*tags):
        return generator(seed, "problem", *tags)

    if cfg.embedding == "orthogonal":
        Q = draw_vectors(cfg.n_vectors, d, "orthogonal", stream("orthogonal"))
        E, z, z_eos, E_noise = Q[:V], Q[V], Q[V + 1], Q[V + 2:V + 2 + Vn]
        U = E if cfg.tied else Q[V + 2 + Vn:2 * V + 2 + Vn]
    else:
        def draw(n, name):
            return draw_vectors(n, d, cfg.embedding, stream(name))
        E, z, z_eos, E_noise = draw(V, "E"), draw(1, "z_trig")[0], draw(1, "z_eos")[0], draw(Vn, "E_noise")
        U = E if cfg.tied else draw(V, "U")
    perm = torch.randperm(V, generator=stream("perm"))
    F = None
    if cfg.n_frozen:
        F = torch.randn(cfg.m, d, generator=stream("F"), dtype=torch.float64)
    to = dict(device=cfg.device, dtype=cfg.torch_dtype)
    return Problem(
        cfg=cfg,
        E=torch.cat([E, E_noise]).to(**to),
        U=U.to(**to),
        z_trig=(cfg.tau * z).to(**to),
        z_eos=z_eos.to(**to),
        perm=perm.to(cfg.device),
        F=None if F is None else F.to(**to),
    )


def coherence(X: torch.Tensor) -> float:
    """max_{i != j} |cos(x_i, x_j)| over the rows of X (n, d): how far from orthogonal they are."""
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"X must be a matrix with at least 2 rows, got shape {tuple(X.shape)}")
    Xn = X / X.norm(dim=1, keepdim=True).clamp_min(1e-300)
    return float((Xn @ Xn.T).abs().fill_diagonal_(0).max())


def check_problem(problem) -> None:
    """Raise a ValueError unless `problem` is a Problem (a TaskConfig is the commonest slip). The one
    check every public entry taking a problem uses."""
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a Problem (make one with lib.make_problem(cfg, seed)), "
                         f"got {type(problem).__name__}")
