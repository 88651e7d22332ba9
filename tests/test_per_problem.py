"""lib.experiments.per_problem: one sweep per problem seed, one row per problem."""
import numpy as np
import pytest

import lib
from lib.experiments.per_problem import per_problem_nstars
from lib.experiments.sweep import sweep, table

BASE = lib.TaskConfig(V=16, d=32, L=4, trigger_in_value=False, device="cpu")
FAST = dict(threshold=0.9, seeds=1, n_test=512, n_min=16, n_max=2 ** 10, resolution=0.1)


def test_rows_are_the_sweeps_of_each_problem_seed():
    configs = lib.experiments.sweep.grid(BASE, L=[4, 8])
    got = per_problem_nstars(configs, 2, **FAST)
    assert got.shape == (2, 2)
    for s in range(2):
        np.testing.assert_array_equal(got[s], table(sweep(configs, seed=s, **FAST))["nstar"])


@pytest.mark.parametrize("args,kw,name", [(([BASE], 0), {}, "problems"), (([], 1), {}, "configs"),
                                          (([BASE], 1), dict(seed=3), "seed")])
def test_bad_arguments_are_named(args, kw, name):
    with pytest.raises(ValueError, match=name):
        per_problem_nstars(*args, **kw)


def test_distinct_gives_every_cell_its_own_seed():
    from lib.experiments.per_problem import point_seed
    configs = lib.experiments.sweep.grid(BASE, L=[4, 8])
    got = per_problem_nstars(configs, 2, distinct=True, **FAST)
    assert got.shape == (2, 2)
    seeds = {point_seed(2, s, j, True) for s in range(2) for j in range(2)}
    assert seeds == {0, 1, 2, 3}                                  # no two cells share a problem or data
    for s in range(2):
        for j, c in enumerate(configs):
            ref = table(sweep([c], seed=point_seed(2, s, j, True), **FAST))["nstar"][0]
            np.testing.assert_array_equal(got[s, j], ref)
    assert point_seed(2, 1, 1, False) == 1                        # the default: the row's seed at every point


def test_distinct_must_be_a_bool():
    with pytest.raises(ValueError, match="distinct"):
        per_problem_nstars([BASE], 1, distinct="yes", **FAST)


def test_metric_searches_the_attention_requirement_as_nstar_does(tmp_path):
    """metric="att_acc": each cell is exactly nstar's attention search with that cell's seed, and the
    recall and attention searches share the store's points (the second computes nothing new)."""
    from lib.experiments.capacity import nstar
    from lib.experiments.per_problem import point_seed
    configs = lib.experiments.sweep.grid(BASE, L=[4, 8])
    cache = str(tmp_path / "points.jsonl")
    acc = per_problem_nstars(configs, 2, distinct=True, cache=cache, **FAST)
    att = per_problem_nstars(configs, 2, distinct=True, cache=cache, metric="att_acc", **FAST)
    for s in range(2):
        for j, c in enumerate(configs):
            ref = nstar(c, seed=point_seed(2, s, j, True), metric="att_acc", cache=cache, **FAST).nstar
            assert np.isnan(att[s, j]) if ref is None else att[s, j] == ref
    assert acc.shape == att.shape == (2, 2)
    pts = sweep(configs[:1], seed=0, metric="att_acc", cache=cache, **FAST)
    assert pts[0].metric == "att_acc" and table(pts)["metric"][0] == "att_acc"
    with pytest.raises(ValueError, match="metric"):
        sweep(configs, metric="loss", **FAST)


def test_only_searches_some_columns_with_their_seeds_in_the_whole_table(tmp_path):
    configs = lib.experiments.sweep.grid(BASE, L=[4, 8, 16])
    cache = str(tmp_path / "points.jsonl")
    whole = per_problem_nstars(configs, 2, distinct=True, cache=cache, **FAST)
    part = per_problem_nstars(configs, 2, distinct=True, only=[2, 0], cache=cache, **FAST)
    assert np.isnan(part[:, 1]).all()
    np.testing.assert_array_equal(part[:, [0, 2]], whole[:, [0, 2]])
    np.testing.assert_array_equal(per_problem_nstars(configs, 2, only=[1], cache=cache, **FAST)[:, 1],
                                  per_problem_nstars(configs, 2, cache=cache, **FAST)[:, 1])
    for bad in ([], [3], [0, 0], [True], "0"):
        with pytest.raises(ValueError, match="only"):
            per_problem_nstars(configs, 2, only=bad, **FAST)


def test_per_problem_coverage_uses_the_cells_seeds():
    """Each cell is the coverage learner's N* on the problem seed per_problem_nstars gives that cell."""
    from lib.experiments.per_problem import point_seed
    from lib.experiments.recall import per_problem_coverage
    from lib.experiments.recall import coverage_learner_nstar
    cfgs = [lib.TaskConfig(V=12, d=8, L=4, device="cpu"), lib.TaskConfig(V=16, d=8, L=4, device="cpu")]
    for distinct in (False, True):
        got = per_problem_coverage(cfgs, 3, distinct=distinct, threshold=0.9, n_test=200, n_min=4, n_max=512)
        want = [[coverage_learner_nstar(c, point_seed(3, s, j, distinct), threshold=0.9, n_test=200, n_min=4,
                                        n_max=512) for j, c in enumerate(cfgs)] for s in range(3)]
        assert got.tolist() == want
    assert np.isnan(per_problem_coverage(cfgs[:1], 1, threshold=0.999999, n_test=200, n_min=4, n_max=8)).all()
    with pytest.raises(ValueError, match="configs"):
        per_problem_coverage([], 2)
