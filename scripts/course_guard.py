"""Checks a student cell cannot defeat: nbgrader's Execute, with every check cell run in a clean process.

nbgrader runs the hidden tests in the student's own kernel, after the student's cells: a student cell
can strip every assert (an IPython input or AST transformer), replace a function of lib/ or a builtin,
answer with a float whose comparisons always hold, or take over the kernel. `GuardedExecute` runs the
student's cells in the student's kernel as nbgrader does, but a check cell (an autograded grade cell)
never runs there. At its place in the notebook:

  1. the names the check reads that the instructor's notebook binds outside the solutions by an
     import or a `def` (lib, np, math, hand_built, a chapter's helper function) are taken from the
     instructor's own statements, never from the kernel;
  2. every other name it reads (the student's answers, and values the chapter computed) is asked of
     the student's kernel: data is saved with torch.save, a function is marked as one;
  3. scripts/course_check_runner.py runs the check in a fresh interpreter (`python -I`, an empty
     working directory): the statements of 1, the data of 2 loaded with torch's restricted unpickler
     (plain types only: no subclass of float or Tensor survives), each student function a stub that
     has the kernel call it on arguments sent as data and returns its result as data;
  4. the check cell's outputs are the clean run's, and nbgrader scores them as usual.

Whatever the kernel was made to do, it can only hand over values: a plain value that passes the hidden
tests is a correct answer. `grade` (scripts/grade.sh) uses the same preprocessor; `course.sh init`
configures nbgrader's autograde with it (GuardedExecute.source_dir: the course's source/ folder).
"""

from __future__ import annotations

import ast
import base64
import builtins
import copy
import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import symtable
import tempfile
import time

import nbformat
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Unicode

from course import is_check

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNNER = pathlib.Path(__file__).resolve().with_name("course_check_runner.py")
BUILTIN_NAMES = set(dir(builtins))

# run in the student's kernel, in a namespace of its own: the values of the names a check reads
EXPORT = r'''
def _grader_export_(ns, names, path):
    import base64, io, json, types, torch
    out = {}
    for n in names:
        if n not in ns:
            continue
        v = ns[n]
        if isinstance(v, types.ModuleType):
            out[n] = {"kind": "module", "module": v.__name__}
        elif callable(v) and not isinstance(v, type):
            out[n] = {"kind": "function"}
        else:
            try:
                b = io.BytesIO()
                torch.save(v, b)
                out[n] = {"kind": "data", "b64": base64.b64encode(b.getvalue()).decode()}
            except Exception as e:
                out[n] = {"kind": "unsupported", "why": f"{type(v).__name__} cannot be saved ({type(e).__name__})"}
    with open(path, "w") as f:
        json.dump(out, f)
'''
CALL = r'''
def _grader_call_(ns, name, request, result):
    import sys, torch
    args, kwargs = torch.load(request, weights_only=False)
    out = ns[name](*args, **kwargs)
    sympy = sys.modules.get("sympy")
    if sympy is not None and isinstance(out, sympy.Basic):     # an expression travels as a tree of plain data

        def enc(e):
            if e.is_Symbol:
                return ("Symbol", e.name, tuple(sorted(e.assumptions0.items())))
            if e.is_Integer:
                return ("Integer", int(e))
            if e.is_Rational:
                return ("Rational", int(e.p), int(e.q))
            if e.is_Float:
                return ("Float", float(e))
            if e.is_NumberSymbol:
                return ("NumberSymbol", type(e).__name__)
            return (type(e).__name__, tuple(enc(a) for a in e.args))
        out = ("__sympy__", enc(out))
    torch.save(out, result)
'''


def free_names(source: str) -> set[str]:
    """Global names the code reads and does not itself bind (at module level), builtins excluded."""
    try:
        top = symtable.symtable(source, "<check>", "exec")
    except SyntaxError:
        return set()
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    found = set()

    def walk(t, module):
        for s in t.get_symbols():
            if s.is_referenced() and (module or s.is_global()):
                found.add(s.get_name())
        for child in t.get_children():
            walk(child, False)

    walk(top, True)
    return found - bound - BUILTIN_NAMES


def instructor_context(instructor) -> dict:
    """name -> ("import" | "def", statement source) for the last top-level binding of each name in the
    instructor notebook's code cells that are no nbgrader cell (not solutions, not checks); a name whose
    last binding is anything else (an assignment, a loop) maps to None: its value is the kernel's."""
    ctx = {}
    for c in instructor.cells:
        if c.cell_type != "code" or "nbgrader" in c.metadata:
            continue
        try:
            tree = ast.parse(c.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    one = copy.copy(node)
                    one.names = [a]
                    ctx[(a.asname or a.name).split(".")[0]] = ("import", ast.unparse(one))
            elif isinstance(node, ast.FunctionDef):
                ctx[node.name] = ("def", ast.get_source_segment(c.source, node) or ast.unparse(node))
            else:
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                        ctx[sub.id] = None
                    elif isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                        ctx[sub.name] = None
    return ctx


def plan(source: str, ctx: dict) -> tuple[list[str], list[str], list[str]]:
    """(import statements, function definitions, names asked of the kernel) for one check: the
    instructor's definitions pull in the names they read, in turn."""
    imports, defs, asked, seen = [], [], [], set()
    todo = sorted(free_names(source))
    while todo:
        n = todo.pop(0)
        if n in seen:
            continue
        seen.add(n)
        kind = ctx.get(n)
        if kind is None:
            asked.append(n)
        elif kind[0] == "import":
            imports.append(kind[1])
        else:
            defs.append(kind[1])
            todo += sorted(free_names(kind[1]))
    return imports, defs, asked


def grader_error(text: str) -> NotebookNode:
    return nbformat.from_dict({"output_type": "error", "ename": "GraderError", "evalue": text,
                               "traceback": [f"GraderError: {text}"]})


class GuardedExecute(Execute):
    """nbgrader's Execute, with each check cell run in a clean process (see the module's docstring).
    The instructor notebook is `instructor` (set by course.grade) or, under nbgrader's autograde,
    source_dir/<assignment>/<notebook>.ipynb."""

    source_dir = Unicode("", help="the course's source/ folder (autograde)").tag(config=True)

    def __init__(self, *args, instructor=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.instructor = instructor

    def preprocess(self, nb, resources=None, km=None):
        instructor = self.instructor
        info = (resources or {}).get("nbgrader", {})
        if instructor is None and self.source_dir and info.get("assignment"):
            path = pathlib.Path(self.source_dir) / info["assignment"] / f"{info['notebook']}.ipynb"
            instructor = nbformat.read(path, as_version=4)
        if instructor is None:
            raise ValueError("GuardedExecute needs the instructor notebook (instructor= or source_dir)")
        self._ctx = instructor_context(instructor)
        with tempfile.TemporaryDirectory(prefix="checks-") as work:
            self._work, self._n, self._proc = pathlib.Path(work), 0, None
            self._server()
            try:
                return super().preprocess(nb, resources, km)
            finally:
                self._stop_server()

    def preprocess_cell(self, cell, resources, index):
        if not is_check(cell):
            return super().preprocess_cell(cell, resources, index)
        self._n += 1
        job = self._work / f"check{self._n}"
        job.mkdir()
        imports, defs, asked = plan(cell.source, self._ctx)
        values = self._export(asked, job, index) if asked else {}
        (job / "job.json").write_text(json.dumps({"root": str(ROOT), "source": cell.source, "imports": imports,
                                                  "defs": defs, "values": values}))
        outputs = self._run_clean(job, index)
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        cell.execution_count = None
        self.nb.cells[index] = cell
        return cell, self.resources

    def _in_kernel(self, code: str, index: int) -> bool:
        """Run code in the student's kernel (outputs discarded); whether it ran without an error."""
        scratch = nbformat.v4.new_code_cell(code)
        try:
            done = self.execute_cell(scratch, index, store_history=False)
        except Exception as e:  # noqa: BLE001 - a dead or hung kernel: the check gets no values
            self.log.warning("grader code failed in the kernel: %s", e)
            return False
        return not any(o.get("output_type") == "error" for o in done.outputs)

    def _export(self, names, job, index) -> dict:
        path = job / "values.json"
        code = (EXPORT + f"_grader_export_(globals(), {names!r}, {str(path)!r})\n"
                "del _grader_export_\n")
        self._in_kernel(code, index)
        try:
            values = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return values if isinstance(values, dict) else {}

    def _server(self):
        """The clean process (scripts/course_check_runner.py), started before the first cell runs and
        again after a check that had to be stopped."""
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen([sys.executable, "-I", str(RUNNER), str(ROOT)], cwd=self._work,
                                          text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, start_new_session=True)
        return self._proc

    def _stop_server(self):
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._proc = None

    def _run_clean(self, job, index) -> list:
        proc = self._server()
        deadline = None if self.timeout is None else time.monotonic() + self.timeout + 120
        try:
            proc.stdin.write(f"{job}\n")
            proc.stdin.flush()
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not select.select([proc.stdout], [], [], left)[0]:
                    self._stop_server()
                    return [grader_error("the check ran past the time limit")]
                msg = json.loads(proc.stdout.readline() or '{"exited": -1}')
                if msg.get("ready"):
                    continue
                if "exited" in msg:
                    break
                ok = msg.get("call") is not None and self._call(msg, index)
                proc.stdin.write(json.dumps({"ok": ok, "error": "" if ok else "it raised or returned nothing"}) + "\n")
                proc.stdin.flush()
            return json.loads((job / "result.json").read_text())
        except (OSError, ValueError) as e:
            self._stop_server()
            return [grader_error(f"the clean run of the check failed: {type(e).__name__}")]

    def _call(self, msg, index) -> bool:
        """A student function, called in the student's kernel on the clean run's arguments."""
        result = pathlib.Path(msg["result"])
        if not str(result).startswith(str(self._work)) or not str(msg["call"]).isidentifier():
            return False
        code = (CALL + f"_grader_call_(globals(), {msg['call']!r}, {msg['request']!r}, {str(result)!r})\n"
                "del _grader_call_\n")
        return self._in_kernel(code, index) and result.exists()
