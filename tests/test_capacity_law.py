"""Chapter 7's calibrated attention law (lib.theory.ch07_law): the fit recovers known constants, the
shipped constants are what the calibration script computes from the shipped grid, the split is a
checkerboard that puts every V, trigger setting and threshold on both sides, stored grid points are
reproduced by the search they came from, and capacity_law's default is chapter 7's derived requirement
(lib.theory.ch07_derived), with the trigger in the value path as the model's default."""
import math

import numpy as np
import pytest

import lib
from lib.experiments.capacity import nstar
from lib.theory import ch07_law
from lib.theory import attention_law, attention_nstar, calibration, capacity_law, critical_snr, fit_law, law_range


def synthetic(theta, form):
    pts = []
    for V in (64, 256):
        for d in (32, 64, 128):
            for L in (8, 32, 128):
                for t in (0.9, 0.99):
                    feat = ch07_law.law_features(V, d, L, t, form)
                    if feat is not None:
                        pts.append({"V": V, "d": d, "L": L, "threshold": t, "y": float(feat[0] @ theta + feat[1])})
    return pts


@pytest.mark.parametrize("form,theta", [("product", [0.5, 1.8, 0.3, -1.2, 0.7]), ("separate", [-1.0, 2.0, 0.5, 1.0])])
def test_fit_recovers_known_constants(form, theta):
    fit = fit_law(synthetic(np.array(theta), form), form)
    assert np.allclose(fit["theta"], theta, atol=1e-9) and fit["sd"] < 1e-9
    p = synthetic(np.array(theta), form)[3]
    assert ch07_law.law_value(fit, p["V"], p["d"], p["L"], p["threshold"]) == pytest.approx(math.exp(p["y"]), rel=1e-9)


def test_wall_and_refusals():
    rs2 = critical_snr(64, 0.99) ** 2
    assert ch07_law.law_features(256, int(rs2), 64, 0.99) is None
    assert math.isinf(attention_law(256, int(rs2), 64, 0.99))
    assert math.isfinite(attention_law(256, int(rs2) + 2, 64, 0.99))
    for call, name in ((lambda: attention_law(1, 64, 16), "V"), (lambda: attention_law(64, 0, 16), "d"),
                       (lambda: attention_law(64, 32, 1), "L"), (lambda: attention_law(64, 32, 16, 1.5), "threshold"),
                       (lambda: attention_law(64, 32, 16, trigger_in_value=1), "trigger_in_value"),
                       (lambda: attention_law(64, 32, 16, form="sum"), "form"),
                       (lambda: fit_law(synthetic(np.zeros(5), "product")[:4], "product"), "points")):
        with pytest.raises(ValueError, match=name):
            call()


def test_law_features_at_the_least_sizes():
    """V = 2, L = 2 and d = 1, the least each guard admits. At L = 2 the accuracy is Phi(r / sqrt 2), so
    r*^2 = 2 Phi^-1(t)^2 = 10.82 at t = 0.99: d = 1 lies past the wall (None) and d = 11 just inside,
    with features [1, log 2, log 2, log 11, log r*^2] and offset -log(1 - r*^2/11). One below each
    least value is refused, naming it."""
    from statistics import NormalDist
    rs2 = 2 * NormalDist().inv_cdf(0.99) ** 2
    assert ch07_law.law_features(2, 1, 2, 0.99) is None
    feat, off = ch07_law.law_features(2, 11, 2, 0.99)
    assert np.allclose(feat, [1, math.log(2), math.log(2), math.log(11), math.log(rs2)], rtol=1e-9)
    assert off == pytest.approx(-math.log(1 - rs2 / 11), rel=1e-7)
    for args, name in (((1, 11, 2), "V"), ((2, 0, 2), "d"), ((2, 11, 1), "L")):
        with pytest.raises(ValueError, match=name):
            ch07_law.law_features(*args, 0.99)


def test_shipped_constants_are_the_calibration_fit():
    cal = calibration()
    for key, fit in cal["fits"].items():
        form, side = key.split("/")
        pts = [dict(p, y=float(np.mean(np.log(p["nstar"])))) for p in cal["points"]
               if p["calibration"] and p["trigger_in_value"] == (side == "in") and None not in p["nstar"]
               and np.exp(np.mean(np.log(p["nstar"]))) >= ch07_law.MIN_N
               and ch07_law.law_features(p["V"], p["d"], p["L"], p["threshold"]) is not None]
        again = fit_law(pts, form)
        assert again["n"] == fit["n"] and np.allclose(again["theta"], fit["theta"], rtol=1e-12, atol=1e-12)
    for key in ("grid_command", "search", "problems", "seed0", "draw", "lib_version", "commit", "fit_command"):
        assert cal["provenance"][key] not in (None, "")


def test_split_puts_every_part_of_the_grid_on_both_sides():
    pts = calibration()["points"]
    for side in (True, False):
        part = [p for p in pts if p["calibration"] == side]
        assert {p["V"] for p in part} == {p["V"] for p in pts}
        assert {p["trigger_in_value"] for p in part} == {False, True}
        assert {p["threshold"] for p in part} == {0.9, 0.99}
    keys = {(p["V"], p["d"], p["L"], p["trigger_in_value"], p["threshold"]) for p in pts}
    assert len(keys) == len(pts)                                  # one point per configuration and threshold


@pytest.mark.slow
def test_stored_points_are_reproduced_by_their_search():
    """Two cheap grid points recomputed with the stored search settings: the same N* per problem up to
    one bisection step (float32 sums may order differently on another CPU)."""
    cal = calibration()
    s = cal["provenance"]["search"]
    cheap = [p for p in cal["points"] if p["V"] == 64 and p["L"] == 16 and p["threshold"] == 0.9
             and all(n is not None for n in p["nstar"])][:2]
    assert cheap
    from lib.core.seed import set_draw
    before = set_draw(cal["provenance"]["draw"])          # the grid's draw, whatever RECALL_DRAW says
    try:
        _recompute(cheap, cal, s)
    finally:
        set_draw(before)


def _recompute(cheap, cal, s):
    for p in cheap:
        cfg = lib.TaskConfig(V=p["V"], d=p["d"], L=p["L"], trigger_in_value=p["trigger_in_value"], device="cpu")
        seed0 = cal["provenance"]["seed0"]
        for i in range(3):
            got = nstar(cfg, 0.9, seeds=1, seed=seed0 + i, metric="att_acc", **s).nstar
            assert got == pytest.approx(p["nstar"][i], rel=2 * s["resolution"], abs=2), (p, i, got)


@pytest.mark.slow
def test_capacity_law_default_is_the_derived_requirement():
    from lib.theory import derived_attention_nstar, derived_range
    for V, d, L, s2 in ((256, 128, 64, 0.0), (512, 256, 128, 1.0), (1024, 192, 192, 1.0)):
        law = capacity_law(V, d, L, s2)
        assert law["att"] == derived_attention_nstar(V, d, L, 0.99, s2 > 0)
        assert law["in_range"] == derived_range(V, d, L, 0.99, s2)
        assert law["law"] == max(law["mem"], law["att"])
    assert capacity_law(512, 256, 128) == capacity_law(512, 256, 128, 1.0)      # the default: trigger in, as the model's
    derived = capacity_law(32, 128, 64, c_noise=1.0)
    assert derived["att"] == attention_nstar(32, 128, 64, 0.99, 1.0) and not derived["in_range"]
    # in_range only where chapter 7 checked: the box, s2 in {0, 1}, away from the wall, N_att >= 128
    assert capacity_law(256, 32, 128, 1.0)["in_range"] and capacity_law(256, 32, 128, 0.0)["in_range"]
    assert not capacity_law(256, 32, 128, 0.01)["in_range"]                     # a trigger scale never checked
    assert not capacity_law(256, 32, 128, 0.99 ** 2)["in_range"]
    assert not capacity_law(32, 16, 128, 0.0)["in_range"] and not capacity_law(256, 16, 64, 0.0)["in_range"]
    assert not capacity_law(256, 64, 8, 1.0)["in_range"]                        # N_att below 128
    rs2 = critical_snr(256, 0.99) ** 2
    d_near = int(rs2 * 1.05)                                                    # the ceiling within reach of 0.99
    assert math.isfinite(capacity_law(512, d_near, 256, 0.0)["att"]) and not capacity_law(512, d_near, 256, 0.0)["in_range"]
    assert not law_range(32, 128, 64) and not law_range(256, 512, 64) and not law_range(256, 128, 512)
    assert not law_range(512, 256, 32, 0.99, True)               # the calibrated law says a dozen samples: below MIN_N
    assert attention_law(64, 16, 128, 0.9) > 2 ** 18 and not law_range(64, 16, 128, 0.9)   # beyond the grid's largest N

def test_law_range_bounds_d_by_its_fraction_of_V(monkeypatch):
    """law_range's d bound is d/V within the calibrated fractions (times V, not divided): with the
    law's N held inside (1000), V = 256 admits d from 0.125 * 256 = 32 to 256 and nothing outside."""
    monkeypatch.setattr(ch07_law, "attention_law", lambda *a, **k: 1000.0)
    lo, hi = calibration()["range"]["d_over_V"]
    V = 256
    assert ch07_law.law_range(V, int(lo * V), 16) and ch07_law.law_range(V, int(hi * V), 16)
    assert not ch07_law.law_range(V, int(lo * V) - 1, 16)
    assert not ch07_law.law_range(V, 8, 16)


def test_derived_range_includes_its_min_N(monkeypatch):
    """derived_range says "at least min_N": a derived N_att exactly at the floor is inside, one
    below it is not (the other conditions held true at a point well inside)."""
    from lib.theory import ch07_capacity
    args = (256, 128, 16, 0.9, 1.0)
    n = ch07_capacity.derived_attention_nstar(*args[:4], True)
    assert ch07_capacity.derived_range(*args) == (n >= ch07_capacity.CHECKED["min_N"])
    monkeypatch.setitem(ch07_capacity.CHECKED, "min_N", n)
    assert ch07_capacity.derived_range(*args)
    monkeypatch.setitem(ch07_capacity.CHECKED, "min_N", math.nextafter(n, math.inf))
    assert not ch07_capacity.derived_range(*args)
