"""The student edition (`bash scripts/build_book.sh --student`, in `_build/student/`) shows no solution.

What a student must not see, read from the chapter notebooks themselves (not from the code that
writes the edition): the code between ``### BEGIN SOLUTION`` and ``### END SOLUTION``, the written
answers (markdown cells that nbgrader grades by hand: the instructor's derivations), the text inside
the solution dropdown fences, and the hidden tests of the check cells. For every chapter, no line of
that code (whole lines of more than 20 characters that the chapter does not also show elsewhere) and
no run of plain words of that prose is on the chapter's page or in the notebook a reader downloads
from it (`_sources/`), and neither are the images that the solution cells drew. The chapter's own
figures are on its page, as in the full book.
"""
import html
import json
import re

import pytest

from book_build import BUILD, EXECUTED, ROOT, built_book, chapter_notebooks, skip_or_fail  # noqa: F401
from test_book_figures import expected_figures, page_images, rendered_image

STUDENT = BUILD / "student"
SOLUTION = re.compile(r"### BEGIN SOLUTION(.*?)### END SOLUTION", re.S)
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", re.S)
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "Solution to Exercise")
# plain words between math, code, links and emphasis: what a rendered page keeps of markdown verbatim
PLAIN = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|`[^`]*`|\{[^}]*\}|\[[^\]]*\]\([^)]*\)|[*_#>|\\]", re.S)


def source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def is_exercise_cell(cell) -> bool:
    return "nbgrader" in cell.get("metadata", {})


def secrets(nb: dict) -> tuple[set[str], set[str]]:
    """(code lines, prose phrases) of the notebook that only its solutions and hidden tests hold."""
    code, prose, public = [], [], []
    for c in nb["cells"]:
        text, meta = source(c), c.get("metadata", {})
        if "solution-wrapper" in meta.get("tags", []) or (
                c["cell_type"] == "markdown" and meta.get("nbgrader", {}).get("solution")):
            prose.append(text)
            continue
        code += SOLUTION.findall(text) + HIDDEN.findall(text)
        public.append(HIDDEN.sub("", SOLUTION.sub("", text)))
    shown = "\n".join(public)
    shown_lines = {line.strip() for line in shown.splitlines()}
    lines = {line.strip() for block in code for line in block.splitlines()
             if len(line.strip()) > 20 and not line.strip().startswith(("import ", "from "))}
    shown_words = " ".join(PLAIN.sub(" ", shown).split())
    phrases = {" ".join(chunk.split()) for block in prose for chunk in PLAIN.sub("\n", block).split("\n")}
    phrases = {p for p in phrases if len(p) >= 30 and p not in shown_words}
    return lines - shown_lines, phrases


def page_text(path) -> str:
    """The page's text, with Sphinx's typographic quotes and dashes turned back into the source's."""
    text = html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))
    for typeset, typed in (("\u2019", "'"), ("\u2018", "'"), ("\u201c", '"'), ("\u201d", '"'), ("\u2014", "---")):
        text = text.replace(typeset, typed)
    return text


def downloaded_text(path) -> str:
    """The sources of the notebook the page offers for download."""
    return "\n".join(source(c) for c in json.loads(path.read_text())["cells"]) if path.exists() else ""


@pytest.fixture(scope="session")
def student_book(built_book):
    index = STUDENT / "index.html"
    if not index.exists():
        skip_or_fail(f"no student edition in {STUDENT}: run `bash scripts/build_book.sh --student`")
    executed = [EXECUTED / nb.relative_to(ROOT) for nb in chapter_notebooks()]
    if any(e.stat().st_mtime > index.stat().st_mtime for e in executed if e.exists()):
        skip_or_fail(f"the student edition in {STUDENT} is older than the last book build: "
                     "run `bash scripts/build_book.sh --student`")
    return STUDENT


@pytest.mark.parametrize("notebook", chapter_notebooks(), ids=lambda p: p.stem)
def test_the_student_page_has_no_solution(student_book, notebook):
    rel = notebook.relative_to(ROOT)
    page = student_book / rel.with_suffix(".html")
    assert page.exists(), f"the student edition has no page {page}"
    text = page_text(page)
    shown = text + "\n" + downloaded_text(student_book / "_sources" / rel)
    lines = {line.strip() for line in shown.splitlines()}
    words = " ".join(shown.split())
    code, prose = secrets(json.loads(notebook.read_text()))
    leaked = sorted(line for line in code if line in lines) + sorted(p for p in prose if p in words)
    assert not leaked, f"{rel}: {len(leaked)} solution or hidden-test texts in the student edition: {leaked[:3]}"
    markers = [m for m in MARKERS if m in shown]
    assert not markers, f"{rel}: solution markers on the student page: {markers}"


@pytest.mark.parametrize("notebook", chapter_notebooks(), ids=lambda p: p.stem)
def test_the_student_page_keeps_the_chapter_figures_only(student_book, notebook):
    rel = notebook.relative_to(ROOT)
    executed = json.loads((EXECUTED / rel).read_text())
    page = student_book / rel.with_suffix(".html")
    stems = {src.rsplit("/", 1)[-1].rsplit(".", 1)[0] for src in page_images(page)}
    expected, _ = expected_figures({"cells": [c for c in executed["cells"] if not is_exercise_cell(c)]})
    missing = [i for i, digest in expected if digest not in stems]
    solution_images = {image[1] for c in executed["cells"] if is_exercise_cell(c)
                       for o in c.get("outputs", []) if (image := rendered_image(o))}
    assert not missing, f"{rel}: the student page lacks the figures of cells {missing}"
    assert not solution_images & stems, f"{rel}: the student page shows images the solutions drew"
