"""Lower bounds and the estimators that meet them (chapter 9). The book's own derivations.

Counting (rigorous).  A permutation of V labels takes log2(V!) bits. A decoder that must get at least
a fraction t of the tokens right for *every* permutation needs at least log2((V - k)!) bits,
k = floor((1 - t) V) the errors allowed (`counting_bits`); with P parameters of b bits each,
`counting_capacity` is the largest V that fits.

Coverage (rigorous, any estimator).  A token that was never the informative one of a training sample
has a label that the data do not constrain beyond "not one of the labels already seen". With Pi*
uniform, the best possible expected accuracy (oracle attention at test, positions and token ids known
in training) is exactly  E[S]/V + P(S < V)/V,  S the number of distinct informative tokens
(`coverage_accuracy`), at most 1 - (1 - 1/V)^N + 1/V, so accuracy t needs N >= `coverage_nstar`.

First-gradient statistics (the lemma is proved; the requirement N_G1 is a heuristic for one estimator).  G1 = (1/(N L)) sum_{k,j} C[k, j] (u_k - u_bar) e_j^T
(trigger out of the value path) is a function of the label/token co-occurrence table C
(`cooccurrence`, `g1_from_counts`), which does not record positions. `readout_scores` (the matched
read-out a_k^T G1 e_j) and `inversion_scores` (least squares C_hat = A^+ G1 E^+ with the label-frequency
bias removed) are two estimators of Pi* from G1 alone; `g1_nstar` is the book's signal-to-noise
heuristic for the inversion read column by column (the requirement of that one estimator, not a
lower bound for functions of G1).

`assignment` turns the inversion scores into a permutation (maximum-weight assignment), a better
first-gradient estimator than the column-wise argmax. `estimator_nstars` measures the critical N of
these estimators on nested batches (one count table, grown chunk by chunk), and `three_steps_nstar`
that of the three steps by the same rule on the same grid, problems and data.

The attention lower bound (`attention_lower_bound`, in `lowerbound_attention`, re-exported here): no
embedding-blind function of the step-2 direction k of N samples (the three steps' k included) locates the
informative position with mean accuracy >= t below N_lower(V, d, L, t), in which N, d and L enter
together (chapter 9's theorem for embedding-blind learners).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..core.config import TaskConfig, check_float, check_int
from ..core.embeddings import Problem, check_problem, make_problem
from ..core.grid import stays_from
from ..core.search import first_true_real
from ..core.task import Batch, check_batch, sample_batch
from .lowerbound_attention import (accuracy_ceiling, attention_lower_bound, class_accuracy_path,  # noqa: F401
                                   critical_ratio, distinct_law, excess_noise_floor, gaussian_mixture_accuracy,
                                   n_grid, reduction_constants, step2_direction, theta_scan)
from .lowerbound_pairs import (EVEN, best_direction, learner_directions, member_noise, model_table,  # noqa: F401
                               pair_ceiling, pair_lower_bound, pair_moments, pair_noise_floor, pair_nstar, pair_row,
                               pair_table, self_terms, shipped_pair_rows)

ESTIMATORS = ("bayes", "matched", "readout", "inversion", "assignment")


def _check_threshold(threshold) -> float:
    t = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    if t == 1.0:
        raise ValueError("threshold must be < 1, got 1.0")
    return t


# ----------------------------------------------------------------------------- counting

def log2_factorial(n: int) -> float:
    """log2(n!) (exact to float rounding, via lgamma)."""
    n = check_int("n", n, 0)
    return math.lgamma(n + 1) / math.log(2)


def counting_bits(V: int, threshold: float = 1.0) -> float:
    """Bits any decoder needs to recall at least a fraction `threshold` of V tokens for every
    permutation: log2((V - k)!), k = floor((1 - threshold) V) errors allowed. (Pigeonhole: one decoded
    map is within k errors of at most V!/(V - k)! permutations.)"""
    V = check_int("V", V, 1)
    t = check_float("threshold", threshold, 0.0, 1.0)
    k = math.floor((1.0 - t) * V + 1e-9)
    return log2_factorial(V - k)


def counting_capacity(params: float, bits: float, threshold: float = 1.0) -> int:
    """Largest V with counting_bits(V, threshold) <= params * bits (0 if even V = 1 does not fit)."""
    params = check_float("params", params, 0.0, strict_min=True)
    bits = check_float("bits", bits, 0.0, strict_min=True)
    t = check_float("threshold", threshold, 0.0, 1.0)
    budget = params * bits
    from ..core.search import largest_true
    return largest_true(lambda V: counting_bits(V, t) <= budget)   # counting_bits is nondecreasing in V


# ----------------------------------------------------------------------------- coverage

def seen_distribution(N: int, V: int) -> np.ndarray:
    """(V + 1,) P(S = s): S the number of distinct tokens among N uniform draws from V (the chain
    s -> s + 1 with probability (V - s)/V, by repeated squaring of its transition matrix)."""
    N, V = check_int("N", N, 0), check_int("V", V, 1)
    s = np.arange(V + 1)
    T = np.diag(s / V)
    T[s[:-1], s[:-1] + 1] = (V - s[:-1]) / V
    p = np.zeros(V + 1)
    p[0] = 1.0
    M, n = T, N
    while n:
        if n & 1:
            p = p @ M
        M = M @ M
        n >>= 1
    return p


def coverage_accuracy(N: int, V: int) -> float:
    """The best expected test accuracy of any estimator after N samples (Pi* uniform, oracle attention
    at test): E[S]/V + P(S < V)/V. Seen tokens are recalled; an unseen one's label is uniform over the
    V - S labels not yet seen, so a guess is right with probability 1/(V - S)."""
    N, V = check_int("N", N, 0), check_int("V", V, 1)
    p = seen_distribution(N, V)
    return float(p @ np.arange(V + 1) / V + (1.0 - p[V]) / V)


def coverage_nstar(V: int, threshold: float = 0.99) -> float:
    """The real N at which 1 - (1 - 1/V)^N + 1/V (an upper bound on `coverage_accuracy`) equals the
    threshold: log(1 - t + 1/V) / log(1 - 1/V). Any estimator whose expected accuracy reaches t has
    N >= this. 0 when t <= 1/V."""
    V = check_int("V", V, 2)
    t = _check_threshold(threshold)
    slack = 1.0 - t + 1.0 / V
    return 0.0 if slack >= 1.0 else math.log(slack) / math.log(1.0 - 1.0 / V)


def coverage_exact_nstar(V: int, threshold: float = 0.99) -> int:
    """Smallest integer N with coverage_accuracy(N, V) >= threshold (`lib.core.search.smallest_true`)."""
    V = check_int("V", V, 2)
    t = _check_threshold(threshold)
    from ..core.search import smallest_true
    ok = lambda N: coverage_accuracy(N, V) >= t
    return 0 if ok(0) else smallest_true(ok)


# ----------------------------------------------------------------------------- first-gradient statistics

def _check_problem(problem) -> Problem:
    check_problem(problem)
    if problem.cfg.model != "attn" or problem.cfg.eos_key or problem.cfg.noise_vocab:
        raise ValueError("problem must be the attention-only model without EOS key or noise vocabulary")
    return problem


def cooccurrence(problem: Problem, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """C (V, V) float64: C[k, j] = #{(n, t): y_n = k, x_{n,t} = j}, and n (V,): how often each token
    was the informative one. C keeps no positions: it is the same whichever token of a sample is
    marked, as long as the label is."""
    _check_problem(problem)
    check_batch(problem, batch)
    V = problem.cfg.V
    ids = (batch.labels[:, None] * V + batch.tokens).reshape(-1)
    C = torch.bincount(ids, minlength=V * V).view(V, V).to(torch.float64)
    n = torch.bincount(batch.informative, minlength=V).to(torch.float64)
    return C, n


def _dU(problem: Problem) -> torch.Tensor:
    U = problem.U.double()
    return U - U.mean(0)                                           # (V, d): a_k = u_k - u_bar


def g1_from_counts(problem: Problem, C: torch.Tensor, N: int) -> torch.Tensor:
    """(d, d): G1 = sum_{k,j} C[k, j] a_k e_j^T / (N L) (+ the trigger's part when it is in the value
    path: (1/L) sum_k (m_k/N) a_k z^T, m_k = sum_j C[k, j] / L the label counts). Equals the step-1
    G1 of `lib.three_steps`."""
    _check_problem(problem)
    N = check_int("N", N, 1)
    cfg = problem.cfg
    E, dU = problem.E.double(), _dU(problem)
    G1 = dU.T @ C @ E / (N * cfg.L)
    if cfg.trigger_in_value:
        m = C.sum(1) / cfg.L
        G1 = G1 + torch.outer(dU.T @ m, problem.z_trig.double()) / (N * cfg.L)
    return G1


def readout_scores(problem: Problem, G1: torch.Tensor) -> torch.Tensor:
    """(V, V): S[k, j] = a_k^T G1 e_j, the matched read-out (label k for token j)."""
    _check_problem(problem)
    return _dU(problem) @ G1 @ problem.E.double().T


def inversion_scores(problem: Problem, G1: torch.Tensor, pinvs=None) -> torch.Tensor:
    """(V, V): the least-squares table C_hat = (A^T)^+ G1 E^+ (the co-occurrence table itself, up to a
    label-independent shift, when d >= V; its projection onto d-dimensional spaces otherwise), minus
    each label's frequency bias (L - 1)/(L V) sum_j C_hat[k, j]."""
    _check_problem(problem)
    L, V = problem.cfg.L, problem.cfg.V
    PA, PE = _pinvs(problem) if pinvs is None else pinvs
    Ch = PA @ G1 @ PE
    return Ch - (L - 1) / (L * V) * Ch.sum(1, keepdim=True)


def _pinvs(problem: Problem) -> tuple[torch.Tensor, torch.Tensor]:
    """((A^T)^+, E^+): the two pseudo-inverses of `inversion_scores` (computed once per problem)."""
    return torch.linalg.pinv(_dU(problem).T), torch.linalg.pinv(problem.E.double())


def matched_scores(problem: Problem, n: torch.Tensor) -> torch.Tensor:
    """(V, V): the one-step memory written with known positions, M = sum_j n_j a_{Pi j} e_j^T, read as
    a_k^T M e_j (chapter 6's step-3 memory with perfect attention, trigger out of the value path)."""
    _check_problem(problem)
    dU, E = _dU(problem), problem.E.double()
    M = dU[problem.perm].T @ (n[:, None] * E)                      # (d, d)
    return dU @ M @ E.T


def token_accuracy(problem: Problem, scores: torch.Tensor) -> float:
    """Fraction of tokens j whose best label argmax_k scores[k, j] is Pi*(j): the expected test
    accuracy with oracle attention at test."""
    _check_problem(problem)
    return float((scores.argmax(0) == problem.perm).double().mean())


def assignment(W) -> np.ndarray:
    """Maximum-weight assignment of a square score table W[k, j] (label k, token j): the permutation
    pi maximising sum_j W[pi(j), j], returned as (V,) labels pi(j) (scipy.optimize.linear_sum_assignment;
    where several permutations tie, the one it returns). Used on `inversion_scores`: Pi* is a permutation, and the
    assignment is unchanged by adding a constant to a column, so it is a function of G1 too."""
    from scipy.optimize import linear_sum_assignment
    W = np.asarray(W.cpu() if isinstance(W, torch.Tensor) else W, dtype=float)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or not np.isfinite(W).all():
        raise ValueError(f"W must be a finite square table, got shape {W.shape}")
    rows, cols = linear_sum_assignment(W, maximize=True)
    out = np.empty(W.shape[0], dtype=int)
    out[cols] = rows
    return out


def assigned_labels(problem: Problem, scores: torch.Tensor) -> torch.Tensor:
    """(V,) long: the label pi(j) of each token j under the maximum-weight assignment of `scores` (V, V), label
    k by token j. The scores are rounded to 9 significant digits of their largest entry first, so that ties
    broken by float round-off (which depends on the thread count) are broken the same way every time."""
    _check_problem(problem)
    V = problem.cfg.V
    if not isinstance(scores, torch.Tensor) or scores.shape != (V, V):
        raise ValueError(f"scores must be a ({V}, {V}) tensor")
    W = scores.cpu().numpy()
    W = np.round(W / max(float(np.abs(W).max()), 1e-300), 9)       # exact ties (integer counts at d >= V) stay
    return torch.as_tensor(assignment(W), dtype=torch.long)        # ties, whatever the float rounding


def assignment_accuracy(problem: Problem, scores: torch.Tensor) -> float:
    """Fraction of tokens j whose label under the maximum-weight assignment of `scores` is Pi*(j)
    (`assigned_labels`)."""
    return float((assigned_labels(problem, scores) == problem.perm.cpu()).double().mean())


def bayes_accuracy(n: torch.Tensor) -> float:
    """Expected accuracy of the Bayes estimator given which tokens were seen: S/V + 1[S < V]/V."""
    V = n.numel()
    S = int((n > 0).sum())
    return S / V + (1.0 / V if S < V else 0.0)


def first_stable(Ns, accs, threshold: float):
    """First N from which every accuracy (to the end of the grid) is >= threshold; None if the last is not."""
    Ns, accs = list(Ns), np.asarray(list(accs), dtype=float)
    if len(Ns) != len(accs):
        raise ValueError(f"Ns and accs must have the same length, got {len(Ns)} and {len(accs)}")
    i = stays_from(accs >= threshold)
    return None if i is None else Ns[i]


def accuracy_curves(cfg: TaskConfig, seed: int = 0, n_min: int = 16, n_max: int = 2 ** 16,
                    per_octave: int = 4, estimators=ESTIMATORS) -> tuple[list[int], dict]:
    """Accuracy of each estimator on the grid `n_grid(n_min, n_max, per_octave)`, for problem `seed`
    and the nested batch `sample_batch(problem, n_max, seed)` (the data the three steps of `lib.run`
    see for the same seed). The count table grows chunk by chunk: O(n_max L + grid V^2 d)."""
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    for e in estimators:
        if e not in ESTIMATORS:
            raise ValueError(f"estimators must be among {', '.join(ESTIMATORS)}; got {e!r}")
    problem = make_problem(cfg, check_int("seed", seed, 0))
    _check_problem(problem)
    Ns = n_grid(n_min, n_max, per_octave)
    batch = sample_batch(problem, Ns[-1], seed)
    V = cfg.V
    C = torch.zeros(V, V, dtype=torch.float64, device=problem.E.device)     # grown chunk by chunk
    n = torch.zeros(V, dtype=torch.float64, device=problem.E.device)
    accs = {e: [] for e in estimators}
    pinvs = _pinvs(problem) if {"inversion", "assignment"} & set(estimators) else None
    start = 0
    for N in Ns:
        dC, dn = cooccurrence(problem, batch.slice(start, N))
        C, n, start = C + dC, n + dn, N
        G1 = g1_from_counts(problem, C, N) if {"readout", "inversion", "assignment"} & set(estimators) else None
        for e in estimators:
            if e == "bayes":
                a = bayes_accuracy(n)
            elif e == "matched":
                a = token_accuracy(problem, matched_scores(problem, n))
            elif e == "readout":
                a = token_accuracy(problem, readout_scores(problem, G1))
            elif e == "inversion":
                a = token_accuracy(problem, inversion_scores(problem, G1, pinvs))
            else:
                a = assignment_accuracy(problem, inversion_scores(problem, G1, pinvs))
            accs[e].append(a)
    return Ns, accs


def estimator_nstars(cfg: TaskConfig, threshold: float = 0.99, seed: int = 0, n_min: int = 16,
                     n_max: int = 2 ** 16, per_octave: int = 4, estimators=ESTIMATORS) -> dict:
    """{estimator: N*} for problem `seed`: the first grid N from which the accuracy stays >= threshold
    (None: not reached by n_max), on the same axes as chapter 7's N*."""
    t = _check_threshold(threshold)
    Ns, accs = accuracy_curves(cfg, seed, n_min, n_max, per_octave, estimators)
    return {e: first_stable(Ns, a, t) for e, a in accs.items()}


# ----------------------------------------------------------------------------- the heuristic N for G1

def _sizes(V, d, L, threshold):
    return (check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 2), _check_threshold(threshold))


def leakage(V: int, d: int) -> tuple[float, float]:
    """(rival, correct): the variance that the other V - 1 planted facts add to a score of the inversion,
    relative to the squared signal, when d < V (0 when d >= V). A rival entry C_hat[k, j] receives two
    single leaks (the true fact of token j through P_A, the fact of label k through P_E), each of
    relative variance (V - d)/(V d) to leading order, plus the sum of V - 2 double leaks, (V - d)^2/(V d^2):
    in all (V - d)(V + d)/(V d^2). The correct entry has no single leaks, but its signal is scaled by the
    two diagonals of the projections, each of relative variance 2 (V - d)/(d (V + 2)) (the Beta law of a
    diagonal entry of a uniformly random rank-d projection): (V - d)^2/(V d^2) + 4 (V - d)/(d (V + 2))."""
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    if d >= V:
        return 0.0, 0.0
    double = (V - d) ** 2 / (V * d * d)
    return double + 2 * (V - d) / (V * d), double + 4 * (V - d) / (d * (V + 2))


def g1_inverse_snr2(N, V: int, d: int, L: int) -> float:
    """1/r^2 of the inversion estimator's point margin (the book's heuristic, in units of a rival's
    spread): (L - 1) max(1, V/d)^2 / N from the count noise of C seen through d-dimensional
    projections, + the rival's leakage (V - d)(V + d)/(V d^2) when d < V (`leakage`)."""
    N = check_float("N", N, 0.0, strict_min=True)
    V, d, L, _ = _sizes(V, d, L, 0.5)
    return (L - 1) * max(1.0, V / d) ** 2 / N + leakage(V, d)[0]


_Z = np.linspace(-9.0, 9.0, 361)                                  # trapezoid nodes: smooth integrand
_PHI = np.exp(-_Z * _Z / 2) / math.sqrt(2 * math.pi)


def g1_accuracy(N: float, V: int, d: int, L: int) -> float:
    """The inversion estimator's expected accuracy (the book's heuristic). A token seen n times as the
    informative one has a correct score of mean 1 and variance s_c^2, and V - 1 rivals of mean 0 and
    variance s_r^2 (in units of the signal): s^2 = (L - 1) N max(1, V/d)^2 / (V n)^2 + leakage; it is
    recalled with probability int phi(z) Phi((1 + s_c z)/s_r)^(V - 1) dz; n ~ Poisson(N/V). An unseen
    token (n = 0) is right with probability 1/V (the Bayes estimator does a little better, 1/(V - S):
    coverage is included only approximately)."""
    from ..theory import _normal_cdf
    N = check_float("N", N, 0.0, strict_min=True)
    V, d, L, _ = _sizes(V, d, L, 0.5)
    lam = N / V
    lo, hi = max(0, int(lam - 9 * math.sqrt(lam) - 9)), int(lam + 9 * math.sqrt(lam) + 9)
    n = np.arange(lo, hi + 1, dtype=float)                        # the Poisson mass, to ~1e-17
    logp = n * math.log(lam) - lam - np.array([math.lgamma(k + 1) for k in n])
    pos = n > 0
    count = (L - 1) * N * max(1.0, V / d) ** 2 / (V * np.where(pos, n, 1.0)) ** 2
    leak_r, leak_c = leakage(V, d)
    s_r, s_c = np.sqrt(count + leak_r), np.sqrt(count + leak_c)
    x = (1.0 + s_c[:, None] * _Z[None, :]) / s_r[:, None]
    acc = np.trapezoid(_PHI * _normal_cdf(x) ** (V - 1), _Z, axis=1)
    acc = np.where(pos, acc, 1.0 / V)
    return float(np.exp(logp) @ acc)


def g1_nstar(V: int, d: int, L: int, threshold: float = 0.99, n_max: float = 2.0 ** 22) -> float:
    """Smallest real N (to 0.5 %) at which `g1_accuracy` reaches the threshold; inf if not by n_max
    (past the wall: the projected facts alone leave the margin below what V - 1 rivals need)."""
    V, d, L, t = _sizes(V, d, L, threshold)
    n_max = check_float("n_max", n_max, 1.0, 1e300)
    return first_true_real(lambda N: g1_accuracy(N, V, d, L) >= t, 1.0, n_max, 0.005, grow=True)


def three_steps_nstar(cfg: TaskConfig, threshold: float = 0.99, seed: int = 0, n_min: int = 16,
                      n_max: int = 2 ** 16, per_octave: int = 4, n_test: int = 2048) -> int | None:
    """The three steps' (limit mode) N* by the rule of `estimator_nstars`: the first N of
    `n_grid(n_min, n_max, per_octave)` from which the test accuracy (n_test fresh samples) stays >=
    threshold, on problem `seed` and the nested data `sample_batch(problem, N, seed)` (the estimators'
    data). Evaluated from the top of the grid down, stopping at the first failure (the rule needs no
    more); None if the accuracy at n_max is below the threshold."""
    from ..learning.evaluate import evaluate
    from ..learning.schedule import three_steps
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    t = _check_threshold(threshold)
    problem = make_problem(cfg, check_int("seed", seed, 0))
    n_test = check_int("n_test", n_test, 1)
    Ns = n_grid(n_min, n_max, per_octave)
    batch = sample_batch(problem, Ns[-1], seed)
    test = sample_batch(problem, n_test, seed, split="test")
    out = None
    for N in reversed(Ns):
        if evaluate(problem, three_steps(problem, batch.slice(0, N)), batch=test).acc < t:
            break
        out = N
    return out
