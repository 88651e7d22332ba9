"""The asserted claims of the book's chapters: find them, and instrument a notebook to record them.

A chapter's claims are its `assert` statements (hidden check cells and exercise checks alike). Each is
named by its chapter, the text of its test (whitespace collapsed) and, when one chapter asserts the
same text more than once, its occurrence number; the cell index is only for display. That name is
what `scripts/replicate.py` reports and what the robustness page and its test match on.

`instrument(nb)` rewrites every assert of a notebook so that a failing one is *recorded* and the
cell goes on (an assert that itself raises counts as failed), and appends a cell that writes the
records as JSON to the path in the environment variable REPLICATE_RECORDS. A claim that is never
reached (its cell stopped at an error first) counts as failed too. Each record also carries a
fingerprint of the values the assert read: equal fingerprints on every draw mean a redraw cannot move
the claim (it reads shipped data, or it is an exact identity), and the table says so.
"""

from __future__ import annotations

import ast
import json
import re

RECORDER = """\
import json as _claims_json, os as _claims_os, hashlib as _claims_hashlib
_CLAIMS = {}
def _claims_bytes(v, depth=0):
    import numpy as _np
    if depth > 4:
        return b"..."
    if hasattr(v, "detach") and hasattr(v, "cpu"):
        v = v.detach().cpu().numpy()
    if isinstance(v, _np.ndarray) and v.dtype != object:
        return str(v.shape).encode() + _np.ascontiguousarray(v).tobytes()
    if isinstance(v, (bool, int, float, complex, str, bytes, type(None), _np.generic)):
        return repr(v).encode()
    if isinstance(v, dict):
        items = sorted(v.items(), key=lambda kv: repr(kv[0]))
        return b"{" + b",".join(_claims_bytes(k, depth + 1) + b":" + _claims_bytes(x, depth + 1)
                               for k, x in items) + b"}"
    if isinstance(v, (list, tuple, set, frozenset, _np.ndarray)):
        seq = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
        return b"[" + b",".join(_claims_bytes(x, depth + 1) for x in seq) + b"]"
    text = repr(v)
    return type(v).__name__.encode() if " at 0x" in text else text.encode()
_CLAIM_BUF = []
def __claim_cap__(v):
    try:
        _CLAIM_BUF.append(_claims_bytes(v))
    except Exception:
        _CLAIM_BUF.append(type(v).__name__.encode())
    return v
def __claim_fp__():
    fp = _claims_hashlib.sha256(b"|".join(_CLAIM_BUF)).hexdigest()[:16]
    _CLAIM_BUF.clear()
    return fp
def __claim__(key, ok, err=None, fp=""):
    prev = _CLAIMS.get(key)
    fp = fp if prev is None else _claims_hashlib.sha256((prev[2] + fp).encode()).hexdigest()[:16]
    if prev is None or (prev[0] and not ok):
        _CLAIMS[key] = (bool(ok), err, fp)
    else:
        _CLAIMS[key] = (prev[0], prev[1], fp)
"""

DUMP = """\
with open(_claims_os.environ["REPLICATE_RECORDS"], "w") as _f:
    _claims_json.dump({k: list(v) for k, v in _CLAIMS.items()}, _f)
"""


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def code_cells(nb: dict):
    """(cell index, source) of every code cell."""
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            yield i, src


def claims(nb: dict, chapter: str) -> list[dict]:
    """Every assert of the notebook, in order: chapter, cell, text, occurrence, key."""
    out, seen = [], {}
    for i, src in code_cells(nb):
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        asserts = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Assert)),
                         key=lambda n: (n.lineno, n.col_offset))
        for node in asserts:
            text = _norm(ast.get_source_segment(src, node.test) or ast.unparse(node.test))
            k = seen.get(text, 0)
            seen[text] = k + 1
            out.append({"chapter": chapter, "cell": i, "line": node.lineno, "text": text,
                        "occurrence": k, "key": f"{chapter}|{text}|{k}"})
    return out


class _Capture(ast.NodeTransformer):
    """Wrap every value an assert's test reads (names, attributes, subscripts, calls) in
    `__claim_cap__`, which records the value and returns it unchanged."""

    def _wrap(self, node):
        return ast.Call(ast.Name("__claim_cap__", ast.Load()), [node], [])

    def visit_Name(self, node):
        return self._wrap(node) if isinstance(node.ctx, ast.Load) else node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        return self._wrap(node) if isinstance(node.ctx, ast.Load) else node

    visit_Subscript = visit_Attribute

    def visit_Call(self, node):
        self.generic_visit(node)
        return self._wrap(node)


class _Recorder(ast.NodeTransformer):
    """Each assert becomes: evaluate the test (an exception counts as False) with every value it reads
    captured (`_Capture`), then record the outcome with a fingerprint of those values, so that the
    table can tell a claim whose numbers change with the draw from one that a redraw cannot move (it
    reads shipped data, or it is an exact computation)."""

    def __init__(self, keys):
        self.keys = keys                     # (lineno, col) -> claim key

    def visit_Assert(self, node):
        import copy
        key = self.keys[(node.lineno, node.col_offset)]
        ok = ast.Name("__claim_ok__", ast.Store())
        test = _Capture().visit(copy.deepcopy(node.test))
        fp = ast.Call(ast.Name("__claim_fp__", ast.Load()), [], [])
        call = lambda ok_, err: ast.Expr(ast.Call(ast.Name("__claim__", ast.Load()),
                                                  [ast.Constant(key), ok_, err, fp], []))
        handler = ast.ExceptHandler(
            ast.Name("Exception", ast.Load()), "__claim_err__",
            [call(ast.Constant(False),
                  ast.Call(ast.Name("repr", ast.Load()), [ast.Name("__claim_err__", ast.Load())], []))])
        return ast.Try(body=[ast.Assign([ok], ast.Call(ast.Name("bool", ast.Load()), [test], []))],
                       handlers=[handler], orelse=[call(ast.Name("__claim_ok__", ast.Load()), ast.Constant(None))],
                       finalbody=[])


def instrument(nb: dict, chapter: str) -> tuple[dict, list[dict]]:
    """A copy of the notebook whose asserts record instead of raising, and its claims."""
    import copy

    nb = copy.deepcopy(nb)
    found = claims(nb, chapter)
    by_cell: dict[int, dict] = {}
    for c in found:
        by_cell.setdefault(c["cell"], {})[c["line"]] = c
    for i, src in code_cells(nb):
        if i not in by_cell:
            continue
        tree = ast.parse(src)
        keys = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert):
                text = _norm(ast.get_source_segment(src, node.test) or ast.unparse(node.test))
                match = [c for c in by_cell[i].values() if c["line"] == node.lineno and c["text"] == text]
                keys[(node.lineno, node.col_offset)] = match[0]["key"]
        tree = ast.fix_missing_locations(_Recorder(keys).visit(tree))
        nb["cells"][i]["source"] = ast.unparse(tree)
    new = lambda src: {"cell_type": "code", "metadata": {}, "source": src, "outputs": [],
                       "execution_count": None}
    nb["cells"].insert(0, new(RECORDER))
    nb["cells"].append(new(DUMP))
    for cell in nb["cells"]:
        cell.pop("id", None)
    nb["nbformat_minor"] = min(nb.get("nbformat_minor", 4), 4)
    return nb, found


def load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)
