"""The three steps: finite mode reproduces limit mode; orthogonal embeddings have no cross-talk."""
import pytest
import torch

import lib
from conftest import small_cfg


def agreement(problem, a, b, n=20000):
    test = lib.sample_batch(problem, n, 0, "test")
    return float((lib.predict(problem, a, test) == lib.predict(problem, b, test)).double().mean())


@pytest.mark.parametrize("model", ["attn", "mlp"])
def test_finite_with_tiny_eta_and_huge_gamma_reproduces_limit(model):
    cfg = lib.TaskConfig(V=64, d=32, L=8, model=model, m=128 if model == "mlp" else None,
                         trigger_in_value=model == "attn", device="cpu")
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 8192, 0)
    lim = lib.three_steps(problem, batch, "limit")
    fin = lib.three_steps(problem, batch, "finite", step_sizes=lib.StepSizes(eta=1e-4, gamma_W=1e12, gamma_V=1e12))
    assert agreement(problem, lim.params, fin.params) >= 0.999


def test_default_step_sizes_give_the_limit_predictions():
    cfg = lib.TaskConfig(V=256, d=64, L=16, device="cpu")
    problem = lib.make_problem(cfg, 1)
    batch = lib.sample_batch(problem, 16384, 1)
    lim = lib.three_steps(problem, batch, "limit")
    fin = lib.three_steps(problem, batch, "finite")
    assert agreement(problem, lim.params, fin.params) >= 0.999


def test_default_finite_step_is_genuinely_finite_and_still_agrees_with_the_limit():
    """Default attn_scale: the MLP's attention is sharp but not saturated, and predictions agree."""
    cfg = lib.TaskConfig(V=64, d=32, L=8, model="mlp", m=128, trigger_in_value=False, device="cpu")
    problem = lib.make_problem(cfg, 1)
    batch = lib.sample_batch(problem, 8192, 1)
    fin = lib.three_steps(problem, batch, "finite")
    assert float((fin.W1 @ problem.z_eos).norm()) == pytest.approx(lib.StepSizes().attn_scale, rel=1e-5)
    test = lib.sample_batch(problem, 4000, 0, "test")
    a = torch.softmax(lib.fast.tokens.position_scores(problem, test, fin.W1 @ problem.z_eos), 1)
    on_trigger = float(a.gather(1, test.pos[:, None]).mean())
    assert 0.99 < on_trigger < 0.9995                     # soft: weight is left off the trigger
    assert agreement(problem, lib.three_steps(problem, batch, "limit").params, fin.params) >= 0.999


def test_finite_direction_converges_to_limit_k():
    """W1 q / |q|^2 points along k as eta -> 0 (cosine -> 1)."""
    cfg = small_cfg(V=20, d=10, L=6)
    problem = lib.make_problem(cfg, 2)
    batch = lib.sample_batch(problem, 500, 2)
    k = lib.three_steps(problem, batch, "limit").k
    cos = []
    for eta in [1e-1, 1e-3, 1e-5]:
        kf = lib.three_steps(problem, batch, "finite", step_sizes=lib.StepSizes(eta=eta)).k
        cos.append(float(kf @ k / (kf.norm() * k.norm())))
    assert cos[-1] > 1 - 1e-8 and cos[0] < cos[-1]


@pytest.mark.parametrize("tiv", [True, False])
def test_orthogonal_embeddings_recall_perfectly_when_attention_is_right(tiv):
    V = 24
    cfg = lib.TaskConfig(V=V, d=2 * V + 2, L=6, embedding="orthogonal", trigger_in_value=tiv,
                         dtype="float64", device="cpu")
    problem = lib.make_problem(cfg, 0)
    # every token appears as informative: coverage, then zero cross-talk means exact recall
    batch = lib.sample_batch(problem, 4000, 0)
    res = lib.three_steps(problem, batch, "limit")
    acc = lib.evaluate(problem, res.params, 5000)
    assert acc.oracle_acc == 1.0
    assert acc.att_acc == 1.0 and acc.acc == 1.0
    # No cross-talk: the scores u_k^T G3 v_i depend on the data only through counts,
    # S[i, k] = (n_i/N)(1[k = Pi i] - 1/V) + [trigger in value] (f_k - 1/V), f_k = label frequency.
    G3 = res.params.W_V
    vals = problem.E[:V] + (problem.z_trig if tiv else 0)
    S = vals @ G3.T @ problem.U.T                                      # (V, V)
    n = torch.bincount(batch.informative, minlength=V).double() / batch.N
    f = torch.zeros(V, dtype=torch.float64)
    f[problem.perm] = n
    expected = n[:, None] * (torch.eye(V, dtype=torch.float64)[problem.perm] - 1 / V)
    if tiv:
        expected = expected + (f - 1 / V)[None, :]
    assert float((S - expected).abs().max()) < 1e-12


def test_limit_with_perfect_attention_is_the_hebbian_memory():
    """With attention on the trigger, G3 = sum_j (n_j/N)(u_{Pi j} - u_bar)(e_j + z_trig)^T."""
    cfg = lib.TaskConfig(V=16, d=64, L=4, dtype="float64", device="cpu", tau=3.0)
    problem = lib.make_problem(cfg, 5)
    batch = lib.sample_batch(problem, 3000, 5)
    res = lib.three_steps(problem, batch, "limit")
    t = (lib.keys_values(problem, batch)[0] @ res.k).argmax(1)
    assert bool((t == batch.pos).all())
    n = torch.bincount(batch.informative, minlength=cfg.V).double()
    hebb = ((n / batch.N)[:, None] * (problem.U_perm - problem.u_bar)).T @ (problem.E[:cfg.V] + problem.z_trig)
    assert float((res.params.W_V - hebb).abs().max()) < 1e-12


def test_step_sizes_validate():
    for bad in [dict(eta=0), dict(eta=float("nan")), dict(gamma_V=-1), dict(gamma_W=float("inf")),
                dict(attn_scale=0)]:
        name = next(iter(bad))
        with pytest.raises(ValueError, match=name):
            lib.StepSizes(**bad)
    cfg = small_cfg()
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 10, 0)
    with pytest.raises(ValueError, match="mode"):
        lib.three_steps(problem, batch, "fast")
    with pytest.raises(ValueError, match="route"):
        lib.three_steps(problem, batch, route="fast")


def test_bad_inputs_name_the_parameter():
    cfg = small_cfg()
    problem = lib.make_problem(cfg, 0)
    batch = lib.sample_batch(problem, 10, 0)
    params = lib.three_steps(problem, batch).params
    other = lib.sample_batch(lib.make_problem(small_cfg(L=6), 0), 10, 0)
    with pytest.raises(ValueError, match="batch.tokens"):
        lib.evaluate(problem, params, batch=other)
    with pytest.raises(ValueError, match="batch.tokens"):
        lib.predict(problem, params, other)
    with pytest.raises(ValueError, match="W_V"):
        lib.evaluate(problem, lib.Params(torch.zeros(3, 3), params.W_KQ))
    with pytest.raises(ValueError, match="n_test"):
        lib.evaluate(problem, params, n_test=0)
    with pytest.raises(ValueError, match="problem"):
        lib.sample_batch("not a problem", 10)
    with pytest.raises(ValueError, match="cfg"):
        lib.make_problem({"V": 3})
    with pytest.raises(ValueError, match="d must be >= "):
        lib.TaskConfig(V=10, d=5, L=2, embedding="orthogonal")
