"""Multi-step trainer: converges on a solvable problem; its first steps are the closed-form ones."""
import torch

import lib
from lib.core.memory import hebbian, make_memory, recall_accuracy
from lib.learning.trainer import TrainConfig, train_memory, train_transformer
from conftest import small_cfg


def test_trainer_solves_a_small_problem():
    cfg = lib.TaskConfig(V=8, d=16, L=3, device="cpu")
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 256, 0)
    params, hist = train_transformer(problem, batch, TrainConfig(steps=400, lr=0.05, optimizer="adam"))
    assert hist.acc[-1] == 1.0 and hist.loss[-1] < 0.05
    assert hist.loss[-1] < hist.loss[0] / 20
    assert lib.evaluate(problem, params, 4000).acc > 0.99


def test_first_gd_steps_match_the_closed_form_steps():
    cfg = small_cfg(V=9, d=6, L=4)
    problem = lib.make_problem(cfg, 1)
    batch = lib.sample_batch(problem, 200, 1)
    eta = 0.3
    p1, _ = train_transformer(problem, batch, TrainConfig(steps=1, lr=eta))
    p2, _ = train_transformer(problem, batch, TrainConfig(steps=2, lr=eta))
    three = lib.three_steps(problem, batch, "finite", step_sizes=lib.StepSizes(eta=eta, gamma_W=eta, gamma_V=eta))
    assert torch.allclose(p1.W_V, three.V1, rtol=1e-10, atol=1e-14)
    assert float(p1.W_KQ.abs().max()) == 0.0                  # grad W_KQ = 0 at W_V = 0
    assert torch.allclose(p2.W_KQ, three.W1, rtol=1e-8, atol=1e-16)


def test_trainer_early_stops_and_records_history():
    cfg = lib.TaskConfig(V=8, d=16, L=3, device="cpu")
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 256, 0)
    _, hist = train_transformer(problem, batch, TrainConfig(steps=2000, lr=0.05, optimizer="adam",
                                                            target_acc=1.0, log_every=10))
    assert hist.stopped_early and hist.acc[-1] == 1.0 and hist.step[-1] < 2000
    assert len(hist.step) == len(hist.loss) == len(hist.acc)


def test_trained_memory_beats_hebbian_memory():
    mem = make_memory(60, 24, seed=0, dtype="float64", device="cpu")   # n log n ~ d^2 / 2.3
    hebb = recall_accuracy(mem, hebbian(mem))
    W, hist = train_memory(mem, TrainConfig(steps=300, lr=0.1, optimizer="adam"))
    assert recall_accuracy(mem, W) == hist.acc[-1]
    assert hist.acc[-1] == 1.0 and hebb < 1.0


def test_trainer_is_chunk_invariant():
    cfg = small_cfg(V=9, d=6, L=4, model="mlp")
    problem = lib.make_problem(cfg, 2)
    batch = lib.sample_batch(problem, 100, 2)
    a, _ = train_transformer(problem, batch, TrainConfig(steps=3, lr=0.5, chunk=7))
    b, _ = train_transformer(problem, batch, TrainConfig(steps=3, lr=0.5))
    assert torch.allclose(a.W_V, b.W_V, rtol=1e-10) and torch.allclose(a.W_KQ, b.W_KQ, rtol=1e-8, atol=1e-16)
