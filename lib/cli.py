"""The command line: `python -m lib train | nstar | sweep ...` (the contract in the README).

`sweep` takes several values for --V, --d, --L and --m, runs N* for every point of their grid
(`lib.experiments.sweep`), resumable through --cache and parallel through --jobs (processes here) or
--backend dask [--scheduler ADDRESS] (a Dask cluster); it prints each grid point's result the moment
it finishes (with --json: JSON lines, one object per grid point, in the order they finish), so a
failure later keeps what was printed; a progress bar with an ETA is on stderr when stderr is a
terminal (--progress / --no-progress to choose).

Invalid values, and a sweep that fails (no Dask scheduler at --scheduler, a grid that cannot fit in
memory, a worker with other code, a lost cluster), exit with status 2 and one line naming the
parameter, e.g. `python -m lib train: error: V must be an integer >= 2, got 0`. Ctrl-C exits with
status 130 and one line (whatever the backend); finished points stay in --cache.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import textwrap
import time
from dataclasses import fields

from .core import featuremaps
from .experiments import sweep as sweep_engine
from .experiments.capacity import nstar
from .core.config import ACTIVATIONS, EMBEDDINGS, MLP_INPUTS, MODELS, TaskConfig, default_device
from .learning.evaluate import N_TEST
from .experiments.experiment import METRICS, run
from .core.steps import MODES, StepSizes


DEFAULTS = {f.name: f.default for f in fields(TaskConfig)}   # the defaults the help shows
INTERRUPT = "Invalid values exit with status 2 and one line naming the parameter; Ctrl-C with status 130 and one line."


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are a single line (no usage block) and exit with status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown (where the help does not already say it, and for flags with a value), the
    description and the example epilog kept as written (`_text` wraps their prose)."""

    def _get_help_string(self, action):
        said = "default" in (action.help or "")
        if action.required or action.default is None or action.default is False or said:
            return action.help
        return super()._get_help_string(action)


def _add_problem_args(p: argparse.ArgumentParser, multi: bool = False) -> None:
    many = dict(nargs="+") if multi else {}
    each = " (one or more values)" if multi else ""
    p.add_argument("--model", default="attn", help=f"one of {', '.join(MODELS)} (default attn)")
    p.add_argument("--V", type=int, required=True, help="vocabulary size" + each, **many)
    p.add_argument("--d", type=int, required=True, help="embedding dimension" + each, **many)
    p.add_argument("--L", type=int, required=True, help="sequence length" + each, **many)
    p.add_argument("--m", type=int, default=None, help="MLP width (required for --model mlp)" + each, **many)
    p.add_argument("--activation", default=None, help=f"MLP activation: {', '.join(ACTIVATIONS)} "
                   f"(default {DEFAULTS['activation']}; --model mlp only)")
    p.add_argument("--mlp-input", default=None, help=f"MLP input normalisation: {', '.join(MLP_INPUTS)} "
                   f"(default {DEFAULTS['mlp_input']}: sigma(F o/|o|); --model mlp only)")
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
    p.add_argument("--eta", type=float, default=None,
                   help=f"finite mode: step 1 size at tau <= 1 (divided by tau^2 above; default {StepSizes.eta:g})")
    p.add_argument("--gamma-w", type=float, default=None, help="finite mode: step 2 size (default: normalised)")
    p.add_argument("--gamma-v", type=float, default=None, help=f"finite mode: step 3 size (default {StepSizes.gamma_V:g})")
    p.add_argument("--attn-scale", type=float, default=None,
                   help=f"finite mode: |W1 q| when --gamma-w is not given (default {StepSizes.attn_scale:g})")
    p.add_argument("--dtype", default="float32", help="float32 or float64")
    p.add_argument("--device", default=default_device(), help="cpu or cuda (default: cuda if present)")
    p.add_argument("--json", action="store_true", help=(
        "print JSON lines: one JSON object per grid point, on its own line, as each finishes" if multi
        else "print the result as one JSON object on one line"))


def _config(a, V=None, d=None, L=None, m=None) -> TaskConfig:
    V, d, L = (a.V if V is None else V), (a.d if d is None else d), (a.L if L is None else L)
    m = a.m if m is None else m
    return TaskConfig(V=V, d=d, L=L, model=a.model, m=m,
                      activation=DEFAULTS['activation'] if a.activation is None else a.activation,
                      mlp_input=DEFAULTS['mlp_input'] if a.mlp_input is None else a.mlp_input,
                      embedding=a.embedding, tied=a.tied, tau=a.tau, trigger_in_value=a.trigger_in_value,
                      eos_key=a.eos_key, noise_vocab=a.noise_vocab, dtype=a.dtype, device=a.device)


def _text(*paragraphs: str) -> str:
    """Paragraphs wrapped to 79 columns; a paragraph of lines starting with two spaces (examples) as is."""
    return "\n\n".join(p if p.startswith("  ") else textwrap.fill(p, 79) for p in paragraphs)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m lib", description=(
        "Three-step training of one-layer transformers on the token-retrieval task "
        "(Vural et al., ICLR 2026)."), epilog="python -m lib COMMAND --help: each command's flags and an example.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    def command(name, short, description, examples, after=INTERRUPT):
        """A subcommand with its one-line help, a description, its examples and what it exits with."""
        return sub.add_parser(name, help=short, formatter_class=HelpFormatter, description=_text(description),
                              epilog=_text("example:" if len(examples) == 1 else "examples:",
                                           "\n".join("  " + e for e in examples), after))

    t = command("train", "run the three steps and report test / attention / oracle accuracy",
                "Train on N samples with the three steps (one problem per seed) and report test, attention and "
                "oracle-attention accuracy, mean and spread over seeds.",
                ["python -m lib train --V 256 --d 256 --L 16 --N 32768 --seeds 3 --json"])
    _add_problem_args(t)
    t.add_argument("--N", type=int, required=True, help="number of training samples")
    t.add_argument("--seeds", type=int, default=1, help="number of seeds (problems) to average over (default 1)")
    t.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="one stderr line per seed trained, with the elapsed time and an ETA (default: on when "
                        "stderr is a terminal)")
    n = command("nstar", "critical sample size N* reaching an accuracy threshold",
                "The smallest N whose mean test accuracy over seeds reaches --threshold: doubling from --n-min, "
                "then bisection to --resolution; every evaluated N is kept in --cache (a rerun computes only "
                "what is missing).",
                ["python -m lib nstar --V 128 --d 128 --L 16 --threshold 0.99 --seeds 3 --cache points.jsonl"])
    _add_problem_args(n)
    n.add_argument("--seeds", type=int, default=3, help="number of seeds (problems) to average over (default 3)")
    n.add_argument("--threshold", type=float, default=0.99, help="target test accuracy (default 0.99)")
    n.add_argument("--n-min", type=int, default=None, help="first N tried (default V)")
    n.add_argument("--n-max", type=int, default=2 ** 20, help="give up above this N (default 2^20)")
    _add_search_args(n)
    n.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="one stderr line per evaluated N, with the elapsed time and, once N* is bracketed, an ETA "
                        "(default: on when stderr is a terminal)")
    w = command("sweep", "N* for every point of a grid over V, d, L (and m): resumable, parallel",
                "N* for every point of the grid of --V, --d, --L (and --m) values. Each grid point's result is "
                "printed the moment it finishes (--json: JSON lines, one object per grid point, in the order they "
                "finish); every evaluated N is appended to --cache at once, so a rerun after a failure or Ctrl-C "
                "computes only what is missing. The grid's memory (its largest point searched up to --n-max) is "
                "checked before any work, and on a Dask cluster against each worker's memory_limit.",
                ["python -m lib sweep --V 64 128 --d 32 64 --L 8 32 --cache points.jsonl --jobs 2",
                 "python -m lib sweep --V 256 512 --d 64 128 --L 8 16 --cache /shared/points.jsonl \\\n"
                 "      --backend dask --scheduler tcp://10.0.0.1:8786 --json > nstar.jsonl"],
                "A sweep that fails (no Dask scheduler at --scheduler, a grid that cannot fit, a worker with other "
                "code, a lost cluster) exits with status 2 and one line; Ctrl-C exits with status 130 and one "
                "line, whatever the backend. Finished points stay in --cache.")
    _add_problem_args(w, multi=True)
    w.add_argument("--seeds", type=int, default=3, help="number of seeds (problems) to average over (default 3)")
    w.add_argument("--threshold", type=float, default=0.99, help="target test accuracy (default 0.99)")
    w.add_argument("--n-min", type=int, default=None, help="first N tried (default V)")
    w.add_argument("--n-max", type=int, default=2 ** 20, help="give up above this N (default 2^20)")
    _add_search_args(w)
    w.add_argument("--jobs", type=int, default=1,
                   help="worker processes (-1: all cores; default 1); with --backend dask: the local cluster's")
    w.add_argument("--backend", default=None,
                   help=f"where --jobs run: {', '.join(sweep_engine.BACKENDS)} (default loky: processes here; "
                        "dask: a Dask cluster, local or at --scheduler)")
    w.add_argument("--scheduler", default=None,
                   help="with --backend dask: the address of a running Dask scheduler (tcp://host:8786) to join "
                        "instead of starting a local cluster")
    w.add_argument("--worker-wait", type=float, default=None, metavar="SECONDS",
                   help="with --backend dask: how long the cluster may have no worker while grid points wait "
                        f"before the sweep fails (default {sweep_engine.NO_WORKER_SECONDS:g}; 0: however long, "
                        "for workers still queued on a batch system)")
    w.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar over grid points with an ETA on stderr (default: on when stderr is a terminal)")
    return parser


def _add_search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resolution", type=float, default=0.05,
                   help="bisect until the bracket is within this fraction of N* (default 0.05)")
    p.add_argument("--cache", default=None, help="JSON-lines store of evaluated points (crash-safe, resumable; "
                   "a relative path is made absolute here, so Dask workers write the same file)")


def _step_sizes(a) -> StepSizes:
    d = StepSizes()
    return StepSizes(eta=d.eta if a.eta is None else a.eta, gamma_W=a.gamma_w,
                     gamma_V=d.gamma_V if a.gamma_v is None else a.gamma_v,
                     attn_scale=d.attn_scale if a.attn_scale is None else a.attn_scale)


# flags that change nothing in some settings: given there, they would only rename the experiment
# (another cache key, the same numbers), so they are refused
MLP_ONLY = ("m", "activation", "mlp_input")
FINITE_ONLY = ("eta", "gamma_w", "gamma_v", "attn_scale")


def _inapplicable(a) -> str | None:
    """The first given flag that does not apply to this model / mode, as an error message (None: all apply)."""
    needs_m = a.model in featuremaps.REGISTRY and featuremaps.REGISTRY[a.model].needs_m
    for name in MLP_ONLY:
        if getattr(a, name) is not None and a.model in featuremaps.REGISTRY and not needs_m:
            what = "the MLP width" if name == "m" else "an MLP setting"
            return (f"--{name.replace('_', '-')} is {what}: it applies to --model mlp only, "
                    f"not --model {a.model}")
    for name in FINITE_ONLY:
        if getattr(a, name) is not None and a.mode == "limit":
            return (f"--{name.replace('_', '-')} is a finite-mode step size: the limit mode takes no step "
                    "sizes (use --mode finite)")
    return None


def _strict(point: dict, mode: str) -> dict:
    """A point for strict JSON: gamma_W is infinite in limit mode, printed as null (as `train` does)."""
    if mode == "limit":
        point["per_seed"] = {**point["per_seed"], "gamma_W": None}
    return point


def _progress_on(a) -> bool:
    """--progress / --no-progress, or by default whether stderr is a terminal (sweep, nstar and train)."""
    return sys.stderr.isatty() if a.progress is None else a.progress


class SearchProgress:
    """Progress of an N* search, one line per evaluated N on `out`: its accuracy, whether it reached the
    threshold, the elapsed time and an ETA. While the search doubles, the number of evaluations left is
    unknown (the line says so); once the threshold is bracketed, the bisection halves the bracket until it
    is within max(1, resolution x N*), so about log2(bracket / that width) evaluations are left, each
    taking the mean time per evaluation so far."""

    def __init__(self, threshold: float, resolution: float, metric: str = "acc", out=None):
        self.threshold, self.resolution, self.metric = threshold, resolution, metric
        self.out = sys.stderr if out is None else out
        self.low = self.high = None                  # largest N below, smallest N reaching the threshold
        self.count, self.t0 = 0, time.perf_counter()

    def left(self) -> int | None:
        """Evaluations left in the bisection (None while doubling)."""
        if self.high is None:
            return None
        gap, width = self.high - (self.low or 0), max(1.0, self.resolution * self.high)
        return max(0, math.ceil(math.log2(gap / width))) if gap > width else 0

    def __call__(self, N: int, point, reached: bool) -> None:
        self.count += 1
        if reached:
            self.high = N if self.high is None else min(self.high, N)
        else:
            self.low = N if self.low is None else max(self.low, N)
        elapsed = time.perf_counter() - self.t0
        left = self.left()
        eta = ("doubling: evaluations left unknown" if left is None else
               f"about {left} evaluation{'s' * (left != 1)} left, ETA {left * elapsed / self.count:.0f} s")
        print(f"  [{self.count}] N={N} {self.metric}={getattr(point, self.metric):.4f} "
              f"({'reached' if reached else 'below'} {self.threshold}); {elapsed:.0f} s; {eta}",
              file=self.out, flush=True)


class SeedProgress:
    """Progress of `train` over its seeds, one line per seed on `out`: its accuracy, the elapsed time and an
    ETA (the seeds left times the mean time per seed so far)."""

    def __init__(self, seeds: int, out=None):
        self.seeds, self.out, self.t0 = seeds, sys.stderr if out is None else out, time.perf_counter()

    def __call__(self, i: int, accs: dict) -> None:
        elapsed = time.perf_counter() - self.t0
        print(f"  seed {i}/{self.seeds}: acc={accs['acc']:.4f}; {elapsed:.0f} s; "
              f"ETA {(self.seeds - i) * elapsed / i:.0f} s", file=self.out, flush=True)


def _sweep(a) -> None:
    ms = a.m if a.m is not None else [None]
    configs = [_config(a, V, d, L, m) for V in a.V for d in a.d for L in a.L for m in ms]
    progress = _progress_on(a)

    def show(_, p):                            # each point the moment it finishes: kept if a later one fails
        if a.json:
            print(json.dumps(p.as_dict()), flush=True)
            return
        found = p.nstar if p.nstar is not None else f"not reached by --n-max {a.n_max}"
        interval = "" if p.nstar_q10 == p.nstar_q90 == p.nstar else \
            f"  [10-90 %: {p.nstar_q10 if p.nstar_q10 is not None else '-'}, " \
            f"{p.nstar_q90 if p.nstar_q90 is not None else 'not reached'}]"
        print(f"{p.model} V={p.V} d={p.d} L={p.L}" + (f" m={p.m}" if p.m is not None else "")
              + f"  N* = {found}{interval}  ({len(p.points)} points, {p.computed} computed, {p.seconds:.1f} s)",
              flush=True)
    try:
        sweep_engine.sweep(configs, threshold=a.threshold, seeds=a.seeds, seed=a.seed, mode=a.mode,
                           step_sizes=_step_sizes(a), n_min=a.n_min, n_max=a.n_max, resolution=a.resolution,
                           n_test=a.n_test, cache=a.cache, jobs=a.jobs, progress=progress, backend=a.backend,
                           scheduler=a.scheduler, on_point=show, **_worker_wait(a))
    except (ValueError, sweep_engine.ClusterError) as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        for flag in ("scheduler",):                               # the flag, as the user typed it
            if msg.startswith(f"{flag} "):
                msg = f"--{flag.replace('_', '-')}{msg[len(flag):]}"
        if isinstance(err, sweep_engine.ClusterError):
            msg += _kept(a)
        raise ValueError(msg) from None


def _worker_wait(a) -> dict:
    """--worker-wait as sweep's worker_wait (0: None, however long); refused without --backend dask."""
    if a.worker_wait is None:
        return {}
    if a.backend != "dask":
        raise ValueError(f"--worker-wait is how long a Dask cluster may have no worker: it needs --backend dask, "
                         f"got {'--backend ' + a.backend if a.backend else 'no --backend'}")
    if not a.worker_wait >= 0 or a.worker_wait == float("inf"):
        raise ValueError(f"--worker-wait must be a number of seconds >= 0 (0: however long), got {a.worker_wait}")
    return {"worker_wait": a.worker_wait or None}


def _kept(a) -> str:
    """Where the finished points are, when some are: the cache file, if it exists and holds a line."""
    cache = getattr(a, "cache", None)
    try:
        return f" (finished points are kept in {cache})" if cache and os.path.getsize(cache) > 0 else ""
    except OSError:
        return ""


def main(argv=None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    prog = f"python -m lib {a.command}"
    refused = _inapplicable(a)
    if refused is not None:
        parser.exit(2, f"{prog}: error: {refused}\n")
    t0 = time.perf_counter()
    try:
        if a.command == "train":
            progress = _progress_on(a)
            res = run(_config(a), a.N, mode=a.mode, seeds=a.seeds, seed=a.seed, n_test=a.n_test,
                      step_sizes=_step_sizes(a), on_seed=SeedProgress(a.seeds) if progress else None)
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
        elif a.command == "sweep":
            _sweep(a)
        else:
            progress = _progress_on(a)
            res = nstar(_config(a), a.threshold, seeds=a.seeds, seed=a.seed, n_min=a.n_min, n_max=a.n_max,
                        mode=a.mode, n_test=a.n_test, resolution=a.resolution, step_sizes=_step_sizes(a),
                        cache=a.cache, on_point=SearchProgress(a.threshold, a.resolution) if progress else None)
            elapsed = time.perf_counter() - t0
            if a.json:
                print(json.dumps({"nstar": res.nstar, "last_false": res.last_false, "threshold": res.threshold,
                                  "seconds": elapsed, "runs": res.runs,
                                  "points": [_strict(p.as_dict(), a.mode) for p in res.points]}))
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
    except KeyboardInterrupt:                  # Ctrl-C: one line, the shell's status for SIGINT
        print(f"{prog}: interrupted{_kept(a)}", file=sys.stderr)
        return 130
    return 0
