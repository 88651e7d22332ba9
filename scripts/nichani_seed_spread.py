"""The book's run at Nichani et al.'s sequential-learning settings on several seeds
(`lib.factual.nichani_sequential_run`, their defaults: 2^13 steps, batch 2^10, lr 0.1 constant, init 1e-5,
2^16 test samples, logs every 64 steps). Writes `book/data/nichani_book_seeds.json`: per seed, the logged
loss and accuracies under both argmax rules, and the seconds each run took. From it
`tests/test_nichani_reproduction.py` takes its tolerance (the spread over seeds). Not run by CI.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/nichani_seed_spread.py --seeds 0 1 2 3 4
"""

import argparse
import datetime
import json
import os
import platform
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lib import factual as F  # noqa: E402

KEYS = ("loss", "loss_f64", "acc", "acc_logits", "rel_acc", "rel_acc_logits", "sub_acc", "sub_acc_logits",
        "frac_prob_ties", "frac_pred_answer0")

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=F.NICHANI_RUN["steps"])
    ap.add_argument("--schedule", default="constant", choices=["constant", "cosine"],
                    help="cosine: the schedule their notebook builds but does not use")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "book", "data",
                                                  "nichani_book_seeds.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    runs = {}
    for s in args.seeds:
        r = F.nichani_sequential_run(steps=args.steps, seed=s, schedule=args.schedule)
        runs[str(s)] = {"step": r["step"], **{k: r[k] for k in KEYS}, "seconds": round(r["seconds"], 1),
                        "acc_crosses_half": next((t for t, a in zip(r["step"], r["acc"]) if a > 0.5), None)}
        print(f"seed {s}: {r['seconds']:.0f} s, loss at 1664 / 4480:",
              [round(r["loss"][r["step"].index(t)], 4) for t in (1664, 4480) if t in r["step"]], flush=True)
        out = {"settings": {**F.NICHANI_TASK, **F.NICHANI_RUN, "steps": args.steps, "schedule": args.schedule, "model": "lib.factual.LinearAttention",
                            "function": "lib.factual.nichani_sequential_run"},
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "torch": torch.__version__, "machine": platform.machine(), "threads": 1, "runs": runs}
        with open(args.out, "w") as fh:
            json.dump(out, fh)
            fh.write("\n")
