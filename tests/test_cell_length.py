"""Every code cell a reader sees in full says one thing in at most LIMIT lines.

A cell is shown in full unless it is tagged remove-cell, remove-input, hide-input or hide-cell
(hidden asserts, glue, collapsed figure code). Lines are counted after stripping leading and
trailing blank lines. The cells that were longer when the limit was set are listed below, by
notebook and cell id: the list may only shrink. A listed cell that is now within the limit fails
the test until it is taken off the list, so the list is always the exact set of cells still to
shorten.
"""
import json
from pathlib import Path

import pytest

LIMIT = 12
BOOK = Path(__file__).resolve().parents[1] / "book"
HIDDEN = {"remove-cell", "remove-input", "hide-input", "hide-cell"}

# cells over the limit still to shorten (notebook -> cell ids); never add to this list
STILL_LONG = {
    "11_factual_recall.ipynb": {'a26a72f9', '06ce5eed'},
}


def _shown_cells(path):
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code" or HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
            continue
        yield cell["id"], len("".join(cell["source"]).strip("\n").split("\n"))


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
