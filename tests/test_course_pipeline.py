"""The course workflow on nbgrader's real pipeline (scripts/course.sh): a mock course on chapter 1
(the quickest chapter with written answers: about 30 s an execution on one thread) with three
students, released, collected, autograded, exported per exercise and given feedback; and
nbgrader's own generate_assignment, run on every chapter as it is in book/, releases no solution.

The mock course executes chapter 1 three times, one thread each (fixture 155 to 200 s on two cores
shared with other work); the release of every chapter takes 15 to 25 s. Five more students tamper with
the grading (CHEATS: short notebooks, about 10 s each to grade), graded by autograde, by grade.sh and,
as a control, in their own kernel: with them, 8 tests took 10 minutes on two loaded cores.
"""

import copy
import csv
import importlib.util
import html as html_lib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbgrader import utils as nbg_utils

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("course", ROOT / "scripts" / "course.py")
course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(course)
sys.path.insert(0, str(ROOT / "scripts"))
from course_students import (CHEATS, GUESS, chapter_cheats, cheat_notebook,  # noqa: E402
                             fill as _fill, solution_names)

COURSE_SH = ROOT / "scripts" / "course.sh"
CHAPTER = ROOT / "book" / "01_task.ipynb"
A = CHAPTER.stem
NBGRADER = ROOT / ".venv" / "bin" / "nbgrader"
ENV = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}


def sh(*args, cwd=None):
    r = subprocess.run(["bash", str(COURSE_SH), *map(str, args)], capture_output=True, text=True,
                       cwd=cwd, env=ENV)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def secrets(nb) -> list[str]:
    """What a student must not see: solution regions, written answers (the instructor's prose),
    hidden tests, and any text of a solution-wrapper cell besides its fence."""
    out = []
    fence = re.compile(r"^(```(\{solution-(start|end)\}.*)?|:class: dropdown)$")
    for c in nb.cells:
        if nbg_utils.is_solution(c) and c.cell_type == "markdown":
            out.append(c.source)
        if "solution-wrapper" in c.metadata.get("tags", []):
            out.append("\n".join(line for line in c.source.splitlines() if not fence.match(line.strip())))
        out += [m.group(1) for m in course.SOLUTION_RE.finditer(c.source)]
        out += [m.group(1) for m in course.HIDDEN_RE.finditer(c.source)]
    return [t for t in out if t.strip()]


def leaks(released, instructor) -> list[str]:
    text = "\n".join(c.source for c in released.cells)
    lines = {line.strip() for line in text.splitlines()}
    found = [m for m in ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS") if m in text]
    for t in secrets(instructor):
        if t.strip() in text:
            found.append(t.strip()[:80])
        found += [line.strip() for line in t.splitlines()
                  if len(line.strip()) >= 25 and not line.strip().startswith(("import ", "from "))
                  and line.strip() in lines]
    return found


@pytest.mark.slow
def test_plain_nbgrader_release_of_every_chapter_has_no_solution(tmp_path):
    """`nbgrader generate_assignment` on the chapters exactly as they are in book/ (no course.py,
    no course.sh): no solution code, written answer or hidden test in the release, and the
    dropdown fences left balanced."""
    chapters = course.exercise_chapters()
    assert len(chapters) >= 10
    (tmp_path / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.course_id = "plain"\n')
    for p in chapters:
        (tmp_path / "source" / p.stem).mkdir(parents=True)
        shutil.copy(p, tmp_path / "source" / p.stem / p.name)
    r = subprocess.run([str(NBGRADER), "generate_assignment", "*"], cwd=tmp_path, env=ENV,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    n_answers = 0
    for p in chapters:
        instructor = nbformat.read(p, as_version=4)
        released = nbformat.read(tmp_path / "release" / p.stem / p.name, as_version=4)
        assert secrets(instructor), p.name
        assert leaks(released, instructor) == [], p.name
        answers = [c for c in released.cells if nbg_utils.is_solution(c) and c.cell_type == "markdown"]
        assert all(c.source == "YOUR ANSWER HERE" for c in answers)
        n_answers += len(answers)
        fences = [c.source.split()[0] for c in released.cells
                  if c.cell_type == "markdown" and c.source.startswith("```{solution-")]
        assert fences == ["```{solution-start}", "```{solution-end}"] * (len(fences) // 2), p.name
        exercises = {c.metadata.nbgrader["grade_id"].split("-check")[0] for c in course.check_cells(released)}
        assert len(fences) == 2 * len(exercises), p.name             # one dropdown per exercise, one check per part
    assert n_answers >= 30


@pytest.fixture(scope="module")
def mock_course(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("course")
    c, subs = tmp / "course", tmp / "SUBMISSIONS"
    # a second, tiny assignment that writes a _cache/ beside the notebook, as chapters 10 and 11 do
    toy = nbformat.v4.new_notebook()
    toy.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    toy.cells = [nbformat.v4.new_code_cell('import os\nos.makedirs("_cache", exist_ok=True)\n'
                                           'open("_cache/points.jsonl", "w").close()')]
    nbformat.write(toy, tmp / "toy_cache.ipynb")
    sh("init", c, "--id", "mock", "--no-executed", CHAPTER, tmp / "toy_cache.ipynb")
    sh("release", c)
    source = nbformat.read(c / "source" / A / f"{A}.ipynb", as_version=4)
    released = nbformat.read(c / "release" / A / f"{A}.ipynb", as_version=4)
    labels = [g.rsplit("-", 1)[0] for g in course.exercise_cells(source) if g.endswith("-check")]
    assert len(labels) == 4
    half = labels[:2]
    carol = _fill(released, source, half, answers=False)
    # cheating: a copied check with a new grade_id worth 100 points, and a second copy of an
    # unsolved exercise's check (same grade_id, 50 points) that passes whatever the answer
    checks = {c.metadata.nbgrader["grade_id"]: i for i, c in enumerate(carol.cells) if nbg_utils.is_grade(c)}
    fake = copy.deepcopy(carol.cells[checks[f"{half[1]}-check"]])
    fake.metadata.nbgrader.update(grade_id="ex-bonus-check", points=100)
    fake.source, fake.id = 'print("correct")', "fakebonus"
    dup = copy.deepcopy(carol.cells[checks[f"{labels[2]}-check"]])
    dup.metadata.nbgrader["points"] = 50
    dup.source, dup.id = 'print("correct")', "fakedup1"
    carol.cells.insert(checks[f"{labels[2]}-check"] + 1, dup)
    carol.cells.insert(checks[f"{half[1]}-check"] + 1, fake)
    students = {"alice": _fill(released, source, labels), "bob": released, "carol": carol,
                **{f"cheat_{k}": cheat_notebook(released, code) for k, code in {**CHEATS, **GUESS}.items()}}
    for s, nb in students.items():
        (subs / s).mkdir(parents=True)
        nbformat.write(nb, subs / s / f"{A}.ipynb")
    shutil.copy(c / "release" / "toy_cache" / "toy_cache.ipynb", subs / "alice")
    before = {p: p.read_bytes() for p in subs.rglob("*") if p.is_file()}
    collected = sh("collect", c, subs)
    grade = sh("autograde", c)
    sh("export", c, tmp / "grades.csv")
    sh("feedback", c)
    after = {p: p.read_bytes() for p in subs.rglob("*") if p.is_file()}
    with open(tmp / "grades.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["assignment"] == A]
    return dict(course=c, source=source, released=released, labels=labels, half=half, rows=rows,
                before=before, after=after, log=grade.stdout + grade.stderr,
                collected=collected.stdout, subs=subs)


def _by_student(rows, cheats=False):
    out = {}
    for r in rows:
        if r["student"].startswith("cheat_") != cheats:
            continue
        assert r["assignment"] == A and r["notebook"] == A
        out.setdefault(r["student"], []).append((r["grade_id"], float(r["score"]), float(r["max_score"]),
                                                 r["needs_manual_grade"]))
    return out


@pytest.mark.slow
def test_per_exercise_csv(mock_course):
    rows = _by_student(mock_course["rows"])
    source = mock_course["source"]
    ids = [c.metadata.nbgrader["grade_id"] for c in source.cells if nbg_utils.is_grade(c)]
    assert sorted(rows) == ["alice", "bob", "carol"]
    for s, got in rows.items():
        assert [g[0] for g in got] == ids, s             # one row per grade cell, none invented
        for gid, score, mx, manual in got:
            assert mx == float(course.exercise_cells(source)[gid].metadata.nbgrader["points"]) == 1
            if gid.endswith("-answer"):   # an answer written waits for a person, an untouched one scores 0
                assert (score, manual) == (0, "1" if s == "alice" else "0"), (s, gid)
            else:
                assert manual == "0", (s, gid)
    checks = lambda s: {g: sc for g, sc, _, _ in rows[s] if "-check" in g}      # every part's check
    assert set(checks("alice").values()) == {1}
    assert set(checks("bob").values()) == {0}
    half = mock_course["half"]
    # an exercise with parts has one check per part (<label>-check, <label>-check-b): each scores alone
    assert checks("carol") == {g: float(g.split("-check")[0] in half) for g in ids if "-check" in g}
    n_ans = sum(g.endswith("-answer") for g in ids)
    assert n_ans == 2 and len(ids) == 9


@pytest.mark.slow
def test_a_hand_grade_reaches_the_export(mock_course, tmp_path):
    """What formgrader does when an instructor grades a written answer (nbgrader 0.9's
    server_extensions/formgrader/apihandlers.py, GradeHandler.put: set the grade's manual score, clear
    needs_manual_grade, commit), done through nbgrader's API on a copy of the course: `course.sh export` then
    reports that score with needs_manual_grade 0, and the other rows are unchanged."""
    from nbgrader.api import Gradebook
    c = tmp_path / "course"
    shutil.copytree(mock_course["course"], c)
    answer = next(g for g, _, _, manual in _by_student(mock_course["rows"])["alice"] if manual == "1")
    with Gradebook(f"sqlite:///{c / 'gradebook.db'}") as gb:
        grade = gb.find_grade(answer, A, A, "alice")
        grade.manual_score, grade.needs_manual_grade = 1.0, False
        gb.db.commit()
    sh("export", c, tmp_path / "after.csv")
    with open(tmp_path / "after.csv", newline="") as f:
        after = _by_student([r for r in csv.DictReader(f) if r["assignment"] == A])
    before = _by_student(mock_course["rows"])
    assert dict((g, (sc, m)) for g, sc, _, m in after["alice"])[answer] == (1.0, "0")
    assert [r for r in after["alice"] if r[0] != answer] == [r for r in before["alice"] if r[0] != answer]
    assert after["bob"] == before["bob"] and after["carol"] == before["carol"]


@pytest.mark.slow
def test_gradebook_totals_and_cheating_refused(mock_course):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{mock_course['course'] / 'gradebook.db'}") as gb:
        totals = {s: (gb.find_submission(A, s).score, gb.find_submission(A, s).max_score)
                  for s in ("alice", "bob", "carol")}
        assert [g.name for g in gb.find_assignment(A).notebooks[0].grade_cells
                if g.name.startswith("ex-bonus")] == []
    assert totals == {"alice": (7, 9), "bob": (0, 9), "carol": (3, 9)}
    log = mock_course["log"]
    out = mock_course["collected"]
    assert "ignored a cell that is not the assignment's: ex-bonus-check" in out
    assert "ignored a cell that is not the assignment's: copy of ex-task-trigger-check" in out
    assert "Attribute 'points' for cell ex-task-trigger-check has changed" in log   # 50 -> 1


@pytest.mark.slow
def test_submissions_left_as_found_and_feedback_written(mock_course):
    assert mock_course["after"] == mock_course["before"]
    c = mock_course["course"]
    assert (c / "autograded" / "alice" / "toy_cache" / "_cache" / "points.jsonl").exists()
    assert not (c / "feedback" / "alice" / "toy_cache" / "_cache").exists()
    for s in ("alice", "bob", "carol"):
        assert (c / "submitted" / s / A / f"{A}.ipynb").exists()
        html = (c / "feedback" / s / A / f"{A}.html").read_text()
        assert "ex-task-beta" in html or "sharpness threshold" in html
    # feedback shows no hidden test: not in the check cells, not in a failing check's traceback
    hidden = [line.strip() for text in course.HIDDEN_RE.findall("\n".join(
        x.source for x in course.check_cells(mock_course["source"]))) for line in text.splitlines()
        if len(line.strip()) >= 12 and not line.strip().startswith("#")]
    released = "\n".join(x.source for x in mock_course["released"].cells)
    hidden = [h for h in hidden if h not in released]            # lines the chapter also shows elsewhere
    assert len(hidden) >= 4
    for s in ("alice", "bob", "carol"):
        page = html_lib.unescape(re.sub(r"<[^>]+>", "", (c / "feedback" / s / A / f"{A}.html").read_text()))
        shown = [h for h in hidden if h in page]
        assert not shown, (s, shown[:3])
    bob = html_lib.unescape(re.sub(r"<[^>]+>", "", (c / "feedback" / "bob" / A / f"{A}.html").read_text()))
    assert "this check did not pass" in bob and "hidden tests: they run when the exercise is graded" in bob


@pytest.mark.slow
def test_released_notebook_is_clean(mock_course):
    released, c = mock_course["released"], mock_course["course"]
    text = "\n".join(x.source for x in released.cells)
    assert "{glue:text}" not in text and "{solution-" not in text
    assert re.search(r"\(`bayes_unmarked`: computed when you run the notebook\)", text)
    assert leaks(released, nbformat.read(CHAPTER, as_version=4)) == []
    assert json.loads((c / "release" / A / f"{A}.ipynb").read_text())["metadata"]["kernelspec"]["name"] == "python3"


def test_course_script_usage():
    r = subprocess.run(["bash", str(COURSE_SH)], capture_output=True, text=True, env=ENV)
    assert r.returncode == 2 and "course.sh init COURSE" in r.stderr
    r = subprocess.run(["bash", str(COURSE_SH), "autograde", "/nonexistent/course"], capture_output=True,
                       text=True, env=ENV)
    assert r.returncode == 2 and "no course folder" in r.stderr


# the points each tampering student gains when the checks run in the student's own kernel (nbgrader's Execute)
IN_KERNEL = {"strip_input": 7, "strip_ast": 7, "patch_lib": 2, "magic_float": 4, "patch_builtins": 3}


@pytest.mark.slow
def test_tampering_scores_zero_under_autograde(mock_course):
    """Each student who strips asserts, patches lib or builtins, answers with a lying float subclass, or
    sets every boolean answer right without computing anything scores 0 on every exercise in nbgrader's
    gradebook; the honest student keeps full marks."""
    rows = _by_student(mock_course["rows"], cheats=True)
    assert sorted(rows) == sorted(f"cheat_{k}" for k in {**CHEATS, **GUESS})
    for s, got in rows.items():
        checks = {g: sc for g, sc, _, _ in got if "-check" in g}
        assert len(checks) == 7 and set(checks.values()) == {0}, (s, checks)
    assert {g: sc for g, sc, _, _ in _by_student(mock_course["rows"])["alice"] if "-check" in g} == \
        {g: 1 for g, _, _, _ in _by_student(mock_course["rows"])["alice"] if "-check" in g}
    assert "GraderError" not in mock_course["log"]


@pytest.mark.slow
def test_tampering_scores_zero_under_grade_sh(mock_course, tmp_path):
    """scripts/grade.sh: the same tampering notebooks score 0, the honest one full marks."""
    names = ["alice", *(f"cheat_{k}" for k in {**CHEATS, **GUESS})]
    paths = []
    for s in names:
        (tmp_path / s).mkdir()
        shutil.copy(mock_course["subs"] / s / f"{A}.ipynb", tmp_path / s / f"{A}.ipynb")
        paths.append(tmp_path / s / f"{A}.ipynb")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "grade.sh"), *map(str, paths)], capture_output=True,
                       text=True, env={**ENV, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines == [f"{A}: 7/7 +2 by hand"] + [f"{A}: 0/7 +2 by hand"] * len({**CHEATS, **GUESS}), r.stdout


@pytest.mark.slow
def test_tampering_defeats_checks_run_in_the_students_kernel(mock_course, tmp_path):
    """The control: run in the student's own kernel (nbgrader's Execute, as autograde did before),
    each tampering notebook gains points, so the tests above test the clean runs, not broken cheats."""
    instructor = nbformat.read(CHAPTER, as_version=4)
    for k in CHEATS:
        nb = nbformat.read(mock_course["subs"] / f"cheat_{k}" / f"{A}.ipynb", as_version=4)
        course.restore_checks(nb, instructor)
        got, _ = course.score(course.execute(nb, tmp_path), instructor)
        assert got == IN_KERNEL[k], (k, got)


# ---------------------------------------------------------------------------------------------------------------
# The same tampering on every exercise chapter. The chapter-1 students above answer chapter 1's own names; these
# are built from each chapter's solution code: every public name it assigns gets a value, every function it
# defines returns one, so each check finds the names it reads and only the grading can refuse them.

@pytest.mark.slow
def test_tampering_scores_zero_on_every_exercise_chapter(tmp_path):
    """On every exercise chapter, each of the five tampering students (asserts stripped from the input or
    from the syntax tree; lib patched; every answer a float subclass that passes every comparison;
    builtins patched; the last three answering every name of the chapter's solutions) scores 0 under scripts/grade.sh
    (nbgrader's grading rule, each check in a clean process fed the answers as data)."""
    chapters = course.exercise_chapters()
    assert len(chapters) >= 11
    paths = []
    for p in chapters:
        instructor = nbformat.read(p, as_version=4)
        funcs, names = solution_names(instructor)
        assert funcs or names, p.name
        released = course.student_version(instructor)
        for k, code in chapter_cheats(instructor).items():
            (tmp_path / k).mkdir(exist_ok=True)
            nbformat.write(cheat_notebook(released, code), tmp_path / k / p.name)
            paths.append(tmp_path / k / p.name)
    half = len(paths) // 2
    procs = [subprocess.Popen(["bash", str(ROOT / "scripts" / "grade.sh"), *map(str, part)], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**ENV, "OMP_NUM_THREADS": "1"}) for part in (paths[:half], paths[half:])]
    outs = [pr.communicate(timeout=3000) for pr in procs]
    assert all(pr.returncode == 0 for pr in procs), [e[-3000:] for _, e in outs]
    lines = "".join(o for o, _ in outs).strip().splitlines()
    assert len(lines) == len(paths)
    scores = [re.match(r"^\S+: (\S+)/(\S+)", line).groups() for line in lines]
    assert all(float(s) == 0 and float(m) > 0 for s, m in scores), [
        (p.parent.name, line) for p, line, (s, m) in zip(paths, lines, scores) if not (float(s) == 0 and float(m) > 0)]


@pytest.mark.slow
def test_chapter_cheats_gain_points_in_the_students_kernel(tmp_path):
    """The control of the test above, on chapter 4: run in the student's own kernel, the asserts stripped
    from the input or from the syntax tree pass checks (5 of 8 when measured), so that test tests the clean
    runs, not cheats that fail by themselves."""
    p = course.BOOK / "04_value_step.ipynb"
    instructor = nbformat.read(p, as_version=4)
    released = course.student_version(instructor)
    cheats = chapter_cheats(instructor)
    for k in ("strip_input", "strip_ast"):
        nb = cheat_notebook(released, cheats[k])
        course.restore_checks(nb, instructor)
        got, max_score = course.score(course.execute(nb, tmp_path), instructor)
        assert 0 < got < max_score == 8, (k, got, max_score)
