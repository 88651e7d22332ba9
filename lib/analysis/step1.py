"""Step 1 measured (chapter 4): the one-step memory's logit terms pooled over problems and swept along
one parameter, the accuracy of the model after step 1 alone, and coverage of the vocabulary by a batch.

Units are those of `lib.theory.step1_term_moments`: the mean signal 1 / (V L^2). Tested in
tests/test_step1.py.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.config import TaskConfig, check_int
from ..core.embeddings import Problem, make_problem
from ..core.models import Params, zero_params
from ..core.task import sample_batch
from ..learning.evaluate import evaluate
from ..theory import coverage_mean, coverage_var, step1_signal_unit, step1_term_moments
from .decompose import memory_counts, pooled_terms

# the step-1 terms, and the sum of the two shared ones (their |z|^2 / L^2 parts cancel)
STEP1_TERMS = ("signal", "crosstalk", "other_tokens", "trigger", "ubar", "trigger+ubar")


def step1_terms(cfg, N: int, seeds, n_test: int = 300, max_off: int = 20_000) -> dict:
    """Each step-1 term at the correct label and at wrong labels, pooled over problems `seeds`, in
    units of 1/(V L^2), with "trigger+ubar" added: {name: (at, off, per-seed means at y)}
    (`lib.analysis.decompose.pooled_terms` with uniform attention on both sides)."""
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must name at least one problem, got none")
    out = pooled_terms(cfg, N, seeds, n_test=check_int("n_test", n_test, 1), max_off=max_off)
    out["trigger+ubar"] = tuple(a + b for a, b in zip(out["trigger"], out["ubar"]))
    u = step1_signal_unit(cfg.V, cfg.L)
    return {k: tuple(x / u for x in v) for k, v in out.items()}


def term_table(meas: dict, pred: dict) -> str:
    """Measured against predicted mean and standard deviation of each term, at the correct label and
    off it, as text: `meas` from `step1_terms`, `pred` from `lib.theory.step1_term_moments`."""
    missing = sorted(set(meas) - set(pred))
    if missing:
        raise ValueError(f"pred has no prediction for the terms {missing} of meas")
    lines = [f"{'term':>13s} | {'mean at y':>17s} | {'sd at y':>13s} | {'mean off':>17s} | {'sd off':>13s}",
             f"{'':>13s} | {'measured  pred':>17s} | {'meas.  pred':>13s} | {'measured  pred':>17s} | {'meas.  pred':>13s}"]
    for name, (a, o, _) in meas.items():
        P = pred[name]
        lines.append(f"{name:>13s} | {float(a.mean()):+8.3f} {P['mean_at']:+7.3f} | {float(a.std()):6.3f} "
                     f"{P['var_at'] ** .5:6.3f} | {float(o.mean()):+8.3f} {P['mean_off']:+7.3f} | "
                     f"{float(o.std()):6.3f} {P['var_off'] ** .5:6.3f}")
    return "\n".join(lines)


def label_table(dec, unit: float, rows: int = 5, scheme: str = "step1") -> str:
    """The terms of `dec` (a `Decomposition`) at the correct label of its first `rows` test sequences,
    and the logit of that label, in units of `unit`, as text."""
    rows = check_int("rows", rows, 1)
    if not unit > 0:
        raise ValueError(f"unit must be positive, got {unit!r}")
    at = dec.at_label(scheme)
    lines = ["sample " + " ".join(f"{k:>13s}" for k in at) + "   logit of y"]
    for m in range(min(rows, len(dec.labels))):
        lines.append(f"{m:6d} " + " ".join(f"{float(v[m]) / unit:13.2f}" for v in at.values())
                     + f"   {float(dec.logits[m, dec.labels[m]]) / unit:10.2f}")
    return "\n".join(lines)


def term_sd_sweep(settings, seeds, names=STEP1_TERMS, n_test: int = 300):
    """Standard deviation of each term along a sweep: for each (cfg, N) of `settings`, measured
    (`step1_terms` over `seeds`) and predicted, the signal's at the correct label and the others' at
    wrong labels. Returns (measured (grid, term), predicted (grid, term), per-seed (grid, term, seed,
    [mean, var])), the last for a bootstrap over problems."""
    seeds, settings = list(seeds), list(settings)
    if not settings:
        raise ValueError("settings must hold at least one (cfg, N) pair, got none")
    S = len(seeds)
    where = lambda n: 0 if n == "signal" else 1                     # signal at y, the rest off y  # noqa: E731
    m_sd, p_sd, seed_sd = [], [], []
    for c, n_ in settings:
        mm, pp = step1_terms(c, n_, seeds, n_test=n_test), step1_term_moments(n_, c.d, c.L, c.V)
        m_sd.append([float(mm[n][where(n)].std()) for n in names])
        p_sd.append([pp[n]["var_at" if n == "signal" else "var_off"] ** 0.5 for n in names])
        per = [len(mm["signal"][0]) // S, len(mm["crosstalk"][1]) // S]
        chunk = lambda n, s: mm[n][where(n)][s * per[where(n)]:(s + 1) * per[where(n)]]   # noqa: E731
        seed_sd.append([[(float(chunk(n, s).mean()), float(chunk(n, s).var())) for s in range(S)]
                        for n in names])
    return np.array(m_sd), np.array(p_sd), np.array(seed_sd)


def step1_accuracy(problem: Problem, seed: int, n_train: int = 20_000, n_test: int = 8000) -> float:
    """Test accuracy of the model after step 1 alone: W_V = G1 (from the count tables of a batch of
    `n_train` samples), W_KQ = 0 (uniform attention), on `n_test` test samples; both drawn with `seed`."""
    seed, n_test = check_int("seed", seed, 0), check_int("n_test", n_test, 1)
    G1 = memory_counts(problem, sample_batch(problem, check_int("n_train", n_train, 1), seed)).matrix(problem)
    batch = sample_batch(problem, n_test, seed, "test")
    return evaluate(problem, Params(G1, zero_params(problem.cfg).W_KQ), batch=batch).acc


def coverage_runs(V: int, seeds: int, points: int = 12, device: str = "cpu") -> dict:
    """How many tokens a batch has seen as informative, over a grid of N from V/8 to 3 V log V, for
    batches `0 .. seeds-1` (nested in N), beside the prediction of `lib.theory.coverage_mean` /
    `coverage_var`. Returns {"N": grid, "K": seen tokens (seeds, grid), "mean", "sd": predicted (grid),
    "waits": samples until every token was seen, per batch (seeds,); 3 V log V + 1 if never}."""
    V, seeds, points = check_int("V", V, 2), check_int("seeds", seeds, 1), check_int("points", points, 2)
    pc = make_problem(TaskConfig(V=V, d=4, L=1, device=device), seed=0)
    n_max = int(3 * V * np.log(V))
    firsts = []
    for s in range(seeds):
        x = sample_batch(pc, n_max, seed=s).informative.cpu()                          # (n_max,)
        firsts.append(torch.full((V,), n_max, dtype=torch.long).scatter_reduce(0, x, torch.arange(n_max), "amin"))
    firsts = torch.stack(firsts)                                                       # (seeds, V): first sighting
    Ns = np.unique(np.geomspace(V / 8, n_max, points).astype(int))
    K = np.array([[(f < n).sum().item() for n in Ns] for f in firsts])                # (seeds, grid)
    return {"N": Ns, "K": K, "mean": np.array([coverage_mean(int(n), V) for n in Ns]),
            "sd": np.sqrt([coverage_var(int(n), V) for n in Ns]),
            "waits": (firsts.max(1).values + 1).double().numpy()}
