"""Course use: student notebooks carry no solution text, the autograder scores the instructor's
notebooks full marks and untouched student notebooks zero, and hidden tests count.

The whole-chapter grading (the tests marked after_build) scores every exercise chapter twice: as it
is, from the book build's own execution of it (_build/jupyter_execute; executed with scripts/grade.sh
when there is no current build, which CI=true refuses), and as an untouched student version, executed
with scripts/grade.sh in two processes at once. scripts/test.sh runs them after the build:
`pytest tests -m after_build`; its library step runs the rest (`-m "not after_build"`).
"""

import ast
import builtins
import concurrent.futures
import copy
import importlib
import importlib.util
import inspect
import itertools
import math
import os
import pathlib
import pkgutil
import re
import signal
import subprocess
import symtable
import sys
import warnings

import nbformat
import numpy as np
import pytest
from nbgrader import utils as nbg_utils

import lib.theory

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("course", ROOT / "scripts" / "course.py")
course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(course)
sys.path.insert(0, str(ROOT / "scripts"))
from course_students import DERIVATIONS, SHORTCUTS, SOLUTION_PRELUDE   # noqa: E402  the students graded

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
    labels, answers, n_checks = [], [], 0
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
        sol, end = cells[j: j + 2]
        assert nbg_utils.is_solution(sol) and not nbg_utils.is_grade(sol), label
        assert sol.metadata.nbgrader["grade_id"] == f"{label}-solution"
        assert sol.source.startswith("### BEGIN SOLUTION") and sol.source.rstrip().endswith("### END SOLUTION")
        assert end.source == "```{solution-end}\n```" and "solution-wrapper" in end.metadata.get("tags", [])
        # one check per part of the exercise: <label>-check, then <label>-check-b, -check-c, ... (partial credit)
        k = j + 2
        while k < len(cells) and nbg_utils.is_grade(cells[k]) and cells[k].cell_type == "code":
            check, part = cells[k], k - j - 2
            g = check.metadata.get("nbgrader", {})
            assert g.get("locked") and g.get("points", 0) > 0 and not nbg_utils.is_solution(check), label
            assert g["grade_id"] == f"{label}-check" + ("" if part == 0 else f"-{'abcdefgh'[part]}"), g["grade_id"]
            assert not check.metadata.get("tags"), label
            n_checks += 1
            k += 1
        assert k > j + 2, f"{label}: no check cell after the solution"
    assert len(labels) == len(set(labels)) >= 3
    assert len(course.check_cells(nb)) == n_checks and len(course.answer_cells(nb)) == len(answers)
    assert len(course.grade_cells(nb)) == n_checks + len(answers)
    # no other cell is tagged solution-wrapper or carries nbgrader metadata
    assert sum("solution-wrapper" in c.metadata.get("tags", []) for c in cells) == 2 * len(labels)
    assert sum("nbgrader" in c.metadata for c in cells) == len(labels) + n_checks + len(answers)


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_grader_counts_only_the_instructors_checks_whatever_the_student_adds_copies_or_deletes(tmp_path):
    """grade.sh scores as nbgrader's autograde does: each of the instructor's check cells once, restored
    from the source by grade_id, with the source's points; invented cells, copies, edits and new
    checksums count for nothing, and a deleted check scores 0 of its points."""
    src, _ = _toy(tmp_path)
    stud = tmp_path / "student"
    course.write_students(stud, [src / "toy.ipynb"])
    path = stud / "toy.ipynb"
    base = nbformat.read(path, as_version=4)
    base.cells[1].source = "answer = 41"                                   # wrong: 0 of 1 when graded honestly
    check = base.cells[2]

    def graded(cells):
        nb = copy.deepcopy(base)
        nb.cells = cells
        nbformat.write(nb, path)
        return course.grade(path, src)[:2]

    invented = nbformat.v4.new_code_cell('print("correct")', metadata={"nbgrader": {
        "solution": False, "grade": True, "locked": True, "points": 100, "grade_id": "bonus", "schema_version": 3,
        "checksum": "0" * 32}})
    assert graded(base.cells + [invented]) == (0, 1)                        # added: ignored
    copied = copy.deepcopy(check)
    copied.source = 'print("correct")'
    copied.metadata["nbgrader"]["points"] = 100
    assert graded(base.cells + [copied, copy.deepcopy(copied)]) == (0, 1)  # copied twice, points raised: once, 1
    edited = copy.deepcopy(check)
    edited.source = "answer = 42"
    edited.metadata["nbgrader"]["checksum"] = "f" * 32                    # re-checksummed to match the edit
    assert graded(base.cells[:2] + [edited]) == (0, 1)                      # edited: restored, still fails
    assert graded(base.cells[:2]) == (0, 1)                                 # deleted: 0 of its point
    right = copy.deepcopy(base.cells[1])
    right.source = "answer = 42"
    assert graded([base.cells[0], right, check, invented, copied]) == (1, 1)   # the honest score survives


def _errors(nb):
    return [(c, o) for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _costs() -> dict:
    """stem -> seconds of each chapter's execution in the last book build (_build/execution_times.txt,
    written by scripts/build_book.sh); {} when there is none."""
    times = ROOT / "_build" / "execution_times.txt"
    if not times.exists():
        return {}
    found = re.findall(r"^\s*(?:\S+/)?([^/\s]+)\.ipynb: ([0-9.]+) s$", times.read_text(), re.M)
    return {stem: float(t) for stem, t in found}


def _halves(paths: list) -> list[list]:
    """paths in two groups of about equal cost (longest first, each to the lighter group): the cost is
    the chapter's execution time in the last book build, else its file size (outputs are stripped:
    its code and prose, which scripts/execute_book.py also takes for a chapter's length)."""
    costs = _costs()
    cost = (lambda p: costs[p.stem]) if all(p.stem in costs for p in paths) else (lambda p: p.stat().st_size)
    groups, loads = [[], []], [0.0, 0.0]
    for p in sorted(paths, key=cost, reverse=True):
        i = loads.index(min(loads))
        groups[i].append(p)
        loads[i] += cost(p)
    return [g for g in groups if g]


def _grade_sh(kind: str, i: int, notebooks: list, tmp: pathlib.Path) -> dict:
    """Run scripts/grade.sh on notebooks, with one thread (the kernels share the cores without
    oversubscribing them, and compute exactly what nbval and the book build compute);
    {(kind, stem): (score line, executed notebook)}."""
    saved = tmp / f"{kind}-{i}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "grade.sh"), "--save-executed", str(saved),
                        *map(str, notebooks)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                       env=env, timeout=3600)
    assert r.returncode == 0, r.stdout
    out = {}
    for line in r.stdout.splitlines():
        stem, score = line.split(": ")
        out[kind, stem] = (score, nbformat.read(saved / f"{stem}.ipynb", as_version=4))
    assert sorted(stem for _, stem in out) == sorted(p.stem for p in notebooks), r.stdout
    return out


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """{(kind, stem): (score line, executed notebook)} for every chapter: "solution", the
    chapter as it is (book/ holds the instructor notebooks), and "student", its untouched student
    version, each scored by course.score as scripts/grade.sh scores.

    The solutions are the book build's own executions (_build/jupyter_execute/book, written by
    scripts/build_book.sh, which scripts/test.sh runs before these tests): the build ran every chapter,
    check cells and hidden tests included, so they are not executed again. A chapter without a current
    execution there (no build, or one older than the chapter or lib/) is executed by scripts/grade.sh
    instead, so these tests also run without a build; under CI=true that fails instead (the build has
    just run: a stale copy would be a bug). The student versions are executed by scripts/grade.sh, in
    two processes at once (one kernel and one thread each) of about equal cost (_halves)."""
    tmp = tmp_path_factory.mktemp("graded")
    out, unbuilt = {}, []
    for path in CHAPTERS:
        got = course.grade_execution(path)
        if got is None:
            unbuilt.append(path)
        else:
            out["solution", path.stem] = (course.score_line(*got), got[2])
    if unbuilt and _in_ci():
        pytest.fail(f"CI=true: no current execution in {course.EXECUTED} of {[p.name for p in unbuilt]} (missing, "
                    "other code, or older than the chapter or lib/): scripts/test.sh runs these tests after the book "
                    "build, so the build's copies must be there", pytrace=False)
    students = course.write_students(tmp / "student", CHAPTERS)
    runs = [("student", students)] + ([("solution", unbuilt)] if unbuilt else [])
    jobs = [(kind, i, group) for kind, nbs in runs for i, group in enumerate(_halves(nbs))]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for found in pool.map(lambda job: _grade_sh(*job, tmp), jobs):
            out.update(found)
    return out


@pytest.mark.after_build
@pytest.mark.parametrize("path", _exercise_chapters(), ids=lambda p: p.stem)
def test_solutions_score_full_marks(graded, path):
    score, nb = graded["solution", path.stem]
    m, hand = len(course.check_cells(nb)), course.hand_points(nb)
    assert score == f"{m}/{m}" + (f" +{course.fmt(hand)} by hand" if hand else ""), score
    assert _errors(nb) == []


@pytest.mark.after_build
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


# ---------------------------------------------------------------------------------------------------------------
# What a check reveals. A visible check tests the format of the answer and a sanity bound only: it prints nothing
# (a "correct" printed before the hidden tests run would be a lie when they fail), it calls none of the functions
# the solution calls (a visible check that recomputes the answer is the solution), and the grade is decided by
# hidden tests, which every check has. A name that a check reads from the solution is assigned nowhere else in the
# chapter (else an untouched notebook fails for a confusing reason, or passes on the chapter's own value). For a
# derivation, the reference value appears neither in the student notebook (text, visible checks, or anything
# the chapter prints) nor as the value of a `lib` formula called with the same arguments.

# chapters whose exercises have not been rewritten to these rules yet (the lead edits chapter 9)
NOT_YET: set = set()

# builtins, math, and the tensor helpers that convert or shape an answer (not the functions that compute it)
CALLS_ANY_CHECK_MAY_MAKE = set(dir(builtins)) | set(dir(math)) | {
    "as_tensor", "asarray", "array", "tensor", "arange", "zeros", "ones", "full", "linspace", "shape", "allclose",
    "isclose", "abs", "sqrt", "exp", "log", "mean", "sum", "std", "var", "item", "numpy", "double", "to"}


def _pending(paths):
    return [pytest.param(p, marks=pytest.mark.xfail(reason="exercises not yet rewritten", strict=False))
            if p.stem in NOT_YET else p for p in paths]


def _visible(src: str) -> str:
    return re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", src, flags=re.S)


def _exercises(nb) -> dict:
    """label -> (solution cell, [check cells]) of every exercise of a chapter."""
    out = {}
    for gid, c in course.exercise_cells(nb).items():
        label, kind = re.match(r"(ex-[\w-]+?)-(solution|answer|check(?:-[a-h])?)$", gid).groups()
        sol, checks = out.get(label, (None, []))
        if kind == "solution":
            sol = c
        elif kind.startswith("check"):
            checks = checks + [c]
        out[label] = (sol, checks)
    return out


class _Scope(ast.NodeVisitor):
    """Names a cell binds at its top level (assignments, loops, defs, imports), and every name it reads or calls."""

    def __init__(self, src: str, imports: bool = True):
        self.bound, self.read, self.calls, self.imports = set(), set(), set(), imports
        self._depth = 0
        self.visit(ast.parse(src))

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Store) and self._depth == 0:
            self.bound.add(node.id)
        elif isinstance(node.ctx, ast.Load):
            self.read.add(node.id)

    def visit_Call(self, node):
        f = node.func
        self.calls.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
        self.generic_visit(node)

    def _scope(self, node):
        if self._depth == 0 and hasattr(node, "name"):
            self.bound.add(node.name)
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _scope
    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _scope

    def visit_Import(self, node):
        if self.imports and self._depth == 0:
            self.bound.update((a.asname or a.name).split(".")[0] for a in node.names)

    visit_ImportFrom = visit_Import


BOOLEAN_ANSWER = re.compile(r"isinstance\(\w+, \(?(?:bool|np\.bool_)\b")


@pytest.mark.parametrize("path", _exercise_chapters(), ids=lambda p: p.stem)
def test_no_check_is_one_boolean(path):
    """A check whose answer is a boolean (a yes/no conclusion) also runs every hidden test of its exercise's
    first check, the quantity the conclusion is about: a student who guesses the boolean, or copies it from a
    classmate, without computing that quantity scores nothing on it. The first check itself is never a
    boolean (tests/test_course_pipeline.py plays that student on chapter 1 and sees 0 on every check)."""
    nb = nbformat.read(path, as_version=4)
    for label, (_, checks) in _exercises(nb).items():
        first = [c for c in checks if c.metadata.nbgrader["grade_id"] == f"{label}-check"]
        assert len(first) == 1, f"{label}: no first check {label}-check"
        assert not BOOLEAN_ANSWER.search(_visible(first[0].source)), f"{label}-check: its answer is one boolean"
        need = [line for line in course.HIDDEN_RE.search(first[0].source).group(1).strip().splitlines()
                if line.strip() and not line.strip().startswith("#")]
        for c in checks:
            if c is first[0] or not BOOLEAN_ANSWER.search(_visible(c.source)):
                continue
            hidden = course.HIDDEN_RE.search(c.source).group(1).splitlines()
            missing = [line for line in need if line not in hidden]
            assert not missing, (f"{c.metadata.nbgrader['grade_id']}: a boolean graded without its exercise's "
                                 f"first check (missing: {missing[0][:80]})")


@pytest.mark.parametrize("path", _pending(_exercise_chapters()), ids=lambda p: p.stem)
def test_checks_print_nothing_hold_hidden_tests_and_do_not_recompute_the_answer(path):
    nb = nbformat.read(path, as_version=4)
    for label, (sol, checks) in _exercises(nb).items():
        solution = _Scope(course.SOLUTION_RE.search(sol.source).group(1))
        sol_calls = solution.calls - solution.bound - CALLS_ANY_CHECK_MAY_MAKE     # its own functions excepted
        for c in checks:
            gid, visible = c.metadata.nbgrader["grade_id"], _visible(c.source)
            assert "print(" not in visible and "display(" not in visible, f"{gid}: a visible check prints"
            hidden = course.HIDDEN_RE.search(c.source)
            assert hidden, f"{gid}: no hidden tests: the visible check alone decides the grade"
            assert any(isinstance(n, ast.Assert) for n in ast.walk(ast.parse(hidden.group(1)))), gid
            shared = _Scope(visible).calls & sol_calls
            assert not shared, f"{gid}: the visible check calls what the solution calls: {sorted(shared)}"


@pytest.mark.parametrize("path", _pending(_exercise_chapters()), ids=lambda p: p.stem)
def test_no_name_a_check_reads_from_the_solution_is_assigned_elsewhere_in_the_chapter(path):
    nb = nbformat.read(path, as_version=4)
    chapter = set()
    for c in nb.cells:
        if c.cell_type == "code" and "nbgrader" not in c.metadata:
            chapter |= _Scope(c.source).bound
    for label, (sol, checks) in _exercises(nb).items():
        answers = _Scope(course.SOLUTION_RE.search(sol.source).group(1), imports=False).bound
        for c in checks:
            clash = answers & _Scope(c.source).read & chapter
            assert not clash, f"{c.metadata.nbgrader['grade_id']}: {sorted(clash)} also assigned by the chapter"


def _references(nb, label) -> list:
    """The values of the derivation exercise's answers at DERIVATIONS' arguments, from the instructor's solution."""
    sol = course.exercise_cells(nb)[f"{label}-solution"]
    ns = {}
    exec(SOLUTION_PRELUDE + course.SOLUTION_RE.search(sol.source).group(1), ns)
    return [ns[name] if args is None else ns[name](*args) for name, args in DERIVATIONS[label]]


def _spellings(x) -> set:
    """The ways a notebook could print x, keeping only those specific enough to identify it (4 digits or more)."""
    if isinstance(x, (bool, np.bool_)):
        return set()
    if isinstance(x, (int, np.integer)):
        return {str(int(x))} if abs(int(x)) >= 100 else set()
    x = float(x)
    out = {repr(x), f"{x:.4g}", f"{x:.5g}", f"{x:.6g}", f"{x:.3e}", f"{x:.4f}"}
    return {s for s in out if sum(ch.isdigit() for ch in s.lstrip("-0.").split("e")[0]) >= 4}


def _derivation_chapters():
    chapters = {p.stem: p for p in _exercise_chapters()}
    found = {}
    for p in chapters.values():
        labels = set(_exercises(nbformat.read(p, as_version=4)))
        found.update({lab: p for lab in DERIVATIONS if lab in labels})
    assert set(found) == set(DERIVATIONS), set(DERIVATIONS) - set(found)
    return sorted(found.items())


@pytest.mark.parametrize("label,path", _derivation_chapters(), ids=lambda x: x if isinstance(x, str) else "")
def test_derivation_answers_are_not_in_the_student_notebook(label, path):
    instructor = nbformat.read(path, as_version=4)
    student = course.student_version(instructor)
    text = "\n".join(c.source for c in student.cells)
    for (name, args), ref in zip(DERIVATIONS[label], _references(instructor, label)):
        for s in _spellings(ref):
            assert s not in text, f"{label}: {name}{args} = {s} is in the student notebook"


def _lib_formulas() -> dict:
    """Every public function of lib.theory and lib.analysis.lowerbound (the book's formulas), by qualified name."""
    modules = [importlib.import_module(f"lib.theory.{m.name}") for m in pkgutil.iter_modules(lib.theory.__path__)]
    modules.append(importlib.import_module("lib.analysis.lowerbound"))
    return {f"{m.__name__}.{n}": f for m in modules for n, f in vars(m).items()
            if callable(f) and not n.startswith("_") and getattr(f, "__module__", "") == m.__name__}


def _numbers(got) -> list:
    values = got.values() if isinstance(got, dict) else got if isinstance(got, (tuple, list)) else [got]
    return [float(v) for v in values if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)]


# the exercises whose search over lib's formulas takes seconds (over 1.5 s each on two loaded cores): marked
# slow, so the fast tier (-m "not slow") keeps only the quick cases; scripts/test.sh runs them all
SLOW_DERIVATIONS = {"ex-value-signal-var", "ex-attention-kappa", "ex-fact-count", "ex-lb-errors",
                    "ex-attention-softmax", "ex-refined-key-var", "ex-value-count-factor", "ex-lb-bayes",
                    "ex-refined-mb-orth"}


def _marked_slow(cases, slow):
    """The parametrize cases (tuples of values, or single values), those whose first value is in `slow`
    marked slow."""
    def first(c):
        return c[0] if isinstance(c, tuple) else c
    assert slow <= {first(c) for c in cases}, f"no such case to mark slow: {slow - {first(c) for c in cases}}"
    return [pytest.param(*(c if isinstance(c, tuple) else (c,)), marks=pytest.mark.slow) if first(c) in slow else c
            for c in cases]


@pytest.mark.parametrize("label,path", _marked_slow(_derivation_chapters(), SLOW_DERIVATIONS),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_derivation_answers_are_no_lib_formula(label, path):
    """No public formula of lib returns the answer, called with the exercise's first arguments in any order (a
    number, or an entry of a returned tuple, list or dict). A call that takes over a second is no formula lookup
    and is cut short."""
    def alarm(*_):
        raise TimeoutError
    previous = signal.signal(signal.SIGALRM, alarm)
    nb = nbformat.read(path, as_version=4)
    firsts = {}
    for (name, args), ref in zip(DERIVATIONS[label], _references(nb, label)):
        if args is not None and name not in firsts and not isinstance(ref, (bool, np.bool_)):
            firsts[name] = (args, float(ref))
    try:
        for name, (args, ref) in firsts.items():
            for fname, f in _lib_formulas().items():
                for perm in sorted(set(itertools.permutations(args))):
                    try:
                        inspect.signature(f).bind(*perm)
                    except (TypeError, ValueError):
                        continue
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            signal.setitimer(signal.ITIMER_REAL, 1.0)
                            got = f(*perm)
                    except BaseException:   # noqa: BLE001 -- arguments of the wrong kind, or the alarm
                        continue
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                    hits = [v for v in _numbers(got) if math.isclose(v, ref, rel_tol=1e-9)]
                    assert not hits, f"{label}: {fname}{perm} returns {name}{args} = {ref}"
    finally:
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.after_build
@pytest.mark.parametrize("label,path", _derivation_chapters(), ids=lambda x: x if isinstance(x, str) else "")
def test_derivation_answers_are_not_printed_by_the_chapter(graded, label, path):
    """Nothing the student notebook prints or shows as text when it runs spells the answer (images are not read:
    their base64 holds every short digit string by chance)."""
    _, executed = graded["student", path.stem]
    shown = []
    for c in executed.cells:
        for o in c.get("outputs", []):
            shown.append(o.get("text", ""))
            shown += [v for k, v in o.get("data", {}).items() if k.startswith("text/") and isinstance(v, str)]
    shown = "\n".join(shown)
    for (name, args), ref in zip(DERIVATIONS[label], _references(nbformat.read(path, as_version=4), label)):
        for s in _spellings(ref):
            assert s not in shown, f"{label}: {name}{args} = {s} is printed by the chapter"


# plausible wrong answers (the question the exercise used to ask, a dropped factor, the chapter's printed formula):
# each passes the visible check, which tests the format only, and fails the hidden tests, which hold the values
WRONG = {
    "ex-task-bayes-check": "bayes_exact = 0.75",
    "ex-task-bias-check": "def keyed_bias_var(V, d):\n    return (d + V + 1) * (d + 2) / d ** 2",
    "ex-int-sphere-margin-check": "def margin_var_sphere(n, d):\n    return 6 / d + (2 * n + 5) / d ** 2",
    "ex-value-count-factor-check": "def count_cross(N, V):\n    return 1.0                 # as if the counts were independent",
    "ex-value-signal-var-check": "def seen_signal_var(N, d, V):\n    return (1 + (V - 1) / N) * (1 + 2 / d) ** 2 - 1",
    "ex-value-coverage-check": "import sympy\ndef n_star(V):\n    return sympy.log(100) / -sympy.log(1 - 1 / V)\n\n"
                               "def n_all_seen(V):\n    return math.ceil(math.log(100) / -math.log(1 - 1 / V))",
    "ex-attention-kappa-check": "def gamma_needed(V, L, d):\n    return float(np.log(99 * (L - 1)) * L ** 3 * V / (0.01 * (L - 1) * (1 - 1 / V)))",
    "ex-attention-softmax-check": "def mean_odds(lam, L, d):\n    return (L - 1) * np.exp(-lam + lam ** 2 / (2 * d))",
    "ex-refined-mb-orth-check": "def var_bias_gap(V, N, tau):\n    return 2 * tau ** 4 * (1 / V) * (1 - 1 / V) / N",
    "ex-capacity-coverage-check": "def n_cov2(V, threshold):\n    return float(np.log(1 - threshold) / np.log(1 - 1 / V))",
    "ex-mlp-shift-check": "def lin_power(s):\n    return 3 * s ** 4 / math.sqrt(6)",
    "ex-mlp-signal-check": "def kappa_var_scaled(m, s):\n    return 14 * s ** 8 / m",
    "ex-train-entropy-gap-check": "def entropy_slope(b, L):\n    p = 1 / (1 + (L - 1) * math.exp(-b))\n    return float(-2 * b * p * (1 - p))",
    "ex-fact-count-check": "def onto_bits(S, R, D):\n    return S * R * math.log2(D)",
    "ex-lb-errors-check": "def table_bits(V, D, k):\n    return V * math.log2(D) - math.log2(sum(math.comb(V, j) for j in range(min(k, V) + 1)))",
    # the proof's over-count carried over to tables: choose the k subjects that may be wrong, any answers for them
    "ex-lb-errors-check#proof-count": "def table_bits(V, D, k):\n    return V * math.log2(D) - math.log2(math.comb(V, k) * D ** k)",
    "ex-lb-bayes-check": "def best_exact(S, V):\n    return (S + (S < V)) / V   # the per-token accuracy",
    "ex-lb-product-check": "def d_twice(V, rstar):\n    return V / math.sqrt(1 + V / rstar ** 2)",
    # the first-order term alone (the pairs' 1/N^2 part dropped)
    "ex-lb-pairs-check": "def no_self_root(psi, pi, q):\n    return psi / q\nn_no_self = 2",
}


@pytest.mark.parametrize("gid", _marked_slow(sorted(WRONG), {"ex-lb-bayes-check"}))
def test_a_wrong_answer_passes_the_visible_check_and_fails_the_hidden_tests(gid):
    cell = gid.split("#")[0]                # "<grade_id>#<name>": another wrong answer to the same check
    path = next(p for p in _exercise_chapters() if cell in course.exercise_cells(nbformat.read(p, as_version=4)))
    check = course.exercise_cells(nbformat.read(path, as_version=4))[cell].source
    for code, must_pass in ((_visible(check), True), (check, False)):
        ns = {}
        exec(SOLUTION_PRELUDE + WRONG[gid], ns)
        try:
            exec(code, ns)
            passed = True
        except AssertionError:
            passed = False
        assert passed is must_pass, f"{gid}: the {'visible' if must_pass else 'full'} check " + \
            ("rejects a well-formed answer" if must_pass else "accepts a wrong answer")



# the shortcuts that pass every check of their exercise: holes in the grading, each with why. strict: a hidden test
# that closes one makes its case pass, and then its entry here must go
SHORTCUT_HOLES = {
    "ex-attention-dmin#plug-in": "lib's population_min_d says r_inf = |z| sqrt(d): with |z_trig| = tau put in, it "
                                 "gives r*(L)^2 / tau^2, the answer itself, so no value test can tell it from the "
                                 "derivation (the scaling argument is graded by hand, in ex-attention-dmin-answer)",
}
# the shortcuts whose run takes about 3 s or more on two loaded cores (a check cut short by the time limit, a
# simulation): marked slow, as SLOW_DERIVATIONS
SLOW_SHORTCUTS = {"ex-value-signal-var", "ex-value-signal-var#window", "ex-fact-count", "ex-lb-errors", "ex-value-count-factor", "ex-attention-gaussian#antithetic",
                  "ex-refined-key-var", "ex-lb-bayes", "ex-int-sphere-margin", "ex-train-adam-first", "ex-task-bias"}
# seconds a check cell may run here: every check a shortcut does not brute-force ends (raises) well within it (16 s at
# most, on a loaded machine); one that runs past it fails the test
SHORTCUT_TIME_LIMIT = 60.0
# the checks a shortcut brute-forces, at arguments where no machine finishes inside the grader's limit (course.sh:
# 900 s a cell): each runs here for BRUTE_FORCE_LIMIT seconds and must still be running then (a declaration that no
# longer holds fails the test). The work, in Python-level steps (tens of nanoseconds each at the very least):
BRUTE_FORCE = {
    ("ex-fact-count", "ex-fact-count-check"): "every map of 60 subjects to 5 answers: 5^60",
    ("ex-fact-count", "ex-fact-count-check-b"): "every map of 60 subjects to 5 answers: 5^60",
    ("ex-lb-errors", "ex-lb-errors-check"): "the ball of 20 errors at V = 200, D = 8: about 10^44 tables",
    ("ex-value-count-factor", "ex-value-count-factor-check"): "the trinomial at N = 10^15: 5 10^29 terms",
    ("ex-value-count-factor", "ex-value-count-factor-check-b"): "the binomial at N = 10^15: 10^15 terms",
    ("ex-value-signal-var", "ex-value-signal-var-check"): "the binomial at N = 10^12: 10^12 terms",
}
BRUTE_FORCE_LIMIT = 3.0


class _TimeLimit(BaseException):
    """Raised by the alarm inside a check cell; a BaseException so that no `except Exception` in the student's
    code swallows it."""


def _chapter_names(path, names) -> str:
    """The chapter's own code for `names` (the imports and top-level functions that bind them, from the cells
    that are not part of an exercise): what the check cells of its exercises read from the chapter."""
    out, found = [], set()
    for c in nbformat.read(path, as_version=4).cells:
        if c.cell_type != "code" or "nbgrader" in c.metadata:
            continue
        for node in ast.parse(c.source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound = {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.FunctionDef):
                bound = {node.name}
            else:
                continue
            if bound & (set(names) - found):
                out.append(ast.get_source_segment(c.source, node))
                found |= bound
    assert set(names) <= found, f"{path.stem} does not define {sorted(set(names) - found)}"
    return "\n".join(out) + "\n"


def _globals(src: str) -> tuple[set, set]:
    """(names the cell binds at its top level, global names it reads anywhere, in its functions too)."""
    bound, read = set(), set()

    def walk(table, top):
        for s in table.get_symbols():
            if top and (s.is_assigned() or s.is_imported()):
                bound.add(s.get_name())
            elif s.is_referenced() and (top or s.is_global()):
                read.add(s.get_name())
        for child in table.get_children():
            walk(child, False)

    walk(symtable.symtable(src, "<cell>", "exec"), True)
    return bound, read


def _run_shortcut(key: str, every: bool = False) -> dict:
    """Execute the shortcut, then the check cells of its exercise in full (visible and hidden tests) in the same
    namespace, as the grader does, each under SHORTCUT_TIME_LIMIT (BRUTE_FORCE_LIMIT for the checks of
    BRUTE_FORCE), up to the first that fails (all of them with `every`); {grade_id: None if it passed, else why
    not}."""
    label = key.split("#")[0]
    path = dict(_derivation_chapters())[label]
    _, checks = _exercises(nbformat.read(path, as_version=4))[label]
    ns = {}
    exec(SOLUTION_PRELUDE, ns)
    cells = [c.source for c in checks] + [SHORTCUTS[key]]
    bound, read = set(), set()
    for src in cells:
        b, r = _globals(src)
        bound, read = bound | b, read | r
    missing = read - bound - set(ns) - set(dir(builtins))
    exec(_chapter_names(path, missing) if missing else "", ns)
    exec(SHORTCUTS[key], ns)

    def alarm(*_):
        raise _TimeLimit

    previous = signal.signal(signal.SIGALRM, alarm)
    out = {}
    try:
        for c in checks:
            gid = c.metadata.nbgrader["grade_id"]
            limit = BRUTE_FORCE_LIMIT if (key, gid) in BRUTE_FORCE else SHORTCUT_TIME_LIMIT
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    signal.setitimer(signal.ITIMER_REAL, limit)
                    exec(c.source, ns)
                out[gid] = None
            except NameError:   # a name the chapter defines and _chapter_names missed: this harness's error
                raise
            except Exception as e:  # noqa: BLE001 -- the grader scores a cell that raises 0, whatever it raises
                out[gid] = f"{type(e).__name__} {e}".strip()
            except _TimeLimit:
                out[gid] = f"over {limit:g} s"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if out[gid] is not None and not every:
                break
    finally:
        signal.signal(signal.SIGALRM, previous)
    return out


def _shortcut_cases():
    """SHORTCUTS' keys, those of SLOW_SHORTCUTS marked slow, the holes (SHORTCUT_HOLES) marked xfail with why."""
    assert set(SHORTCUT_HOLES) <= set(SHORTCUTS), set(SHORTCUT_HOLES) - set(SHORTCUTS)
    out = []
    for case in _marked_slow(sorted(SHORTCUTS), SLOW_SHORTCUTS):
        key, marks = (case.values[0], list(case.marks)) if hasattr(case, "values") else (case, [])
        if key in SHORTCUT_HOLES:
            marks.append(pytest.mark.xfail(strict=True, reason=SHORTCUT_HOLES[key]))
        out.append(pytest.param(key, marks=marks) if marks else key)
    return out


def test_every_derivation_has_a_shortcut_student():
    assert {k.split("#")[0] for k in SHORTCUTS} == set(DERIVATIONS)


@pytest.mark.parametrize("key", _shortcut_cases())
def test_a_shortcut_student_fails_every_derivation(key):
    """The shortcut earns nothing on the exercise: every one of its check cells raises (an assertion or any error:
    the grader scores a cell that raises 0) or, for the checks of BRUTE_FORCE, is still running after
    BRUTE_FORCE_LIMIT seconds; each run after the shortcut as the grader runs it, whatever the checks before it did."""
    outcome = _run_shortcut(key, every=True)
    passed = [gid for gid, why in outcome.items() if why is None]
    assert not passed, f"{key}: the shortcut passes {passed}: {outcome}"
    # a check declared brute force is still running when stopped: its arguments have not shrunk to a size where
    # the shortcut ends (and, ending, might pass under the grader's longer limit)
    stopped = f"over {BRUTE_FORCE_LIMIT:g} s"
    ended = {gid: why for gid, why in outcome.items() if (key, gid) in BRUTE_FORCE and why != stopped}
    assert not ended, f"{key}: declared brute force, but these checks ended within {BRUTE_FORCE_LIMIT:g} s: {ended}"
    # any other check raises before the time limit: one stopped by it might have passed under the grader's 900 s
    slow = [gid for gid, why in outcome.items() if (key, gid) not in BRUTE_FORCE and why == f"over {SHORTCUT_TIME_LIMIT:g} s"]
    assert not slow, f"{key}: these checks ran past {SHORTCUT_TIME_LIMIT:g} s without being declared brute force: {slow}"


def test_brute_force_declarations_name_a_shortcut_and_a_check_of_its_exercise():
    paths = dict(_derivation_chapters())
    for key, gid in BRUTE_FORCE:
        label = key.split("#")[0]
        assert key in SHORTCUTS, key
        _, checks = _exercises(nbformat.read(paths[label], as_version=4))[label]
        assert gid in {c.metadata.nbgrader["grade_id"] for c in checks}, (key, gid)


@pytest.mark.slow
def test_grader_leaves_the_folder_as_found_and_runs_one_thread(tmp_path, monkeypatch):
    """A chapter that writes beside itself (chapters 10 and 11 write _cache/) leaves the submission's
    folder as it was; the kernel runs with one thread unless the caller set a count; the grader's own
    environment is given back."""
    src, nb = _toy(tmp_path)
    nb.cells.insert(1, nbformat.v4.new_code_cell(
        'import os, torch\nos.makedirs("_cache", exist_ok=True)\nopen("_cache/points.jsonl", "w").close()\n'
        'threads = (os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads())'))
    nb.cells[-1].source = TOY_CHECK.replace('print("correct")', 'assert threads == ("1", 1), threads')
    nbformat.write(nb, src / "toy.ipynb")
    stud = tmp_path / "student"
    stud.mkdir()
    nb.cells[2].source = "answer = 42"
    nbformat.write(nb, stud / "toy.ipynb")
    before = sorted(p.relative_to(stud) for p in stud.rglob("*"))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert course.grade(stud / "toy.ipynb", src)[:2] == (1, 1)
    assert sorted(p.relative_to(stud) for p in stud.rglob("*")) == before
    assert "OMP_NUM_THREADS" not in os.environ


def test_execute_fills_every_glued_number_without_a_book_build(tmp_path, monkeypatch):
    """With `--execute` a chapter that has no current execution is run in its own folder (one kernel) and
    its glued values fill the text: no "computed when you run the notebook" marker is left; the run is
    kept and reused while current; a chapter whose cell fails stops the release with its name."""
    book = tmp_path / "book"
    book.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("a {glue:text}`x:.2f`, b {glue:text}`n`"),
                nbformat.v4.new_code_cell("import pathlib\nfrom myst_nb import glue\n"
                                          "glue('x', 2 / 3, display=False)\n"
                                          "glue('n', len(pathlib.Path('here.txt').read_text()), display=False)")]
    nbformat.write(nb, book / "toy.ipynb")
    (book / "here.txt").write_text("seven!!")                  # read relative to the chapter's folder
    monkeypatch.setattr(course, "COURSE_EXECUTED", tmp_path / "course_execute")
    src, filled, used = course.source_version(book / "toy.ipynb", tmp_path / "nowhere", execute=True)
    assert (filled, used) == (2, True) and src.cells[0].source == "a 0.67, b 7"
    assert (tmp_path / "course_execute" / "toy.ipynb").exists()
    (book / "here.txt").write_text("changed, but the chapter's code is not: the kept run is reused")
    assert course.source_version(book / "toy.ipynb", None, execute=True)[0].cells[0].source == "a 0.67, b 7"
    out = course.write_students(tmp_path / "students", [book / "toy.ipynb"], None, execute=True)
    assert "computed when you run" not in nbformat.read(out[0], as_version=4).cells[0].source
    nb.cells[1].source += "\nraise ValueError('boom')"
    nbformat.write(nb, book / "toy.ipynb")
    with pytest.raises(SystemExit, match="toy.ipynb: a cell failed .*boom"):
        course.source_version(book / "toy.ipynb", None, execute=True)


def test_released_markdown_is_plain_markdown_that_jupyter_renders():
    """Jupyter shows MyST directives as code blocks and roles as raw text: the released notebooks write
    them as Markdown (a bold heading over the body, math kept; a reference by its target's name; a
    citation by authors and year), on a hand-made cell and on every chapter."""
    text = ("See {prf:ref}`prop-x` and {prf:ref}`the bound <prop-x>`, after {cite:t}`vural2026recall` "
            "{cite:p}`nichani2025factual`.\n\n````{exercise} A title\n:label: ex-a\n\nDerive $x^2$.\n\n"
            "```{prf:proof}\nInner $$y$$\n```\n````\n\n:::{prf:proposition} Law\n:label: prop-x\n\nBody.\n:::\n")
    titles = {"prop-x": "Proposition (Law)"}
    out = course.plain_markdown(text, titles)
    assert out == ("See Proposition (Law) and the bound, after Vural et al. (2026) (Nichani et al., 2025).\n\n"
                   "**Exercise: A title.**\n\nDerive $x^2$.\n\n*Proof.*\n\nInner $$y$$\n\n"
                   "**Proposition (Law).**\n\nBody.\n"), out
    for path in course.chapters():
        nb, _, _ = course.source_version(path, None)
        md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        left = re.findall(r"\{(?:exercise|prf:[a-z]+|cite:[tp]|doc)\}|^(?:`{3,}|:{3,})\{", md, re.M)
        assert not left, (path.name, left[:3])
        assert md.count("$") >= 2 and "**Exercise" in md or not course.check_cells(nb)


@pytest.mark.slow
def test_a_check_can_call_the_students_function_on_symbols(tmp_path):
    """Checks by form call the student's function on sympy symbols: under the grader the function runs in the
    student's kernel and its expression comes back as a tree of plain data, rebuilt from a whitelist of sympy
    heads (nothing evaluated as code). A correct closed form scores 1, a numerical one (it cannot take a
    symbol) and a wrong form 0; a tree with another head is refused."""
    src, nb = _toy(tmp_path)
    nb.cells[1].source = "### BEGIN SOLUTION\ndef f(s, m):\n    return (24 * s ** 8 - 2 * s ** 4) / m + s ** 0.5\n### END SOLUTION"
    nb.cells[2].source = ("assert callable(f)\n### BEGIN HIDDEN TESTS\nimport sympy as _sp\n"
                          "_s, _m = _sp.symbols('s m', positive=True)\n_e = f(_s, _m)\n"
                          "assert isinstance(_e, _sp.Expr) and _e.free_symbols == {_s, _m}\n"
                          "for _v in ((1.3, 2.0), (7.0, 0.5)):\n"
                          "    _want = (24 * _v[0] ** 8 - 2 * _v[0] ** 4) / _v[1] + _v[0] ** 0.5\n"
                          "    assert abs(float(_e.subs(dict(zip((_s, _m), _v)))) / _want - 1) < 1e-12\n"
                          "### END HIDDEN TESTS")
    nbformat.write(nb, src / "toy.ipynb")
    stud = tmp_path / "student"
    course.write_students(stud, [src / "toy.ipynb"])
    for answer, want in (("def f(s, m):\n    return s ** 0.5 + (24 * s ** 8 - 2 * s ** 4) / m", 1),
                         ("import math\ndef f(s, m):\n    return (24 * s ** 8 - 2 * s ** 4) / m + math.sqrt(s)", 0),
                         ("def f(s, m):\n    return (24 * s ** 8 - 3 * s ** 4) / m + s ** 0.5", 0)):
        student = nbformat.read(stud / "toy.ipynb", as_version=4)
        student.cells[1].source = answer
        nbformat.write(student, stud / "toy.ipynb")
        assert course.grade(stud / "toy.ipynb", src)[:2] == (want, 1), answer
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import course_check_runner as runner
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    x = runner.decode_sympy(("Add", (("Symbol", "x", (("positive", True),)), ("Rational", 1, 2))))
    assert str(x) == "x + 1/2"
    with pytest.raises(TypeError, match="not an expression"):
        runner.decode_sympy(("Function", (("Symbol", "x", ()),)))
