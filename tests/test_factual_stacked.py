"""Chapter 11's models trained many at once (lib.factual.stacked): the same histories as one-at-a-time
training, the padding inert, the stack's stops, both attention routes, bad input refused."""
import pytest
import torch

from lib.factual import FactModelConfig, FactTask, FactTrainConfig, FactTransformer, train_facts
from lib.factual import stacked as st

FIELDS = ("loss", "acc", "rel_acc", "sub_acc", "kl", "lr")


def _same(h_ref, h, tol):
    assert h.step == h_ref.step
    for name in FIELDS:
        a, b = getattr(h_ref, name), getattr(h, name)
        assert len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol * max(1.0, max(map(abs, a))), name


# one stack mixing tasks (S, seed), head counts, MLP widths (0 included); d_h = 2 takes the keys route, d_h = 6
# the query route (each group is also run on the other route below)
SPECS = {
    "keys": [(FactTask(S=8, R=2, D=3, T=5, seed=1), FactModelConfig(d=16, H=2, d_h=2, m=0, seed=1)),
             (FactTask(S=12, R=2, D=3, T=5, seed=2), FactModelConfig(d=16, H=3, d_h=2, m=0, seed=2)),
             (FactTask(S=8, R=2, D=3, T=5, seed=1), FactModelConfig(d=16, H=1, d_h=2, m=8, seed=3))],
    "query": [(FactTask(S=8, R=2, D=3, T=5, seed=1), FactModelConfig(d=16, H=2, d_h=6, m=5, seed=4)),
              (FactTask(S=10, R=2, D=3, T=5, seed=3), FactModelConfig(d=16, H=1, d_h=6, m=0, seed=5))],
    "identity": [(FactTask(S=8, R=2, D=3, T=5, seed=1), FactModelConfig(d=16, H=1, d_h=2, m=12, values="identity", seed=3)),
                 (FactTask(S=9, R=2, D=3, T=5, seed=4), FactModelConfig(d=16, H=1, d_h=2, m=4, values="identity", seed=6))],
}


@pytest.mark.parametrize("group", sorted(SPECS))
@pytest.mark.parametrize("optimizer,schedule", [("adam", "constant"), ("sgd", "cosine")])
def test_stack_reproduces_one_at_a_time_training_in_float64(group, optimizer, schedule):
    # float64: every logged number of every model equal to train_facts's to 1e-12 (measured: 1e-16); the
    # models stop at different steps (stop_at), so the stack drops rows, Adam's moments with them
    cfg = FactTrainConfig(steps=60, batch=64, lr=0.02 if optimizer == "adam" else 0.5, log_every=10, n_test=256,
                          stop_at=0.6, optimizer=optimizer, schedule=schedule)
    specs = SPECS[group]
    hists = st.train_stacked([FactTransformer(t, c, dtype=torch.float64) for t, c in specs], cfg)
    for (t, c), h in zip(specs, hists):
        _same(train_facts(FactTransformer(t, c, dtype=torch.float64), cfg), h, 1e-12)


def test_models_stop_at_different_steps_and_float32_agrees_to_round_off():
    cfg = FactTrainConfig(steps=60, batch=64, lr=0.02, log_every=10, n_test=256, stop_at=0.6)
    specs = SPECS["keys"]
    hists = st.train_stacked([FactTransformer(t, c) for t, c in specs], cfg)
    assert len({h.step[-1] for h in hists}) >= 2                        # the stack lost a row mid-run
    for (t, c), h in zip(specs, hists):
        _same(train_facts(FactTransformer(t, c), cfg), h, 1e-5)          # float32 (measured: 1e-7)


def test_padding_stays_zero_and_the_models_are_untouched():
    specs = SPECS["keys"]
    models = [FactTransformer(t, c) for t, c in specs]
    before = [{k: v.clone() for k, v in m.state_dict().items()} for m in models]
    stack = st.StackedFacts(models)
    assert stack.Q.shape == (3, 3, 16, 2) and stack.W1.shape == (3, 16, 8) and stack.wte.shape[1] == specs[1][0].vocab
    opt = torch.optim.Adam(stack.parameters(), lr=0.05)
    x = torch.stack([torch.randint(t.vocab, (32, t.T), generator=torch.Generator().manual_seed(i))
                     for i, (t, _) in enumerate(specs)])
    for _ in range(5):
        opt.zero_grad()
        stack(x).square().sum().backward()
        opt.step()
    assert stack.Q[0, 2:].abs().max() == 0 and stack.O[0, 4:].abs().max() == 0     # model 0: 2 of 3 heads
    assert stack.W1[:2].abs().max() == 0 and stack.W2[:2].abs().max() == 0           # models 0, 1: no MLP
    assert stack.Q[0, :2].abs().max() > 0
    for m, b in zip(models, before):
        assert all(torch.equal(v, b[k]) for k, v in m.state_dict().items())


def test_each_models_logits_are_its_own():
    specs = SPECS["query"] + [(FactTask(S=8, R=2, D=3, T=5, seed=1), FactModelConfig(d=16, H=3, d_h=6, m=5, seed=9))]
    models = [FactTransformer(t, c, dtype=torch.float64) for t, c in specs]
    stack = st.StackedFacts(models)
    g = torch.Generator().manual_seed(0)
    x = torch.stack([torch.randint(t.vocab, (20, t.T), generator=g) for t, _ in specs])
    out = stack(x)
    for i, m in enumerate(models):
        assert torch.allclose(out[i], m(x[i]), rtol=0, atol=1e-12)
    assert torch.allclose(stack(x[[2, 0]], torch.tensor([2, 0])), out[[2, 0]], rtol=0, atol=1e-12)


@pytest.mark.parametrize("route", st.ROUTES)
@pytest.mark.parametrize("group", sorted(SPECS))
def test_every_attention_route_gives_each_models_own_logits(group, route):
    # both routes forced on each group (small and large d_h, identity values), float64, against each
    # model's own forward; and a few Adam steps on each route land on the same parameters
    specs = SPECS[group]
    models = [FactTransformer(t, c, dtype=torch.float64) for t, c in specs]
    g = torch.Generator().manual_seed(len(route))
    x = torch.stack([torch.randint(t.vocab, (7, t.T), generator=g) for t, _ in specs])
    out = st.StackedFacts(models, route=route)(x)
    for i, m in enumerate(models):
        assert torch.allclose(out[i], m(x[i]), rtol=0, atol=1e-12)
    cfg = FactTrainConfig(steps=5, batch=16, lr=0.02, log_every=5, n_test=32)
    ref = st.train_stacked(models, cfg, route="query")
    for h_ref, h in zip(ref, st.train_stacked(models, cfg, route=route)):
        _same(h_ref, h, 1e-12)


def test_the_default_route():
    # through the query past d_h = 4, through the keys at or below it; a route outside ROUTES is refused
    assert st.attention_route(st.QUERY_ROUTE_DH + 1) == "query" and st.attention_route(st.QUERY_ROUTE_DH) == "keys"
    specs = SPECS["keys"]
    assert st.StackedFacts([FactTransformer(t, c) for t, c in specs]).route is None
    for bad in ("table", "fast"):
        with pytest.raises(ValueError, match="route"):
            st.StackedFacts([FactTransformer(t, c) for t, c in specs], route=bad)
    with pytest.raises(ValueError, match="route"):
        st.train_stacked([FactTransformer(t, c) for t, c in specs], FactTrainConfig(steps=2), route="keys ")
    with pytest.raises(ValueError, match="d_h"):
        st.attention_route(0)


@pytest.mark.parametrize("models, match", [
    ([], "non-empty"),
    ([FactTransformer(FactTask(S=4, R=2, D=2), FactModelConfig(d=8)), "x"], "FactTransformer"),
    ([FactTransformer(FactTask(S=4, R=2, D=2), FactModelConfig(d=8)),
      FactTransformer(FactTask(S=4, R=2, D=2), FactModelConfig(d=12))], "share d"),
    ([FactTransformer(FactTask(S=4, R=2, D=2), FactModelConfig(d=8)),
      FactTransformer(FactTask(S=4, R=3, D=2), FactModelConfig(d=8))], "R D"),
    ([FactTransformer(FactTask(S=4, R=2, D=2), FactModelConfig(d=8, train_embeddings=True))], "frozen"),
    ([FactTransformer(FactTask(S=4, R=2, D=2), FactModelConfig(d=8, m=2, activation="he2")),
      FactTransformer(FactTask(S=4, R=2, D=2), FactModelConfig(d=8, m=3, activation="he2"))], "sigma"),
])
def test_models_that_cannot_share_a_stack_are_refused(models, match):
    with pytest.raises(ValueError, match=match):
        st.train_stacked(models, FactTrainConfig(steps=2))
    with pytest.raises(ValueError, match=match):
        st.StackedFacts(models)


def test_bad_arguments_raise_value_errors_naming_the_parameter():
    m = [FactTransformer(FactTask(S=4, R=2, D=2), FactModelConfig(d=8))]
    with pytest.raises(ValueError, match="cfg"):
        st.train_stacked(m, {"steps": 2})
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="test_chunk"):
            st.train_stacked(m, FactTrainConfig(steps=2), test_chunk=bad)


def _all_numbers(hists):
    return [(h.step, [getattr(h, f) for f in FIELDS]) for h in hists]


def test_a_batch_cache_changes_no_bit_and_draws_each_batch_once():
    # float32, exact equality: a stack trained with a cache (shared by two stacks on the same tasks, as a
    # search's rounds; or one too small to keep a task, which must draw again) gives every logged number of the
    # stack trained without one, and every batch it keeps is sample()'s
    from lib.factual import sample
    cfg = FactTrainConfig(steps=40, batch=32, lr=0.02, log_every=10, n_test=128, stop_at=0.6)
    specs = SPECS["keys"]
    models = lambda: [FactTransformer(t, c) for t, c in specs]
    ref = _all_numbers(st.train_stacked(models(), cfg))
    shared = st.BatchCache()
    for cache in (shared, shared, st.BatchCache(max_bytes=4096), st.BatchCache(max_bytes=0)):
        assert _all_numbers(st.train_stacked(models(), cfg, cache=cache)) == ref
        kept = sum(v[0].nbytes + v[1].nbytes for e in cache.tasks.values() for k, v in e.items() if k != "table")
        assert cache.bytes == kept > 0 and len(cache.tasks) == (2 if cache is shared else 1)
    # two tasks among the three models, drawn by the first stack only: one batch a step while a model of the task
    # trains, i.e. as many as the task's last model to stop has steps
    last = {}
    for (task, _), (steps, _) in zip(specs, ref):
        last[task] = max(last.get(task, 0), steps[-1])
    assert len(shared.tasks) == 2 and shared.drawn == sum(last.values()) > 0
    for task, n in last.items():
        for i in range(n):
            x, y = shared.get(task, 32, i)
            b = sample(task, 32, f"step-{i}")
            assert torch.equal(x, b.x) and torch.equal(y, b.y), (task, i)
    assert shared.drawn == sum(last.values())                           # all found, none drawn again
    small = st.BatchCache(max_bytes=1 << 17)                            # one buffer (64 steps) at most
    for i in (0, 70, 3, 0, 70):              # buffers 0, 1, 0 (new), 0 (its row 0 unfilled), 1 (new again)
        x, y = small.get(specs[1][0], 32, i)
        b = sample(specs[1][0], 32, f"step-{i}")
        assert torch.equal(x, b.x) and torch.equal(y, b.y)
    assert 0 < small.bytes <= 1 << 17 and small.drawn == 5


def test_a_batch_cache_keeps_draws_apart():
    from lib.core.seed import get_draw, set_draw
    from lib.factual import sample
    t, cache, before = SPECS["keys"][0][0], st.BatchCache(), get_draw()
    try:
        x0, y0 = cache.get(t, 16, 0)
        set_draw(before + 7)
        x7, y7 = cache.get(t, 16, 0)
        b = sample(t, 16, "step-0")
        assert torch.equal(x7, b.x) and torch.equal(y7, b.y) and not torch.equal(x0, x7)
    finally:
        set_draw(before)
    b = sample(t, 16, "step-0")
    x, y = cache.get(t, 16, 0)
    assert torch.equal(x, b.x) and torch.equal(y, b.y) and torch.equal(x, x0) and cache.drawn == 2


def test_a_bad_batch_cache_is_refused_naming_the_parameter():
    from lib.factual import FactStore, smallest_models, trained_points
    m = [FactTransformer(FactTask(S=4, R=2, D=2), FactModelConfig(d=8))]
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="max_bytes"):
            st.BatchCache(max_bytes=bad)
    cache, t = st.BatchCache(), m[0].task
    for args, name in (((None, 4, 0), "task"), ((["S"], 4, 0), "task"), ((t, 0, 0), "N"), ((t, 1.5, 0), "N"),
                       ((t, 4, -1), "i"), ((t, 4, "3"), "i")):
        with pytest.raises(ValueError, match=name):
            cache.get(*args)
    assert not cache.tasks and cache.bytes == 0 and cache.drawn == 0   # a refused call leaves nothing behind
    for bad in ({}, 3, "cache"):
        with pytest.raises(ValueError, match="cache"):
            st.train_stacked(m, FactTrainConfig(steps=2), cache=bad)
        with pytest.raises(ValueError, match="cache"):
            trained_points([(m[0].task, m[0].cfg)], FactTrainConfig(steps=2), FactStore(), cache=bad)
        with pytest.raises(ValueError, match="cache"):
            smallest_models([], cache=bad)


def test_a_diverging_stack_names_the_model_as_train_facts_raises():
    t, cfg = FactTask(S=4, R=2, D=2), FactTrainConfig(steps=4, log_every=2, lr=1e30, optimizer="sgd")
    with pytest.raises(FloatingPointError, match="not finite at step 2"):
        train_facts(FactTransformer(t, FactModelConfig(d=8)), cfg)
    with pytest.raises(FloatingPointError, match="model 0 is not finite at step 2"):
        st.train_stacked([FactTransformer(t, FactModelConfig(d=8)), FactTransformer(t, FactModelConfig(d=8, seed=1))], cfg)


@pytest.mark.slow
def test_searches_at_once_answer_as_one_at_a_time_and_a_rerun_trains_nothing(tmp_path):
    # eight searches (both blocks, two sizes, two seeds) one at a time (train_facts) and at once (stacks of 8):
    # the same answers (measured: 1, 2, 1, 2, 1, 6, 2, none), unless a model sits within 2 test samples of the
    # threshold, where the stacked route's float round-off may tip it
    from lib.factual import FactStore, smallest_model, smallest_models, trained_point
    from lib.factual.capacity import block_config
    cfg = FactTrainConfig(steps=300, batch=64, lr=0.05, log_every=20, n_test=256, stop_at=0.9)
    jobs = [dict(task=FactTask(S=S, R=2, D=2, T=4, seed=s), block=b, threshold=0.9, train_cfg=cfg, d=16, d_h=2, unit=2,
                 n_max=16, seed=s) for S in (4, 16) for s in (0, 1) for b in ("attention", "mlp")]
    one = [smallest_model(**j) for j in jobs]
    path = str(tmp_path / "points.jsonl")
    many = smallest_models(jobs, store=FactStore(path), stack=8)
    assert any(r["n"] and r["n"] > 2 for r in one) and any(r["n"] is None for r in one)
    for j, a, b in zip(jobs, one, many):
        if a["n"] != b["n"]:
            lo = min(x for x in (a["n"], b["n"]) if x is not None)
            acc = trained_point(j["task"], block_config(j["block"], lo, 16, 2, 2, j["seed"]), cfg)["max_acc"]
            assert abs(acc - 0.9) <= 2 / 256, (j["block"], a, b)
        else:
            assert a == b
    store = FactStore(path)
    assert smallest_models(jobs, store=store, stack=8) == many and store.computed == 0
    with pytest.raises(ValueError, match="store"):
        smallest_models([{**jobs[0], "store": None}])
    with pytest.raises(ValueError, match="stack"):
        smallest_models(jobs, stack=0)


def test_the_grid_script_reads_a_whole_store_and_trains_nothing(tmp_path):
    """scripts/fact_capacity_grid.py on a copy of the shipped store (route "stacked", what chapter 11 reads): every
    noise point and every 3000-step attention search of two shipped draws is found, one line each, and the store
    gains no line; bad flags exit 2 naming the flag."""
    import os
    import shutil
    import subprocess
    import sys
    from lib.factual import CAPACITY_STORE, capacity_grid_jobs
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "grid.jsonl"
    shutil.copy(CAPACITY_STORE, out)
    before = out.read_bytes()
    cmd = [sys.executable, os.path.join(root, "scripts", "fact_capacity_grid.py"), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for only, word in (("noise", "best accuracy"), ("budget", "block parameters")):    # points, then searches
        r = subprocess.run(cmd + ["--only", only, "--draws", "0", "3", "--jobs", "2"], capture_output=True, text=True,
                           timeout=600, env=env)
        assert r.returncode == 0, r.stderr
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("draw ")]
        assert len(lines) == 2 * len(capacity_grid_jobs(only)) and all(word in ln for ln in lines), r.stdout
        assert out.read_bytes() == before
    for flags, name in ((["--stack", "0"], "--stack"), (["--jobs", "0"], "--jobs"), (["--draws", "-1"], "--draws"),
                        (["--route", "both"], "--route"), (["--only", "some"], "--only")):
        r = subprocess.run(cmd + flags, capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 2 and name in r.stderr, (flags, r.stderr)
