"""Sphinx extension: the pages never show an exercise's hidden tests.

A graded check cell holds the tests a student sees and, between ``### BEGIN HIDDEN TESTS`` and
``### END HIDDEN TESTS``, the tests that decide the grade (nbgrader removes them from the released
notebook and restores them when it grades). The book's pages show the cell as a student receives
it: the hidden block becomes one comment line saying that it exists. The notebooks themselves are
unchanged, so nbval and the grader still run every hidden test.
"""
import re

from docutils import nodes

HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[ \t]*\n?", re.S | re.M)
PLACEHOLDER = "# (hidden tests: they run when the exercise is graded)\n"


def shown_source(text):
    """The code a page shows for a cell whose source is ``text``."""
    return HIDDEN.sub(PLACEHOLDER, text)


def _strip(app, doctree):
    for block in list(doctree.findall(nodes.literal_block)):
        text = block.astext()
        if "### BEGIN HIDDEN TESTS" not in text:
            continue
        new = nodes.literal_block(shown_source(text), shown_source(text), **block.attributes)
        block.replace_self(new)


def setup(app):
    app.connect("doctree-read", _strip)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
