"""Chapter 7: the attention accuracy after step 2 as a curve in N, measured exactly and predicted from
the moments of k, and the requirement read off the mean curve.

The attention accuracy of a direction k is a table lookup (`margins.attention_accuracy`): its exact
expectation over fresh test sequences, with no test-set noise. Over a batch of N training samples it
still varies from problem to problem and batch to batch, and near the accuracy ceiling one problem's
curve is not monotone in N. So the chapter's requirement is read off the *mean* curve over problems:

  exact_curves      (P, n) exact attention accuracy after the three steps (limit mode) of P problems at
                    each N of a grid, batches nested in N (one batch per problem, its prefixes)
  moment_curves     (P, n) the same accuracies predicted from each problem's moments, with nothing
                    trained: A(r(N), L), 1/r(N)^2 = 1/r_inf^2 + X_mean(N) + Var_perp(N)/(1 + beta/N)^2
                    (r_inf, beta and the mean's X_mean exact; Var_perp from k_noise's moments)
  requirement       the N from which the mean accuracy over problems stays at or above a threshold to
                    the grid's end (log-interpolated between the last grid point below and the next),
                    with the N from which the upper and the lower end of its 95 % t-interval stay there
  first_passage     per problem: the first grid N at which its own accuracy reaches the threshold
  shipped_curves    the exact curves shipped with the book for chapter 7 (book/data/ch07_curves_*.jsonl)
  shipped_requirements  their requirements and first passages, one row per configuration and threshold
  with_predictions  those rows with the derived formula, its range and the calibrated law beside them
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np

from ..core.config import TaskConfig, check_float, check_int
from ..core.embeddings import make_problem
from ..core.grid import crossing, first_index
from ..core.paths import data_dir
from ..core.task import sample_batch
from ..learning.schedule import three_steps
from .. import theory
from . import k_noise, margins


def _grid(Ns) -> list:
    Ns = [check_int("Ns", n, 1) for n in Ns]
    if not Ns or any(b <= a for a, b in zip(Ns, Ns[1:])):
        raise ValueError(f"Ns must be a non-empty increasing list of positive integers, got {Ns!r}")
    return Ns


def _cfg(cfg: TaskConfig) -> TaskConfig:
    if not isinstance(cfg, TaskConfig):
        raise ValueError(f"cfg must be a TaskConfig, got {type(cfg).__name__}")
    if cfg.model != "attn" or cfg.noise_vocab or cfg.eos_key:
        raise ValueError("cfg must be the attention-only model with a shared vocabulary and no EOS key")
    return dataclasses.replace(cfg, dtype="float64", device="cpu")


def _seeds(seeds) -> list:
    seeds = [check_int("seeds", s, 0) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one problem")
    return seeds


def exact_curves(cfg: TaskConfig, Ns, seeds) -> np.ndarray:
    """(len(seeds), len(Ns)): exact attention accuracy of the three steps (limit mode) of problem s on
    the first N samples of its batch (problem and batch from seed s; float64 on the CPU)."""
    cfg, Ns, seeds = _cfg(cfg), _grid(Ns), _seeds(seeds)
    out = np.empty((len(seeds), len(Ns)))
    for i, s in enumerate(seeds):
        pr = make_problem(cfg, s)
        b = sample_batch(pr, Ns[-1], s)
        for j, N in enumerate(Ns):
            out[i, j] = margins.attention_accuracy(pr, three_steps(pr, b.slice(0, N), mode="limit").k)
    return out


def moment_curves(cfg: TaskConfig, Ns, seeds, samples: int = 8000) -> np.ndarray:
    """(len(seeds), len(Ns)): the attention accuracy of problem s predicted from its moments alone
    (Gaussian scores, `theory.gaussian_attention_accuracy`), nothing trained; see the module docstring."""
    cfg, Ns, seeds = _cfg(cfg), _grid(Ns), _seeds(seeds)
    samples = check_int("samples", samples, 4)
    out = np.empty((len(seeds), len(Ns)))
    for i, s in enumerate(seeds):
        pr = make_problem(cfg, s)
        zz = float(pr.z_trig @ pr.z_trig)
        r_inf = margins.score_stats(pr, margins.k_population(pr))["r"]
        beta = k_noise.k_self_beta(pr)
        mom = k_noise.k_noise_moments(pr, samples=samples, seed=s)
        for j, N in enumerate(Ns):
            factor = (1 + beta / N) ** 2                             # the trigger's bonus, squared
            r = 0.0                                                  # no bonus: no signal
            if factor > 1e-12:
                X = k_noise.excess_noise_mean(pr, N) + k_noise.k_noise_variance(mom, N)["perp"] / factor
                r = 1.0 / math.sqrt(1.0 / r_inf ** 2 + X / zz)
            out[i, j] = theory.gaussian_attention_accuracy(r, cfg.L)
    return out


def requirement(acc, Ns, threshold: float) -> dict:
    """The requirement read off the mean curve of `acc` (problems x len(Ns)): {"nstar": the N from which
    the mean over problems stays >= threshold to the grid's end, "lo"/"hi": the same for the upper / the
    lower end of its 95 % t-interval (so lo <= nstar <= hi), "mean": the mean curve, "half": its
    half-widths}; each N is inf when that curve ends below the threshold (not reached: a result)."""
    Ns = _grid(Ns)
    acc = np.asarray(acc, float)
    if acc.ndim != 2 or acc.shape[1] != len(Ns) or acc.shape[0] < 2 or not np.isfinite(acc).all():
        raise ValueError(f"acc must be a finite (problems >= 2, {len(Ns)}) array, got shape {acc.shape}")
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    mean, half = theory.t_interval(acc, axis=0)
    out = {"mean": mean, "half": half}
    for key, curve in (("nstar", mean), ("lo", mean + half), ("hi", mean - half)):
        n = crossing(Ns, curve, threshold, rule="stays", log_x=True)
        out[key] = math.inf if n is None else n
    return out


def first_passage(acc, Ns, threshold: float) -> np.ndarray:
    """Per problem (row of `acc`): the first grid N at which its accuracy reaches `threshold` (inf if none)."""
    Ns = _grid(Ns)
    acc = np.asarray(acc, float)
    if acc.ndim != 2 or acc.shape[1] != len(Ns):
        raise ValueError(f"acc must be a (problems, {len(Ns)}) array, got shape {acc.shape}")
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    first = first_index(acc >= threshold, axis=1)
    return np.array([float(Ns[i]) if i < len(Ns) else math.inf for i in first])


CURVES_DIR = data_dir()                           # book/data, or its copy installed with lib
CURVE_PARTS = ("slice", "off", "off2048")


def shipped_curves(part: str) -> dict:
    """The exact curves shipped with the book (`scripts/attention_curve_grid.py`, draw 0):
    {(V, d, L, trigger_in_value): {"Ns": [...], "seeds": [...], "acc": (problems, len(Ns)) array}}."""
    if part not in CURVE_PARTS:
        raise ValueError(f"part must be one of {', '.join(CURVE_PARTS)}, got {part!r}")
    path = os.path.join(CURVES_DIR, f"ch07_curves_{part}.jsonl")
    out = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            key = (r["V"], r["d"], r["L"], r["trigger_in_value"])
            e = out.setdefault(key, {"Ns": r["Ns"], "seeds": [], "acc": []})
            if r["Ns"] != e["Ns"]:
                raise ValueError(f"{path}: the N grids of {key} differ between problems")
            e["seeds"].append(r["seed"])
            e["acc"].append(r["acc"])
    for e in out.values():
        order = np.argsort(e["seeds"])
        e["seeds"] = [e["seeds"][i] for i in order]
        e["acc"] = np.array(e["acc"], float)[order]
    return out


def shipped_requirements(thresholds=(0.9, 0.99)) -> list:
    """One dict per shipped (part, V, d, L, trigger setting, threshold): the requirement of the mean
    curve ("req", with its interval "lo", "hi") and the geometric mean of the problems' first passages
    ("fp_gm", inf when a problem never passes)."""
    thresholds = [check_float("thresholds", t, 0.0, 1.0, strict_min=True) for t in thresholds]
    rows = []
    for part in CURVE_PARTS:
        for (V, d, L, trig), e in sorted(shipped_curves(part).items()):
            for t in thresholds:
                req = requirement(e["acc"], e["Ns"], t)
                fp = first_passage(e["acc"], e["Ns"], t)
                rows.append({"part": part, "V": V, "d": d, "L": L, "trig": trig, "t": t, "req": req["nstar"],
                             "lo": req["lo"], "hi": req["hi"],
                             "fp_gm": float(np.exp(np.log(fp).mean())) if np.isfinite(fp).all() else math.inf})
    return rows


def with_predictions(rows: list) -> list:
    """`shipped_requirements`' rows, each updated in place (and returned) with the derived requirement
    ("der", `theory.derived_attention_nstar`), whether the point is in its range ("inside",
    `theory.derived_range`) and the calibrated law ("cal", `theory.attention_law`)."""
    for r in rows:
        args = (r["V"], r["d"], r["L"], r["t"])
        r.update(der=theory.derived_attention_nstar(*args, r["trig"]),
                 inside=theory.derived_range(*args, float(r["trig"])),
                 cal=theory.attention_law(*args, r["trig"]))
    return rows
