"""No input crashes the process: every public entry point that takes token ids, positions or labels
(a `Batch`, or the fused loops' tensors) refuses bad ones with a ValueError naming the argument, or,
for ids that are valid but stored differently (int64 / int16 instead of int32, a non-contiguous view),
returns exactly what it returns for the ordinary batch. Ids out of range (one past the top, negative,
10^8), float, bool and complex ids, and wrong shapes are tried on every entry, field by field. All
cases run in one child process, so a segfault or an abort fails the test (with the last case named)
instead of killing the suite.

Not driven here: `lib.fast.tokens`' chunk helpers, which take chunks of batches that their callers
(every entry below) have checked."""
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow   # every case in one child process: 18 s on two busy cores

CHILD = r"""
import json, sys, torch, lib
from lib.fast import counts, limit, native
from lib.learning import trainer
from lib.analysis import construct, decompose, k_noise, lowerbound, margins

cfg = lib.TaskConfig(V=64, d=16, L=8, dtype="float64")
p = lib.make_problem(cfg, 0)
clean = lib.sample_batch(p, 300, 0)
test = lib.sample_batch(p, 50, 0, "test")
P = lib.Params(0.05 * torch.randn(16, 16, dtype=torch.float64, generator=lib.generator(1, "fuzz")),
               0.05 * torch.randn(16, 16, dtype=torch.float64, generator=lib.generator(2, "fuzz")))
k = torch.randn(16, dtype=torch.float64, generator=lib.generator(3, "fuzz"))
S = torch.randn(cfg.V_in, dtype=torch.float64, generator=lib.generator(4, "fuzz"))
D = torch.randn(cfg.V, cfg.V_in, dtype=torch.float64, generator=lib.generator(5, "fuzz"))
inf0 = clean.informative.clone()

BATCH_ENTRIES = {
    "lib.three_steps limit": lambda b: lib.three_steps(p, b),
    "lib.three_steps finite": lambda b: lib.three_steps(p, b, "finite"),
    "lib.three_steps direct": lambda b: lib.three_steps(p, b, route="direct"),
    "lib.gradients": lambda b: lib.gradients(p, P, b),
    "lib.autograd_gradients": lambda b: lib.autograd_gradients(p, P, b),
    "lib.core.gradients.direct_gradients": lambda b: lib.core.gradients.direct_gradients(p, P, b),
    "lib.forward": lambda b: lib.forward(p, P, b).logits,
    "lib.loss": lambda b: lib.loss(p, P, b),
    "lib.keys_values": lambda b: lib.keys_values(p, b),
    "lib.predict": lambda b: lib.predict(p, P, b),
    "lib.evaluate": lambda b: lib.evaluate(p, P, batch=b).acc,
    "lib.train": lambda b: lib.train(p, b, steps=2)[0].W_V,
    "counts.gradients": lambda b: counts.gradients(p, P, b),
    "counts.count_gradients": lambda b: counts.count_gradients(p, P, b),
    "counts.table_gradients": lambda b: counts.table_gradients(p, P, b),
    "limit.count_tables": lambda b: limit.count_tables(p, b),
    "limit.step1_from_counts": lambda b: limit.step1_from_counts(p, b)[0],
    "limit.limit_attn": lambda b: limit.limit_attn(p, b),
    "limit.finite_attn": lambda b: limit.finite_attn(p, b, 0.01, None, 20.0),
    "trainer.gd_counts": lambda b: trainer.gd_counts(p, b, 2, 0.5)[0].W_V,
    "trainer.train_transformer": lambda b: trainer.train_transformer(p, b, trainer.TrainConfig(steps=2))[0].W_V,
    "trainer.attention_summary": lambda b: trainer.attention_summary(p, P, b),
    "decompose.memory_counts": lambda b: decompose.memory_counts(p, b).S,
    "decompose.decompose train": lambda b: decompose.decompose(p, b, test).logits,
    "decompose.decompose test": lambda b: decompose.decompose(p, test, b).logits,
    "decompose.pooled": lambda b: decompose.pooled(p, b),
    "lowerbound.cooccurrence": lambda b: lowerbound.cooccurrence(p, b),
    "margins.margins": lambda b: margins.margins(p, b, k),
    "k_noise.first_projection": lambda b: k_noise.first_projection(p, b)[0],
    "k_noise.pair_kernel": lambda b: k_noise.pair_kernel(p, clean, b)[0],
    "construct.bayes_accuracy_unmarked": lambda b: construct.bayes_accuracy_unmarked(b, cfg.V),
    "construct.hand_built_predicted_accuracy": lambda b: construct.hand_built_predicted_accuracy(b, cfg.V, 2.0),
}
# the fused loops take tensors; their informative tokens are the clean ones (a bad pos is refused)
LOOP_ENTRIES = {
    "native.pair_count": lambda t, pos, inf: native.pair_count(t, inf, cfg.V, cfg.V_in),
    "native.beta_counts": lambda t, pos, inf: native.beta_counts(t, inf, D, torch.zeros(cfg.V, dtype=D.dtype), cfg.n_keys),
    "native.attend": lambda t, pos, inf: native.attend(t, pos, inf, S, 1.0, None, cfg.V),
}

TOP = {"tokens": cfg.V_in, "pos": cfg.L, "labels": cfg.V, "informative": cfg.V}
def corrupt(t, field, how):
    t = t.clone()
    at = (3, 2) if t.dim() == 2 else (5,)
    if how == "top":   t[at] = TOP[field]
    if how == "neg":   t[at] = -1
    if how == "huge":  t[at] = 10 ** 8
    if how == "float": t = t.double()
    if how == "bool":  t = t != 0
    if how == "complex": t = t.to(torch.complex64)
    if how == "short": t = t[:-1]
    if how == "flat":  t = t.reshape(-1)
    if how == "int64": t = t.long()
    if how == "int16": t = t.to(torch.int16)
    if how == "strided": t = t.t().contiguous().t() if t.dim() == 2 else torch.stack([t, t], 1)[:, 0]
    return t
BAD = ["top", "neg", "huge", "float", "bool", "complex", "short", "flat"]
SAME = ["int64", "int16", "strided"]

def flat(x):
    if isinstance(x, torch.Tensor): return [x.detach().double().reshape(-1)]
    if isinstance(x, (int, float)): return [torch.tensor([float(x)])]
    if isinstance(x, dict): return [y for v in x.values() for y in flat(v)]
    if isinstance(x, (tuple, list)): return [y for v in x for y in flat(v)]
    if hasattr(x, "__dataclass_fields__"): return [y for f in x.__dataclass_fields__ for y in flat(getattr(x, f))]
    return []

def same(a, b):
    fa, fb = flat(a), flat(b)
    return len(fa) == len(fb) and all(x.shape == y.shape and torch.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True)
                                      for x, y in zip(fa, fb))

out = []
def record(entry, field, how, fn, ref):
    print(json.dumps({"case": [entry, field, how]}), file=sys.stderr, flush=True)
    try:
        res = fn()
        out.append([entry, field, how, "same" if (ref is not None and same(res, ref)) else "returned"])
    except ValueError as e:
        out.append([entry, field, how, "ValueError", str(e)])
    except Exception as e:
        out.append([entry, field, how, type(e).__name__, str(e)[:200]])

for name, fn in BATCH_ENTRIES.items():
    ref = fn(clean)
    for field in ("tokens", "pos", "labels"):
        for how in BAD + SAME:
            if how in ("strided",) and field != "tokens" and how == "strided":
                pass
            def call(field=field, how=how):
                parts = {"tokens": clean.tokens, "pos": clean.pos, "labels": clean.labels}
                parts[field] = corrupt(parts[field], field, how)
                return fn(lib.Batch(parts["tokens"], parts["pos"], parts["labels"]))
            record(name, field, how, call, ref)
for name, fn in LOOP_ENTRIES.items():
    ref = fn(clean.tokens, clean.pos, inf0)
    fields = ("tokens", "pos", "informative") if name == "native.attend" else ("tokens", "informative")
    for field in fields:
        for how in BAD + SAME:
            def call(field=field, how=how):
                parts = {"tokens": clean.tokens, "pos": clean.pos, "informative": inf0}
                parts[field] = corrupt(parts[field], field, how)
                return fn(parts["tokens"], parts["pos"], parts["informative"])
            record(name, field, how, call, ref)
print(json.dumps(out))
"""


def test_no_id_crashes_and_every_refusal_names_its_argument():
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=900)
    last = [line for line in proc.stderr.splitlines() if line.startswith('{"case"')][-1:] or ["none"]
    assert proc.returncode == 0, f"the child died (status {proc.returncode}) at {last[0]}: {proc.stderr[-800:]}"
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    wrong = []
    for entry, field, how, outcome, *msg in results:
        native_loop = entry.startswith("native.")
        if how in ("int64", "int16", "strided") and not (native_loop and field == "tokens") or (how == "flat" and field != "tokens"):
            ok = outcome == "same" or (outcome == "ValueError" and field in msg[0])
        elif how == "short" and native_loop and field == "tokens":   # N read from tokens: the other is named
            ok = outcome == "ValueError" and "shape" in msg[0]
        else:
            ok = outcome == "ValueError" and field in msg[0]
        if not ok:
            wrong.append((entry, field, how, outcome, *msg))
    assert len(results) > 400
    assert not wrong, f"{len(wrong)} of {len(results)} cases:\n" + "\n".join(map(str, wrong[:60]))
