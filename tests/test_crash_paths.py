"""Public entries that reach the fused loops never crash on bad ids: each refuses them with a
ValueError naming the argument. Every case runs in a child process, so a segfault fails the test
instead of killing the suite."""
import json
import subprocess
import sys

import pytest

CASES = [
    # (entry, what is corrupted, value)
    ("count_tables", "tokens", 10 ** 8), ("count_tables", "tokens", 70), ("count_tables", "tokens", -1),
    ("step1_from_counts", "tokens", 10 ** 8), ("step1_from_counts", "tokens", 64),
    ("limit_attn", "tokens", 10 ** 8), ("limit_attn", "pos", 99), ("limit_attn", "labels", 64),
    ("finite_attn", "tokens", 10 ** 8),
    ("native.pair_count", "tokens", 10 ** 8), ("native.pair_count", "informative", 64),
    ("native.beta_counts", "tokens", 10 ** 8), ("native.beta_counts", "informative", -3),
    ("native.attend", "tokens", 10 ** 8), ("native.attend", "pos", 40), ("native.attend", "informative", 64),
]

CHILD = r"""
import json, sys, torch, lib
from lib import counts, native
cases = json.loads(sys.argv[1])
cfg = lib.TaskConfig(V=64, d=16, L=8)
p = lib.make_problem(cfg, 0)
b = lib.sample_batch(p, 500, 0)
def run(entry, field, value):
  print(json.dumps({"case": [entry, field, value]}), flush=True)
  tokens, pos, labels = b.tokens.clone(), b.pos.clone(), b.labels.clone()
  inf = b.informative.clone()
  if field == "tokens":
      tokens[3, 2] = value
  elif field == "pos":
      pos[5] = value
  elif field == "labels":
      labels[5] = value
  elif field == "informative":
      inf[5] = value
  try:
      if entry.startswith("native."):
          S = torch.randn(cfg.V_in, dtype=p.E.dtype)
          D = torch.randn(cfg.V, cfg.V_in, dtype=p.E.dtype)
          if entry == "native.pair_count":
              native.pair_count(tokens, inf, cfg.V, cfg.V_in)
          elif entry == "native.beta_counts":
              native.beta_counts(tokens, inf, D, torch.zeros(cfg.V, dtype=p.E.dtype), cfg.n_keys)
          else:
              native.attend(tokens, pos, inf, S, 1.0, None, cfg.V)
      else:
          bad = lib.Batch(tokens, pos, labels)
          args = (p, bad) if entry != "finite_attn" else (p, bad, 0.01, None, 20.0)
          getattr(counts, entry)(*args)
      print(json.dumps({"raised": None}))
  except ValueError as e:
      print(json.dumps({"raised": "ValueError", "msg": str(e)}))
  except Exception as e:
      print(json.dumps({"raised": type(e).__name__, "msg": str(e)}))

for case in cases:
    run(*case)
"""


def test_bad_ids_give_a_named_value_error_never_a_crash():
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES)], capture_output=True, text=True,
                          timeout=600)
    lines = [json.loads(line) for line in proc.stdout.strip().splitlines()]
    last = [x["case"] for x in lines if "case" in x][-1:] or ["none"]
    assert proc.returncode == 0, f"child died with status {proc.returncode} at case {last[0]}: {proc.stderr[-500:]}"
    results = [(c["case"], r) for c, r in zip(lines[::2], lines[1::2])]
    assert [c for c, _ in results] == [list(x) for x in CASES]
    for (entry, field, value), out in results:
        assert out["raised"] == "ValueError", (entry, field, value, out)
        assert field in out["msg"], (entry, field, value, out)
