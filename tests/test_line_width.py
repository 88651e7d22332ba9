"""Code a reader can open is at most WIDTH characters wide: no line scrolls sideways on the page or is
cut at the PDF's margin.

Every code cell the page shows, in full or behind "Show code" (all but remove-cell / remove-input),
counts, as the page shows it (an exercise check's hidden tests are one comment line there). The
chapters written before the limit still hold the long lines counted in STILL_WIDE: a chapter's count
may only fall, and a chapter that drops below its count fails until the number is lowered, so the
table is always the exact number of lines still to wrap. A page new to the book starts at zero.
"""
import importlib.util
import json
from pathlib import Path

import pytest

WIDTH = 88
BOOK = Path(__file__).resolve().parents[1] / "book"
REMOVED = {"remove-cell", "remove-input"}
_spec = importlib.util.spec_from_file_location("hidden_tests", BOOK / "_ext" / "hidden_tests.py")
hidden_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hidden_tests)

# long lines still to wrap, per notebook (only ever lowered; a notebook not listed has none)
STILL_WIDE = {}


def wide_lines(path):
    out = []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code" or REMOVED & set(cell.get("metadata", {}).get("tags", [])):
            continue
        shown = hidden_tests.shown_source("".join(cell["source"]))
        out += [(cell["id"], line) for line in shown.split("\n") if len(line) > WIDTH]
    return out


@pytest.mark.parametrize("path", sorted(BOOK.glob("*.ipynb")), ids=lambda p: p.name)
def test_shown_code_lines_fit_the_page(path):
    wide = wide_lines(path)
    allowed = STILL_WIDE.get(path.name, 0)
    assert len(wide) <= allowed, (f"{path.name}: {len(wide)} shown code lines over {WIDTH} characters "
                                  f"(allowed {allowed}); first: {wide[len(wide) - 1][0]}: {wide[-1][1][:120]}")
    assert len(wide) == allowed, f"{path.name}: {len(wide)} long lines now: lower STILL_WIDE to {len(wide)}"


def test_the_table_names_only_the_book():
    assert set(STILL_WIDE) <= {p.name for p in BOOK.glob("*.ipynb")}
    assert all(n > 0 for n in STILL_WIDE.values())
