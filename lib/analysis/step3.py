"""Step 3 taken apart (chapter 6): the step-3 terms of `lib.analysis.decompose` regrouped with the
label vectors centred, and the step-3 memory under oracle attention, in closed form over all V tokens."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as Fn

from ..core.embeddings import Problem
from ..core.task import Batch, check_batch
from .decompose import Decomposition, _check_attn, _split, _weights
from ..core.models import model_logits


# ----------------------------------------------------------------------------- step 3, centred

CENTRED_TERMS = ("signal", "finite_sample", "crosstalk", "trigger_key", "mean_bias", "leakage", "misread")


def centred_step3(problem: Problem, dec: Decomposition, test: Batch, test_attn=None) -> dict:
    """The step-3 terms of chapter 6 (each (M, V)), with -u_bar folded into every path it belongs to.

    The fine terms keep u_k . u_{Pi i} and the -u_bar part apart; the large pieces of `trigger_equal`
    + `ubar` and of `trigger_cross` + `ubar` then cancel ACROSS the "step3" groups. Here the label
    vectors are centred, a_ki = u_k . (u_{Pi i} - u_bar), so no two groups cancel:

        crosstalk     crosstalk - (u_k . u_bar)(obar_tok . o_tok)      token keys read by test tokens
        trigger_key   [stored token keys read by the test's shared part s] - (u_k . u_bar)(obar_tok . s)
        mean_bias     trigger_equal + trigger_count + [stored shared vectors read by the test tokens]
                      - (u_k . u_bar)(obar_sh . o)   = (u_k . nu)(|s|^2 + s . e_x) with oracle attention,
                      nu = sum_i (n_i/N - 1/V) u_{Pi i}: only the label-frequency fluctuation is left
        signal, finite_sample (= signal_count), leakage (= other_memory), misread (= other_test)

    obar_sh = sum_i P_i / N is the shared part of the mean training vector, obar_tok the rest. The
    seven terms sum exactly to dec.logits (tests/test_decompose.py). `test` and `test_attn` must be the
    ones `dec` was computed with.
    """
    if not isinstance(dec, Decomposition):
        raise ValueError(f"dec must be a Decomposition (see decompose), got {type(dec).__name__}")
    check_batch(problem, test)
    if test.N != dec.logits.shape[0] or not torch.equal(test.labels, dec.labels):
        raise ValueError("test must be the batch the decomposition was computed on")
    test_attn = _check_attn(problem, test, test_attn, "test_attn")
    mem, U = dec.memory, problem.U
    a = _weights(problem, test, test_attn, 0)
    b_inf, b_oth, s = _split(problem, test, a)
    o_tok = b_inf[:, None] * problem.E[test.informative] + Fn.embedding_bag(
        test.tokens, problem.E, mode="sum", per_sample_weights=b_oth.contiguous())
    o = o_tok + s
    obar_sh = mem.P.sum(0) / mem.N
    obar_tok = mem.obar - obar_sh
    ub = (U @ problem.u_bar)[None, :]                              # (1, V): u_k . u_bar
    C = U @ problem.U_perm.T
    trigger_read = o_tok @ (C @ (mem.P / mem.N)).T                 # stored shared vectors . test tokens
    ubar_shared = -(o @ obar_sh)[:, None] * ub
    ubar_key = -(s @ obar_tok)[:, None] * ub
    T = dec.terms
    return {
        "signal": T["signal"],
        "finite_sample": T["signal_count"],
        "crosstalk": T["crosstalk"] + (T["ubar"] - ubar_shared - ubar_key),
        "trigger_key": T["trigger_cross"] - trigger_read + ubar_key,
        "mean_bias": T["trigger_equal"] + T["trigger_count"] + trigger_read + ubar_shared,
        "leakage": T["other_memory"],
        "misread": T["other_test"],
    }



def oracle_memory_logits(problem: Problem, counts) -> torch.Tensor:
    """Logits (V, V) of the step-3 memory under oracle attention, row x = content token x, column k.

    `counts` (V,): how often each content token was informative in training (N = counts.sum()).
    The memory is G3 = sum_i (n_i / N)(u_{Pi i} - u_bar)(e_i + s)^T with s the trigger when it rides
    in the value path (0 otherwise), read at e_x + s. O(V d^2): cheap enough for many problems.
    """
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a Problem (see lib.make_problem), got {type(problem).__name__}")
    V = problem.cfg.V
    n = torch.as_tensor(counts)
    if n.shape != (V,) or bool((n < 0).any()) or float(n.sum()) <= 0:
        raise ValueError(f"counts must be a ({V},) tensor of non-negative counts with a positive sum")
    E = problem.E[:V]
    s = problem.z_trig if problem.cfg.trigger_in_value else torch.zeros_like(problem.z_trig)
    f = n.to(E.dtype).to(E.device) / float(n.sum())
    keys = E + s                                                   # (V, d): e_i + s
    G = ((problem.U_perm - problem.u_bar) * f[:, None]).T @ keys     # (d, d)
    return model_logits(problem, G, keys)                          # keys are the attention model's features


def oracle_memory_accuracy(problem: Problem, counts) -> float:
    """Recall accuracy over all V content tokens of `oracle_memory_logits` (ties count as errors)."""
    logits = oracle_memory_logits(problem, counts)
    V = logits.shape[0]
    y = problem.perm.to(logits.device)
    correct = logits.gather(1, y[:, None])[:, 0]
    logits[torch.arange(V, device=logits.device), y] = -torch.inf
    return float((correct > logits.max(1).values).double().mean())


def oracle_memory_curve(cfg, Ns, problems: int, seed: int = 0) -> tuple:
    """Mean and standard error over `problems` problems (seeds seed, seed+1, ...) of
    `oracle_memory_accuracy` at each N in `Ns`, the counts of each problem nested in N (the informative
    tokens of one `sample_batch`, its first N samples). Returns (mean, se), numpy arrays of len(Ns)."""
    import numpy as np
    from ..core.config import check_int
    from ..core.task import sample_batch
    from ..core.embeddings import make_problem
    problems = check_int("problems", problems, 2)
    Ns = [check_int("N", N, 1) for N in Ns]
    if not Ns:
        raise ValueError("Ns must name at least one N")
    acc = np.zeros((problems, len(Ns)))
    for j in range(problems):
        pr = make_problem(cfg, seed + j)
        tokens = sample_batch(pr, max(Ns), seed + j).informative
        for i, N in enumerate(Ns):
            acc[j, i] = oracle_memory_accuracy(pr, torch.bincount(tokens[:N], minlength=cfg.V))
    return acc.mean(0), acc.std(0, ddof=1) / math.sqrt(problems)
