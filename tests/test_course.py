"""Course use: student notebooks carry no solution text, the autograder scores the instructor's
notebooks full marks and untouched student notebooks zero, and hidden tests count.

The whole-chapter grading executes every chapter twice (solution and student version), about
10 s a notebook on two CPU cores.
"""

import copy
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import nbformat
import pytest
from nbgrader import utils as nbg_utils

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("course", ROOT / "scripts" / "course.py")
course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(course)

CHAPTERS = course.chapters()
EXERCISE_RE = re.compile(r"^````\{exercise\}.*\n:label: (ex-[\w-]+)", re.M)


def _exercise_chapters():
    return [p for p in CHAPTERS
            if any(EXERCISE_RE.search(c.source) for c in nbformat.read(p, as_version=4).cells)]


def test_book_has_chapters_with_exercises():
    assert len(_exercise_chapters()) >= 4


@pytest.mark.parametrize("path", _exercise_chapters(), ids=lambda p: p.stem)
def test_every_exercise_follows_the_cell_convention(path):
    nb = nbformat.read(path, as_version=4)
    cells = nb.cells
    labels, answers = [], []
    for i, c in enumerate(cells):
        m = EXERCISE_RE.search(c.source) if c.cell_type == "markdown" else None
        if not m:
            continue
        label = m.group(1)
        labels.append(label)
        start = cells[i + 1]
        # the fence cell holds the directive only: anything else would be released by nbgrader
        assert start.source == f"```{{solution-start}} {label}\n:class: dropdown\n```", label
        assert "solution-wrapper" in start.metadata.get("tags", []), label
        j = i + 2
        if cells[j].cell_type == "markdown":      # the written answer, graded by hand
            a = cells[j].metadata.get("nbgrader", {})
            assert nbg_utils.is_solution(cells[j]) and nbg_utils.is_grade(cells[j]), label
            assert a["grade_id"] == f"{label}-answer" and not a.get("locked") and a["points"] > 0, label
            assert not cells[j].metadata.get("tags"), label
            answers.append(label)
            j += 1
        sol, end, check = cells[j: j + 3]
        assert nbg_utils.is_solution(sol) and not nbg_utils.is_grade(sol), label
        assert sol.metadata.nbgrader["grade_id"] == f"{label}-solution"
        assert sol.source.startswith("### BEGIN SOLUTION") and sol.source.rstrip().endswith("### END SOLUTION")
        assert end.source == "```{solution-end}\n```" and "solution-wrapper" in end.metadata.get("tags", [])
        g = check.metadata.get("nbgrader", {})
        assert nbg_utils.is_grade(check) and g.get("locked") and g.get("points", 0) > 0, label
        assert g["grade_id"] == f"{label}-check" and not check.metadata.get("tags"), label
        assert "print(" not in check.source.split("### BEGIN HIDDEN TESTS")[0].replace('print("correct")', ""), \
            f"{label}: a check prints something besides 'correct'"
    assert len(labels) == len(set(labels)) >= 3
    assert len(course.check_cells(nb)) == len(labels) and len(course.answer_cells(nb)) == len(answers)
    assert len(course.grade_cells(nb)) == len(labels) + len(answers)
    # no other cell is tagged solution-wrapper or carries nbgrader metadata
    assert sum("solution-wrapper" in c.metadata.get("tags", []) for c in cells) == 2 * len(labels)
    assert sum("nbgrader" in c.metadata for c in cells) == 2 * len(labels) + len(answers)


def test_student_notebooks_have_no_solution_text(tmp_path):
    written = course.write_students(tmp_path, CHAPTERS)
    assert [p.name for p in written] == [p.name for p in CHAPTERS]
    for src, out in zip(CHAPTERS, written):
        instructor, student = nbformat.read(src, as_version=4), nbformat.read(out, as_version=4)
        assert course.leaked(student, instructor) == []
        text = "\n".join(c.source for c in student.cells)
        for secret in course.solution_texts(instructor):
            assert secret.strip() not in text
        for c in student.cells:
            assert "solution-wrapper" not in c.metadata.get("tags", [])
            if nbg_utils.is_solution(c) and c.cell_type == "code":
                assert "raise NotImplementedError()" in c.source
            elif nbg_utils.is_solution(c):
                assert c.source == "YOUR ANSWER HERE"
            if c.cell_type == "code":
                assert c.outputs == []
        assert len(course.grade_cells(student)) == len(course.grade_cells(instructor))
        assert "{glue:" not in text              # every glued number filled in or marked


def test_student_script_refuses_missing_output_folder():
    r = subprocess.run(["bash", str(ROOT / "scripts" / "student.sh")], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr


TOY_SOLUTION = '### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION'
TOY_CHECK = ('assert isinstance(answer, int)\n'
             '### BEGIN HIDDEN TESTS\nassert answer == 42\n### END HIDDEN TESTS\nprint("correct")')


def _toy(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_markdown_cell("Store the answer in `answer`."),
        nbformat.v4.new_code_cell(TOY_SOLUTION, metadata={"nbgrader": {
            "solution": True, "grade": False, "locked": False, "grade_id": "toy-solution", "schema_version": 3}}),
        nbformat.v4.new_code_cell(TOY_CHECK, metadata={"nbgrader": {
            "solution": False, "grade": True, "locked": True, "points": 1, "grade_id": "toy-check",
            "schema_version": 3}}),
    ]
    src = tmp_path / "src"
    src.mkdir()
    nbformat.write(nb, src / "toy.ipynb")
    return src, nb


def test_grader_restores_hidden_tests_and_ignores_edited_checks(tmp_path):
    src, _ = _toy(tmp_path)
    stud = tmp_path / "student"
    course.write_students(stud, [src / "toy.ipynb"])
    nb = nbformat.read(stud / "toy.ipynb", as_version=4)
    assert "answer == 42" not in "\n".join(c.source for c in nb.cells)
    nb.cells[1].source = "answer = 41"                  # passes the visible test, fails the hidden one
    nbformat.write(nb, stud / "toy.ipynb")
    assert course.grade(stud / "toy.ipynb", src)[:2] == (0, 1)
    nb.cells[2].source = 'print("correct")'             # a student who empties the check gains nothing
    nbformat.write(nb, stud / "toy.ipynb")
    assert course.grade(stud / "toy.ipynb", src)[:2] == (0, 1)
    nb.cells[1].source = "answer = 42"
    nbformat.write(nb, stud / "toy.ipynb")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "grade.sh"), "--source", str(src), str(stud / "toy.ipynb")],
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "toy: 1/1"


def _errors(nb):
    return [(c, o) for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every chapter and its untouched student version with scripts/grade.sh, the two runs in
    parallel (one kernel each, one thread each); returns {(kind, stem): (score line, executed notebook)}."""
    tmp = tmp_path_factory.mktemp("graded")
    students = course.write_students(tmp / "student", CHAPTERS)
    # one thread per kernel: the two runs share the cores without oversubscribing them, and compute
    # exactly what nbval computes (scripts/test.sh runs it with OMP_NUM_THREADS=1 too)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    runs = {kind: subprocess.Popen(["bash", str(ROOT / "scripts" / "grade.sh"), "--save-executed", str(tmp / kind),
                                    *map(str, nbs)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                   env=env)
            for kind, nbs in (("solution", CHAPTERS), ("student", students))}
    out = {}
    for kind, proc in runs.items():
        stdout, _ = proc.communicate(timeout=3600)
        assert proc.returncode == 0, stdout
        for line in stdout.splitlines():
            stem, score = line.split(": ")
            out[kind, stem] = (score, nbformat.read(tmp / kind / f"{stem}.ipynb", as_version=4))
    return out


@pytest.mark.parametrize("path", _exercise_chapters(), ids=lambda p: p.stem)
def test_solutions_score_full_marks(graded, path):
    score, nb = graded["solution", path.stem]
    m, hand = len(course.check_cells(nb)), course.hand_points(nb)
    assert score == f"{m}/{m}" + (f" +{course.fmt(hand)} by hand" if hand else ""), score
    assert _errors(nb) == []


@pytest.mark.parametrize("path", _exercise_chapters(), ids=lambda p: p.stem)
def test_untouched_students_score_zero_with_no_other_error(graded, path):
    score, nb = graded["student", path.stem]
    hand = course.hand_points(nb)
    assert score == f"0/{len(course.check_cells(nb))}" + (f" +{course.fmt(hand)} by hand" if hand else ""), score
    # the only errors: the unanswered solution cells and the checks that depend on them
    for cell, err in _errors(nb):
        if nbg_utils.is_solution(cell):
            assert err.ename == "NotImplementedError", cell.source
        else:
            assert nbg_utils.is_grade(cell), f"a non-exercise cell failed in the student notebook: {cell.source[:200]}"


def _glue_toy(tmp_path, code="x = 1"):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("a {glue:text}`x:.2f`, b {glue:text}`n`, c {glue:text}`gone:.1f`"),
                nbformat.v4.new_code_cell("x = 1")]
    (tmp_path / "book").mkdir()
    nbformat.write(nb, tmp_path / "book" / "toy.ipynb")
    ex = copy.deepcopy(nb)
    ex.cells[1].source = code
    ex.cells[1].outputs = [nbformat.v4.new_output(
        "display_data", data={"application/papermill.record/text/plain": text},
        metadata={"scrapbook": {"mime_prefix": "application/papermill.record/", "name": name}})
        for name, text in (("x", "0.123456"), ("n", "7"))]
    (tmp_path / "executed").mkdir()
    nbformat.write(ex, tmp_path / "executed" / "toy.ipynb")
    return tmp_path / "book" / "toy.ipynb", tmp_path / "executed"


def test_source_fills_glued_numbers_from_a_current_execution(tmp_path):
    path, executed = _glue_toy(tmp_path)
    nb, filled, used = course.source_version(path, executed)
    assert (filled, used) == (2, True)
    assert nb.cells[0].source == "a 0.12, b 7, c (`gone`: computed when you run the notebook)"


def test_source_marks_glued_numbers_when_the_execution_is_stale_or_absent(tmp_path):
    path, executed = _glue_toy(tmp_path, code="x = 2")      # executed from other code: not used
    for where in (executed, tmp_path / "nowhere", None):
        nb, filled, used = course.source_version(path, where)
        assert (filled, used) == (0, False)
        assert nb.cells[0].source == ("a (`x`: computed when you run the notebook), b (`n`: computed when you "
                                      "run the notebook), c (`gone`: computed when you run the notebook)")
