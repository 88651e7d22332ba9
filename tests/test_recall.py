"""lib.experiments.recall: the trained transformer's recall and chapter 2's linear memory's."""
import numpy as np
import pytest

import lib
from lib.experiments.recall import linear_memory_recall, transformer_recall

CFG = lib.TaskConfig(V=12, d=16, L=4, trigger_in_value=False, device="cpu")


def test_transformer_recall_records_every_budget_and_equals_a_direct_run():
    acc, oracle = transformer_recall(CFG, 96, 2, steps=40, lr=0.03, record_every=20, n_test=256)
    assert acc.shape == (2,) and 0.0 <= oracle <= 1.0
    prob = lib.make_problem(CFG, 2)
    batch, test = lib.sample_batch(prob, 96, 2), lib.sample_batch(prob, 256, 2, split="test")
    _, rec = lib.train(prob, batch, steps=40, lr=0.03, record_every=20, test_batch=test)
    np.testing.assert_array_equal(acc, rec.test_acc[1:])
    assert oracle == lib.evaluate(prob, lib.three_steps(prob, batch), batch=test).oracle_acc


def test_linear_memory_trained_beats_hebbian_at_its_capacity():
    trained, hebb = linear_memory_recall(24, 16, 0)
    assert trained >= hebb and trained > 0.9
    with pytest.raises(ValueError, match="n"):
        linear_memory_recall(0, 16, 0)


@pytest.mark.parametrize("kw,name", [(dict(n_train=0), "n_train"), (dict(steps=0), "steps"), (dict(lr=0.0), "lr"),
                                     (dict(record_every=0), "record_every"), (dict(seed=-1), "seed")])
def test_transformer_recall_names_bad_arguments(kw, name):
    args = dict(n_train=32, seed=0, steps=10, lr=0.01, record_every=5) | kw
    with pytest.raises(ValueError, match=name):
        transformer_recall(CFG, args.pop("n_train"), args.pop("seed"), **args)
    with pytest.raises(ValueError, match="cfg"):
        transformer_recall("cfg", 32, 0, steps=10, lr=0.01, record_every=5)
