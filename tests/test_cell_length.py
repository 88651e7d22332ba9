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
    "01_task.ipynb": {'a7be7ff4', '8ca08120', 'b068b95c'},
    "02_interference.ipynb": {'dd25da1a', '02567520', '850c7c19', 'b7971b58', '1eafe6ae', '98da4d42'},
    "03_model.ipynb": {'08b3efea', '3760239b', '6e89b190', '1533342a', 'efdea9a0', '37c3b928'},
    "04_value_step.ipynb": {'1ab2cdab', '4547a167', 'c1784ce8', 'aa68be49', 'f7759dee', '5bc81fd8', '15006443'},
    "05_attention_step.ipynb": {'c03c093c7', 'c06c6577a', 'c09b756dc', 'c123a8b9d', 'c156d5f64', 'c2251e4ac', 'c241fdaa4', 'c28ab827e', 'c31dcf7be', 'c3833921e', 'c41c3eb1b', 'c482018fd', 'c53eba453'},
    "06_refined_memory.ipynb": {'359e7a7c', '2e6cc9dd', 'ba469a4c', 'bf4fd1ac', 'd6d734ed', '89efddb6', '7e0bc91b', '8ad19f30', '847f9d2e', '68538f0e', '5fea2f73'},
    "07_capacity.ipynb": {'1e19f038', 'efee4bdc'},
    "08_mlp_memory.ipynb": {'d0d5a3b2', '8d62d777', '606a0f08', '7c473614', 'd4e5c379', '7d7ec03e', 'b92bf604', '6f595151'},
    "11_factual_recall.ipynb": {'37d92cd1', '2f690928', '5fbf03ed', 'a26a72f9', '06ce5eed'},
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
