"""Wrap the book's code cells to the page width with black (a developer's tool, not needed to build).

    .venv/bin/python -m pip install black==25.11.0 && .venv/bin/python scripts/wrap_code.py [NOTEBOOK ...]

For each code cell a reader can open (not remove-cell/remove-input, not an exercise check), in two
steps: a trailing comment that pushes its line past 88 characters moves onto its own lines above it
(same indentation, wrapped at 88); then, in a cell that holds no assert (an assert's text names its
claim in the robustness table), `black --line-length 88` wraps the code. For a cell shown in full,
either step applies only where the result stays within the 12 lines of tests/test_cell_length.py.
Cells that cannot be parsed (IPython magics) are left as they are. Prints the long lines left per
notebook: long strings, which neither step wraps, are for a person to shorten.
"""
from __future__ import annotations

import ast
import glob
import io
import json
import os
import sys
import textwrap
import tokenize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTH, LIMIT = 88, 12
HIDDEN = {"hide-input", "hide-cell"}
REMOVED = {"remove-cell", "remove-input"}


def hoist_comments(src: str) -> str:
    """Move each trailing comment whose line is wider than WIDTH onto its own lines above the code."""
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.start[1]
    out = []
    for i, line in enumerate(src.split("\n"), 1):
        col = comments.get(i)
        code = line[:col].rstrip() if col is not None else line
        if len(line) <= WIDTH or col is None or not code.strip() or len(code) > WIDTH:
            out.append(line)
            continue
        indent = code[:len(code) - len(code.lstrip())]
        text = line[col:].lstrip("#").strip()
        out += textwrap.wrap(text, WIDTH - len(indent) - 2, initial_indent=indent + "# ",
                             subsequent_indent=indent + "# ", break_long_words=False)
        out.append(code)
    return "\n".join(out)


def wrap(path: str, black) -> tuple[int, int]:
    with open(path) as f:
        nb = json.load(f)
    changed = 0
    for cell in nb["cells"]:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell["cell_type"] != "code" or tags & REMOVED:
            continue
        src = "".join(cell["source"])
        if "### BEGIN" in src or not any(len(line) > WIDTH for line in src.split("\n")):
            continue
        shown = not tags & HIDDEN
        fits = lambda text: not shown or len(text.strip("\n").split("\n")) <= LIMIT
        try:
            asserts = any(isinstance(n, ast.Assert) for n in ast.walk(ast.parse(src)))
            new = hoist_comments(src)
            new = new if fits(new) else src
            if not asserts and any(len(line) > WIDTH for line in new.split("\n")):
                formatted = black.format_str(new, mode=black.Mode(line_length=WIDTH)).rstrip("\n")
                new = formatted if fits(formatted) else new
        except Exception:                      # magics, or it cannot be parsed
            continue
        if new != src:
            lines = new.split("\n")
            cell["source"] = [line + "\n" for line in lines[:-1]] + [lines[-1]]
            changed += 1
    with open(path, "w") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")
    left = sum(len(line) > WIDTH for c in nb["cells"] if c["cell_type"] == "code"
               and not set(c.get("metadata", {}).get("tags", [])) & REMOVED
               for line in "".join(c["source"]).split("\n"))
    return changed, left


def main(argv=None) -> int:
    try:
        import black
    except ImportError:
        print("black is not installed: .venv/bin/python -m pip install black==25.11.0", file=sys.stderr)
        return 2
    paths = (argv if argv is not None else sys.argv[1:]) or sorted(glob.glob(os.path.join(ROOT, "book", "*.ipynb")))
    for p in paths:
        changed, left = wrap(p, black)
        print(f"{os.path.basename(p)}: {changed} cells wrapped, {left} long lines left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
