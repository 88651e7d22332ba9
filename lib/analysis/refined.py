"""Step 3 measured over problems (chapter 6): leakage of mis-attended training samples, the spread of
each centred term, knock-out accuracies, the orthogonal-embedding rule, the memory's accuracy at
N = infinity against chapter 2's memory, N* on a grid, and finite against limit mode.

Each function is one experiment of the chapter, on explicit seeds. Tested in tests/test_refined.py.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..core.config import TaskConfig, check_int
from ..core.embeddings import Problem, make_problem
from ..core.grid import between, first_index
from ..core.memory import hebbian, make_memory, recall_accuracy
from ..core.models import hard_attention
from ..core.seed import generator
from ..core.task import Batch, sample_batch
from ..fast.counts import position_scores
from ..learning.crosscheck import relative_gap
from ..learning.evaluate import evaluate, predict
from ..learning.schedule import three_steps
from ..theory import orthogonal_recall, refined_memory_accuracy, refined_memory_moments, refined_memory_nstar
from .decompose import decompose, memory_counts
from .step3 import centred_step3, oracle_memory_accuracy, oracle_memory_curve, oracle_memory_logits

TERMS = ("crosstalk", "trigger_key", "mean_bias", "finite_sample")


def leakage_row(cfg: TaskConfig, seed: int, n_train: int = 2 ** 11, n_test: int = 2048):
    """One problem's leakage: the attention learned in three steps against as many errors scattered on
    random samples and positions. None when the learned attention reads every training sample right;
    else (f: mis-attended fraction, |leak| / sqrt(f) learned and scattered, errors per token learned and
    scattered, accuracy with oracle / learned / scattered attention in training (oracle at test),
    standard deviation of the leakage term in units of the signal 1/V)."""
    seed = check_int("seed", seed, 0)
    pr = make_problem(cfg, seed)
    tr, te = sample_batch(pr, check_int("n_train", n_train, 1), seed), sample_batch(pr, check_int("n_test", n_test, 1), seed, split="test")
    pk = hard_attention(position_scores(pr, tr, three_steps(pr, tr, "limit").k))     # the one rule
    wrong = pk != tr.pos
    g = generator(seed, "scattered")
    scat = tr.pos.clone()                                    # as many errors, on random samples and positions
    idx = torch.randperm(tr.N, generator=g)[: int(wrong.sum())]
    scat[idx] = (tr.pos[idx] + torch.randint(1, cfg.L, (len(idx),), generator=g)) % cfg.L
    G_o = memory_counts(pr, tr, "oracle").matrix(pr)
    f = float(wrong.double().mean())
    if f == 0:
        return None
    size = lambda att: relative_gap(G_o, memory_counts(pr, tr, att).matrix(pr)) / f ** 0.5          # noqa: E731
    per_token = lambda w: int(w.sum()) / len(torch.unique(tr.informative[w]))               # noqa: E731
    acc = lambda dec: float((dec.logits.argmax(1) == te.labels).double().mean())          # noqa: E731
    dec_pk = decompose(pr, tr, te, pk, "oracle")                # the learned attention in training, oracle at test
    T = centred_step3(pr, dec_pk, te, "oracle")
    return (f, size(pk), size(scat), per_token(wrong), per_token(scat != tr.pos),
            acc(decompose(pr, tr, te, "oracle", "oracle")), acc(dec_pk),
            acc(decompose(pr, tr, te, scat, "oracle")), float(T["leakage"].std()) * cfg.V)


def leak_table(rows) -> str:
    """The rows of `leakage_row` as a text table, 78 characters wide: the share f of mis-attended samples,
    |leak| / sqrt(f) and errors per token (learned and scattered attention), accuracy (oracle, learned,
    scattered), and the leakage's standard deviation over the signal."""
    lines = [f"{'':6}{'|leak| / sqrt(f)':^18}{'errors per token':^18}{'accuracy':^26}{'leakage sd':>10}",
             f"{'f':>6}{'learned':>8}{'scattered':>10}{'learned':>8}{'scattered':>10}{'oracle':>8}"
             f"{'learned':>8}{'scattered':>10}{'/ signal':>10}"]
    for row in rows:
        if len(row) != 9:
            raise ValueError(f"rows must be the 9-tuples of leakage_row, got one of length {len(row)}")
        lines.append("{:6.1%}{:8.2f}{:10.2f}{:8.1f}{:10.1f}{:8.3f}{:8.3f}{:10.3f}{:10.2f}".format(*row))
    return "\n".join(lines)


def term_sds(V: int, d: int, N: int, seed: int, trigger_in_value: bool = True, n_test: int = 1024):
    """Measured standard deviation of each centred term of `TERMS` (at wrong labels; the finite-sample
    term at the correct label) with oracle attention, and its prediction: (measured, predicted) dicts."""
    c = TaskConfig(V=V, d=d, L=4, trigger_in_value=trigger_in_value, dtype="float64", device="cpu")
    pr = make_problem(c, check_int("seed", seed, 0))   # L does not enter the oracle-attention memory: keep it short
    tr, te = sample_batch(pr, check_int("N", N, 1), seed), sample_batch(pr, check_int("n_test", n_test, 1), seed, split="test")
    T = centred_step3(pr, decompose(pr, tr, te, "oracle", "oracle"), te, "oracle")
    wrong = torch.ones(te.N, V, dtype=torch.bool)
    wrong[torch.arange(te.N), te.labels] = False
    at_y = lambda t: t.gather(1, te.labels[:, None])[:, 0]                               # noqa: E731
    meas = {"crosstalk": T["crosstalk"][wrong].std(), "trigger_key": T["trigger_key"][wrong].std(),
            "mean_bias": T["mean_bias"][wrong].std(), "finite_sample": at_y(T["finite_sample"]).std()}
    th = refined_memory_moments(V, d, N, float(pr.z_trig @ pr.z_trig) if trigger_in_value else 0.0)
    return {k: float(v) for k, v in meas.items()}, {k: th[k] ** 0.5 for k in meas}


def knockout_accuracies(cfg: TaskConfig, seed: int, N: int, n_test: int = 2048, terms=TERMS) -> dict:
    """Accuracy of the oracle-attention memory with all centred terms, and without each of `terms`."""
    seed = check_int("seed", seed, 0)
    pr = make_problem(cfg, seed)
    tr, te = sample_batch(pr, check_int("N", N, 1), seed), sample_batch(pr, check_int("n_test", n_test, 1), seed, split="test")
    T = centred_step3(pr, decompose(pr, tr, te, "oracle", "oracle"), te, "oracle")
    unknown = sorted(set(terms) - set(T))
    if unknown:
        raise ValueError(f"terms must be centred step-3 terms, got {unknown}")
    total = sum(T.values())
    acc_of = lambda xi: float((xi.argmax(1) == te.labels).double().mean())               # noqa: E731
    return {"all terms": acc_of(total), **{f"without {k}": acc_of(total - T[k]) for k in terms}}


def logit_spread_coupling(V: int, d: int, seeds) -> float:
    """Correlation over inputs (all V tokens of each problem `seeds`, trigger out, N = infinity) of the
    correct logit and the spread of the same input's wrong logits."""
    xi_y, sd_wrong = [], []
    for seed in seeds:
        pr = make_problem(TaskConfig(V=V, d=d, L=4, trigger_in_value=False, dtype="float64", device="cpu"), seed)
        lg = oracle_memory_logits(pr, torch.ones(V))
        wrong = lg.masked_fill(torch.nn.functional.one_hot(pr.perm, V).bool(), float("nan"))
        xi_y.append(lg.gather(1, pr.perm[:, None])[:, 0])
        sd_wrong.append(torch.sqrt(torch.nanmean((wrong - torch.nanmean(wrong, 1, keepdim=True)) ** 2, 1)))
    if not xi_y:
        raise ValueError("seeds must name at least one problem, got none")
    return float(np.corrcoef(torch.cat(xi_y).numpy(), torch.cat(sd_wrong).numpy())[0, 1])


def orthogonal_rule_runs(cfg: TaskConfig, Ns, n_test: int = 4096):
    """Problem 0 of `cfg` (orthogonal embeddings), batches nested in N: per N of `Ns`, (learned model's
    accuracy, oracle-memory accuracy, accuracy of `lib.theory.orthogonal_recall`, test samples off a tie
    where memory and rule disagree); and the number of tokens exactly on a tie, summed over N."""
    if cfg.embedding != "orthogonal":
        raise ValueError(f"cfg.embedding must be 'orthogonal', got {cfg.embedding!r}")
    V, rows, n_ties = cfg.V, [], 0
    pr = make_problem(cfg, 0)
    te = sample_batch(pr, check_int("n_test", n_test, 1), 0, split="test")
    for N in Ns:
        tr = sample_batch(pr, N, 0)
        a = evaluate(pr, three_steps(pr, tr, "limit").params, batch=te)
        hit = decompose(pr, tr, te, "oracle", "oracle").logits.argmax(1) == te.labels
        counts = torch.bincount(tr.informative, minlength=V)
        rule = orthogonal_recall(counts, cfg.tau ** 2, cfg.trigger_in_value)[te.informative]
        if cfg.trigger_in_value:   # a token exactly on the tie (1 + tau^2) n_x = tau^2 max_{j != x} n_j: rounding decides
            other = torch.stack([torch.cat([counts[:x], counts[x + 1:]]).max() for x in range(V)])
            tie = ((1 + cfg.tau ** 2) * counts == cfg.tau ** 2 * other) & (counts > 0)
        else:
            tie = torch.zeros(V, dtype=torch.bool)
        n_ties += int(tie.sum())
        off = ~tie[te.informative]
        rows.append((a.acc, float(hit.double().mean()), float(rule.double().mean()), int((hit != rule)[off].sum())))
    return rows, n_ties


def capacity_row(V: int, d: int, problems: int) -> tuple:
    """At N = infinity, trigger out: (V, mean accuracy of the exact centred memory, its standard error,
    mean accuracy of chapter 2's one-step memory of V pairs, its standard error, predicted accuracy),
    over problems 0 .. problems-1."""
    V, d, n = check_int("V", V, 2), check_int("d", d, 1), check_int("problems", problems, 2)
    c = TaskConfig(V=V, d=d, L=4, trigger_in_value=False, device="cpu")
    ex = np.array([oracle_memory_accuracy(make_problem(c, s), torch.ones(V)) for s in range(n)])
    h = np.array([recall_accuracy(m, hebbian(m)) for m in (make_memory(V, d, seed=s) for s in range(n))])
    return (V, ex.mean(), ex.std(ddof=1) / n ** 0.5, h.mean(), h.std(ddof=1) / n ** 0.5,
            refined_memory_accuracy(V, d, math.inf, 0.0))


def first_crossing(x, y, level: float = 0.99) -> float:
    """Where y, above `level` at x[0], first falls below it, interpolated linearly between grid points;
    nan if y[0] is below `level` or y never falls below it."""
    x, y = list(x), list(y)
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"x and y must have the same length >= 2, got {len(x)} and {len(y)}")
    if y[0] < level:
        return float("nan")
    j = first_index(np.asarray(y, dtype=float) < level)
    return float("nan") if j is None else between(x, y, j, level)


def nstar_row(V: int, d: int, trigger_in_value: bool, problems: int, threshold: float = 0.99) -> tuple:
    """N* of the exact oracle-attention memory (mean over `problems` problems) on a grid of N in steps
    of 2^(1/4) around the predicted N* (from 2^13 up when none is predicted): (V, d, trigger_in_value,
    predicted N*, first N where the mean reaches `threshold`, the same for mean + 3 s.e. and mean - 3
    s.e. (None when never), mean accuracy at the last N, last N)."""
    p = refined_memory_nstar(V, d, 1.0 if trigger_in_value else 0.0)
    Ns = [int((p or 2 ** 13) * 2 ** (k / 4)) for k in range(-6, 5 if p else 13)]
    m, se = oracle_memory_curve(TaskConfig(V=V, d=d, L=4, trigger_in_value=trigger_in_value, device="cpu"), Ns,
                                check_int("problems", problems, 2))
    first = lambda ok: Ns[int(np.argmax(ok))] if ok.any() else None                     # noqa: E731
    return (V, d, trigger_in_value, p, first(m >= threshold), first(m + 3 * se >= threshold),
            first(m - 3 * se >= threshold), m[-1], Ns[-1])


def nstar_table(rows, problems: int) -> str:
    """The rows of `nstar_row` as a text table."""
    lines = [f"\n V    d  trigger  predicted N*  measured N* (mean of {problems} problems; range at ±3 s.e.)"]
    for V_, d_, tiv, p, m, lo, hi, m_last, N_last in rows:
        if m is None:
            lines.append(f"{V_:4d} {d_:4d}  {'in ' if tiv else 'out'}      {str(p):>8s}      none up to N = {N_last} "
                         f"(mean accuracy {m_last:.4f})")
        else:
            lines.append(f"{V_:4d} {d_:4d}  {'in ' if tiv else 'out'}      {str(p):>8s}      {m:>6d}  [{lo}, {hi}]")
    return "\n".join(lines)


def median_trigger_gap(problem: Problem, test: Batch, k: torch.Tensor) -> float:
    """Median over test samples of the lead of the informative position's score along k / |k| over the
    best other position (for an even count, the mean of the two middle values, as `statistics.median`)."""
    sc = position_scores(problem, test, k / k.norm())
    gap = sc.gather(1, test.pos[:, None]) - sc.scatter(1, test.pos[:, None], -float("inf"))
    return float(gap.min(1).values.double().quantile(0.5))


def agreement_with_limit(problem: Problem, train: Batch, test: Batch, limit_params, step_sizes) -> list:
    """For each StepSizes of `step_sizes`: the fraction of test predictions of finite mode equal to
    those of limit mode (`limit_params`)."""
    p_lim = predict(problem, limit_params, test)
    return [float((predict(problem, three_steps(problem, train, "finite", step_sizes=s).params, test) == p_lim)
                  .double().mean()) for s in step_sizes]


def read_counts(problem: Problem, batch: Batch, attn: torch.Tensor) -> tuple:
    """The count tables of a step-3 memory whose training samples read positions `attn` (N,):
    n_ok (V,), the correctly attended samples per informative token, and M (V, V), the mis-attended
    samples per token read (row) and label (column); float64."""
    attn = torch.as_tensor(attn)
    if attn.shape != batch.pos.shape:
        raise ValueError(f"attn must hold one position per sample, shape {tuple(batch.pos.shape)}, got {tuple(attn.shape)}")
    V = problem.cfg.V
    ok = attn == batch.pos
    n_ok = torch.bincount(batch.informative[ok], minlength=V).double()
    read = batch.tokens[torch.arange(batch.N), attn]
    M = torch.zeros(V, V, dtype=torch.float64)
    M.index_put_((read[~ok], batch.labels[~ok]), torch.ones(int((~ok).sum()), dtype=torch.float64), accumulate=True)
    return n_ok, M


def key_term_samples(V: int, d: int, s2: float, samples: int, gen: torch.Generator) -> torch.Tensor:
    """Monte Carlo of the trigger read as a key with orthonormal label vectors (chapter 6's exercise):
    orthonormal u_1..u_V in R^d, a permutation Pi, a shared vector s with |s|^2 = s2 and `samples`
    draws of Gaussian token embeddings e_i ~ N(0, I/d); returns the term (1/V) sum_i (e_i . s) a_ki at
    the label k = Pi(1), a_ki = u_k . (u_{Pi i} - u_bar), one value per draw. Draws from `gen` in that order."""
    V, d, samples = check_int("V", V, 2), check_int("d", d, 1), check_int("samples", samples, 2)
    if d < V:
        raise ValueError(f"d must be at least V = {V} for orthonormal label vectors, got {d}")
    if not s2 > 0:
        raise ValueError(f"s2 must be positive, got {s2!r}")
    U = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))[0][:V]
    perm = torch.randperm(V, generator=gen)
    s = torch.randn(d, generator=gen, dtype=torch.float64)
    s = s * (s2 / float(s @ s)) ** 0.5
    A = U @ (U[perm] - U.mean(0)).T                  # a_ki
    E = torch.randn(samples, V, d, generator=gen, dtype=torch.float64) / d ** 0.5
    return (E @ s) @ A[int(perm[1])] / V             # a label (the term is the same for every input)
