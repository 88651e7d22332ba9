"""The logits of a one-step memory, split into named terms that add up exactly (chapters 4 and 6).

Both value steps of the three-step algorithm store a one-step (Hebbian) memory of pooled vectors

    G = (1/N) sum_n (u_{y_n} - u_bar) o_n^T,      o_n = sum_t a_{n,t} v_{n,t},

with uniform attention a_{n,t} = 1/K in step 1 (G = G1, chapter 4) and the attention learned in
step 2 in step 3 (G = G3, chapter 6; hard, soft or oracle). The logits of a test sample with pooled
vector o (its own attention weights b_t) are xi_k = u_k^T G o. `decompose` splits them into terms.

Notation (per sample, attention-only model). K keys (L, or L + 1 with the EOS key); l the informative
position; x* = x_l the informative token; y = Pi*(x*) the label; tv = 1 if the trigger is in the
value path, else 0. A pooled vector is split into three parts,

    o = a_l e_{x*}                      (informative part: weight a_l on the informative token)
      + sum_{t != l, t <= L} a_t e_{x_t}  (other part: the L - 1 other positions; a repeat of x* at
                                         another position counts here)
      + tv a_l z_trig + a_EOS z_EOS     (shared part: vectors every sample carries)

Count tables of the training batch (never an (N, L, d) tensor; one weighted scatter-add over the
N L token ids, like `lib.fast.counts`), for content tokens i in [V] and input tokens j in [V_in]:

    S_i   = sum_{n: x*_n = i} a_{n,l_n}                                   (V,)
    B_ij  = sum_{n: x*_n = i} sum_{t != l_n} a_{n,t} 1[x_{n,t} = j]       (V, V_in)
    P_i   = sum_{n: x*_n = i} (tv a_{n,l_n} z_trig + a_{n,EOS} z_EOS)     (V, d)
    obar  = (1/N) sum_n o_n = (1/N) (sum_i S_i e_i + sum_j (sum_i B_ij) e_j + sum_i P_i)

so that  G = (1/N) sum_i u_{Pi i} (S_i e_i + sum_j B_ij e_j + P_i)^T - u_bar obar^T.  With uniform
attention S_i = n_i / K (n_i: samples whose informative token is i) and B_ij / K counts token j
beside informative token i; with oracle attention S_i = n_i and B = 0.

Write C_ki = u_k . u_{Pi i} (V, V), sbar = (1/V) sum_i S_i / N (the count-averaged informative
weight: 1/(V K) for uniform attention, 1/V for the oracle), pbar = (1/V) sum_i P_i / N. For a test
sample with parts (b e_{x*}, r, s) as above (b = its weight on the informative position), the fine
terms of xi_k (each an (M, V) tensor over test samples m and labels k) are:

    signal          1[k = y] sbar |u_y|^2 |e_{x*}|^2 b
                    the matched path: the memory row stored for x*, read by the test's informative
                    part, at the right label, with every token counted equally often.
    signal_count    1[k = y] (S_{x*}/N - sbar) |u_y|^2 |e_{x*}|^2 b
                    the same path's finite-sample fluctuation: x* was seen n_{x*} != N/V times.
    crosstalk       sum_i (S_i/N) C_ki (e_i . e_{x*}) b  -  signal - signal_count
                    informative memory read by the informative part through random overlaps
                    (k != y: u_k . u_{Pi i} != 0; i != x*: e_i . e_{x*} != 0).
    other_test      sum_i (S_i/N) C_ki (e_i . r)
                    informative memory read by the test's OTHER tokens. Its matched path
                    (k = Pi(x_t) for a test token x_t) is as large as the signal under uniform
                    attention: step 1 cannot tell the informative token from the others.
    other_memory    sum_i C_ki (1/N) sum_j B_ij (e_j . (b e_{x*} + r))
                    the other tokens stored in memory (step 1: the L - 1 neighbours of every
                    informative token; step 3: leakage of mis-attended training samples).
    trigger_equal   C_k. pbar . s = (sum_i C_ki) (pbar . s)  =  V (u_k . u_bar) (pbar . s)
                    shared part stored with equal weights, read by the test's shared part.
    trigger_count   sum_i C_ki (P_i/N - pbar) . s
                    the same with the label-frequency fluctuation (n_i/N - 1/V in the oracle case):
                    the part of the shared term that does not cancel against u_bar.
    trigger_cross   sum_i C_ki (P_i/N) . (b e_{x*} + r)  +  sum_i C_ki (S_i e_i + sum_j B_ij e_j)/N . s
                    cross-talk between the shared vectors and token embeddings.
    ubar            -(u_k . u_bar) (obar . o)
                    the -u_bar (mean-bias) part of the label vectors u_y - u_bar.

They sum exactly to u_k^T G o (tests/test_decompose.py, float64). Two groupings name them as the
chapters do (`GROUPS`): "step1" (signal, crosstalk, other_tokens, trigger, ubar) and "step3"
(signal, crosstalk, mean_bias, finite_sample, leakage, misread). Under "step3", mean_bias =
trigger_equal + trigger_count + ubar: the trigger in the value path and -u_bar. With oracle
attention trigger_equal = (u_k . u_bar) |z|^2 cancels the z.z part of ubar = -(u_k . u_bar)(obar . o)
exactly, leaving trigger_count = |z|^2 sum_i (n_i/N - 1/V) C_ki, of standard deviation about
|z|^2 sqrt((1/d + 1/V) / N) over labels k, plus the rest of ubar; finite_sample = signal_count;
leakage = other_memory; misread = other_test (zero when the test attention is the oracle).

Attention weights (`train_attn`, `test_attn`): None or "uniform" (1/K each), "oracle" (one-hot on l),
an (N,) long tensor of attended positions (hard attention; K - 1 = L is EOS when it is a key), or an
(N, K) float tensor of weights (soft attention, rows need not sum to one).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as Fn

from ..fast.counts import chunks
from ..fast.limit import count_chunk_size
from ..core.embeddings import Problem
from ..core.task import Batch, check_batch
from ..core.models import model_logits

FINE_TERMS = ("signal", "signal_count", "crosstalk", "other_test", "other_memory",
              "trigger_equal", "trigger_count", "trigger_cross", "ubar")

GROUPS = {
    "step1": {"signal": ("signal", "signal_count"),
              "crosstalk": ("crosstalk", "trigger_cross"),
              "other_tokens": ("other_test", "other_memory"),
              "trigger": ("trigger_equal", "trigger_count"),
              "ubar": ("ubar",)},
    "step3": {"signal": ("signal",),
              "crosstalk": ("crosstalk", "trigger_cross"),
              "mean_bias": ("trigger_equal", "trigger_count", "ubar"),
              "finite_sample": ("signal_count",),
              "leakage": ("other_memory",),
              "misread": ("other_test",)},
}


@dataclass
class MemoryCounts:
    """Count tables of a one-step memory G = (1/N) sum_n (u_{y_n} - u_bar) o_n^T (see module doc)."""

    N: int
    S: torch.Tensor       # (V,): summed informative-position weight per informative token
    B: torch.Tensor       # (V, V_in): weight on token j at other positions, per informative token i
    P: torch.Tensor       # (V, d): summed shared vectors (trigger in value, EOS) per informative token
    obar: torch.Tensor    # (d,): mean pooled training vector

    def matrix(self, problem: Problem) -> torch.Tensor:
        """G (d, d) itself, from the tables: the readable check of the formula above."""
        rows = self.S[:, None] * problem.E[: problem.cfg.V] + self.B @ problem.E + self.P   # (V, d)
        return problem.U_perm.T @ rows / self.N - torch.outer(problem.u_bar, self.obar)


@dataclass
class Decomposition:
    """Fine terms (each (M, V)) of the logits of M test samples, and the logits themselves."""

    terms: dict            # name -> (M, V) tensor, keys FINE_TERMS
    logits: torch.Tensor   # (M, V): u_k^T G o computed directly (not as the sum of terms)
    labels: torch.Tensor   # (M,): the test labels y
    memory: MemoryCounts

    def total(self) -> torch.Tensor:
        """Sum of the fine terms: equals `logits` to rounding."""
        return sum(self.terms.values())

    def grouped(self, scheme: str = "step1") -> dict:
        """The terms summed as in GROUPS[scheme] ("step1" or "step3")."""
        if scheme not in GROUPS:
            raise ValueError(f"scheme must be one of {', '.join(GROUPS)}; got {scheme!r}")
        return {name: sum(self.terms[f] for f in parts) for name, parts in GROUPS[scheme].items()}

    def at_label(self, scheme: str | None = None) -> dict:
        """Each term at the correct label y of each test sample: name -> (M,)."""
        terms = self.terms if scheme is None else self.grouped(scheme)
        idx = self.labels[:, None]
        return {name: t.gather(1, idx)[:, 0] for name, t in terms.items()}

    def off_label(self, scheme: str | None = None) -> dict:
        """Each term at the wrong labels k != y: name -> (M, V - 1), row m without column y_m."""
        terms = self.terms if scheme is None else self.grouped(scheme)
        M, V = self.logits.shape
        keep = torch.ones(M, V, dtype=torch.bool, device=self.logits.device)
        keep[torch.arange(M, device=keep.device), self.labels] = False
        return {name: t[keep].view(M, V - 1) for name, t in terms.items()}


# ----------------------------------------------------------------------------- attention weights

def _check_attn(problem: Problem, batch: Batch, attn, name: str):
    K = problem.cfg.n_keys
    if attn is None or (isinstance(attn, str) and attn in ("uniform", "oracle")):
        return attn
    if isinstance(attn, str):
        raise ValueError(f"{name} must be None, 'uniform', 'oracle' or a tensor; got {attn!r}")
    if not isinstance(attn, torch.Tensor):
        raise ValueError(f"{name} must be None, 'uniform', 'oracle' or a tensor; got {type(attn).__name__}")
    if attn.dtype in (torch.int32, torch.int64):
        if tuple(attn.shape) != (batch.N,):
            raise ValueError(f"{name} as positions must have shape ({batch.N},), got {tuple(attn.shape)}")
        if batch.N and (int(attn.min()) < 0 or int(attn.max()) >= K):
            raise ValueError(f"{name} positions must lie in [0, {K})")
        return attn.to(batch.tokens.device)
    if not attn.is_floating_point():
        raise ValueError(f"{name} must be a long (positions) or floating (weights) tensor, got {attn.dtype}")
    if tuple(attn.shape) != (batch.N, K):
        raise ValueError(f"{name} as weights must have shape ({batch.N}, {K}), got {tuple(attn.shape)}")
    if not torch.isfinite(attn).all():
        raise ValueError(f"{name} contains NaN or inf")
    return attn.to(device=batch.tokens.device, dtype=problem.E.dtype)


def _weights(problem: Problem, b: Batch, attn, start: int) -> torch.Tensor:
    """(B, K) attention weights of the chunk b that starts at sample `start`."""
    K, dt, dev = problem.cfg.n_keys, problem.E.dtype, b.tokens.device
    if attn is None or (isinstance(attn, str) and attn == "uniform"):
        return torch.full((b.N, K), 1.0 / K, dtype=dt, device=dev)
    if isinstance(attn, str):                                             # oracle
        return Fn.one_hot(b.pos, K).to(dt)
    part = attn[start:start + b.N]
    if not part.is_floating_point():
        return Fn.one_hot(part, K).to(dt)
    return part


def _split(problem: Problem, b: Batch, a: torch.Tensor):
    """Per-sample informative weight (B,), other-position weights (B, L), shared vectors (B, d)."""
    cfg = problem.cfg
    a_inf = a.gather(1, b.pos[:, None])[:, 0]                             # (B,)
    a_oth = a[:, : cfg.L].scatter(1, b.pos[:, None], 0.0)                 # (B, L)
    shared = (a_inf[:, None] * problem.z_trig) if cfg.trigger_in_value else torch.zeros(
        b.N, cfg.d, dtype=a.dtype, device=a.device)
    if cfg.eos_key:
        shared = shared + a[:, cfg.L:] * problem.z_eos
    return a_inf, a_oth, shared


# ----------------------------------------------------------------------------- the memory

def memory_counts(problem: Problem, batch: Batch, attn=None) -> MemoryCounts:
    """Count tables S, B, P, obar of G = (1/N) sum_n (u_{y_n} - u_bar) o_n^T for attention `attn`."""
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
    if problem.cfg.model != "attn":
        raise ValueError(f"model must be 'attn' for the logit decomposition (linear in o), got "
                         f"{problem.cfg.model!r}")
    check_batch(problem, batch)
    attn = _check_attn(problem, batch, attn, "train_attn")
    cfg = problem.cfg
    dt, dev = problem.E.dtype, problem.E.device
    S = torch.zeros(cfg.V, dtype=dt, device=dev)
    Bf = torch.zeros(cfg.V * cfg.V_in, dtype=dt, device=dev)
    P = torch.zeros(cfg.V, cfg.d, dtype=dt, device=dev)
    start = 0
    for b in chunks(batch, count_chunk_size(problem)):
        a = _weights(problem, b, attn, start)
        a_inf, a_oth, shared = _split(problem, b, a)
        xi = b.informative
        S.index_add_(0, xi, a_inf)
        Bf.index_add_(0, (b.tokens + xi[:, None] * cfg.V_in).reshape(-1), a_oth.reshape(-1))
        P.index_add_(0, xi, shared)
        start += b.N
    B = Bf.view(cfg.V, cfg.V_in)
    obar = (S @ problem.E[: cfg.V] + B.sum(0) @ problem.E + P.sum(0)) / batch.N
    return MemoryCounts(batch.N, S, B, P, obar)


# ----------------------------------------------------------------------------- the decomposition

def decompose(problem: Problem, train: Batch, test: Batch, train_attn=None, test_attn=None,
              memory: MemoryCounts | None = None) -> Decomposition:
    """Split the logits u_k^T G o of every test sample into FINE_TERMS (module docstring).

    G is the memory of `train` under `train_attn` (None: uniform, i.e. G1 of step 1); o are the
    test pooled vectors under `test_attn` (None: uniform, as the model after step 1 pools). Pass
    `memory` (from `memory_counts`) to reuse the tables across test sets. Costs O(N L + V^2 d +
    M (L + V) d) time and O(V V_in + M V) memory; the test batch is processed in one piece, so keep
    M to a few thousand samples.
    """
    if memory is None:
        memory = memory_counts(problem, train, train_attn)
    elif not isinstance(memory, MemoryCounts):
        raise ValueError(f"memory must be a MemoryCounts (see memory_counts), got {type(memory).__name__}")
    check_batch(problem, test)
    test_attn = _check_attn(problem, test, test_attn, "test_attn")
    cfg = problem.cfg
    E, Ec, U = problem.E, problem.E[: cfg.V], problem.U
    N, V = memory.N, cfg.V

    # read-out tables: row k of each is a d-vector rho with  term_k = rho_k . (part of o)
    C = U @ problem.U_perm.T                                       # (V, V): C_ki = u_k . u_{Pi i}
    sbar = memory.S.sum() / (N * V)
    pbar = memory.P.sum(0) / (N * V)                               # (d,)
    R_inf = (C * (memory.S / N)) @ Ec                              # (V, d)
    R_oth = C @ (memory.B @ E) / N                                 # (V, d)
    R_sh = C @ (memory.P / N)                                      # (V, d)
    R_sh_eq = C.sum(1)[:, None] * pbar                             # (V, d)
    ub = U @ problem.u_bar                                         # (V,)

    # test parts
    a = _weights(problem, test, test_attn, 0)
    b_inf, b_oth, s = _split(problem, test, a)                     # (M,), (M, L), (M, d)
    xi, y = test.informative, test.labels
    o_inf = b_inf[:, None] * E[xi]                                 # (M, d)
    o_oth = Fn.embedding_bag(test.tokens, E, mode="sum", per_sample_weights=b_oth.contiguous())
    o_tok = o_inf + o_oth
    o = o_tok + s

    M = test.N
    diag = torch.zeros(M, V, dtype=E.dtype, device=E.device)
    base = (U[y] * U[y]).sum(1) * (E[xi] * E[xi]).sum(1) * b_inf  # |u_y|^2 |e_x*|^2 b
    diag[torch.arange(M, device=E.device), y] = 1.0
    signal = diag * (sbar * base)[:, None]
    signal_count = diag * ((memory.S[xi] / N - sbar) * base)[:, None]
    terms = {
        "signal": signal,
        "signal_count": signal_count,
        "crosstalk": o_inf @ R_inf.T - signal - signal_count,
        "other_test": o_oth @ R_inf.T,
        "other_memory": o_tok @ R_oth.T,
        "trigger_equal": s @ R_sh_eq.T,
        "trigger_count": s @ (R_sh - R_sh_eq).T,
        "trigger_cross": o_tok @ R_sh.T + s @ (R_inf + R_oth).T,
        "ubar": -(o @ memory.obar)[:, None] * ub[None, :],
    }
    logits = model_logits(problem, memory.matrix(problem), o)      # (M, V) directly
    return Decomposition(terms, logits, y, memory)


def pooled(problem: Problem, test: Batch, test_attn=None) -> torch.Tensor:
    """Pooled test vectors o (M, d) under `test_attn`, as `decompose` builds them."""
    check_batch(problem, test)
    test_attn = _check_attn(problem, test, test_attn, "test_attn")
    a = _weights(problem, test, test_attn, 0)
    b_inf, b_oth, s = _split(problem, test, a)
    o_oth = Fn.embedding_bag(test.tokens, problem.E, mode="sum", per_sample_weights=b_oth.contiguous())
    return b_inf[:, None] * problem.E[test.informative] + o_oth + s


def pooled_terms(cfg, N: int, seeds, n_test: int = 400, scheme: str | None = "step1",
                 train_attn=None, test_attn=None, max_off: int = 20000) -> dict:
    """Each term at the correct label and at wrong labels, pooled over problems `seeds`.

    For every seed s: problem `make_problem(cfg, s)`, training batch `sample_batch(problem, N, s)`,
    test batch `sample_batch(problem, n_test, s, "test")`. `train_attn` / `test_attn` are as in
    `decompose`, or callables (problem, batch) -> attention (e.g. hard positions along step 2's k).
    Returns {name: (at (S n_test,), off (<= S max_off,), per_seed_at_means (S,))} with the terms of
    GROUPS[scheme] (FINE_TERMS when scheme is None). At most `max_off` wrong-label values per seed
    are kept (the first ones, row by row).
    """
    from ..core.embeddings import make_problem
    from ..core.task import sample_batch
    at, off, means = {}, {}, {}
    for s in seeds:
        problem = make_problem(cfg, s)
        train, test = sample_batch(problem, N, s), sample_batch(problem, n_test, s, "test")
        ta = train_attn(problem, train) if callable(train_attn) else train_attn
        sa = test_attn(problem, test) if callable(test_attn) else test_attn
        dec = decompose(problem, train, test, ta, sa)
        for name, t in dec.at_label(scheme).items():
            at.setdefault(name, []).append(t)
            means.setdefault(name, []).append(t.mean())
        for name, t in dec.off_label(scheme).items():
            off.setdefault(name, []).append(t.reshape(-1)[:max_off])
    return {name: (torch.cat(at[name]), torch.cat(off[name]), torch.stack(means[name])) for name in at}
