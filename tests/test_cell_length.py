"""Every code cell a reader sees in full says one thing in at most LIMIT lines.

A cell is shown in full unless it is tagged remove-cell, remove-input, hide-input or hide-cell
(hidden asserts, glue, collapsed figure code). Lines are counted as the page shows them (an
exercise check's hidden tests are one comment line there: book/_ext/hidden_tests.py), after
stripping leading and trailing blank lines. The cells that were longer when the limit was set are listed below, by
notebook and cell id: the list may only shrink. A listed cell that is now within the limit fails
the test until it is taken off the list, so the list is always the exact set of cells still to
shorten.
"""
import json
from pathlib import Path

import importlib.util

import pytest

LIMIT = 12
BOOK = Path(__file__).resolve().parents[1] / "book"
HIDDEN = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
_spec = importlib.util.spec_from_file_location("hidden_tests", BOOK / "_ext" / "hidden_tests.py")
hidden_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hidden_tests)

# cells over the limit still to shorten (notebook -> cell ids); never add to this list
STILL_LONG = {}


def _shown_cells(path):
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code" or HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
            continue
        shown = hidden_tests.shown_source("".join(cell["source"]))
        yield cell["id"], len(shown.strip("\n").split("\n"))


@pytest.mark.parametrize("path", sorted(BOOK.glob("*.ipynb")), ids=lambda p: p.name)
def test_shown_cells_are_short(path):
    allowed = STILL_LONG.get(path.name, set())
    lengths = dict(_shown_cells(path))
    long_now = {cid for cid, n in lengths.items() if n > LIMIT}
    new = sorted(f"{cid} ({lengths[cid]} lines)" for cid in long_now - allowed)
    assert not new, f"{path.name}: shown cells over {LIMIT} lines: {new}"
    fixed = sorted(allowed - long_now)
    assert not fixed, f"{path.name}: cells now within {LIMIT} lines (or gone): take {fixed} off STILL_LONG"


def test_every_cell_has_an_id_and_the_list_names_only_the_book():
    for path in BOOK.glob("*.ipynb"):
        assert all("id" in c for c in json.loads(path.read_text())["cells"]), path.name
    assert set(STILL_LONG) <= {p.name for p in BOOK.glob("*.ipynb")}


def test_the_page_shows_a_check_without_its_hidden_tests():
    cell = "x = 1\n### BEGIN HIDDEN TESTS\nassert x == 1\nassert x > 0\n### END HIDDEN TESTS\nprint('ok')"
    assert hidden_tests.shown_source(cell) == "x = 1\n" + hidden_tests.PLACEHOLDER + "print('ok')"
    assert hidden_tests.shown_source("y = 2\n") == "y = 2\n"
