"""lib.experiments.recall: the trained transformer's recall and chapter 2's linear memory's."""
import numpy as np
import pytest
import torch

import lib
from lib.experiments.recall import linear_memory_recall, transformer_recall

CFG = lib.TaskConfig(V=12, d=16, L=4, trigger_in_value=False, device="cpu")


def test_transformer_recall_records_every_budget_and_equals_a_direct_run():
    """The budgets against a direct `lib.train`; the oracle accuracy against its definition, recomputed
    in float64 from the problem's raw tensors: the three steps' (limit mode) W_V read at o = v_l = e_{x_l}
    (trigger out of the value path), logits xi = U W_V o, a hit when argmax xi is the label. L = 16, d = 16
    is a problem where attention often fails (att_acc 0.25), so the oracle (0.34) differs from the model's
    accuracy (0.19), from finite mode's oracle (0.26) and from the oracle on the training batch. The
    float32 route may flip only samples within float32 rounding of a tie: the allowed difference is the
    fraction of samples whose top-two gap is below 1e-4 of the largest logit (none here). ~1 s."""
    cfg = CFG.with_(L=16)
    n_test = 256
    acc, oracle = transformer_recall(cfg, 96, 2, steps=40, lr=0.03, record_every=20, n_test=n_test)
    prob = lib.make_problem(cfg, 2)
    batch, test = lib.sample_batch(prob, 96, 2), lib.sample_batch(prob, n_test, 2, split="test")
    _, rec = lib.train(prob, batch, steps=40, lr=0.03, record_every=20, test_batch=test)
    np.testing.assert_array_equal(acc, rec.test_acc[1:])
    W_V = lib.three_steps(prob, batch, "limit").params.W_V.double()
    o = prob.E.double()[test.tokens[torch.arange(n_test), test.pos].long()]        # v_l = e_{x_l}
    xi = o @ W_V.T @ prob.U.double().T                                               # (n_test, V)
    top2 = xi.topk(2, 1).values
    near_ties = int((top2[:, 0] - top2[:, 1] < 1e-4 * float(xi.abs().max())).sum())
    want = float((xi.argmax(1) == test.labels).double().mean())
    assert abs(oracle - want) <= near_ties / n_test, (oracle, want, near_ties)
    assert abs(want - lib.evaluate(prob, lib.three_steps(prob, batch), batch=test).acc) > 0.05   # a telling case


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


def test_attention_starts_equals_the_direct_loop():
    from lib.experiments.recall import attention_starts
    out = attention_starts(CFG, 2, [32, 64], [64], 64, lr=0.03, steps=6, long_steps=9, long_every=3, n_test=128)
    assert out["att_three"].shape == (2, 2) and out["att_zero"].shape == (2, 1)
    assert len(out["long"]) == len(out["smallV"]) == len(out["reset"]) == len(out["w_norm"]) == 2
    for s in range(2):
        prob = lib.make_problem(CFG, s)
        test, batch = lib.sample_batch(prob, 128, s, split="test"), lib.sample_batch(prob, 64, s)
        p3 = lib.three_steps(prob, batch, "finite").params
        summ = lib.learning.trainer.attention_summary(prob, p3, test)
        assert out["att_three"][s, 1] == summ["att_acc"] and out["ent_three"][s, 1] == summ["entropy"]
        _, rec = lib.train(prob, batch, steps=6, lr=0.03, record_every=6, test_batch=test)
        assert out["att_zero"][s, 0] == rec.att_acc[-1] and out["ent_zero"][s, 0] == rec.entropy[-1]
        _, rec = lib.train(prob, batch, steps=9, lr=0.03, init=p3, record_every=3, test_batch=test)
        assert out["long"][s].att_acc == rec.att_acc and out["long"][s].step == rec.step
        _, rec = lib.train(prob, batch, steps=6, lr=0.03, init=lib.Params(p3.W_V, 0 * p3.W_KQ), record_every=6,
                           test_batch=test)
        assert out["reset"][s].test_acc == rec.test_acc
        assert out["w_norm"][s] == float((p3.W_KQ @ prob.z_eos).norm())


@pytest.mark.parametrize("kw,name", [(dict(problems=0), "problems"), (dict(n_three=[]), "n_three"),
                                     (dict(n_trained=[128]), "n_trained"), (dict(n_small=32), "n_small"),
                                     (dict(lr=0.0), "lr"), (dict(long_every=0), "long_every")])
def test_attention_starts_names_bad_arguments(kw, name):
    from lib.experiments.recall import attention_starts
    args = dict(cfg=CFG, problems=1, n_three=[32, 64], n_trained=[64], n_small=64, lr=0.01) | kw
    with pytest.raises(ValueError, match=name):
        attention_starts(**args)


@pytest.mark.parametrize("guess", [False, True])
def test_coverage_learner_nstar_is_the_first_n_whose_batch_covers_enough(guess):
    """Recomputed from its definition with plain Python sets: at the returned N the learner's accuracy
    on the test samples (seen facts right; unseen right with probability 1/(labels not shown) when it
    guesses) reaches the threshold and at the search's last failing N it does not; its accuracy only
    grows with N (nested batches), so the first N of a fine scan is within the resolution below."""
    from lib.core.search import threshold_search
    from lib.experiments.recall import coverage_learner_nstar
    cfg, seed, t = lib.TaskConfig(V=24, d=8, L=4, trigger_in_value=False, device="cpu"), 3, 0.95
    prob = lib.make_problem(cfg, seed)
    xs = lib.sample_batch(prob, 300, seed, split="test").informative.tolist()

    def acc(N):
        seen = set(lib.sample_batch(prob, N, seed).informative.tolist())
        other = 1 / (cfg.V - len(seen)) if guess and len(seen) < cfg.V else 0.0
        return sum(1.0 if x in seen else other for x in xs) / len(xs)

    n = coverage_learner_nstar(cfg, seed, threshold=t, n_test=300, n_min=4, n_max=2 ** 10, resolution=0.1, guess=guess)
    want = threshold_search(lambda N: acc(N) >= t, 4, 2 ** 10, 0.1).first_true
    assert n == want and acc(n) >= t
    first = next(N for N in range(1, 2 ** 10) if acc(N) >= t)
    assert first <= n <= first * 1.1 + 1 and all(acc(N) <= acc(N + 7) for N in range(1, 200, 7))
    assert coverage_learner_nstar(cfg, seed, threshold=0.999999, n_test=300, n_min=4, n_max=8) is None
    for bad, name in ((dict(seed=-1), "seed"), (dict(threshold=1.5), "threshold"), (dict(guess="yes"), "guess")):
        with pytest.raises(ValueError, match=name):
            coverage_learner_nstar(cfg, **{"seed": 0, **bad})
