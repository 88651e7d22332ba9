"""lib.learning.crosscheck: the count route's training against autograd, run by run."""
import pytest
import torch

import lib
from lib.learning.crosscheck import count_route_vs_autograd, relative_gap
from conftest import small_cfg


def test_relative_gap_and_its_zero_reference():
    a, b = torch.tensor([3.0, 4.0]), torch.tensor([0.0, 5.0])
    assert relative_gap(a, b) == pytest.approx(10 ** 0.5 / 5.0)
    assert relative_gap(a, torch.zeros(2)) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="a and b"):
        relative_gap(a, torch.zeros(3))


def test_runs_agree_with_autograd_and_keep_their_order():
    problem = lib.make_problem(small_cfg(V=8, d=5, L=3), 1)
    batch = lib.sample_batch(problem, 120, 1)
    runs = [("zero", "adam", 0.02), ("three_steps", "adam", 0.02), ("zero", "gd", 0.5)]
    gaps = count_route_vs_autograd(problem, batch, runs, steps=5, grad_at=(0, 4))
    assert list(gaps) == [("zero", "adam"), ("three_steps", "adam"), ("zero", "gd")]
    assert all(g["grad"] < 1e-10 and g["params"] < 1e-10 for g in gaps.values())


@pytest.mark.parametrize("kw,name", [(dict(runs=[("one", "adam", 0.1)]), "init"),
                                     (dict(runs=[("zero", "sgd", 0.1)]), "optimizer"),
                                     (dict(runs=[("zero", "adam")]), "runs"),
                                     (dict(runs=[]), "runs"),
                                     (dict(runs=[("zero", "adam", 0.1)], steps=-1), "steps"),
                                     (dict(runs=[("zero", "adam", 0.1)], grad_at=()), "grad_at")])
def test_bad_arguments_are_named(kw, name):
    problem = lib.make_problem(small_cfg(V=8, d=5, L=3), 1)
    batch = lib.sample_batch(problem, 50, 1)
    with pytest.raises(ValueError, match=name):
        count_route_vs_autograd(problem, batch, **kw)
