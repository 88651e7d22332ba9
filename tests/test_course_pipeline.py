"""The course workflow on nbgrader's real pipeline (scripts/course.sh): a mock course on chapter 1
(the quickest chapter with written answers: about 30 s an execution on one thread) with three
students, released, collected, autograded, exported per exercise and given feedback; and
nbgrader's own generate_assignment, run on every chapter as it is in book/, releases no solution.

The mock course executes chapter 1 three times, one thread each (fixture 155 to 200 s on two cores
shared with other work); the release of every chapter takes 15 to 25 s: 3 to 4 minutes in all.
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

import nbformat
import pytest
from nbgrader import utils as nbg_utils

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("course", ROOT / "scripts" / "course.py")
course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(course)

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


def _fill(released, source, labels, answers=True):
    """The released notebook with the instructor's solutions typed in for the given exercises."""
    nb = copy.deepcopy(released)
    ref = course.exercise_cells(source)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id", "")
        label = gid.rsplit("-", 1)[0]
        if label not in labels or not nbg_utils.is_solution(c):
            continue
        if c.cell_type == "code":
            c.source = course.SOLUTION_RE.search(ref[gid].source).group(1).strip("\n")
        elif answers:
            c.source = ref[gid].source
    return nb


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
    students = {"alice": _fill(released, source, labels), "bob": released, "carol": carol}
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
                collected=collected.stdout)


def _by_student(rows):
    out = {}
    for r in rows:
        assert r["assignment"] == A and r["notebook"] == A
        out.setdefault(r["student"], []).append((r["grade_id"], float(r["score"]), float(r["max_score"]),
                                                 r["needs_manual_grade"]))
    return out


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
