"""Printed output a reader sees is at most WIDTH characters wide: no output line scrolls sideways on the
page or is cut at the PDF's margin.

The lines checked are the book build's own executions (_build/jupyter_execute/book, written by
scripts/build_book.sh, which scripts/test.sh runs before the tests marked after_build): every stream
output and every plain-text result of a cell whose output the page shows (all but remove-cell /
remove-output; hide-output counts, a reader opens it). Without a build these tests are skipped, except
under CI=true, where the build has just run and a missing one is a failure.
"""
import json
import os
from pathlib import Path

import pytest

WIDTH = 100
ROOT = Path(__file__).resolve().parents[1]
EXECUTED = ROOT / "_build" / "jupyter_execute" / "book"
REMOVED = {"remove-cell", "remove-output"}
CHAPTERS = sorted(p.name for p in (ROOT / "book").glob("*.ipynb"))


def printed_lines(nb: dict) -> list[tuple[str, str]]:
    """(cell id, line) for every line of text output that the page shows."""
    out = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or REMOVED & set(cell.get("metadata", {}).get("tags", [])):
            continue
        for o in cell.get("outputs", []):
            if o["output_type"] == "stream":
                text = "".join(o["text"])
            elif o["output_type"] in ("execute_result", "display_data"):
                data = o.get("data", {})
                # a richer form (HTML table, figure) is what the page shows instead of the plain text
                if set(data) & {"text/html", "image/png", "image/svg+xml", "text/markdown", "text/latex"}:
                    continue
                text = "".join(data.get("text/plain", ""))
            else:
                continue
            out += [(cell.get("id", "?"), line) for line in text.split("\n")]
    return out


def test_the_rule_sees_long_lines_and_skips_what_the_page_hides():
    cell = lambda tags, text: {"cell_type": "code", "id": "c", "metadata": {"tags": tags},  # noqa: E731
                               "outputs": [{"output_type": "stream", "name": "stdout", "text": [text]}]}
    long = "x" * (WIDTH + 1)
    assert printed_lines({"cells": [cell([], long)]}) == [("c", long)]
    assert printed_lines({"cells": [cell(["hide-output"], long)]}) == [("c", long)]
    assert printed_lines({"cells": [cell(["remove-output"], long)]}) == []
    html = {"cell_type": "code", "id": "h", "metadata": {}, "outputs": [
        {"output_type": "execute_result", "data": {"text/plain": [long], "text/html": ["<p/>"]}}]}
    assert printed_lines({"cells": [html]}) == []


@pytest.mark.after_build
@pytest.mark.parametrize("name", CHAPTERS)
def test_printed_lines_fit_the_page(name):
    path = EXECUTED / name
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: no build execution of {name} in {EXECUTED}", pytrace=False)
        pytest.skip(f"no build: {path} (scripts/build_book.sh writes it)")
    wide = [(cid, line) for cid, line in printed_lines(json.loads(path.read_text())) if len(line) > WIDTH]
    assert not wide, (f"{name}: {len(wide)} printed lines over {WIDTH} characters; first, in cell "
                      f"{wide[0][0]}: {wide[0][1][:140]}")
