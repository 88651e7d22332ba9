"""Feedback without the hidden tests: an nbconvert preprocessor for nbgrader's generate_feedback.

nbgrader's feedback shows the autograded notebook, in which autograde restored every check cell from
the source, hidden tests included; a failing hidden test's traceback quotes its line. Once feedback is
out, an assignment could not be reused. `scripts/course.sh init` writes an nbgrader_config.py that runs
`HideHiddenTests` after nbgrader's GetGrades, so that in each check cell (an autograded grade cell) of
the feedback
  - the region between "### BEGIN HIDDEN TESTS" and "### END HIDDEN TESTS" is replaced by the one
    comment line the book's pages show (`book/_ext/hidden_tests.shown_source`), and
  - every error output becomes one line, its exception's name and "this check did not pass" (no
    traceback, no message: either could quote a hidden test).
The score nbgrader records is not touched: grades come from the gradebook, not from this copy.
"""

from __future__ import annotations

import importlib.util
import pathlib

from nbconvert.preprocessors import Preprocessor

from course import is_check

# the book pages' own rule for a check cell's hidden block (book/_ext/hidden_tests.py): the feedback shows a
# check exactly as the page and the released notebook do
_spec = importlib.util.spec_from_file_location(
    "hidden_tests", pathlib.Path(__file__).resolve().parents[1] / "book" / "_ext" / "hidden_tests.py")
hidden_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hidden_tests)


def hide(cell) -> bool:
    """Strip one check cell's hidden tests and error details in place; whether anything changed."""
    source = hidden_tests.shown_source(cell.source)
    changed = source != cell.source
    cell.source = source
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            out["evalue"] = "this check did not pass"
            out["traceback"] = [f"{out.get('ename', 'Error')}: this check did not pass"]
            changed = True
    return changed


class HideHiddenTests(Preprocessor):
    """nbconvert preprocessor: `hide` every check cell of the notebook (enabled: nbconvert skips a
    preprocessor whose `enabled` is False, its default)."""

    enabled = True

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if is_check(cell):
                hide(cell)
        return nb, resources
