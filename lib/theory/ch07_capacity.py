"""Chapter 7 (capacity): the book's capacity law N* ~ max(N_mem, N_att), assembled from chapters 5
and 6. The fits with intervals the chapter reports are in `lib.theory.fits`.
"""

from __future__ import annotations

import functools
import math

from ..core.config import check_float, check_int
from .ch05_attention_step import gaussian_attention_accuracy, imbalance_noise, trigger_self_bias
from .ch06_refined_memory import _check_s2, refined_memory_nstar
from .ch07_derived import derived_attention_nstar
from .ch07_law import rstar_cached


# ---- chapter 7: the capacity law (the fits with intervals are in fits.py)
#
# The book's own law (chapter 7), assembled from the conditions of chapters 2, 4, 5 and 6: the final
# N* is the larger of what the memory needs (chapter 6: coverage, count fluctuations, mean bias;
# infinite past chapter 2's capacity wall) and what attention needs (chapter 5's signal-to-noise ratio
# r(N) = 1 / sqrt(1/d + c B / (N + beta)^2), with one measured noise constant c).


@functools.lru_cache(maxsize=None)
def _memory_nstar_cached(V: int, d: int, s2: float, threshold: float):
    return refined_memory_nstar(V, d, s2, threshold)


def attention_nstar(V: int, d: int, L: int, threshold: float = 0.99, c_noise: float = 1.0) -> float:
    """Smallest N with 1 / sqrt(1/d + c_noise B / (N + beta)^2) >= r*(L) (chapter 5's `attention_snr`
    with its noise B scaled by c_noise, the one constant chapter 7 measures):
    N_att = sqrt(c_noise B / (1/r*^2 - 1/d)) - beta, at least 1; inf when d <= r*(L)^2 (attention
    fails even at N = infinity). B = imbalance_noise, beta = trigger_self_bias."""
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 2)
    from ..core.config import check_float
    c_noise = check_float("c_noise", c_noise, 0.0, strict_min=True)
    rs = rstar_cached(L, float(threshold))
    room = 1.0 / rs ** 2 - 1.0 / d
    if room <= 0:
        return math.inf
    return max(math.sqrt(c_noise * imbalance_noise(V, d, L) / room) - trigger_self_bias(V, d, L), 1.0)


def capacity_law(V: int, d: int, L: int, s2: float = 1.0, threshold: float = 0.99,
                 c_noise: float | None = None) -> dict:
    """The book's capacity law (chapter 7): N* ~ max(N_mem, N_att).

    N_mem = refined_memory_nstar(V, d, s2, threshold) (chapter 6; None -> inf: V is past the memory
    wall of dimension d, or the trigger's plateau is below the threshold). s2 = |z_trig|^2 in the value
    path: 1.0 (the model's default, trigger in the value path, tau = 1) or 0.0 (trigger out). N_att is,
    by default, the attention requirement derived from the moments of k
    (`lib.theory.ch07_derived.derived_attention_nstar`, trigger in when s2 > 0); with c_noise given,
    chapter 5's self-term form `attention_nstar(V, d, L, threshold, c_noise)` instead.
    Returns {"mem", "att", "law", "bottleneck", "in_range"}: bottleneck "memory", "attention" or "none"
    (no N reaches the threshold); in_range whether the point lies where chapter 7 checked the derived
    requirement (`derived_range`; always False for the c_noise form, which was not checked there)."""
    V, d = check_int("V", V, 2), check_int("d", d, 1)
    s2 = _check_s2(s2)
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    n_mem = _memory_nstar_cached(V, d, s2, float(threshold))
    n_mem = math.inf if n_mem is None else float(n_mem)
    if c_noise is None:
        n_att = derived_attention_nstar(V, d, L, threshold, s2 > 0)
        in_range = derived_range(V, d, L, threshold, s2)
    else:
        n_att, in_range = attention_nstar(V, d, L, threshold, c_noise), False
    law = max(n_mem, n_att)
    neck = "none" if math.isinf(law) else ("attention" if n_att > n_mem else "memory")
    return {"mem": n_mem, "att": n_att, "law": law, "bottleneck": neck, "in_range": in_range}


CHECKED = {"V": (64, 2048), "d_over_V": (0.125, 1.0), "L": (8, 256), "threshold": (0.9, 0.99), "s2": (0.0, 1.0),
           "min_N": 128}


def derived_range(V: int, d: int, L: int, threshold: float = 0.99, s2: float = 1.0) -> bool:
    """Whether chapter 7 checked the derived attention requirement at this point: V, d/V, L and the
    threshold within `CHECKED`'s bounds, s2 one of its two values (the trigger out, or in at scale 1),
    the accuracy ceiling A(sqrt(d), L) (N -> infinity) at least halfway from the threshold to 1 (nearer
    the wall the ceiling is within a problem's scatter of the threshold), and the derived N_att at least
    `CHECKED["min_N"]` = 128: below it the expansion in 1/N and the Gaussian scores are too coarse and
    the formula underestimates the requirement (chapter 7 measures by how much)."""
    V, d, L = check_int("V", V, 2), check_int("d", d, 1), check_int("L", L, 2)
    threshold = check_float("threshold", threshold, 0.0, 1.0, strict_min=True)
    s2 = _check_s2(s2)
    c = CHECKED
    inside = (c["V"][0] <= V <= c["V"][1] and c["d_over_V"][0] * V <= d <= c["d_over_V"][1] * V
              and c["L"][0] <= L <= c["L"][1] and c["threshold"][0] <= threshold <= c["threshold"][1]
              and s2 in c["s2"])
    if not inside:
        return False
    if 1.0 - gaussian_attention_accuracy(math.sqrt(d), L) > (1.0 - threshold) / 2:
        return False
    return derived_attention_nstar(V, d, L, threshold, s2 > 0) >= c["min_N"]
