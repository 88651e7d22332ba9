"""The peer's side of bench_fact_stack.py: one Adam step of Nichani, Lee and Bietti's own JAX model, as their
run.py trains it (`model.TF_one_layer`, `optax.adamw` through `optax.multi_transform` with the embeddings set to
zero updates, the step jit-compiled, batches sampled beforehand by their `task.FactRecall`), timed per step.

    <python with jax, flax, optax, simple_pytree> bench/peer_nichani_step.py --repo CHECKOUT --sizes JSON --steps K

Runs in its own interpreter (their code needs JAX; the book's does not). Prints one JSON object:
{"jax": version, "seconds_per_step": [one median per size, null for m = 0: their model always has an MLP]}. Their files are imported, never copied.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True, help="a checkout of eshnich/factual-recall-iclr")
    ap.add_argument("--sizes", required=True, help='JSON list of {"S", "R", "D", "T", "d", "H", "d_h", "m", "batch"}')
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round (default 20)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; the median round is reported (default 3)")
    a = ap.parse_args()
    sys.path.insert(0, a.repo)
    import jax
    import optax
    from flax.traverse_util import flatten_dict, unflatten_dict
    from jax import numpy as jnp
    from jax import random as jr
    from model import TF_one_layer
    from task import FactRecall

    out = []
    for z in json.loads(a.sizes):
        if z["m"] == 0:                   # their TF_one_layer always has its MLP (flax Dense of width 0 fails)
            out.append(None)
            continue
        S, R, D, T = z["S"], z["R"], z["D"], z["T"]
        n_noise = S + R
        vocab = S + R + n_noise + 1
        key = jr.PRNGKey(0)
        facts = jnp.array([jr.choice(jr.fold_in(key, r), jnp.arange(D * r, D * (r + 1)), (S,)) for r in range(R)]).T
        problem = FactRecall(S, R, R * D, n_noise, facts, T, EOS_token=True)
        sample = jax.jit(lambda k: jax.vmap(problem.sample)(jr.split(k, z["batch"])))
        batches = [sample(jr.fold_in(key, 100 + i)) for i in range(4)]
        model = TF_one_layer(vocab_size=vocab, output_size=R * D, d=z["d"], heads=z["H"], d_h=z["d_h"], width=z["m"], alpha=1.0)
        p = flatten_dict(model.init(jr.fold_in(key, 1), batches[0][0][:2])["params"], sep=".")
        labels = {k: ("zero" if k in ("wte", "unembed") else "adam") for k in p}
        opt = optax.multi_transform({"adam": optax.adamw(learning_rate=1e-3, weight_decay=0.0),
                                     "zero": optax.set_to_zero()}, labels)

        def loss_fn(p, batch):
            x, y = batch
            f = model.apply({"params": unflatten_dict(p, sep=".")}, x)
            return -jnp.log(jnp.take_along_axis(f, y[:, None], axis=1)).mean()

        @jax.jit
        def step(p, batch, state):
            loss, g = jax.value_and_grad(loss_fn)(p, batch)
            updates, state = opt.update(g, state, p)
            return optax.apply_updates(p, updates), state, loss

        state = opt.init(p)
        p, state, loss = step(p, batches[0], state)               # compile
        loss.block_until_ready()
        rounds = []
        for _ in range(a.rounds):
            t = time.perf_counter()
            for i in range(a.steps):
                p, state, loss = step(p, batches[i % len(batches)], state)
            loss.block_until_ready()
            rounds.append((time.perf_counter() - t) / a.steps)
        out.append(statistics.median(rounds))
    print(json.dumps({"jax": jax.__version__, "seconds_per_step": out}))


if __name__ == "__main__":
    main()
