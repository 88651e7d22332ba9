"""Mutation check: does the library's test suite notice when the core code is wrong?

Draws operator mutants at random (seeded) from the core modules: `+` <-> `-`, `*` <-> `/`,
`<` <-> `<=`, `>` <-> `>=`, `==` <-> `!=`, a dropped unary minus, an integer constant k -> k + 1.
Each mutant is one change to one line of a copy of the repository; the library's tests (not the
notebooks, which nbval runs) run on it with -x, and a mutant is *killed* when they fail, *survives*
when they pass. A survivor is either an equivalent mutant (the change cannot alter any result: read
it) or a gap in the tests (add one). Mutants whose line is never executed by the suite survive too;
the report shows each survivor's line so it can be judged.

    python scripts/mutation_check.py                  # 20 mutants, seed 0, about 1 min each on 2 cores
    python scripts/mutation_check.py --n 40 --seed 3 --files lib/fast/counts.py lib/core/search.py
    python scripts/mutation_check.py --group theory --n 60 --tests auto   # lib/theory and lib/analysis

`--group` picks the modules: `core` (the default list below) or `theory` (every module of lib/theory
and lib/analysis: the formulas the chapters compare with measurements). `--tests auto` runs, for each
mutant, only the test files that name a function or class the mutated module defines (or the module
itself): seconds per mutant instead of a minute. That is a subset of the suite, so a mutant it kills
the whole suite kills too, and its score is a lower bound on the whole suite's.

Not part of the test command (it reruns the suite once per mutant); run it when the core changes.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ["lib/core/embeddings.py", "lib/core/task.py", "lib/core/models.py", "lib/fast/tokens.py", "lib/core/gradients.py",
        "lib/fast/counts.py", "lib/fast/limit.py", "lib/learning/schedule.py", "lib/core/steps.py", "lib/learning/evaluate.py", "lib/core/search.py",
        "lib/experiments/experiment.py", "lib/experiments/capacity.py", "lib/experiments/store.py", "lib/experiments/sweep.py", "lib/core/memory.py", "lib/experiments/memory_capacity.py", "lib/experiments/records.py",
        "lib/core/featuremaps.py", "lib/learning/trainer.py", "lib/core/optim.py"]
SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
        ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
THEORY = sorted(str(p.relative_to(ROOT)) for d in ("lib/theory", "lib/analysis") for p in (ROOT / d).glob("*.py")
                if p.name != "__init__.py")
TESTS = ["tests", "--ignore=tests/book", "--ignore=tests/test_course.py", "--ignore=tests/test_notebooks.py"]
SKIP_AUTO = {"test_course.py", "test_notebooks.py", "test_course_pipeline.py"}


def tests_for(path: Path, root: Path = ROOT) -> list[str]:
    """The test files that name something the module defines at top level (a function, a class or a
    module-level name of 4+ characters, not private) or the module itself."""
    tree = ast.parse(path.read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name) and len(t.id) >= 4 and not t.id.startswith("_")}
    names.add(path.stem)
    out = []
    for t in sorted((root / "tests").glob("test_*.py")):
        if t.name in SKIP_AUTO:
            continue
        text = t.read_text()
        if any(re.search(rf"\b{re.escape(n)}\b", text) for n in names):
            out.append(str(t.relative_to(root)))
    return out


def _in_docstring_or_annotation(node, parents) -> bool:
    p = parents.get(node)
    while p is not None:
        if isinstance(p, (ast.arg, ast.AnnAssign)) and getattr(p, "annotation", None) is not None:
            return True
        p = parents.get(p)
    return False


def sites(path: Path, root: Path = ROOT) -> list[tuple[str, int, int, str]]:
    """Every mutation site of a file (under `root`) as (file relative to root, line, col, kind)."""
    tree = ast.parse(path.read_text())
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    rel = str(path.relative_to(root))
    out = []
    for node in ast.walk(tree):
        if _in_docstring_or_annotation(node, parents):
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in SWAP:
            out.append((rel, node.lineno, node.col_offset, type(node.op).__name__))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAP:
            out.append((rel, node.lineno, node.col_offset, type(node.ops[0]).__name__))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            out.append((rel, node.lineno, node.col_offset, "USub"))
        elif (isinstance(node, ast.Constant) and type(node.value) is int and not isinstance(parents.get(node), ast.Subscript)
              and not isinstance(parents.get(node), ast.keyword)):
            out.append((rel, node.lineno, node.col_offset, "Int"))
    return out


class _Mutate(ast.NodeTransformer):
    def __init__(self, line, col, kind):
        self.key, self.kind, self.done = (line, col), kind, False

    def _hit(self, node):
        return not self.done and (node.lineno, node.col_offset) == self.key

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if self._hit(node) and type(node.op).__name__ == self.kind:
            node.op, self.done = SWAP[type(node.op)](), True
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        if self._hit(node) and type(node.ops[0]).__name__ == self.kind:
            node.ops, self.done = [SWAP[type(node.ops[0])]()], True
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if self._hit(node) and self.kind == "USub" and isinstance(node.op, ast.USub):
            self.done = True
            return node.operand
        return node

    def visit_Constant(self, node):
        if self._hit(node) and self.kind == "Int" and type(node.value) is int:
            self.done = True
            return ast.copy_location(ast.Constant(node.value + 1), node)
        return node


def mutant_source(path: Path, line: int, col: int, kind: str) -> str:
    tree = ast.parse(path.read_text())
    m = _Mutate(line, col, kind)
    tree = ast.fix_missing_locations(m.visit(tree))
    if not m.done:
        raise RuntimeError(f"site {path}:{line}:{col} {kind} not found")
    return ast.unparse(tree)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="number of mutants (default 20)")
    ap.add_argument("--seed", type=int, default=0, help="which mutants are drawn (default 0)")
    ap.add_argument("--files", nargs="+", default=None, help="modules to mutate (default: the group's)")
    ap.add_argument("--group", choices=("core", "theory"), default="core",
                    help="core: the model, gradients, steps, searches and sweeps; theory: lib/theory and lib/analysis")
    ap.add_argument("--tests", choices=("all", "auto"), default="all",
                    help="all: the library's tests (-x); auto: only the test files naming the mutated module's names")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per test run (default 600)")
    a = ap.parse_args()
    if a.n < 1:
        sys.exit("error: --n must be >= 1")
    if a.timeout < 1:
        sys.exit("error: --timeout must be >= 1")
    if a.files is None:
        a.files = CORE if a.group == "core" else THEORY
    for f in a.files:
        if not (ROOT / f).is_file():
            sys.exit(f"error: --files: no such file {f}")
    survivors = []
    with tempfile.TemporaryDirectory() as tmp:
        # everything below reads the snapshot, so editing the tree during a run changes nothing
        work = Path(tmp) / "repo"
        shutil.copytree(ROOT, work, ignore=shutil.ignore_patterns(".venv", "_build", ".git", "__pycache__", "*.ipynb"))
        all_sites = [s for f in a.files for s in sites(work / f, work)]
        chosen = random.Random(a.seed).sample(all_sites, min(a.n, len(all_sites)))
        print(f"{len(all_sites)} sites in {len(a.files)} files; {len(chosen)} mutants (seed {a.seed})", flush=True)
        env = dict(os.environ, PYTHONPATH=str(work), MPLBACKEND="Agg", OMP_NUM_THREADS="1",
                   PYTHONDONTWRITEBYTECODE="1")
        for i, (f, line, col, kind) in enumerate(chosen, 1):
            src = (work / f).read_text()
            (work / f).write_text(mutant_source(work / f, line, col, kind))
            t = time.time()
            tests = TESTS if a.tests == "all" else tests_for(work / f, work)
            try:
                if not tests:
                    raise FileNotFoundError(f"no test names anything {f} defines")
                r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                                   cwd=work, env=env, capture_output=True, text=True, timeout=a.timeout)
                verdict = "killed" if r.returncode != 0 else "SURVIVED"
            except subprocess.TimeoutExpired:
                verdict = "killed (timeout)"
            except FileNotFoundError:
                verdict = "SURVIVED"
            (work / f).write_text(src)
            code = src.splitlines()[line - 1].strip()
            print(f"[{i:2d}] {verdict:16s} {f}:{line} {kind:5s} {time.time() - t:5.0f} s | {code[:90]}", flush=True)
            if verdict == "SURVIVED":
                survivors.append((f, line, kind, code))
    print(f"killed {len(chosen) - len(survivors)} of {len(chosen)}")
    for f, line, kind, code in survivors:
        print(f"  survivor {f}:{line} ({kind}): {code}")


if __name__ == "__main__":
    main()
