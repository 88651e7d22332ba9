"""The hash of the lib source a stored point's numbers depend on: part of every store key.

`code_files(part)` follows the imports from the module that computes a point ("points": the three steps
and trained points of `lib.experiments.store.Store`; "factual": chapter 11's trained models of
`lib.factual.FactStore`) through lib's source, function-level imports included (lib/__init__.py,
which imports everything, is not followed). `code_hash(part)` hashes those modules' syntax trees
without docstrings: a changed formula changes it, a changed comment, docstring or layout does not.
A stale point is then never read back as valid (its key misses), the shipped stores must carry the
hash of the code that reads them (tests/test_store_code.py; scripts/restamp_stores.py rechecks and
restamps them), and a sweep worker whose hash differs from its client's refuses the task.
"""

from __future__ import annotations

import ast
import hashlib
import os

from ..core.config import check_choice

LIB_ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
CODE_ENTRIES = {"points": ("experiments.experiment",),                       # three-step and trained points
                "factual": ("factual.task", "factual.models", "factual.training"),   # chapter 11's models
                "factual_stacked": ("factual.stacked",)}    # the same, trained many at once (route "stacked")


def _module_file(root: str, dotted: str) -> str | None:
    base = os.path.join(root, *dotted.split(".")) if dotted else root
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _imports(root: str, dotted: str, tree) -> set:
    """The lib modules (dotted, relative to lib) that the module `dotted` imports anywhere in `tree`."""
    package = dotted.rsplit(".", 1)[0] if not _module_file(root, dotted).endswith("__init__.py") else dotted
    parts = package.split(".") if package else []
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[:len(parts) - node.level + 1] if node.level > 1 else parts
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and (node.module == "lib" or node.module.startswith("lib.")):
                target = node.module[4:]
            else:
                continue
            for alias in node.names:               # `from pkg import module` names a module
                sub = f"{target}.{alias.name}" if target else alias.name
                out.add(sub if _module_file(root, sub) else target)
        elif isinstance(node, ast.Import):
            out.update(a.name[4:] for a in node.names if a.name.startswith("lib."))
    return {m for m in out if m and _module_file(root, m)}


def _normalised(tree) -> str:
    """The module's syntax tree without docstrings: comments, docstrings and layout do not count."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def code_files(part: str = "points", root: str | None = None) -> list[str]:
    """The lib modules (dotted, sorted) whose code fixes the numbers of a stored `part` ("points":
    `lib.experiments.store.Store`'s; "factual": `lib.factual.FactStore`'s): `CODE_ENTRIES[part]` and every
    lib module they import, followed through the source. `root`: another copy of lib (tests)."""
    check_choice("part", part, tuple(CODE_ENTRIES))
    root = LIB_ROOT if root is None else os.fspath(root)
    todo, seen = list(CODE_ENTRIES[part]), set()
    while todo:
        m = todo.pop()
        if m in seen or not m:
            continue
        seen.add(m)
        with open(_module_file(root, m), encoding="utf-8") as f:
            todo.extend(_imports(root, m, ast.parse(f.read())) - seen)
    return sorted(seen)


_HASHES: dict = {}


def code_hash(part: str = "points", root: str | None = None) -> str:
    """SHA-256 (16 hex digits) of the code a stored `part` depends on (`code_files`): each module's
    syntax tree without docstrings, so a changed formula changes it and a changed comment does not.
    Computed once per process for this lib; every stored point's key carries it."""
    check_choice("part", part, tuple(CODE_ENTRIES))
    if root is None and part in _HASHES:
        return _HASHES[part]
    base = LIB_ROOT if root is None else os.fspath(root)
    h = hashlib.sha256()
    for m in code_files(part, base):
        with open(_module_file(base, m), encoding="utf-8") as f:
            h.update(f"{m}\n{_normalised(ast.parse(f.read()))}\n".encode())
    if root is None:
        _HASHES[part] = h.hexdigest()[:16]
    return h.hexdigest()[:16]
