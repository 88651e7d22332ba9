"""No page of the built book shows an exercise's hidden tests.

Each graded check cell keeps its hidden tests between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN
TESTS`` (nbgrader cuts them from the released notebook). The page shows the check as a student gets
it: the hidden block is one comment line (book/_ext/hidden_tests.py). Here, for every chapter: the
markers and the hidden code are absent from its page, and the page has one such comment line for each
check cell of the notebook that holds hidden tests.
"""
import json
import re

import pytest

from book_build import HTML, ROOT, built_book, chapter_notebooks  # noqa: F401 (fixture)

BLOCK = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
NOTE = "hidden tests: they run when the exercise is graded"


def page_text(path):
    raw = path.read_text()
    text = re.sub(r"<[^>]+>", "", raw)
    for entity, char in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#39;", "'"), ("&amp;", "&")):
        text = text.replace(entity, char)
    return text


@pytest.mark.parametrize("notebook", chapter_notebooks(), ids=lambda p: p.name)
def test_the_page_hides_the_hidden_tests(built_book, notebook):
    nb = json.loads(notebook.read_text())
    blocks = [m.group(1) for c in nb["cells"] if c["cell_type"] == "code"
              for m in BLOCK.finditer("".join(c["source"]))]
    text = page_text(HTML / notebook.relative_to(ROOT).with_suffix(".html"))
    assert "BEGIN HIDDEN TESTS" not in text and "END HIDDEN TESTS" not in text
    assert text.count(NOTE) == len(blocks)
    # every hidden line that appears nowhere else in the notebook is absent from the page
    elsewhere = "\n".join(BLOCK.sub("", "".join(c["source"])) for c in nb["cells"])
    hidden = {line.strip() for block in blocks for line in block.splitlines() if len(line.strip()) > 20}
    leaked = sorted(line for line in hidden if line not in elsewhere and line in text)
    assert not leaked, f"{notebook.name}: hidden test lines on the page: {leaked[:3]}"
