"""The command line: `python -m lib train ...` and `python -m lib nstar ...` (SPEC.md contract).

Invalid values exit with status 2 and one line naming the parameter, e.g.
`python -m lib train: error: V must be an integer >= 2, got 0`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from .capacity import nstar
from .config import ACTIVATIONS, EMBEDDINGS, MLP_INPUTS, MODELS, TaskConfig, default_device
from .evaluate import N_TEST
from .experiment import METRICS, run
from .steps import MODES, StepSizes


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are a single line (no usage block) and exit with status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_problem_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="attn", help=f"one of {', '.join(MODELS)} (default attn)")
    p.add_argument("--V", type=int, required=True, help="vocabulary size")
    p.add_argument("--d", type=int, required=True, help="embedding dimension")
    p.add_argument("--L", type=int, required=True, help="sequence length")
    p.add_argument("--m", type=int, default=None, help="MLP width (required for --model mlp)")
    p.add_argument("--activation", default="he3", help=f"MLP activation: {', '.join(ACTIVATIONS)}")
    p.add_argument("--mlp-input", default="unit", help=f"MLP input normalisation: {', '.join(MLP_INPUTS)} "
                   "(default unit: sigma(F o/|o|))")
    p.add_argument("--embedding", default="gaussian", help=f"one of {', '.join(EMBEDDINGS)}")
    p.add_argument("--tied", action="store_true", help="tie output to input embeddings (u = e)")
    p.add_argument("--tau", type=float, default=1.0, help="trigger scale (z_trig = tau z)")
    p.add_argument("--trigger-in-value", action=argparse.BooleanOptionalAction, default=True,
                   help="does z_trig enter the value path (default: yes)")
    p.add_argument("--eos-key", action="store_true", help="z_EOS is also a key")
    p.add_argument("--noise-vocab", type=int, default=None, help="size of a separate noise vocabulary")
    p.add_argument("--mode", default="limit", help=f"one of {', '.join(MODES)} (default limit)")
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--n-test", type=int, default=N_TEST, help=f"fresh test samples per seed (default {N_TEST})")
    p.add_argument("--eta", type=float, default=StepSizes.eta, help="finite mode: step 1 size")
    p.add_argument("--gamma-w", type=float, default=None, help="finite mode: step 2 size (default: normalised)")
    p.add_argument("--gamma-v", type=float, default=StepSizes.gamma_V, help="finite mode: step 3 size")
    p.add_argument("--attn-scale", type=float, default=StepSizes.attn_scale,
                   help=f"finite mode: |W1 q| when --gamma-w is not given (default {StepSizes.attn_scale:g})")
    p.add_argument("--dtype", default="float32", help="float32 or float64")
    p.add_argument("--device", default=default_device(), help="cpu or cuda (default: cuda if present)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _config(a) -> TaskConfig:
    return TaskConfig(V=a.V, d=a.d, L=a.L, model=a.model, m=a.m, activation=a.activation,
                      mlp_input=a.mlp_input, embedding=a.embedding, tied=a.tied, tau=a.tau, trigger_in_value=a.trigger_in_value,
                      eos_key=a.eos_key, noise_vocab=a.noise_vocab, dtype=a.dtype, device=a.device)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m lib", description=(
        "Three-step training of one-layer transformers on the token-retrieval task "
        "(Vural et al., ICLR 2026)."))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    t = sub.add_parser("train", help="run the three steps and report test / attention / oracle accuracy")
    _add_problem_args(t)
    t.add_argument("--N", type=int, required=True, help="number of training samples")
    t.add_argument("--seeds", type=int, default=1, help="number of seeds (problems) to average over (default 1)")
    n = sub.add_parser("nstar", help="critical sample size N* reaching an accuracy threshold")
    _add_problem_args(n)
    n.add_argument("--seeds", type=int, default=3, help="number of seeds (problems) to average over (default 3)")
    n.add_argument("--threshold", type=float, default=0.99, help="target test accuracy (default 0.99)")
    n.add_argument("--n-min", type=int, default=None, help="first N tried (default V)")
    n.add_argument("--n-max", type=int, default=2 ** 20, help="give up above this N (default 2^20)")
    n.add_argument("--cache", default=None, help="JSON file caching evaluated points (resumable)")
    return parser


def _step_sizes(a) -> StepSizes:
    return StepSizes(eta=a.eta, gamma_W=a.gamma_w, gamma_V=a.gamma_v, attn_scale=a.attn_scale)


def main(argv=None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    prog = f"python -m lib {a.command}"
    t0 = time.perf_counter()
    try:
        if a.command == "train":
            res = run(_config(a), a.N, mode=a.mode, seeds=a.seeds, seed=a.seed, n_test=a.n_test,
                      step_sizes=_step_sizes(a))
            elapsed = time.perf_counter() - t0
            gamma_W = res.per_seed["gamma_W"]
            if a.json:
                print(json.dumps({**{k: getattr(res, k) for k in METRICS},
                                  **{f"{k}_std": getattr(res, f"{k}_std") for k in METRICS},
                                  "gamma_W": statistics.fmean(gamma_W) if a.mode == "finite" else None,
                                  "per_seed": {k: v if k != "gamma_W" or a.mode == "finite" else None
                                               for k, v in res.per_seed.items()},
                                  "seconds": elapsed}))
            else:
                print(f"{a.model} V={a.V} d={a.d} L={a.L} N={a.N} mode={a.mode} seeds={a.seeds} ({elapsed:.2f} s)")
                for k in METRICS:
                    v = res.per_seed[k]
                    print(f"  {k:<11} {getattr(res, k):.4f} ± {getattr(res, k + '_std'):.4f}   per seed: "
                          + " ".join(f"{x:.4f}" for x in v))
                if a.mode == "finite":
                    print("  gamma_W     " + " ".join(f"{x:.4g}" for x in gamma_W))
        else:
            res = nstar(_config(a), a.threshold, seeds=a.seeds, seed=a.seed, n_min=a.n_min, n_max=a.n_max,
                        mode=a.mode, n_test=a.n_test, step_sizes=_step_sizes(a), cache=a.cache)
            elapsed = time.perf_counter() - t0
            if a.json:
                print(json.dumps({"nstar": res.nstar, "threshold": res.threshold, "seconds": elapsed,
                                  "runs": res.runs, "points": [p.as_dict() for p in res.points]}))
            else:
                for p in res.points:
                    print(f"  N={p.N:<9d} acc={p.acc:.4f} ± {p.acc_std:.4f}  att_acc={p.att_acc:.4f}  "
                          f"oracle_acc={p.oracle_acc:.4f}")
                found = res.nstar if res.nstar is not None else f"not reached by --n-max {a.n_max}"
                print(f"N* = {found}  (threshold {a.threshold}, {a.seeds} seeds, {elapsed:.1f} s)")
    except ValueError as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"{prog}: error: {msg}", file=sys.stderr)
        return 2
    return 0
