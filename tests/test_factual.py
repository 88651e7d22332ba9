"""lib.factual (chapter 11): the sampler against its definition, parameter counts against hand
counts, autograd against finite differences, the relation-only predictor against brute force, the
cache (a rerun trains nothing) and argument validation."""

import math
import json
import os
import warnings

import pytest
import torch

from lib import factual as F


def test_fact_table_answers_lie_in_their_relation_block():
    for table in ("random", "balanced"):
        task = F.FactTask(S=12, R=3, D=4, table=table, seed=2)
        a = F.fact_table(task)
        assert a.shape == (12, 3)
        r = torch.arange(3)[None, :]
        assert ((a >= r * 4) & (a < (r + 1) * 4)).all()
        assert torch.equal(a, F.fact_table(task))                      # fixed per seed
    counts = torch.stack([torch.bincount(F.fact_table(F.FactTask(S=12, R=3, D=4, table="balanced"))[:, r] - 4 * r,
                                         minlength=4) for r in range(3)])
    assert (counts == 3).all()                                         # balanced: each answer S/D times


@pytest.mark.parametrize("eos", [False, True])
def test_sampler_positions_and_answers_follow_the_definition(eos):
    task = F.FactTask(S=10, R=3, D=5, T=7, eos=eos, seed=1)
    table = F.fact_table(task)
    b = F.sample(task, 5000, "train")
    S, R, T = 10, 3, 7
    rows = torch.arange(b.N)
    assert torch.equal(b.x[rows, b.s_pos], b.subject)
    assert torch.equal(b.x[rows, b.r_pos], S + b.relation)
    assert torch.equal(b.y, table[b.subject, b.relation])
    assert int(b.s_pos.max()) == T - 2 and int(b.s_pos.min()) == 0     # subject among the first T - 1
    other = torch.ones_like(b.x, dtype=torch.bool)
    other[rows, b.s_pos] = False
    other[rows, b.r_pos] = False
    if eos:
        assert (b.r_pos != b.s_pos).all() and int(b.r_pos.max()) == T - 2
        assert (b.x[:, -1] == task.eos_token).all()
        other[:, -1] = False
    else:
        assert (b.r_pos == T - 1).all()
    noise = b.x[other]
    assert int(noise.min()) >= S + R and int(noise.max()) < S + R + task.n_noise
    # every one of the n_noise = S + R noise tokens occurs, uniformly (within 5 standard errors)
    assert task.n_noise == S + R
    cnt = torch.bincount(noise - (S + R), minlength=task.n_noise).double()
    assert cnt.numel() == task.n_noise and (cnt > 0).all()
    p0 = 1 / task.n_noise
    assert (cnt / noise.numel() - p0).abs().max() < 5 * math.sqrt(p0 * (1 - p0) / noise.numel())
    # uniform positions: every position's frequency within 5 standard errors
    n_pos = T - 1
    freq = torch.bincount(b.s_pos, minlength=n_pos).double() / b.N
    assert (freq - 1 / n_pos).abs().max() < 5 * math.sqrt((1 / n_pos) / b.N)


def test_sampler_is_nested_in_N_and_streams_differ():
    task = F.FactTask(S=8, R=2, D=3, T=5, seed=4)
    big, small = F.sample(task, F.SAMPLE_BLOCK + 300), F.sample(task, 1000)
    assert torch.equal(big.x[:1000], small.x) and torch.equal(big.y[:1000], small.y)
    assert not torch.equal(F.sample(task, 1000, "test").x, small.x)


def test_zipf_weights_shape_the_subject_frequencies():
    task = F.FactTask(S=6, R=2, D=2, alpha=1.0)
    b = F.sample(task, 20000)
    freq = torch.bincount(b.subject, minlength=6).double() / b.N
    assert (freq - F.zipf_weights(6, 1.0)).abs().max() < 0.015


def test_relation_only_predictor_matches_brute_force():
    task = F.FactTask(S=9, R=3, D=4, alpha=0.7, beta=0.3, seed=3)
    table, p, w = F.fact_table(task), F.zipf_weights(9, 0.7), F.zipf_weights(3, 0.3)
    q = F.relation_only(task)
    acc = loss = 0.0
    for r in range(3):
        dist = {}
        for s in range(9):
            dist[int(table[s, r])] = dist.get(int(table[s, r]), 0.0) + float(p[s])
        acc += float(w[r]) * max(dist.values())
        loss -= float(w[r]) * sum(v * math.log(v) for v in dist.values())
        for a in range(12):
            assert float(q[r, a]) == pytest.approx(dist.get(a, 0.0), abs=1e-12)
    sc = F.relation_only_scores(task)
    assert sc["acc"] == pytest.approx(acc, abs=1e-12) and sc["loss"] == pytest.approx(loss, abs=1e-12)
    even = F.relation_only_scores(F.FactTask(S=16, R=4, D=8, table="balanced"))
    assert even["acc"] == pytest.approx(1 / 8) and even["loss"] == pytest.approx(math.log(8))


@pytest.mark.parametrize("H, d_h, m, values, train_emb", [(3, 4, 0, "trained", False), (2, 5, 7, "trained", True),
                                                          (1, 3, 9, "identity", False)])
def test_parameter_counts_equal_hand_counts_and_numel(H, d_h, m, values, train_emb):
    d = 6
    task = F.FactTask(S=5, R=2, D=3)
    if values == "identity":
        H = 1
    model = F.FactTransformer(task, F.FactModelConfig(d=d, H=H, d_h=d_h, m=m, values=values, train_embeddings=train_emb))
    c = F.param_counts(model)
    hand_attn = (4 if values == "trained" else 2) * H * d_h * d
    assert c["attention"] == hand_attn and c["mlp"] == 2 * m * d + m
    assert c["embeddings"] == (5 + 2 + 7 + 1) * d + 6 * d
    assert c["trainable"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert model(F.sample(task, 11).x).shape == (11, 6)
    lin = F.LinearAttention(task)
    assert F.param_counts(lin)["trainable"] == sum(p.numel() for p in lin.parameters()) == 15 * 15 + 15 * 6


def _fd_check(model, x, y):
    params = [p for p in model.parameters() if p.requires_grad]
    loss = torch.nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, params)
    g = torch.Generator().manual_seed(0)
    for p, gr in zip(params, grads):
        for _ in range(3):
            idx = tuple(int(torch.randint(n, (1,), generator=g)) for n in p.shape)
            h, old = 1e-6, p.data[idx].item()
            p.data[idx] = old + h
            up = torch.nn.functional.cross_entropy(model(x), y).item()
            p.data[idx] = old - h
            dn = torch.nn.functional.cross_entropy(model(x), y).item()
            p.data[idx] = old
            assert gr[idx].item() == pytest.approx((up - dn) / (2 * h), rel=1e-6, abs=1e-9)


def test_autograd_gradient_equals_finite_differences_in_float64():
    task = F.FactTask(S=4, R=2, D=3, T=5, eos=True)
    b = F.sample(task, 7)
    model = F.FactTransformer(task, F.FactModelConfig(d=5, H=2, d_h=3, m=4, activation="he3",
                                                      train_embeddings=True), dtype=torch.float64)
    _fd_check(model, b.x, b.y)
    lin = F.LinearAttention(task, "random", d=6, init=0.3, dtype=torch.float64)
    _fd_check(lin, b.x, b.y)


def test_attention_heads_attend_from_the_last_position():
    task = F.FactTask(S=4, R=2, D=3, T=5)
    model = F.FactTransformer(task, F.FactModelConfig(d=6, H=2, d_h=3), dtype=torch.float64)
    x = F.sample(task, 3).x
    o, a = model.attention(x)
    e = model.wte[x]
    for h in range(2):
        s = (e @ model.K[h]) @ (e[:, -1] @ model.Q[h])[:, :, None] / math.sqrt(3)      # (N, T, 1)
        assert torch.allclose(a[:, h], torch.softmax(s[..., 0], -1))
    assert torch.allclose(a.sum(-1), torch.ones(3, 2, dtype=torch.float64))


def test_training_learns_a_small_task_and_logs_every_k_steps():
    task = F.FactTask(S=4, R=2, D=2, T=4)
    hist = F.train_facts(F.FactTransformer(task, F.FactModelConfig(d=16, H=2, d_h=8)),
                   F.FactTrainConfig(steps=120, batch=128, lr=3e-2, log_every=30, n_test=512))
    assert hist.step == [0, 30, 60, 90, 120]
    assert hist.acc[-1] > 0.95 and hist.rel_acc[-1] > 0.95 and hist.loss[-1] < hist.loss[0]


def test_metrics_of_the_relation_only_predictor_are_its_scores():
    task = F.FactTask(S=16, R=4, D=8, table="balanced")
    b, q = F.sample(task, 4000), F.relation_only(task)
    m = F.metrics(torch.log(q[b.relation].clamp_min(1e-30)), b, task, q)
    assert m["kl"] == pytest.approx(0.0, abs=1e-9) and m["rel_acc"] == 1.0
    assert m["loss"] == pytest.approx(math.log(8), abs=1e-6)


def test_metrics_on_hand_made_logits_follow_their_definitions():
    # S = 2, R = 2, D = 3: answers 0..2 belong to relation 0, 3..5 to relation 1
    task = F.FactTask(S=2, R=2, D=3, T=4)
    y = torch.tensor([1, 4, 2, 5])
    relation, subject = y // 3, torch.tensor([0, 1, 0, 1])
    b = F.FactBatch(torch.zeros(4, 4, dtype=torch.long), y, subject, relation, torch.zeros(4, dtype=torch.long),
                    torch.full((4,), 3, dtype=torch.long))
    pred = torch.tensor([1,    # right answer
                         3,    # right block, wrong place
                         5,    # wrong block, right place in the block (2 % 3 == 5 % 3)
                         2])   # wrong block, right place in the block (5 % 3 == 2 % 3)
    logits = torch.full((4, 6), -5.0)
    logits[torch.arange(4), pred] = 5.0
    q = torch.zeros(2, 6, dtype=torch.float64)          # relation_only returns float64
    q[0, :3] = torch.tensor([0.5, 0.5, 0.0])
    q[1, 3:] = torch.tensor([0.0, 0.25, 0.75])
    m = F.metrics(logits, b, task, q)
    assert m["acc"] == 0.25 and m["rel_acc"] == 0.5 and m["sub_acc"] == 0.75
    logp = torch.log_softmax(logits.double(), -1)
    assert m["loss"] == pytest.approx(float(-logp[torch.arange(4), y].mean()), rel=1e-12)
    kl = [sum(float(q[r, a] * (math.log(q[r, a]) - logp[i, a])) for a in range(6) if q[r, a] > 0)
          for i, r in enumerate(relation.tolist())]
    assert m["kl"] == pytest.approx(sum(kl) / 4, rel=1e-12)


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_learning_rate_schedule_reaches_zero_at_the_last_step(schedule):
    task = F.FactTask(S=4, R=2, D=2, T=4)
    cfg = F.FactTrainConfig(steps=8, batch=16, lr=0.1, log_every=1, n_test=16, schedule=schedule, optimizer="sgd")
    hist = F.train_facts(F.LinearAttention(task, init=0.01), cfg)
    want = [0.1 * (1 + math.cos(math.pi * i / 8)) / 2 if schedule == "cosine" else 0.1 for i in range(9)]
    assert hist.step == list(range(9))
    assert hist.lr == pytest.approx(want, abs=1e-12)
    if schedule == "cosine":
        assert hist.lr[-1] == pytest.approx(0.0, abs=1e-12) and hist.lr[-2] > 0


def test_plateau_reads_the_logged_stage():
    h = F.FactHistory(step=[0, 10, 20, 30, 40], loss=[0] * 5, acc=[0.1, 0.12, 0.13, 0.9, 1.0], rel_acc=[0.2, 1, 1, 1, 1],
                  sub_acc=[0] * 5, kl=[1.4, 0.05, 0.02, 0.5, 2.0])
    p = F.plateau(h)
    assert (p["first"], p["last"], p["length"]) == (10, 20, 20)
    assert F.plateau(h, kl_max=0.01)["length"] == 0


def test_capacity_search_uses_the_cache_and_a_rerun_trains_nothing(tmp_path):
    task = F.FactTask(S=4, R=2, D=2, T=4)
    tc = F.FactTrainConfig(steps=60, batch=64, lr=3e-2, log_every=20, n_test=256, stop_at=0.9)
    path = tmp_path / "fact.jsonl"
    st = F.FactStore(str(path))
    first = F.smallest_model(task, "attention", 0.9, tc, d=8, d_h=2, n_max=8, store=st)
    assert st.computed >= 1
    again = F.FactStore(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = F.smallest_model(task, "attention", 0.9, tc, d=8, d_h=2, n_max=8, store=again)
    assert again.computed == 0 and second == first
    with open(path, "a") as f:
        f.write('{"key": 1}\n')
    with pytest.warns(RuntimeWarning, match="not a record"):
        assert len(F.FactStore(str(path))) == len(again)


def test_a_shipped_store_is_read_but_never_written(tmp_path):
    task = F.FactTask(S=4, R=2, D=2, T=4)
    tc = F.FactTrainConfig(steps=40, batch=64, lr=3e-2, log_every=20, n_test=256)
    shipped, local = tmp_path / "shipped.jsonl", tmp_path / "local.jsonl"
    a = F.trained_point(task, F.block_config("attention", 1, 8, 2, 1), tc, F.FactStore(str(shipped)))
    before = shipped.read_bytes()
    st = F.FactStore(str(local), read_also=str(shipped))
    assert F.trained_point(task, F.block_config("attention", 1, 8, 2, 1), tc, st) == a and st.computed == 0
    F.trained_point(task, F.block_config("attention", 2, 8, 2, 1), tc, st)     # a new point: to `path` only
    assert st.computed == 1 and shipped.read_bytes() == before and len(F.FactStore(str(local))) == 1
    with pytest.raises(ValueError, match="read_also"):
        F.FactStore(str(local), read_also=str(tmp_path / "absent.jsonl"))
    os.chmod(shipped, 0o444)                     # only read: a read-only shipped file serves
    try:
        assert len(F.FactStore(None, read_also=str(shipped))) == 1
    finally:
        os.chmod(shipped, 0o644)
    with pytest.raises(ValueError, match="another file than path"):
        F.FactStore(str(shipped), read_also=str(shipped))
    with open(shipped, "a") as f:                # a shipped store must be whole (one lib.experiments.store helper)
        f.write('{"key": 1}\n')
    with pytest.warns(RuntimeWarning, match="not a record"), pytest.raises(ValueError, match="invalid lines"):
        F.FactStore(str(local), read_also=str(shipped))


def test_capacity_grid_keeps_the_heads_rank_within_d():
    g = F.CAPACITY_GRID
    assert g["n_max"]["attention"] * g["d_h"] <= g["d"]          # H d_h <= d: every head can add rank
    assert os.path.isabs(F.CAPACITY_STORE) and len(F.FactStore(None, read_also=F.CAPACITY_STORE)) > 0   # found from any folder
    assert len(g["S"]["attention"]) >= 6 and len(g["S"]["mlp"]) >= 6
    with pytest.raises(ValueError, match="block"):
        F.grid_search("both", 8, 0)
    with pytest.raises(ValueError, match="S must be"):
        F.grid_search("mlp", 0, 0)
    with pytest.raises(ValueError, match="steps must be"):
        F.grid_search("attention", 8, 0, steps=0)


class _ReadOnly(F.FactStore):
    """A store that refuses to train: a point it lacks fails at once instead of training for minutes."""

    def put(self, key, result):
        raise AssertionError(f"not shipped: {key}")


def test_the_whole_grid_is_shipped_for_draws_0_to_3():
    """Every job of `capacity_grid_jobs()` (what chapter 11 reads) is in the shipped store for draws 0-3, route
    "stacked": read, not trained. The attention searches at budget_steps never need more heads than at the grid's
    1000 steps (the longer run repeats the shorter one's first 1000 steps, so a success at 1000 is one at 3000 up
    to floating-point differences between training sessions, and the search then returns no larger n)."""
    from lib.core.seed import get_draw, set_draw
    g, jobs = F.CAPACITY_GRID, F.capacity_grid_jobs()
    assert g["budget_steps"] > g["train"].steps and set(g["budget_S"]["attention"]) <= set(g["S"]["attention"])
    kinds = {j[0] for j in jobs}
    assert kinds == {"attention", "mlp", "direct", "noise"} and len(set(jobs)) == len(jobs)
    assert sum(j[0] == "attention" and j[3] == g["budget_steps"] for j in jobs) == 2 * len(g["seeds"])
    before = get_draw()
    try:
        for draw in (0, 1, 2, 3):
            set_draw(draw)
            st = _ReadOnly(None, read_also=F.CAPACITY_STORE)
            got = F.capacity_grid(store=st)
            assert st.computed == 0 and set(got) == set(jobs), draw
            for S in g["budget_S"]["attention"]:
                for seed in g["seeds"]:
                    long_, short = got["attention", S, seed, g["budget_steps"]], got["attention", S, seed, None]
                    assert long_["n"] is not None and long_["n"] <= short["n"], (draw, S, seed)
    finally:
        set_draw(before)


def test_capacity_grid_refuses_bad_jobs():
    assert F.capacity_grid_jobs("noise") == [j for j in F.capacity_grid_jobs() if j[0] == "noise"]
    assert F.capacity_grid_jobs("budget") == [j for j in F.capacity_grid_jobs() if j[0] == "attention" and j[3]]
    with pytest.raises(ValueError, match="only"):
        F.capacity_grid_jobs("some")
    for jobs, match in (([("both", 8, 0, None)], "jobs must be"), ([("mlp", 8, 0)], "jobs must be"),
                        ([("noise", 8, 0, 64)], "extra must be"), ([("noise", 8, 0, (None, 6))], "width must be a multiple"),
                        ([("noise", 8, 0, (None, 0))], "width must be"), ([("mlp", 0, 0, None)], "S must be"),
                        ([("attention", 8, 0, 0)], "steps must be")):
        with pytest.raises(ValueError, match=match):
            F.capacity_grid(jobs)
    with pytest.raises(ValueError, match="stack"):
        F.capacity_grid([], stack=0)
    with pytest.raises(ValueError, match="route"):
        F.capacity_grid([], route="both")
    st = _ReadOnly()                           # every job is checked before anything trains
    with pytest.raises(ValueError, match="width must be a multiple"):
        F.capacity_grid([("mlp", 4, 0, None), ("noise", 8, 0, (None, 6))], store=st)
    assert st.computed == 0


def test_capacity_grid_one_at_a_time_is_the_searches_and_points_themselves():
    """Route "single" answers as grid_search and noise_point do, point for point: they read back every point it
    stored and train nothing."""
    st = F.FactStore()
    search, point = ("mlp", 4, 0, None), ("noise", 4, 0, (None, 8))
    got = F.capacity_grid([search, point], store=st, route="single")
    trained = st.computed
    assert trained >= 2 and got[search]["n"] is not None
    assert F.grid_search("mlp", 4, 0, store=st) == got[search] and F.noise_point(4, 0, None, 8, store=st) == got[point]
    assert st.computed == trained and all(k.get("route") is None for k in map(json.loads, st.data))


def test_direct_grid_searches_the_mlp_with_no_noise_tokens():
    g, t = F.CAPACITY_GRID, F.DIRECT_GRID
    assert t["T"] == 2 and len(t["S"]) >= 6 and set(t["budget_S"]) <= set(t["S"]) and t["budget_steps"] > g["train"].steps
    st = F.FactStore(None, read_also=F.CAPACITY_STORE)
    nz = t["noise"]                                             # shipped: read, not trained
    few, full, direct = (("noise", nz["S"], 0, (nz["n_noise"], nz["width"])), ("noise", nz["S"], 0, (None, nz["width"])),
                         ("direct", t["S"][0], 0, None))
    got = F.capacity_grid([few, full, direct], store=st)
    r = got[direct]
    assert st.computed == 0 and r["n"] is not None and r["block_params"] == 2 * r["n"] * g["d"] + r["n"]
    for kw, match in ((dict(S=0, seed=0), "S must be"), (dict(S=8, seed=-1), "seed must be"),
                      (dict(S=8, seed=0, steps=0), "steps must be")):
        with pytest.raises(ValueError, match=match):
            F.direct_search(**kw)
    assert got[full] == F.trained_points([(F.FactTask(S=nz["S"], R=g["R"], D=g["D"], T=g["T"], seed=0),     # the grid's own point
        F.block_config("mlp", nz["width"] // g["unit"], g["d"], g["d_h"], g["unit"], 0))], g["train"], st)[0]
    assert got[few]["max_acc"] > 0 and got[few] != got[full] and st.computed == 0
    for kw, match in ((dict(S=8, seed=0, width=6), "width must be a multiple"), (dict(S=8, seed=0, n_noise=0), "n_noise must be"),
                      (dict(S=8, seed=0, width=0), "width must be")):
        with pytest.raises(ValueError, match=match):
            F.noise_point(**kw)


@pytest.mark.parametrize("make, match", [
    (lambda: F.FactTask(S=0, R=2, D=2), "S must be"),
    (lambda: F.FactTask(S=2, R=2, D=2, T=2, eos=True), "T must be"),
    (lambda: F.FactTask(S=2, R=2, D=2, table="zipf"), "table must be"),
    (lambda: F.FactTask(S=2, R=2, D=2, alpha=-1.0), "alpha must be"),
    (lambda: F.FactModelConfig(d=4, H=2, d_h=4, values="identity"), "values='identity' needs H = 1"),
    (lambda: F.FactModelConfig(activation="tanh"), "activation must be"),
    (lambda: F.FactTrainConfig(lr=0.0), "lr must be"),
    (lambda: F.FactTrainConfig(optimizer="lbfgs"), "optimizer must be"),
    (lambda: F.sample(F.FactTask(S=2, R=2, D=2), 0), "N must be"),
    (lambda: F.FactTransformer(F.FactTask(S=2, R=2, D=2), F.FactModelConfig(d=4, embeddings="orthogonal")), "d must be"),
    (lambda: F.smallest_model(F.FactTask(S=2, R=2, D=2), "embedding", 0.9, F.FactTrainConfig(), d=4), "block must be"),
])
def test_bad_arguments_raise_value_errors_naming_the_parameter(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_block_params_without_building_the_model_equal_the_built_count():
    g = F.CAPACITY_GRID
    task = F.FactTask(S=8, R=g["R"], D=g["D"], T=g["T"])
    for block in ("attention", "mlp"):
        for n in (1, 3, g["n_max"][block]):
            built = F.param_counts(F.FactTransformer(task, F.block_config(block, n, g["d"], g["d_h"], g["unit"])))
            assert F.grid_block_params(block, n) == built[block]
    assert F.grid_block_params("mlp", 2) == 2 * 8 * 128 + 8          # width 4n = 8: W1, b1, W2
    with pytest.raises(ValueError, match="block"):
        F.grid_block_params("both", 1)
    with pytest.raises(ValueError, match="n must be"):
        F.grid_block_params("mlp", 0)
    with pytest.raises(ValueError, match="cfg"):
        F.block_param_counts("mlp")


def test_budget_effect_ratios_slopes_and_paired_drop():
    short = {(2, 0): 2, (8, 0): 8, (2, 1): 3, (8, 1): 12, (2, 2): 2, (8, 2): 16}
    long_ = {(2, 0): 2, (8, 0): 4, (2, 1): 3, (8, 1): 6, (2, 2): 2, (8, 2): 16}
    ratio, ends, drop = F.budget_effect(short, long_, (2, 8), (0, 1, 2))
    assert ratio[2] == pytest.approx((1.0, 1.0, 1.0)) and ratio[8][0] == pytest.approx(0.25 ** (1 / 3))
    assert ends[1000] == pytest.approx([1.0, 1.0, 1.5]) and ends[3000] == pytest.approx([0.5, 0.5, 1.5])
    assert drop[0] == pytest.approx(1 / 3) and drop[1] > 0                      # paired by seed: (0.5, 0.5, 0)


def test_logged_median_gap_is_the_true_median():
    """The logged median top-two gap, for an even count, is the mean of the two middle gaps (np.median, as their
    loop logs it), not torch's lower median; the argmax rules break ties to the first index."""
    import numpy as np
    from lib.factual.reference import _logged
    z = torch.tensor([[3.0, 1.0, 0.0, 0.0], [2.0, 2.0, 0.0, 0.0], [5.0, 0.0, 1.0, 0.0], [0.0, 0.5, 4.0, 0.0]])
    y = torch.tensor([0, 1, 2, 3])
    out = _logged(z, y, 2)
    gaps = [2.0, 0.0, 4.0, 3.5]
    assert out["median_logit_gap"] == float(np.median(gaps)) == 2.75
    assert out["acc_logits"] == 0.25 and out["frac_prob_ties"] == 0.25   # row 1 ties: argmax 0, not its label 1
