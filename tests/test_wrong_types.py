"""Wrong objects where a problem or parameters are expected give a ValueError naming the argument,
not a torch error from deep inside a forward pass (each case raised something else before)."""
import pytest
import torch

import lib

CFG = lib.TaskConfig(V=32, d=16, L=8)


@pytest.fixture(scope="module")
def pb():
    problem = lib.make_problem(CFG, 0)
    return problem, lib.sample_batch(problem, 64, 0)


@pytest.mark.parametrize("call", [
    lambda pr, b: lib.three_steps(CFG, b),
    lambda pr, b: lib.three_steps(CFG, b, "finite"),
    lambda pr, b: lib.evaluate(CFG, lib.three_steps(pr, b).params, batch=b),
])
def test_a_config_where_a_problem_is_expected(pb, call):
    with pytest.raises(ValueError, match=r"problem must be a Problem \(make one with lib.make_problem"):
        call(*pb)


@pytest.mark.parametrize("field", ["W_V", "W_KQ"])
@pytest.mark.parametrize("use", ["evaluate", "train", "gradients"])
def test_params_of_the_wrong_dtype(pb, field, use):
    problem, batch = pb
    p = lib.zero_params(CFG)
    bad = lib.Params(**{"W_V": p.W_V, "W_KQ": p.W_KQ, field: getattr(p, field).double()})
    with pytest.raises(ValueError, match=rf"params\.{field} has dtype torch.float64, the problem's is torch.float32"):
        if use == "evaluate":
            lib.evaluate(problem, bad, batch=batch)
        elif use == "train":
            lib.train(problem, batch, steps=1, init=bad)
        else:
            lib.gradients(problem, bad, batch)


def test_params_that_are_not_tensors(pb):
    problem, batch = pb
    p = lib.zero_params(CFG)
    with pytest.raises(ValueError, match=r"params\.W_V must be a torch.Tensor, got ndarray"):
        lib.evaluate(problem, lib.Params(p.W_V.numpy(), p.W_KQ), batch=batch)


@pytest.mark.parametrize("tau,dtype", [(1e3, "float32"), (1e3, "float64"), (1e5, "float64")])
def test_finite_mode_agrees_with_the_limit_at_large_trigger_scale(tau, dtype):
    # With the trigger in the value path the step-1 logits grow like eta tau^2; an unscaled eta
    # saturated the softmax (attention accuracy 0.000 at tau = 1000 against 1.000 in limit mode).
    cfg = lib.TaskConfig(V=64, d=32, L=8, tau=tau, trigger_in_value=True, dtype=dtype, device="cpu")
    problem = lib.make_problem(cfg, 0)
    batch, test = lib.sample_batch(problem, 4096, 0), lib.sample_batch(problem, 2048, 0, split="test")
    fin = lib.three_steps(problem, batch, "finite")
    lim = lib.three_steps(problem, batch, "limit")
    a_fin, a_lim = lib.evaluate(problem, fin, batch=test), lib.evaluate(problem, lim, batch=test)
    assert a_fin.att_acc == a_lim.att_acc == 1.0
    same = (lib.predict(problem, fin, test) == lib.predict(problem, lim, test)).double().mean()
    assert same >= 0.99, float(same)
    assert lib.StepSizes().eta_for(tau) == pytest.approx(0.01 / tau ** 2)
    assert lib.StepSizes().eta_for(0.5) == 0.01                      # tau <= 1: eta as given
