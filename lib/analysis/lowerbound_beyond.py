"""Learners outside chapter 9's pair-statistic class, measured against its bound (the book's own measurement).

The class P_N of `lowerbound_pairs` fixes the weights on the sample pairs before the batch. Step 2 reads the first
gradient G1 as a memory; the learners here keep step 2 and replace that memory by one written from a permutation
pi of the labels, M_pi = sum_j a_{pi(j)} e_j^T: pi the maximum-weight assignment of G1's inversion scores (a
nonlinear function of G1, so the pair weights depend on the batch), the same pi read out as the embedding of the
token it names, pi the assignment of the co-occurrence table with each column's mean removed (which G1
determines, for almost every draw of the embeddings), and pi = Pi* itself (a learner told the permutation). `beyond_row` measures their exact attention
accuracy along the pair grid's nested batches; `beyond_table` reads each one's requirement beside the bound N_P of
the same problems.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.config import check_int
from .lowerbound import _dU, _pinvs, assigned_labels, cooccurrence, g1_from_counts, inversion_scores
from .lowerbound_attention import _threshold
from .lowerbound_pairs import POINT, _points, _step2, nested_row, pair_nstar

BEYOND = ("assigned_memory", "assigned_readout", "decoded", "told")


def assigned_directions(problem, batch, N: int, counts=None, pinvs=None) -> dict:
    """Step 2 of four learners *outside* the class P_N, on the first N samples of `batch` (limit mode). Each
    replaces the first gradient's read-out by one built from a permutation:
    "assigned_memory": estimate Pi* from G1 by the maximum-weight assignment of its inversion scores
    (`lowerbound.assigned_labels`, chapter 9's G1 assignment estimator: a nonlinear function of G1), write the
    one-step memory M = sum_j a_{pi(j)} e_j^T, and take step 2 with it: the read-out for label y is M^T a_y;
    "assigned_readout": the same assignment, read out as the embedding of the token it names for label y (no
    value matrix gives this read-out: the a_y sum to zero);
    "decoded": the memory M written with the maximum-weight assignment of PC, the co-occurrence table C with
    each column's mean over the labels removed. For embeddings drawn independently with densities (d >= 1) or
    uniform on spheres (d >= 2), G1 determines PC with probability one (chapter 9's proposition), so this
    memory is a map of G1 (for d >= V least squares recovers PC; for d < V decoding is an integer problem that no
    practical learner solves: exact arithmetic);
    "told": the memory written with Pi* itself (not a function of the data: a learner told the permutation).
    The weights on the sample pairs depend on the batch (through the assignment), so none is a member of P_N.
    Returns the four (d,) directions (in the problem's dtype), "recovered" and "recovered_decoded", the fraction
    of tokens whose label the assignment of G1's inversion scores, and of PC, gets right. `counts`: the co-occurrence table of the first N samples
    (`lowerbound.cooccurrence`, saves recounting along a nested grid); `pinvs`: `lowerbound._pinvs(problem)`."""
    import torch

    from ..core.task import check_batch
    from .margins import _check_population
    _check_population(problem, "assigned_directions")
    check_batch(problem, batch)
    cfg = problem.cfg
    N = check_int("N", N, 1)
    if N > batch.N:
        raise ValueError(f"N must be <= the batch's {batch.N} samples, got {N}")
    V = cfg.V
    if counts is None:
        counts = cooccurrence(problem, batch.slice(0, N))[0]
    elif (not isinstance(counts, torch.Tensor) or counts.shape != (V, V)
          or abs(float(counts.sum()) - N * cfg.L) > 0.5):
        raise ValueError(f"counts must be the ({V}, {V}) co-occurrence table of the first {N} samples")
    f64 = torch.float64
    G1 = g1_from_counts(problem, counts.to(f64), N)
    pi = assigned_labels(problem, inversion_scores(problem, G1, _pinvs(problem) if pinvs is None else pinvs))
    E, z = problem.E[:V].to(f64), problem.z_trig.to(f64)
    dU, perm = _dU(problem).cpu(), problem.perm.cpu()
    x, l = batch.tokens[:N].long().cpu(), batch.pos[:N].long().cpu()
    E, z = E.cpu(), z.cpu()
    C = counts.to(f64)
    pi_c = assigned_labels(problem, C - C.mean(0, keepdim=True))     # from PC, which G1 determines
    named = torch.empty(V, dtype=torch.long)
    named[pi] = torch.arange(V)                                       # named[y]: the token the assignment gives label y
    dt = problem.E.dtype
    out = {"assigned_memory": _step2(E, z, x, l, (dU[perm] @ dU[pi].T) @ E, cfg.trigger_in_value),
           "assigned_readout": _step2(E, z, x, l, E[named[perm]], cfg.trigger_in_value),
           "decoded": _step2(E, z, x, l, (dU[perm] @ dU[pi_c].T) @ E, cfg.trigger_in_value),
           "told": _step2(E, z, x, l, (dU[perm] @ dU[perm].T) @ E, cfg.trigger_in_value)}
    out = {k: v.to(device=problem.E.device, dtype=dt) for k, v in out.items()}
    out["recovered"] = float((pi == perm).double().mean())
    out["recovered_decoded"] = float((pi_c == perm).double().mean())
    return out


BEYOND_FILE = "ch09_beyond.jsonl"


def beyond_row(cfg, seed: int, n_max: int = 2 ** 15) -> dict:
    """One row of chapter 9's grid of learners outside the class (`scripts/pair_bound_grid.py --beyond`): the
    exact attention accuracy of each of BEYOND (`assigned_directions`) and the fractions of Pi* the two
    assignments recover ("recovered": of G1's inversion scores; "recovered_decoded": of the centred table), on
    the first N samples of the same problem and batch as `pair_row(cfg, seed, n_max)`, at every N of
    `n_grid(2, n_max)`."""
    from .margins import attention_accuracy
    p, b, Ns, head = nested_row(cfg, seed, n_max)
    out = {k: [] for k in (*BEYOND, "recovered", "recovered_decoded")}
    pinvs, counts, start = _pinvs(p), 0, 0
    for N in Ns:
        counts, start = counts + cooccurrence(p, b.slice(start, N))[0], N
        dirs = assigned_directions(p, b, N, counts, pinvs)
        for k in BEYOND:
            out[k].append(attention_accuracy(p, dirs[k]))
        out["recovered"].append(dirs["recovered"])
        out["recovered_decoded"].append(dirs["recovered_decoded"])
    return {**head, **out}


def shipped_beyond_rows() -> list:
    """The rows of `beyond_row` shipped with the book (draw 0; the problems and batches of `shipped_pair_rows`)."""
    import json
    import os
    from .attention_curve import CURVES_DIR
    with open(os.path.join(CURVES_DIR, BEYOND_FILE)) as f:
        return [json.loads(line) for line in f if line.strip()]


def beyond_table(rows, pair_rows, threshold: float = 0.99) -> list:
    """One dict per point of `rows` (`beyond_row` dicts, >= 2 problems per point): "bound", N_P of the same
    problems (their moments from the `pair_row` dicts `pair_rows`, matched by point and seed; every problem of
    `rows` must have one), for each learner of BEYOND its requirement on the mean curve ("<learner>", "_lo",
    "_hi", as `pair_table`), and "recovered_at_bound" ("recovered_decoded_at_bound"), the mean over the problems
    of the fraction of Pi* the assignment of G1's inversion scores (of the centred table) recovers at the largest grid N not above the
    bound (nan when the bound is below the grid or inf)."""
    from .attention_curve import requirement
    t = _threshold(threshold)
    moments = {(*(r[k] for k in POINT), r["seed"]): r["moments"] for r in pair_rows}
    out = []
    for key, g, Ns in _points(rows):
        missing = [r["seed"] for r in g if (*key, r["seed"]) not in moments]
        if missing:
            raise ValueError(f"pair_rows must hold the problems of rows; missing seeds {missing} at {key}")
        bound = pair_nstar([moments[(*key, r["seed"])] for r in g], t)
        row = dict(zip(POINT, key), problems=len(g), bound=bound)
        for k in BEYOND:
            req = requirement(np.array([r[k] for r in g]), Ns, t)
            row[k], row[k + "_lo"], row[k + "_hi"] = req["nstar"], req["lo"], req["hi"]
        below = [i for i, N in enumerate(Ns) if N <= bound]
        for k in ("recovered", "recovered_decoded"):
            row[k + "_at_bound"] = (float(np.mean([r[k][below[-1]] for r in g]))
                                    if below and math.isfinite(bound) else math.nan)
        out.append(row)
    return out
