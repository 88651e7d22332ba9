"""Property-based fuzzing of the configuration. Valid configurations always give finite results
(no NaN/inf, also for step sizes up to 1e12); a configuration with one bad field raises a
ValueError whose message names that field. Derandomised in CI (FUZZ_RANDOM=1 explores afresh,
FUZZ_EXAMPLES=n sets the number of examples)."""
import math
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lib
from lib.learning.trainer import TrainConfig

SETTINGS = dict(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 200)), deadline=None,
                derandomize=not os.environ.get("FUZZ_RANDOM"), suppress_health_check=[HealthCheck.too_slow])
step = st.one_of(st.floats(1e-8, 1e12), st.sampled_from([1e-8, 1.0, 1e6, 1e12]))

valid = st.fixed_dictionaries({
    "V": st.integers(2, 12), "d": st.integers(1, 12), "L": st.integers(1, 8), "N": st.integers(1, 40),
    "model": st.sampled_from(["attn", "mlp"]), "m": st.integers(1, 10),
    "activation": st.sampled_from(["he2", "he3", "he4", "relu", "centred_relu"]),
    "embedding": st.sampled_from(["gaussian", "sphere", "orthogonal"]), "tied": st.booleans(),
    "tau": st.one_of(st.floats(0, 1e6), st.sampled_from([0.0, 1.0, 1e6])),
    "trigger_in_value": st.booleans(), "eos_key": st.booleans(),
    "noise_vocab": st.one_of(st.none(), st.integers(1, 6)), "dtype": st.sampled_from(["float32", "float64"]),
    "eta": step, "gamma_W": st.one_of(st.none(), step), "gamma_V": step,
    "mode": st.sampled_from(["limit", "finite"]),
})

CONFIG_FIELDS = ("V", "d", "L", "m", "model", "activation", "embedding", "tied", "tau", "trigger_in_value",
                 "eos_key", "noise_vocab", "dtype")
STEP_FIELDS = ("eta", "gamma_W", "gamma_V")


def run(p):
    cfg = lib.TaskConfig(device="cpu", **{k: p[k] for k in CONFIG_FIELDS})
    steps = lib.StepSizes(**{k: p[k] for k in STEP_FIELDS})
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, p["N"], 0)
    res = lib.three_steps(problem, batch, p["mode"], step_sizes=steps)
    return res, lib.evaluate(problem, res.params, 64)


def fit_orthogonal(p):
    """Orthogonal embeddings need d >= 2V + 2 (+ noise vocabulary); raise d when drawn smaller."""
    if p["embedding"] == "orthogonal":
        p["d"] = max(p["d"], p["V"] * (1 if p["tied"] else 2) + 2 + (p["noise_vocab"] or 0))
    return p


@pytest.mark.slow
@settings(**SETTINGS)
@given(p=valid)
def test_smoke_valid_configurations_run_and_stay_finite(p):
    try:
        res, acc = run(fit_orthogonal(p))
    except ValueError as err:   # only a refused overflow, and only at extreme scales
        extreme = p["tau"] > 100 or max(p["eta"], p["gamma_W"] or 0.0, p["gamma_V"]) > 1e6
        assert str(err).startswith("dtype") and extreme, (p, str(err))
        return
    for t in (res.V1, res.W1, res.V2, res.k):
        assert bool(torch.isfinite(t).all())
    for a in (acc.acc, acc.att_acc, acc.oracle_acc):
        assert 0.0 <= a <= 1.0 and math.isfinite(a)


BAD = {
    "V": [0, 1, -3, 2.5, "x", None, True], "d": [0, -1, 1.5, "x", None], "L": [0, -2, "x", None],
    "N": [0, -5, 2.5, "x", None], "m": [0, -1, "x", 2.5], "model": ["foo", None, 3],
    "activation": ["tanh", None], "embedding": ["x", None], "tied": [1, "yes", None],
    "tau": [-1.0, float("nan"), float("inf"), 1e7, "x"], "trigger_in_value": [1, "no"],
    "eos_key": [0, "x"], "noise_vocab": [0, -2, "x"], "dtype": ["float16", None],
    "eta": [0.0, -1.0, float("nan"), float("inf"), 1e13], "gamma_W": [-1.0, float("nan"), 1e13],
    "gamma_V": [-1.0, float("inf"), "x"], "mode": ["fast", None],
}


@settings(**SETTINGS)
@given(p=valid, field=st.sampled_from(sorted(BAD)), data=st.data())
def test_one_bad_field_is_named(p, field, data):
    p = fit_orthogonal(p)
    if field == "m":
        p["model"] = "mlp"
    p[field] = data.draw(st.sampled_from(BAD[field]))
    try:
        run(p)
    except ValueError as err:
        assert str(err).startswith(field), (field, str(err))
    else:
        raise AssertionError(f"{field}={p[field]!r} was accepted")


@settings(max_examples=40, deadline=None)
@given(g=st.sampled_from([1.0, 1e3, 1e6, 1e9, 1e12]), eta=st.sampled_from([1e-6, 1e-2, 1.0, 1e3, 1e12]),
       model=st.sampled_from(["attn", "mlp"]), dtype=st.sampled_from(["float32", "float64"]))
def test_smoke_huge_step_sizes_stay_finite(g, eta, model, dtype):
    cfg = lib.TaskConfig(V=16, d=8, L=6, model=model, m=12 if model == "mlp" else None, dtype=dtype, device="cpu")
    problem = lib.make_problem(cfg, 1)
    batch = lib.sample_batch(problem, 300, 1)
    res = lib.three_steps(problem, batch, "finite", step_sizes=lib.StepSizes(eta=eta, gamma_W=g, gamma_V=g))
    assert all(bool(torch.isfinite(t).all()) for t in (res.V1, res.W1, res.V2))
    acc = lib.evaluate(problem, res.params, 256)
    assert 0 <= acc.acc <= 1


@given(steps=st.one_of(st.integers(-3, 10), st.just("x")), lr=st.one_of(st.floats(-1, 10), st.just(float("nan"))),
       opt=st.sampled_from(["gd", "adam", "sgd"]), target=st.one_of(st.none(), st.floats(-1, 2)))
@settings(max_examples=60, deadline=None)
def test_train_config_validates(steps, lr, opt, target):
    """Invalid fields raise a ValueError naming the first bad one (in the order they are checked);
    valid ones construct. The expectation is computed here, independently of the class."""
    bad = [name for name, ok in (
        ("steps", isinstance(steps, int) and steps >= 0),
        ("lr", isinstance(lr, float) and math.isfinite(lr) and 0 < lr <= 1e12),
        ("optimizer", opt in ("gd", "adam")),
        ("target_acc", target is None or 0 <= target <= 1)) if not ok]
    if bad:
        with pytest.raises(ValueError) as err:
            TrainConfig(steps=steps, lr=lr, optimizer=opt, target_acc=target)
        assert str(err.value).split()[0] == bad[0], str(err.value)
    else:
        cfg = TrainConfig(steps=steps, lr=lr, optimizer=opt, target_acc=target)
        assert (cfg.steps, cfg.lr, cfg.optimizer, cfg.target_acc) == (steps, lr, opt, target)
