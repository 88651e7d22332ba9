"""lib.analysis.decompose: the named terms add up to the logits u_k^T G o exactly (float64), the count tables
give the same memory as the direct (N, L, d) route and as lib.three_steps, and each term equals its
formula computed independently from materialised tensors."""
import itertools

import pytest
import torch
import torch.nn.functional as Fn

import lib
import lib.fast.counts as counts
from lib.analysis.decompose import FINE_TERMS, GROUPS, decompose, memory_counts, pooled
from conftest import small_cfg, rel


def attn_of(kind, problem, batch, seed):
    """Attention weights of each kind the decomposition accepts."""
    K = problem.cfg.n_keys
    g = torch.Generator().manual_seed(seed)
    if kind in (None, "oracle"):
        return kind
    if kind == "hard":
        return torch.randint(K, (batch.N,), generator=g)
    return torch.rand(batch.N, K, generator=g, dtype=torch.float64)       # soft, unnormalised


def direct_parts(problem, batch, attn):
    """Informative, other and shared parts of every pooled vector, from (N, K, d) tensors."""
    cfg = problem.cfg
    h, v = lib.keys_values(problem, batch)                                 # (N, K, d)
    N, K = batch.N, cfg.n_keys
    if attn is None:
        a = torch.full((N, K), 1.0 / K, dtype=torch.float64)
    elif isinstance(attn, str):
        a = Fn.one_hot(batch.pos, K).double()
    elif attn.dtype == torch.long:
        a = Fn.one_hot(attn, K).double()
    else:
        a = attn
    e = problem.E[batch.tokens]                                             # (N, L, d) token part only
    inf = torch.zeros(N, cfg.L, dtype=torch.float64)
    inf[torch.arange(N), batch.pos] = 1.0
    o_inf = torch.einsum("nt,ntd->nd", a[:, :cfg.L] * inf, e)
    o_oth = torch.einsum("nt,ntd->nd", a[:, :cfg.L] * (1 - inf), e)
    o = torch.einsum("nt,ntd->nd", a, v)
    return o_inf, o_oth, o - o_inf - o_oth, o


SWITCHES = list(itertools.product([True, False], [False, True], [None, 4]))
KINDS = [None, "oracle", "hard", "soft"]


@pytest.mark.parametrize("tiv,eos,noise", SWITCHES)
@pytest.mark.parametrize("train_kind", KINDS)
def test_terms_sum_to_logits_and_memory_equals_direct(tiv, eos, noise, train_kind):
    cfg = small_cfg(V=9, d=6, L=5, trigger_in_value=tiv, eos_key=eos, noise_vocab=noise)
    problem = lib.make_problem(cfg, 3)
    train, test = lib.sample_batch(problem, 400, 1), lib.sample_batch(problem, 50, 1, "test")
    ta = attn_of(train_kind, problem, train, 5)
    *_, o_train = direct_parts(problem, train, ta)
    dU = problem.U[train.labels] - problem.u_bar
    G_direct = dU.T @ o_train / train.N
    for test_kind in KINDS:
        sa = attn_of(test_kind, problem, test, 6)
        dec = decompose(problem, train, test, ta, sa)
        assert set(dec.terms) == set(FINE_TERMS)
        assert rel(dec.memory.matrix(problem), G_direct) < 1e-12
        *_, o_test = direct_parts(problem, test, sa)
        assert rel(pooled(problem, test, sa), o_test) < 1e-12
        direct_logits = o_test @ G_direct.T @ problem.U.T
        assert rel(dec.logits, direct_logits) < 1e-12
        assert float((dec.total() - direct_logits).abs().max()) < 1e-13 * float(direct_logits.abs().max())
        for scheme in GROUPS:
            assert float((sum(dec.grouped(scheme).values()) - dec.logits).abs().max()) < 1e-13 * float(
                dec.logits.abs().max())


def test_uniform_memory_is_step_one_and_hard_memory_is_step_three():
    """G1 (uniform attention) and G3 (hard attention along k) of lib.three_steps, from the tables."""
    cfg = small_cfg(V=11, d=7, L=6)
    problem = lib.make_problem(cfg, 2)
    batch = lib.sample_batch(problem, 600, 2)
    out = lib.three_steps(problem, batch, "limit")
    assert rel(memory_counts(problem, batch).matrix(problem), out.V1) < 1e-12
    t = counts.position_scores(problem, batch, out.k).argmax(1)
    assert rel(memory_counts(problem, batch, t).matrix(problem), out.V2) < 1e-12
    # the logits after step 1 are those of the model (V1, W_KQ = 0), whose attention is uniform
    test = lib.sample_batch(problem, 40, 2, "test")
    model = lib.forward(problem, lib.Params(out.V1, torch.zeros(cfg.d, cfg.d, dtype=torch.float64)), test)
    assert rel(decompose(problem, batch, test).logits, model.logits) < 1e-12


@pytest.mark.parametrize("train_kind,test_kind", [(None, None), ("soft", "hard"), ("oracle", "soft")])
def test_each_term_equals_its_formula(train_kind, test_kind):
    """Every fine term recomputed from materialised per-sample parts, pair by pair."""
    cfg = small_cfg(V=8, d=5, L=4, eos_key=True)
    problem = lib.make_problem(cfg, 7)
    train, test = lib.sample_batch(problem, 300, 3), lib.sample_batch(problem, 30, 3, "test")
    ta, sa = attn_of(train_kind, problem, train, 1), attn_of(test_kind, problem, test, 2)
    dec = decompose(problem, train, test, ta, sa)
    m_inf, m_oth, m_sh, m_o = direct_parts(problem, train, ta)
    t_inf, t_oth, t_sh, t_o = direct_parts(problem, test, sa)
    U, Uy = problem.U, problem.U[train.labels]
    N, V = train.N, cfg.V

    def read(mem, part):     # (1/N) sum_n (u_k . u_{y_n}) (mem_n . part_m): (M, V)
        return (part @ mem.T) @ Uy @ U.T / N

    # matched path: training samples with the test's informative token, at the test's label
    same = (test.informative[:, None] == train.informative[None, :]).double()   # (M, N)
    a_train = (m_inf.norm(dim=1) / problem.E[train.informative].norm(dim=1))    # a_{n, l_n}
    S_x = same @ a_train                                                         # (M,)
    sbar = float(a_train.sum()) / (N * V)
    base = (U[test.labels] ** 2).sum(1) * (t_inf ** 2).sum(1) / t_inf.norm(dim=1).clamp_min(1e-300) \
        * problem.E[test.informative].norm(dim=1)                                # |u_y|^2 |e|^2 b
    onehot = Fn.one_hot(test.labels, V).double()
    ref = {
        "signal": onehot * (sbar * base)[:, None],
        "signal_count": onehot * ((S_x / N - sbar) * base)[:, None],
        "other_test": read(m_inf, t_oth),
        "other_memory": read(m_oth, t_inf + t_oth),
        "trigger_cross": read(m_sh, t_inf + t_oth) + read(m_inf + m_oth, t_sh),
        "ubar": -(t_o @ m_o.mean(0))[:, None] * (U @ problem.u_bar)[None, :],
    }
    ref["crosstalk"] = read(m_inf, t_inf) - ref["signal"] - ref["signal_count"]
    shared = read(m_sh, t_sh)
    pbar = m_sh.sum(0) / (N * V)
    ref["trigger_equal"] = (t_sh @ pbar)[:, None] * (U @ problem.U_perm.T).sum(1)[None, :]
    ref["trigger_count"] = shared - ref["trigger_equal"]
    scale = float(dec.logits.abs().max())
    for name in FINE_TERMS:
        assert float((dec.terms[name] - ref[name]).abs().max()) < 1e-12 * scale, name


def test_orthogonal_embeddings_leave_no_crosstalk_and_oracle_no_leakage():
    cfg = small_cfg(V=6, d=20, L=4, embedding="orthogonal")
    problem = lib.make_problem(cfg, 1)
    train, test = lib.sample_batch(problem, 200, 1), lib.sample_batch(problem, 30, 1, "test")
    dec = decompose(problem, train, test)
    scale = float(dec.logits.abs().max())
    assert float(dec.terms["crosstalk"].abs().max()) < 1e-12 * scale
    assert float(dec.terms["trigger_cross"].abs().max()) < 1e-12 * scale
    assert float(dec.terms["signal"].abs().max()) > 0.01 * scale
    orc = decompose(problem, train, test, "oracle", "oracle")
    assert float(orc.terms["other_memory"].abs().max()) == 0.0
    assert float(orc.terms["other_test"].abs().max()) == 0.0
    # uniform attention: signal = 1/(V L^2) per unit norms, counts averaged
    assert torch.allclose(dec.at_label()["signal"], torch.full((30,), 1 / (6 * 16), dtype=torch.float64))


def test_chunked_tables_equal_one_chunk(monkeypatch):
    cfg = small_cfg(V=10, d=6, L=5, eos_key=True)
    problem = lib.make_problem(cfg, 4)
    train = lib.sample_batch(problem, 500, 4)
    ta = attn_of("soft", problem, train, 3)
    one = memory_counts(problem, train, ta).matrix(problem)
    monkeypatch.setattr(lib.fast.limit, "PASS_SAMPLES", 7)
    assert rel(memory_counts(problem, train, ta).matrix(problem), one) < 1e-13


def test_at_and_off_label_partition_the_logits():
    cfg = small_cfg(V=7, d=5, L=3)
    problem = lib.make_problem(cfg, 5)
    dec = decompose(problem, lib.sample_batch(problem, 100, 5), lib.sample_batch(problem, 20, 5, "test"))
    at, off = dec.at_label("step1"), dec.off_label("step1")
    assert set(at) == set(GROUPS["step1"])
    tot_at = sum(at.values())
    assert torch.allclose(tot_at, dec.logits.gather(1, dec.labels[:, None])[:, 0], atol=1e-14)
    assert off["signal"].shape == (20, 6) and float(off["signal"].abs().max()) == 0.0
    assert torch.allclose(sum(off.values()).sum(1) + tot_at, dec.logits.sum(1), atol=1e-13)


def test_invalid_arguments_name_the_parameter():
    cfg = small_cfg(V=5, d=4, L=3)
    problem = lib.make_problem(cfg, 0)
    b = lib.sample_batch(problem, 10, 0)
    with pytest.raises(ValueError, match="train_attn"):
        decompose(problem, b, b, "softmax")
    with pytest.raises(ValueError, match="train_attn"):
        decompose(problem, b, b, torch.zeros(9, dtype=torch.long))
    with pytest.raises(ValueError, match="train_attn"):
        decompose(problem, b, b, torch.full((10,), 3, dtype=torch.long))
    with pytest.raises(ValueError, match="test_attn"):
        decompose(problem, b, b, None, torch.zeros(10, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="test_attn"):
        decompose(problem, b, b, None, torch.full((10, 3), float("nan"), dtype=torch.float64))
    with pytest.raises(ValueError, match="memory"):
        decompose(problem, b, b, memory="tables")
    with pytest.raises(ValueError, match="scheme"):
        decompose(problem, b, b).grouped("step2")
    mlp = lib.make_problem(small_cfg(V=5, d=4, L=3, model="mlp"), 0)
    with pytest.raises(ValueError, match="model"):
        memory_counts(mlp, lib.sample_batch(mlp, 10, 0))


# ---- chapter 6: the centred step-3 terms

def test_centred_step3_terms_sum_to_logits_and_match_closed_forms():
    """centred_step3 regroups the fine terms exactly, and with oracle attention its mean_bias and
    trigger_key equal their closed forms (u_k . nu)(|s|^2 + s . e_x) and sum_i f_i a_ki (e_i . s)."""
    from lib.analysis.step3 import CENTRED_TERMS, centred_step3
    cfg = lib.TaskConfig(V=12, d=7, L=5, dtype="float64", device="cpu")
    pr = lib.make_problem(cfg, 3)
    train, test = lib.sample_batch(pr, 300, 3), lib.sample_batch(pr, 40, 3, split="test")
    for train_attn, test_attn in (("oracle", "oracle"), (attn_of("hard", pr, train, 1), "oracle"),
                                  (attn_of("soft", pr, train, 2), attn_of("soft", pr, test, 3))):
        dec = decompose(pr, train, test, train_attn, test_attn)
        T = centred_step3(pr, dec, test, test_attn)
        assert tuple(T) == CENTRED_TERMS
        assert rel(sum(T.values()), dec.logits) < 1e-12
    dec = decompose(pr, train, test, "oracle", "oracle")
    T = centred_step3(pr, dec, test, "oracle")
    f = torch.bincount(train.informative, minlength=12).double() / train.N
    A = pr.U @ (pr.U_perm - pr.u_bar).T                                  # (k, i): a_ki
    nu = (f - 1 / 12) @ pr.U_perm
    s, ex = pr.z_trig, pr.E[test.informative]
    mb = (pr.U @ nu)[None, :] * (s @ s + ex @ s)[:, None]
    tk = ((A * f) @ (pr.E[:12] @ s))[None, :].expand(40, 12)
    assert rel(T["mean_bias"], mb) < 1e-10 and rel(T["trigger_key"], tk) < 1e-10
    assert float(T["leakage"].abs().max()) == 0.0 and float(T["misread"].abs().max()) == 0.0


def test_centred_step3_closed_forms_hold_under_soft_test_attention():
    """With oracle attention in training and soft attention at test (so the test's other tokens carry
    weight), the memory is G3 = sum_i f_i (u_{Pi i} - u_bar)(e_i + s)^T; reading it at the test vector
    o = o_tok + sh (sh its shared part), mean_bias is the stored trigger read by all of o,
    (u_k . nu)(s . o), and trigger_key the stored token keys read by sh, sum_i f_i a_ki (e_i . sh):
    both from the materialised (N, K, d) vectors of `direct_parts`, with and without the EOS key."""
    from lib.analysis.step3 import centred_step3
    for eos in (False, True):
        cfg = lib.TaskConfig(V=12, d=7, L=5, eos_key=eos, dtype="float64", device="cpu")
        pr = lib.make_problem(cfg, 3)
        train, test = lib.sample_batch(pr, 300, 3), lib.sample_batch(pr, 40, 3, split="test")
        ta = attn_of("soft", pr, test, 3)
        T = centred_step3(pr, decompose(pr, train, test, "oracle", ta), test, ta)
        _, o_oth, sh, o = direct_parts(pr, test, ta)
        assert float(o_oth.abs().max()) > 0.1                               # the other tokens are read
        f = torch.bincount(train.informative, minlength=12).double() / train.N
        A = pr.U @ (pr.U_perm - pr.u_bar).T                                  # (k, i): a_ki
        nu = (f - 1 / 12) @ pr.U_perm
        mb = (pr.U @ nu)[None, :] * (o @ pr.z_trig)[:, None]
        tk = (sh @ pr.E[:12].T) @ (A * f).T
        assert rel(T["mean_bias"], mb) < 1e-10 and rel(T["trigger_key"], tk) < 1e-10, eos


def test_centred_step3_rejects_a_foreign_test_batch():
    from lib.analysis.step3 import centred_step3
    cfg = lib.TaskConfig(V=6, d=4, L=3, dtype="float64", device="cpu")
    pr = lib.make_problem(cfg, 0)
    train, test = lib.sample_batch(pr, 50, 0), lib.sample_batch(pr, 10, 0, split="test")
    dec = decompose(pr, train, test, "oracle", "oracle")
    with pytest.raises(ValueError, match="test"):
        centred_step3(pr, dec, lib.sample_batch(pr, 11, 1, split="test"), "oracle")
    with pytest.raises(ValueError, match="dec"):
        centred_step3(pr, "not a decomposition", test, "oracle")


def test_pooled_terms_collects_every_seed():
    from lib.analysis.decompose import pooled_terms
    cfg = small_cfg(V=9, d=6, L=4)
    out = pooled_terms(cfg, 200, [0, 1, 2], n_test=10, scheme="step3", test_attn="oracle",
                       train_attn=lambda p, b: b.pos)
    assert set(out) == set(GROUPS["step3"])
    at, off, means = out["signal"]
    assert at.shape == (30,) and off.shape == (3 * 10 * 8,) and means.shape == (3,)
    # hard attention on the informative position is the oracle: no leakage, no misread
    assert float(out["leakage"][0].abs().max()) == 0.0 and float(out["misread"][1].abs().max()) == 0.0
    p = lib.make_problem(cfg, 1)
    d1 = decompose(p, lib.sample_batch(p, 200, 1), lib.sample_batch(p, 10, 1, "test"), "oracle", "oracle")
    assert torch.allclose(at[10:20], d1.at_label("step3")["signal"])
