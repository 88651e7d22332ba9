"""Run one check cell in a fresh interpreter (started by scripts/course_guard.py; not for direct use).

    python -I scripts/course_check_runner.py ROOT     (then one JOBDIR per line on stdin)

A server: it imports torch, numpy and the book's library from ROOT once, and forks a fresh child for
each check, so every check starts from the same state, which no student value ever entered.
JOBDIR/job.json holds the check's source, the instructor's import statements and function definitions
it needs, and the student's values: each one plain data (torch.save bytes, loaded back with torch's
restricted unpickler: numbers, booleans, strings, containers, numpy arrays, tensors and the book
library's own classes; no other class, so no float or tensor subclass) or a function, called back in
the student's kernel through the grader (its arguments and result travel as the same plain data; a
sympy expression it returns, for the checks that test an answer's form on symbols, as a tree of plain
data rebuilt by `decode_sympy` from a whitelist of heads).
The check runs in a namespace built only from these; the grader reads JOBDIR/result.json: the cell's
outputs as a Jupyter kernel would give them (stdout, stderr, the last expression's value, an error).
The protocol with the grader uses stdin and a copy of stdout; the check's own prints are captured,
and file descriptors 1 and 2 go to JOBDIR/runner.log, so nothing the check writes reaches the grader.
"""

import ast
import base64
import builtins
import contextlib
import importlib
import io
import json
import os
import sys
import traceback

CHECK = "<check>"
NUMPY_OK = {"numpy.ndarray", "numpy.dtype", "numpy._core.multiarray._reconstruct",
            "numpy.core.multiarray._reconstruct", "numpy._core.multiarray.scalar",
            "numpy.core.multiarray.scalar"}
ALLOWED_MODULE_ROOTS = {"lib", "numpy", "torch", "scipy"} | set(sys.stdlib_module_names)


def resolve(dotted: str):
    """The object a pickle global names ("pkg.mod.Qual.Name"), importing the longest module prefix."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(dotted)


def allowed_global(name: str):
    """The object for a global a student's value may name: numpy's array and scalar rebuilders and
    dtypes, or a class of the book's library (lib.*) defined there; None for anything else."""
    if name in NUMPY_OK or name.startswith("numpy.dtypes."):
        return resolve(name)
    if name.startswith("lib."):
        obj = resolve(name)
        if isinstance(obj, type) and obj.__module__.startswith("lib.") and obj.__name__ == name.rsplit(".", 1)[1]:
            return obj
    return None


def load_data(blob: bytes):
    """A value saved by torch.save, loaded with torch's weights-only unpickler and only the globals
    of allowed_global: a student-defined class (a float or tensor subclass) is refused."""
    import torch
    names = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(blob))
    allowed = []
    if any(n.startswith("numpy.") for n in names):      # a dtype is rebuilt from its class, named nowhere
        import numpy
        allowed += [getattr(numpy.dtypes, d) for d in dir(numpy.dtypes) if d.endswith("DType")]
    for n in names:
        obj = allowed_global(n)
        if obj is None:
            raise TypeError(f"not plain data: holds {n}")
        allowed.append(obj)
    with torch.serialization.safe_globals(allowed):
        return torch.load(io.BytesIO(blob), weights_only=True)


SYMPY_HEADS = {"Add", "Mul", "Pow", "exp", "log", "Abs", "sign", "Min", "Max", "sin", "cos", "tan", "atan"}
SYMPY_CONSTANTS = {"Pi": "pi", "Exp1": "E"}


def decode_sympy(tree):
    """A sympy expression rebuilt from the tree of plain data a student function's result was sent as
    (course_guard's `_grader_call_`): symbols with their assumptions, integers, rationals, floats, pi,
    e, and the heads of SYMPY_HEADS only; anything else raises. Nothing of it is evaluated as code, so a
    crafted tree can give a wrong expression (a wrong answer), never run anything."""
    import sympy
    head = tree[0]
    if head == "Symbol":
        return sympy.Symbol(str(tree[1]), **{str(k): bool(v) for k, v in tree[2]})
    if head == "Integer":
        return sympy.Integer(int(tree[1]))
    if head == "Rational":
        return sympy.Rational(int(tree[1]), int(tree[2]))
    if head == "Float":
        return sympy.Float(float(tree[1]))
    if head == "NumberSymbol" and tree[1] in SYMPY_CONSTANTS:
        return getattr(sympy, SYMPY_CONSTANTS[tree[1]])
    if head in SYMPY_HEADS:
        return getattr(sympy, head)(*[decode_sympy(a) for a in tree[1]])
    raise TypeError(f"not an expression the grader rebuilds: {str(head)[:40]}")


class Channel:
    """Calls back to the grader: a student function runs in the student's kernel."""

    def __init__(self, jobdir, proto_in, proto_out):
        self.jobdir, self.inp, self.out, self.n = jobdir, proto_in, proto_out, 0

    def call(self, name, args, kwargs):
        import torch
        self.n += 1
        req = os.path.join(self.jobdir, f"call{self.n}.pt")
        res = os.path.join(self.jobdir, f"result{self.n}.pt")
        torch.save((args, kwargs), req)
        self.out.write(json.dumps({"call": name, "request": req, "result": res}) + "\n")
        self.out.flush()
        reply = json.loads(self.inp.readline() or "{}")
        if not reply.get("ok"):
            raise RuntimeError(f"{name}(...) failed in the notebook's kernel: {reply.get('error', 'no reply')}")
        with open(res, "rb") as f:
            value = load_data(f.read())
        if isinstance(value, tuple) and len(value) == 2 and value[0] == "__sympy__":
            return decode_sympy(value[1])
        return value

    def proxy(self, name):
        def student_function(*args, **kwargs):
            return self.call(name, args, kwargs)
        student_function.__name__ = student_function.__qualname__ = name
        return student_function


def bind(ns, values, channel, refused):
    for name, spec in values.items():
        kind = spec.get("kind")
        try:
            if kind == "data":
                ns[name] = load_data(base64.b64decode(spec["b64"]))
            elif kind == "function":
                ns[name] = channel.proxy(name)
            elif kind == "module" and spec["module"].split(".")[0] in ALLOWED_MODULE_ROOTS:
                ns[name] = importlib.import_module(spec["module"])
            else:
                refused[name] = spec.get("why", f"a {kind}")
        except Exception as e:        # noqa: BLE001 - any failure: the name stays unbound
            refused[name] = f"{type(e).__name__}: {e}"


def run_check(source, ns):
    """Execute like an IPython cell: the last expression's value (not None) becomes an execute_result."""
    tree = ast.parse(source, CHECK)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, CHECK, "exec"), ns)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), CHECK, "eval"), ns)
        if value is not None:
            return {"output_type": "execute_result", "execution_count": None, "metadata": {},
                    "data": {"text/plain": repr(value)}}
    return None


def error_output(e, refused):
    tb = traceback.TracebackException.from_exception(e)
    tb.stack = traceback.StackSummary.from_list([f for f in tb.stack if f.filename == CHECK])
    evalue = str(e)
    name = getattr(e, "name", None)
    if isinstance(e, NameError) and name in refused:
        evalue += (f" (not graded: {refused[name]}; an answer must be a number, boolean, string, list,"
                   " tuple or dict of those, numpy array, tensor, or a function)")
    lines = list(tb.format())
    lines[-1] = f"{type(e).__name__}: {evalue}\n"
    return {"output_type": "error", "ename": type(e).__name__, "evalue": evalue,
            "traceback": [line.rstrip("\n") for line in lines]}


def run_job(jobdir):
    """One check, in a child of the server: outputs to JOBDIR/result.json."""
    proto_out = os.fdopen(os.dup(1), "w")
    log = os.open(os.path.join(jobdir, "runner.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    with open(os.path.join(jobdir, "job.json")) as f:
        job = json.load(f)
    channel = Channel(jobdir, sys.stdin, proto_out)
    ns = {"__name__": "__main__", "__builtins__": builtins}
    out, err, outputs, refused = io.StringIO(), io.StringIO(), [], {}
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            for stmt in job["imports"]:
                exec(compile(stmt, "<instructor import>", "exec"), ns)
            bind(ns, job["values"], channel, refused)
            for src in job["defs"]:
                exec(compile(src, "<instructor definition>", "exec"), ns)
            result = run_check(job["source"], ns)
            if result is not None:
                outputs.append(result)
        except BaseException as e:    # noqa: BLE001 - the check failed, as a cell's error would show
            outputs.append(error_output(e, refused))
    streams = [{"output_type": "stream", "name": n, "text": s.getvalue()}
               for n, s in (("stdout", out), ("stderr", err)) if s.getvalue()]
    with open(os.path.join(jobdir, "result.json"), "w") as f:
        json.dump(streams + outputs, f)


def preload(root):
    """Import torch, numpy and every module of lib/ (as they are on disk now, before any student cell
    runs): each check's process is a fork of this one, which never holds a student's value."""
    import pkgutil
    sys.path.insert(0, root)
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import lib
    for m in pkgutil.walk_packages(lib.__path__, "lib."):
        if m.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            importlib.import_module(m.name)
        except (Exception, SystemExit):   # noqa: BLE001 - one that cannot load here is loaded (or not) by the check
            pass


def serve(root):
    """Read JOBDIR lines; fork a child per job (run_job, which talks to the grader over these same
    pipes while it runs), then report {"exited": status}."""
    preload(root)
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                run_job(line.strip())
            except BaseException:     # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(json.dumps({"exited": status}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve(sys.argv[1])
