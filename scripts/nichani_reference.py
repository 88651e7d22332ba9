"""Run Nichani, Lee and Bietti's own sequential-learning training and store its logged curve.

Produces `book/data/nichani_reference.json`, the reference that chapter 11 and
`tests/test_nichani_reproduction.py` compare the book's model (`lib.factual.nichani_sequential_run`) with.
Not run by CI: it needs JAX and their code, neither of which the book depends on.

What it runs. Their notebook `sequential-learning.ipynb` of the repository eshnich/factual-recall-iclr
at commit 7c4d121d80b8ffd3c6a6ff65fd668f9d457dba7b (the newest there, 2025-02-28). This script copies
none of their code: it reads the notebook's code cells 0-6 from their checkout and executes them as they
are (their `util.py` on the path, their working directory), dropping only IPython magics (`%env
CUDA_VISIBLE_DEVICES=7`), and two changes to cell 6 recorded in the output: the six metric lines of the
logging block are removed (on CPU they cost about 100 s per logged step on 2^16 test samples; they
consume no randomness, so the trajectory is unchanged: the 128-step smoke runs with and without them agree
to the last digit), the metrics being computed afterwards from the A, V the loop stores, and checked
against their own jitted `loss_fn` and `accuracy` at steps 64, 1664, 4480 (equal to 2.4e-7 nats and
exactly in accuracy); with `--stop`, the loop runs only the first `stop` steps (same data stream and
logging; the stored file: --stop 4544, logged steps 0..4480, 1716 s of training on a loaded 2-core
machine). Cell 7 (the plot) is not run. What those cells execute:

  task      FactRecall(S=16, R=4, n_answer=32, n_noise=20, T=32, EOS_token=True), uniform subjects and
            relations; the table is their "structured" one (it overwrites the random table drawn just
            before): a*(s, r) = floor(s D / S) + r D with D = 8, the same assignment for every relation
  model     Simple_TF with one-hot embeddings (d = vocabulary = 41), *linear* attention from the last
            position (the softmax line is commented out), A = 1e-5 ones (1, 41, 41), V = 1e-5 ones (41, 32),
            output softmax(.) in float32
  training  plain gradient descent, lr = 0.1 *constant* (the cosine schedule is built and never used),
            wd = 0, 2^13 steps, batches of 2^10 sliced from epochs of 2^20 fresh samples, RNG(64)
  logging   every 2^13 / 128 = 64 steps (before the step), on 2^16 test samples: loss -log f[y] of the
            float32 probabilities, accuracy argmax(f) == y, relation / subject accuracy and losses

What it adds, afterwards and from what their loop stored (A, V at every logged step): the logits
(their own `lin_attn` / `embed` methods, without the final softmax), accuracy under argmax of the
logits, the float64 loss from the logits, and how often the float32 probabilities tie at their maximum
(`jnp.argmax` then returns the first tied index: answer 0, or the first answer of a block).

Optional `--cosine` reruns the same cells with the one change `lr=lr` -> `lr=schedule(i)` in the step
call (what the notebook builds but does not use), to record where its accuracy crosses 1/2.

Setup used for the stored file (CPU, one thread):
    python3 -m venv /work/jaxenv
    /work/jaxenv/bin/pip install "jax[cpu]" optax flax simple_pytree jaxopt tqdm matplotlib seaborn scipy
      (jax 0.10.2, optax 0.2.8, flax 0.12.8, jaxopt 0.8.5, simple-pytree 0.2.2, numpy 2.4.6)
    mkdir /tmp/nlb-src && git --git-dir=<mirror> archive 7c4d121d | tar -x -C /tmp/nlb-src
    OMP_NUM_THREADS=1 XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
      JAX_PLATFORMS=cpu /work/jaxenv/bin/python scripts/nichani_reference.py --src /tmp/nlb-src --stop 4544
    (--cosine was not run for the stored file)

JAX's random streams: jax >= 0.5 switched `jax_threefry_partitionable` on by default, which changes the
random bits of `jax.random` for the same key. Their code dates from jax 0.4 (default off); this script
sets it off (`--partitionable` keeps it on) and records the setting. Either way the data are their
sampler's; only the draw differs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time

COMMIT = "7c4d121d80b8ffd3c6a6ff65fd668f9d457dba7b"
REPO = "eshnich/factual-recall-iclr"
NOTEBOOK = "sequential-learning.ipynb"


METRIC_LINES = ("test_loss.append(", "rel_accs.append(", "rel_losses.append(", "sub_accs.append(",
                "sub_losses.append(", "accs.append(")


def their_cells(src: str, cosine: bool, steps: int | None, stop: int | None) -> list[str]:
    """Code cells 0-6 of their notebook, magics dropped, and these documented changes to cell 6:
    the six metric lines of the logging block removed (they read the model and the fixed test set and
    consume no randomness; the metrics are computed afterwards from the A, V the loop stores), and the
    loop run for `stop` steps instead of `steps` (same save_every and data stream: a prefix)."""
    nb = json.load(open(os.path.join(src, NOTEBOOK)))
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"][:7]
    out = []
    for c in cells:
        text = "".join(c["source"])
        text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("%"))
        out.append(text)
    lines = out[6].splitlines()
    kept = [l for l in lines if not l.strip().startswith(METRIC_LINES)]
    assert len(lines) - len(kept) == 6, "their logging block changed"
    train = "\n".join(kept)
    if stop is not None:
        assert train.count("for i in trange(steps):") == 1
        train = train.replace("for i in trange(steps):", f"for i in trange({int(stop)}):")
    if cosine:
        old = "step_fn(model, next(iterator), lr=lr, wd=wd)"
        assert train.count(old) == 1, "their training loop changed: cosine substitution not found"
        train = train.replace(old, "step_fn(model, next(iterator), lr=schedule(i), wd=wd)")
    if steps is not None:                       # smoke tests only: never for the stored reference
        assert train.count("steps = 2**13") == 1 and train.count("rng.next(2**16)") == 1
        train = train.replace("steps = 2**13", f"steps = {steps}").replace("rng.next(2**16)", "rng.next(2**10)")
    out[6] = train
    return out


def run_theirs(src: str, cosine: bool, steps: int | None, stop: int | None = None) -> dict:
    """Execute their cells; returns their namespace (test_loss, accs, As, Vs, testx, testy, ...)."""
    cwd = os.getcwd()
    sys.path.insert(0, src)
    os.chdir(src)
    try:
        ns: dict = {"__name__": "nlb_sequential"}
        for text in their_cells(src, cosine, steps, stop):
            exec(compile(text, NOTEBOOK, "exec"), ns)
    finally:
        os.chdir(cwd)
        sys.path.remove(src)
    return ns


def analyse(ns: dict, check_steps=()) -> dict:
    """Per logged step, from the A, V their loop stored: their metrics (the formulas of their loss_fn,
    accuracy, rel_/sub_accuracy, rel_/sub_loss on the float32 softmax of the last position's output) and
    the logit-argmax ones. Their model computes linear attention for every position and keeps the last
    row; here only the last row is computed (the same sums; float32 rounding may differ in the last
    bits). At `check_steps` their own jitted `loss_fn` and `accuracy` are run on their model with those
    A, V, and the differences are returned."""
    import jax
    import numpy as np
    from jax import numpy as jnp

    model, testx, testy = ns["init_model"], ns["testx"], ns["testy"]
    D, n_answer = int(ns["D"]), int(ns["n_answer"])
    save_every = int(ns["save_every"])

    @jax.jit
    def logits_fn(A, V):
        x = model.embed(testx)                                       # their embedding (one-hot rows)
        s = jnp.einsum("nd,de,nle->nl", x[:, -1], A, x)              # x_T^T A x_l, as their lin_attn
        return jnp.einsum("nl,nld->nd", s, x) @ V                    # last row of their attn @ V

    y = np.asarray(testy)
    idx = np.arange(len(y))
    blocks = np.arange(n_answer)
    rows, checks = [], []
    for k, (A, V) in enumerate(zip(ns["As"], ns["Vs"])):
        z = logits_fn(A, V)
        f = jax.nn.softmax(z)                                 # float32, as their model returns
        zf, fp = np.asarray(z, np.float64), np.asarray(f)
        pred_p, pred_z = fp.argmax(1), zf.argmax(1)           # numpy argmax: first index on ties, as jnp
        ties = (fp == fp.max(1, keepdims=True)).sum(1) > 1
        logp = zf - zf.max(1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
        gap = np.sort(zf, 1)
        rel_mass = np.where((blocks[None, :] // D) == (y[:, None] // D), fp, 0).sum(1, dtype=np.float32)
        sub_mass = np.where((blocks[None, :] % D) == (y[:, None] % D), fp, 0).sum(1, dtype=np.float32)
        step = k * save_every
        rows.append({
            "step": step,
            "loss": float(np.mean(-np.log(fp[idx, y]))),        # theirs: -log f[y], float32
            "acc": float((pred_p == y).mean()),                 # theirs: argmax of float32 probabilities
            "rel_acc": float((pred_p // D == y // D).mean()),
            "sub_acc": float((pred_p % D == y % D).mean()),
            "rel_loss": float(np.mean(-np.log(rel_mass))),
            "sub_loss": float(np.mean(-np.log(sub_mass))),
            "loss_f64": float(-logp[idx, y].mean()),
            "acc_logits": float((pred_z == y).mean()),
            "rel_acc_logits": float((pred_z // D == y // D).mean()),
            "sub_acc_logits": float((pred_z % D == y % D).mean()),
            "frac_prob_ties": float(ties.mean()),               # max float32 probability attained twice
            "frac_pred_answer0": float((pred_p == 0).mean()),   # their argmax on answer 0
            "median_logit_gap": float(np.median(gap[:, -1] - gap[:, -2])),
        })
        if step in check_steps:                                 # their own functions, their model
            m = model.replace(A=A[None], V=V)
            their_loss = float(ns["loss_fn"](m, (testx, testy)))
            their_acc = float(ns["accuracy"](m, (testx, testy)))
            checks.append({"step": step, "their_loss_fn": their_loss, "their_accuracy": their_acc,
                           "loss_here": rows[-1]["loss"], "acc_here": rows[-1]["acc"]})
            print("check", checks[-1], flush=True)
    return {"rows": rows, "n_answer": n_answer, "checks": checks}


def crossing(rows: list, key: str, level: float = 0.5):
    for r in rows:
        if r[key] > level:
            return r["step"]
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default="/tmp/nlb-src", help="their repository at commit " + COMMIT)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "book", "data",
                                                  "nichani_reference.json"))
    ap.add_argument("--cosine", action="store_true", help="also run with the cosine schedule applied")
    ap.add_argument("--partitionable", action="store_true", help="keep jax_threefry_partitionable on")
    ap.add_argument("--stop", type=int, default=None, help="run the first STOP of their 2^13 steps")
    ap.add_argument("--check-steps", type=int, nargs="*", default=[64, 1664, 4480],
                    help="logged steps at which their own loss_fn and accuracy are also run")
    ap.add_argument("--smoke-steps", type=int, default=None, help="fewer steps (testing this script only)")
    args = ap.parse_args()

    import jax
    jax.config.update("jax_threefry_partitionable", bool(args.partitionable))
    import flax, optax, numpy

    t0 = time.perf_counter()
    ns = run_theirs(args.src, cosine=False, steps=args.smoke_steps, stop=args.stop)
    t_run = time.perf_counter() - t0
    raw = args.out + ".raw.npz"                 # their stored curve and A, V: analyse() can be rerun
    numpy.savez(raw, As=numpy.asarray(ns["As"]), Vs=numpy.asarray(ns["Vs"]))
    print("their training done in", round(t_run, 1), "s; raw curve in", raw, flush=True)
    res = analyse(ns, set(args.check_steps))
    t_all = time.perf_counter() - t0
    fd = numpy.asarray(ns["fact_dict"]).tolist()
    out = {
        "provenance": {
            "repo": REPO, "commit": COMMIT, "file": NOTEBOOK,
            "function": "code cells 0-6, counted from zero (FactRecall, Simple_TF, loss_fn, accuracy, rel_/sub_accuracy, "
                        "the training loop of cell 6), executed with the changes listed in changes_to_their_cells",
            "driver": "scripts/nichani_reference.py",
            "jax": jax.__version__, "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else None,
            "flax": flax.__version__, "optax": optax.__version__, "numpy": numpy.__version__,
            "jax_threefry_partitionable": bool(args.partitionable),
            "backend": jax.default_backend(), "dtype": "float32",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "seconds_training": round(t_run, 1), "seconds_total": round(t_all, 1),
            "smoke_steps": args.smoke_steps, "stop": args.stop,
            "changes_to_their_cells": "IPython magics dropped; in cell 6 the six metric lines of the logging "
                                      "block removed (metrics computed afterwards from the stored A, V) and, "
                                      "with stop, the loop run for the first `stop` steps",
            "check_against_their_functions": res["checks"],
        },
        "settings": {
            "S": 16, "R": 4, "D": int(ns["D"]), "n_noise": int(ns["n_noise"]), "T": int(ns["T"]),
            "eos": True, "vocab": int(ns["vocab_size"]), "d": int(ns["d"]), "n_answer": res["n_answer"],
            "table": "structured: a*(s, r) = floor(s D / S) + r D (their fact_dict, printed below)",
            "fact_dict": fd,
            "model": "Simple_TF, one-hot embeddings, linear attention from the last position, no softmax "
                     "in the attention, output softmax",
            "init": 1e-5, "optimizer": "plain gradient descent", "lr": float(ns["lr"]),
            "schedule": "constant (optax.cosine_decay_schedule built, never used)", "wd": float(ns["wd"]),
            "steps": int(ns["steps"]), "batch": int(ns["batch_size"]), "epoch": int(ns["max_size"]),
            "n_test": int(ns["testy"].shape[0]), "log_every": int(ns["save_every"]),
            "seed": "RNG(64): fact table draws, test set, then the batch iterator",
            "loss": "-log f[y] with f the float32 softmax (theirs); loss_f64: from the logits in float64",
            "acc": "argmax of the float32 probabilities (theirs; ties -> first index); acc_logits: argmax "
                   "of the logits",
        },
        "logged": res["rows"],
        "summary": {"acc_crosses_half": crossing(res["rows"], "acc"),
                    "acc_logits_crosses_half": crossing(res["rows"], "acc_logits")},
    }
    if args.cosine:
        t1 = time.perf_counter()
        nc = run_theirs(args.src, cosine=True, steps=args.smoke_steps, stop=args.stop)
        rc = analyse(nc)["rows"]
        out["cosine_variant"] = {
            "change": "lr=lr -> lr=schedule(i) in the step call; everything else as above",
            "seconds": round(time.perf_counter() - t1, 1),
            "acc_crosses_half": crossing(rc, "acc"), "acc_logits_crosses_half": crossing(rc, "acc_logits"),
            "logged": [{k: r[k] for k in ("step", "loss", "acc", "acc_logits", "rel_acc", "sub_acc")} for r in rc],
        }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")
    for r in out["logged"][:: max(1, len(out["logged"]) // 16)]:
        print(f"step {r['step']:5d} loss {r['loss']:.4f} acc {r['acc']:.4f} acc_logits {r['acc_logits']:.4f} "
              f"ties {r['frac_prob_ties']:.3f} rel_acc {r['rel_acc']:.3f}/{r['rel_acc_logits']:.3f}")
    print("summary", out["summary"], "seconds", out["provenance"]["seconds_total"])
    if args.cosine:
        print("cosine", {k: out["cosine_variant"][k] for k in ("acc_crosses_half", "acc_logits_crosses_half",
                                                               "seconds")})


if __name__ == "__main__":
    main()
