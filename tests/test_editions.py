"""The sources of the student edition and the PDF (scripts/editions.py), and the PDF's chapter numbers
(book/_ext/latex_chapters.py), without building a book: the built editions are tested in tests/book.
"""

import pathlib
import sys

import nbformat
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import course  # noqa: E402
import editions  # noqa: E402
import latex_chapters  # noqa: E402


def _with_outputs(path):
    """The chapter with one output in every code cell, as if executed: a line naming the cell."""
    nb = nbformat.read(path, as_version=4)
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code":
            c.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"output of cell {i}\n")]
    return nb


def test_the_student_page_keeps_the_chapter_outputs_and_clears_the_exercises():
    path = ROOT / "book" / "04_value_step.ipynb"
    executed = _with_outputs(path)
    page = course.student_version(executed, keep_outputs=True)
    kept = [c for c in page.cells if c.cell_type == "code" and "nbgrader" not in c.metadata]
    exercise = [c for c in page.cells if c.cell_type == "code" and "nbgrader" in c.metadata]
    assert kept and exercise
    assert all(len(c.outputs) == 1 for c in kept), "a chapter cell lost its output"
    assert all(not c.outputs for c in exercise), "an exercise cell kept what the solution printed"
    assert not course.leaked(page, executed)
    assert all(not c.get("outputs") for c in course.student_version(executed).cells), "notebooks stay cleared"


def test_edition_config_executes_nothing():
    full, student = editions.edition_config(student=False), editions.edition_config(student=True)
    for config in (full, student):
        assert config["execute"]["execute_notebooks"] == "off" and "cache" not in config["execute"]
    assert student["title"].endswith("(student edition)") and student["sphinx"]["config"]["hide_solutions"]
    assert "hide_solutions" not in full["sphinx"]["config"]


def test_an_edition_needs_a_current_execution(tmp_path):
    with pytest.raises(SystemExit, match="build_book.sh"):
        editions.write_edition(tmp_path / "out", student=True, executed_dir=tmp_path / "nowhere")
    assert not (tmp_path / "out").exists()
    stale, current = tmp_path / "stale", tmp_path / "current"
    stale.mkdir(), current.mkdir()
    for path in editions.toc_notebooks():
        nb = _with_outputs(path)
        nbformat.write(nb, current / path.name)
        nb.cells.append(nbformat.v4.new_code_cell("x = 1"))      # executed other code
        nbformat.write(nb, stale / path.name)
    assert sorted(editions.stale_chapters(stale)) == sorted(p.name for p in editions.toc_notebooks())
    assert editions.stale_chapters(current) == []


@pytest.mark.slow
def test_the_student_edition_source_has_every_page_and_no_solution(tmp_path):
    executed = tmp_path / "executed"
    executed.mkdir()
    for path in editions.toc_notebooks():
        nbformat.write(_with_outputs(path), executed / path.name)
    out = tmp_path / "student_src"
    lines = editions.write_edition(out, student=True, executed_dir=executed)
    assert len(lines) == len(editions.toc_notebooks())
    assert yaml.safe_load((out / "_config.yml").read_text())["execute"]["execute_notebooks"] == "off"
    assert (out / "_toc.yml").read_text() == (ROOT / "_toc.yml").read_text()
    assert (out / "book" / "intro.md").exists() and (out / "book" / "_ext" / "hidden_tests.py").exists()
    for path in editions.toc_notebooks():
        text = (out / "book" / path.name).read_text()
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, path.name
        chapter_code = [c for c in nbformat.read(path, as_version=4).cells
                        if c.cell_type == "code" and "nbgrader" not in c.metadata]
        assert ("output of cell" in text) == bool(chapter_code), f"{path.name}: the chapter's outputs are lost"


def test_the_pdf_numbers_only_the_numbered_part():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    starts = latex_chapters.part_starts(toc)
    numbered = [part for part in toc["parts"] if part.get("numbered")]
    assert len(numbered) == 1 and starts[numbered[0]["chapters"][0]["file"]] is True
    assert [n for n in starts.values() if n is False], "front or back matter: unnumbered"
    assert len(starts) == len(toc["parts"])
