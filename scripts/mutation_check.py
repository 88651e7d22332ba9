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

Not part of the test command (it reruns the suite once per mutant); run it when the core changes.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ["lib/core/embeddings.py", "lib/core/task.py", "lib/core/models.py", "lib/fast/tokens.py", "lib/core/gradients.py",
        "lib/fast/counts.py", "lib/fast/limit.py", "lib/learning/schedule.py", "lib/core/steps.py", "lib/learning/evaluate.py", "lib/core/search.py",
        "lib/experiments/experiment.py", "lib/experiments/capacity.py", "lib/experiments/store.py", "lib/experiments/sweep.py", "lib/core/memory.py",
        "lib/core/featuremaps.py", "lib/learning/trainer.py", "lib/core/optim.py"]
SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
        ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
TESTS = ["tests", "--ignore=tests/book", "--ignore=tests/test_course.py", "--ignore=tests/test_notebooks.py"]


def _in_docstring_or_annotation(node, parents) -> bool:
    p = parents.get(node)
    while p is not None:
        if isinstance(p, (ast.arg, ast.AnnAssign)) and getattr(p, "annotation", None) is not None:
            return True
        p = parents.get(p)
    return False


def sites(path: Path) -> list[tuple[str, int, int, str]]:
    """Every mutation site of a file as (file, line, col, kind)."""
    tree = ast.parse(path.read_text())
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    rel = str(path.relative_to(ROOT))
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
    ap.add_argument("--files", nargs="+", default=CORE, help="modules to mutate (default: the core)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per test run (default 600)")
    a = ap.parse_args()
    if a.n < 1:
        sys.exit("error: --n must be >= 1")
    if a.timeout < 1:
        sys.exit("error: --timeout must be >= 1")
    for f in a.files:
        if not (ROOT / f).is_file():
            sys.exit(f"error: --files: no such file {f}")
    all_sites = [s for f in a.files for s in sites(ROOT / f)]
    chosen = random.Random(a.seed).sample(all_sites, min(a.n, len(all_sites)))
    print(f"{len(all_sites)} sites in {len(a.files)} files; {len(chosen)} mutants (seed {a.seed})", flush=True)
    survivors = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(ROOT, work, ignore=shutil.ignore_patterns(".venv", "_build", ".git", "__pycache__", "*.ipynb"))
        env = dict(os.environ, PYTHONPATH=str(work), MPLBACKEND="Agg", OMP_NUM_THREADS="1",
                   PYTHONDONTWRITEBYTECODE="1")
        for i, (f, line, col, kind) in enumerate(chosen, 1):
            src = (ROOT / f).read_text()
            (work / f).write_text(mutant_source(ROOT / f, line, col, kind))
            t = time.time()
            try:
                r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS],
                                   cwd=work, env=env, capture_output=True, text=True, timeout=a.timeout)
                verdict = "killed" if r.returncode != 0 else "SURVIVED"
            except subprocess.TimeoutExpired:
                verdict = "killed (timeout)"
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
