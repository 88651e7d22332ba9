"""lib.learning.trainer.train (count route, GD and Adam) against the autograd trainer, and its record."""
import math

import pytest
import torch

import lib
from lib.learning.trainer import TrainConfig, TrainSpec, attention_summary, train, train_transformer, train_with
from conftest import rel, small_cfg


def _start(problem, batch, init):
    if init == "zero":
        return lib.zero_params(problem.cfg)
    return lib.three_steps(problem, batch, "finite").params


@pytest.mark.parametrize("model", ["attn", "mlp"])
@pytest.mark.parametrize("optimizer,lr", [("gd", 0.5), ("adam", 0.02)])
@pytest.mark.parametrize("init", ["zero", "three_steps"])
def test_twenty_steps_equal_autograd(model, optimizer, lr, init):
    cfg = small_cfg(V=9, d=6, L=4, model=model)
    problem = lib.make_problem(cfg, 3)
    batch = lib.sample_batch(problem, 300, 3)
    start = _start(problem, batch, init)
    ref, hist = train_transformer(problem, batch, TrainConfig(steps=20, lr=lr, optimizer=optimizer), init=start)
    got, rec = train(problem, batch, optimizer=optimizer, steps=20, lr=lr, init=init, record_every=1, n_test=0)
    assert rel(got.W_V, ref.W_V) < 1e-10 and rel(got.W_KQ, ref.W_KQ) < 1e-10
    assert float(ref.W_KQ.norm()) > 0 and float((ref.W_V - start.W_V).norm()) > 0   # both blocks moved
    assert rec.step == hist.step == list(range(21))
    assert max(abs(a - b) / max(abs(b), 1.0) for a, b in zip(rec.loss, hist.loss)) < 1e-10
    assert rec.acc == hist.acc


def test_separate_kq_learning_rate_matches_autograd():
    cfg = small_cfg(V=8, d=5, L=3)
    problem = lib.make_problem(cfg, 4)
    batch = lib.sample_batch(problem, 200, 4)
    ref, _ = train_transformer(problem, batch, TrainConfig(steps=20, lr=0.03, lr_KQ=0.3, optimizer="adam"))
    got, _ = train(problem, batch, steps=20, lr=0.03, lr_KQ=0.3, n_test=0)
    assert rel(got.W_V, ref.W_V) < 1e-10 and rel(got.W_KQ, ref.W_KQ) < 1e-10


def test_record_metrics_against_the_direct_forward_pass():
    cfg = small_cfg(V=9, d=6, L=4)
    problem = lib.make_problem(cfg, 5)
    batch = lib.sample_batch(problem, 200, 5)
    test = lib.sample_batch(problem, 500, 9, split="test")
    params, rec = train(problem, batch, steps=7, lr=0.05, record_every=3, test_batch=test)
    assert rec.step == [0, 3, 6, 7]
    f = lib.forward(problem, params, test)                                  # materialised reference
    a = f.attn
    entropy = float(-(a * a.log()).sum(1).mean())
    assert abs(rec.entropy[-1] - entropy) < 1e-12
    assert rec.att_acc[-1] == float((f.scores.argmax(1) == test.pos).double().mean())
    assert rec.test_acc[-1] == float((f.logits.argmax(1) == test.labels).double().mean())
    assert abs(rec.entropy[0] - math.log(cfg.L)) < 1e-12                  # W_KQ = 0: uniform attention
    assert rec.test_acc[-1] == lib.evaluate(problem, params, batch=test).acc
    assert attention_summary(problem, params, test)["entropy"] == rec.entropy[-1]


def test_train_with_spec_and_validation():
    cfg = small_cfg(V=7, d=5, L=3)
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 100, 0)
    a, _ = train_with(problem, batch, TrainSpec("gd", 5, 0.4, None, "three_steps"), n_test=0)
    b, _ = train(problem, batch, optimizer="gd", steps=5, lr=0.4, init="three_steps", n_test=0)
    assert torch.equal(a.W_V, b.W_V) and torch.equal(a.W_KQ, b.W_KQ)
    for kw, name in [(dict(optimizer="sgd"), "optimizer"), (dict(lr=0.0), "lr"), (dict(steps=-1), "steps"),
                     (dict(init="random"), "init"), (dict(record_every=0), "record_every"),
                     (dict(betas=(0.9, 1.0)), "betas"), (dict(init=lib.three_steps(problem, batch)), "finite"),
                     (dict(test_seed=-1), "test_seed"), (dict(test_batch="x"), "test_batch")]:
        with pytest.raises(ValueError, match=name):
            train(problem, batch, **kw)
    with pytest.raises(ValueError, match="lr"):
        TrainSpec(lr=-1.0)
    _, rec = train(problem, batch, steps=2, n_test=0)
    assert all(math.isnan(x) for x in rec.test_acc + rec.att_acc + rec.entropy)


def test_trained_sweep_is_cached_and_keyed_apart(tmp_path):
    cache = str(tmp_path / "points.jsonl")
    cfgs = [small_cfg(V=6, d=8, L=3, dtype="float32")]
    spec = TrainSpec("adam", 15, 0.05, None, "three_steps")
    kw = dict(threshold=0.9, seeds=2, n_max=256, n_test=512, mode="finite", cache=cache)
    first = lib.sweep.sweep(cfgs, training=spec, **kw)[0]
    assert first.computed > 0 and first.training == {"optimizer": "adam", "steps": 15, "lr": 0.05,
                                                     "lr_KQ": None, "init": "three_steps"}
    again = lib.sweep.sweep(cfgs, training=spec, **kw)[0]
    assert again.computed == 0 and again.from_cache and again.nstar == first.nstar and again.points == first.points
    three = lib.sweep.sweep(cfgs, **kw)[0]                        # same cache, no training: its own points
    assert three.computed > 0 and three.training is None
    other = lib.sweep.sweep(cfgs, training=TrainSpec("adam", 16, 0.05, None, "three_steps"), **kw)[0]
    assert other.computed > 0
    # a cached trained point is what train + evaluate give directly
    N = first.points[0]["N"]
    accs = []
    for s in range(2):
        problem = lib.make_problem(cfgs[0], s)
        params, _ = train_with(problem, lib.sample_batch(problem, N, s), spec, n_test=0)
        accs.append(lib.evaluate(problem, params, 512, s).acc)
    assert first.points[0]["per_seed"] == accs
    with pytest.raises(ValueError, match="mode"):
        lib.sweep.sweep(cfgs, training=spec, **{**kw, "mode": "limit"})
    with pytest.raises(ValueError, match="training"):
        lib.experiments.capacity.nstar(cfgs[0], training={"steps": 3}, mode="finite")


def test_trained_points_start_from_the_runs_step_sizes():
    """A recipe starting from the three steps starts from them with run's step sizes (which are in the
    point's store key): other step sizes give another point, the default ones the same point."""
    cfg = lib.TaskConfig(V=16, d=16, L=4, device="cpu")
    spec = TrainSpec(optimizer="adam", steps=5, lr=0.01, init="three_steps")
    base = lib.run(cfg, 256, mode="finite", seeds=1, training=spec)
    same = lib.run(cfg, 256, mode="finite", seeds=1, training=spec, step_sizes=lib.StepSizes())
    other = lib.run(cfg, 256, mode="finite", seeds=1, training=spec, step_sizes=lib.StepSizes(eta=5.0, attn_scale=1.0))
    assert same.per_seed == base.per_seed and other.per_seed["acc"] != base.per_seed["acc"]
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 64, 0)
    with pytest.raises(ValueError, match="step_sizes"):
        lib.learning.trainer.train_with(problem, batch, spec, step_sizes={"eta": 1.0})


def test_nstar_metric_searches_share_the_store(tmp_path):
    """metric="att_acc" finds the N at which attention alone reaches the threshold; its points are the
    same store entries as the test-accuracy search's, so the second search computes nothing it has seen."""
    from lib.experiments.capacity import nstar
    cfg = lib.TaskConfig(V=16, d=64, L=8, trigger_in_value=False, device="cpu")
    kw = dict(seeds=1, seed=0, n_test=256, n_min=8, n_max=2 ** 12, resolution=0.1, cache=str(tmp_path / "p.jsonl"))
    att = nstar(cfg, 0.9, metric="att_acc", **kw)
    acc = nstar(cfg, 0.9, **kw)
    assert att.nstar is not None and acc.nstar is not None
    assert all(p.att_acc >= 0.9 for p in att.points if p.N == att.nstar)
    assert acc.runs < len(acc.points)                   # some points read back from the attention search
    with pytest.raises(ValueError, match="metric"):
        nstar(cfg, 0.9, metric="loss", **kw)


def test_problem_nstars_is_one_search_per_problem(tmp_path):
    from lib.experiments.capacity import nstar, problem_nstars
    cfg = lib.TaskConfig(V=16, d=64, L=8, trigger_in_value=False, device="cpu")
    kw = dict(n_test=256, n_min=8, n_max=2 ** 12, resolution=0.1, metric="att_acc")
    got = problem_nstars(cfg, 0.9, 2, seed0=5, **kw)
    assert got == [nstar(cfg, 0.9, seeds=1, seed=5 + i, **kw).nstar for i in range(2)]
    with pytest.raises(ValueError, match="seed"):
        problem_nstars(cfg, 0.9, 2, seed=3, **kw)
    with pytest.raises(ValueError, match="problems"):
        problem_nstars(cfg, 0.9, 0, **kw)


def test_tied_best_is_two_binomial_standard_errors_of_the_best():
    from lib.learning.trainer import tied_best
    rates = [0.01, 0.03, 0.1, 0.3]
    # best 0.985 on 2048 samples: p = (0.985 * 2048 + 2) / 2052 = 0.98406, two standard errors 0.00554
    assert tied_best([0.7, 0.973, 0.985, 0.985], rates, 2048) == [0.1, 0.3]
    assert tied_best([0.7, 0.980, 0.985, 0.985], rates, 2048) == [0.03, 0.1, 0.3]
    # a perfect best: p = 2050 / 2052, two standard errors 0.00138 (2.8 samples), not 0
    assert tied_best([0.7, 2046 / 2048, 1.0, 1.0], rates, 2048) == [0.03, 0.1, 0.3]
    assert tied_best([0.7, 2045 / 2048, 1.0, 1.0], rates, 2048) == [0.1, 0.3]
    assert tied_best([0.5, 0.5, 0.5, 0.5], rates, 10 ** 9) == rates
    for args, name in [(([0.5], rates, 10), "accuracies"), (([0.5, 0.5, 0.5, 1.5], rates, 10), "accuracies"),
                       (([0.5] * 4, rates, 0), "n_val"), (([], [], 10), "rates"), ((["a"] * 4, rates, 10), "accuracies")]:
        with pytest.raises(ValueError, match=name):
            tied_best(*args)


def test_choose_lr_is_the_smallest_tied_rate_of_a_direct_validation():
    from lib.learning.trainer import choose_lr, tied_best
    problem = lib.make_problem(small_cfg(V=9, d=6, L=4), 0)
    rates = [1e-4, 0.03, 0.3]
    lr, acc, tied = choose_lr(problem, rates, n=60, steps=20, n_val=300, seed=2)
    batch, val = lib.sample_batch(problem, 60, 2), lib.sample_batch(problem, 300, 3, split="test")
    direct = [train(problem, batch, steps=20, lr=r, record_every=20, test_batch=val)[1].test_acc[-1] for r in rates]
    assert acc == direct and tied == tied_best(direct, rates, 300) and lr == tied[0]
    assert acc[0] < max(acc) and lr != rates[0]          # 20 steps at 1e-4 leave the model near chance
    for kw, name in [(dict(rates=[0.1, 0.01]), "rates"), (dict(rates=[0.0, 0.1]), "rates"), (dict(rates=[]), "rates"),
                     (dict(n=0), "n"), (dict(steps=0), "steps"), (dict(n_val=0), "n_val"), (dict(seed=-1), "seed")]:
        with pytest.raises(ValueError, match=name):
            choose_lr(problem, **{"rates": rates, "n": 60, **kw})
