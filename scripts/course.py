"""Course tooling: student notebooks and an autograder for the book's chapters (nbgrader 0.9).

The chapters follow one exercise convention (see the "For instructors" page):

  exercise statement (markdown)  ->  solution-start fence (markdown, tag solution-wrapper)
  ->  [written answer: markdown, nbgrader "manually graded answer" (solution + grade, 1 point),
       holding the instructor's derivation or explanation]
  ->  solution code cell (nbgrader solution, ### BEGIN/END SOLUTION)
  ->  solution-end fence (markdown, tag solution-wrapper)  ->  check cell (nbgrader grade, locked, points)

The fences only open and close the solution dropdown of the HTML book; everything a student must not
see lives in nbgrader cells, so `nbgrader generate_assignment` itself releases no solution (the
written answer becomes "YOUR ANSWER HERE"). The full nbgrader course workflow is scripts/course.sh.

`student` applies nbgrader's own preprocessors, in the order `nbgrader generate_assignment` uses, to
each notebook, after removing the solution-wrapper cells (the dropdown fences), and fills in the
glued numbers as `source` does.
`grade` executes a notebook and scores its check cells; before executing, it puts back the
instructor's version of every check cell (matched by grade_id), so hidden tests count and an edited
check cell does not; each check runs in a clean process fed the answers as data (course_guard.py). Written answers are not scored (their points are reported, to grade by hand).
`score` is its one scoring rule (nbgrader's determine_grade over the check cells, a deleted check
cell counted 0); `grade_execution` applies it to the book build's own execution of a chapter
(_build/jupyter_execute/book), which the tests take instead of executing the chapter again.
No nbgrader course directory or gradebook is needed.

Usage:
  python scripts/course.py source OUT_DIR [--executed DIR | --no-executed] [--execute] [NOTEBOOK ...]
        (nbgrader source notebooks, one folder per chapter: OUT_DIR/<stem>/<stem>.ipynb, the
         dropdown fences removed, every {glue:text} role replaced by its value from the executed
         copy in DIR (default _build/jupyter_execute/book, when current) or by a marker)
  python scripts/course.py sanitize SOURCE_NOTEBOOK SUBMITTED_NOTEBOOK ...
        (strip the nbgrader metadata of cells whose grade_id the source notebook lacks, and of
         all but the last cell of a duplicated grade_id)
  python scripts/course.py export COURSE_DIR OUT.csv
        (one row per student, assignment and grade cell of COURSE_DIR/gradebook.db)
  python scripts/course.py student OUT_DIR [--execute] [NOTEBOOK ...]     (default: every book/*.ipynb)
        (with --execute, here and for `source`, a chapter with no current execution is run first,
         into _build/course_execute/, so that every glued number is filled: no marker is left)
  python scripts/course.py grade [--source DIR] [--save-executed DIR] NOTEBOOK ...
        (prints NAME: S/M per notebook, S/M over the check cells, then "+P by hand" when the
         notebook has written answers worth P points; each notebook runs in a scratch folder, so
         the submission's folder is left as it was, with one thread unless OMP_NUM_THREADS is set)
"""

from __future__ import annotations

import argparse
import functools
import copy
import csv
import os
import pathlib
import re
import sys
import tempfile
from unittest import mock

import nbformat
from nbgrader import utils as nbg_utils
from nbgrader.preprocessors import (ClearHiddenTests, ClearMarkScheme, ClearOutput, ClearSolutions,
                                    ComputeChecksums, Execute, LockCells)

ROOT = pathlib.Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
WRAPPER_TAG = "solution-wrapper"
SOLUTION_RE = re.compile(r"### BEGIN SOLUTION(.*?)### END SOLUTION", re.S)
HIDDEN_RE = re.compile(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", re.S)


def chapters(source: pathlib.Path = BOOK) -> list[pathlib.Path]:
    """Every chapter notebook of the book, in file order."""
    return sorted(p for p in source.glob("*.ipynb") if not p.name.startswith("."))


def exercise_chapters(source: pathlib.Path = BOOK) -> list[pathlib.Path]:
    """The chapters with at least one check cell."""
    return [p for p in chapters(source) if check_cells(nbformat.read(p, as_version=4))]


def exercise_cells(nb) -> dict:
    """grade_id -> cell for every nbgrader cell of a notebook."""
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
            if "nbgrader" in c.metadata and "grade_id" in c.metadata["nbgrader"]}


def grade_cells(nb) -> list:
    return [c for c in nb.cells if nbg_utils.is_grade(c)]


def is_check(cell) -> bool:
    """An autograded grade cell (code, locked): one exercise's check. The one rule (grading, feedback)."""
    return cell.cell_type == "code" and nbg_utils.is_grade(cell) and not nbg_utils.is_solution(cell)


def check_cells(nb) -> list:
    """The autograded grade cells (code, locked): the exercises' checks."""
    return [c for c in nb.cells if is_check(c)]


def answer_cells(nb) -> list:
    """The written answers: markdown cells that nbgrader grades by hand (solution + grade)."""
    return [c for c in grade_cells(nb) if nbg_utils.is_solution(c) and c.cell_type == "markdown"]


def solution_texts(nb) -> list[str]:
    """The texts a student must not see: solution regions, written answers (the instructor's
    derivations), solution-wrapper cells other than bare fences, hidden tests."""
    texts = []
    for c in nb.cells:
        if WRAPPER_TAG in c.metadata.get("tags", []) or (nbg_utils.is_solution(c) and c.cell_type == "markdown"):
            texts.append(c.source)
        texts += [m.group(1) for m in SOLUTION_RE.finditer(c.source)]
        texts += [m.group(1) for m in HIDDEN_RE.finditer(c.source)]
    return [t for t in texts if t.strip()]


def student_version(nb, keep_outputs: bool = False):
    """The student notebook: solution-wrapper cells removed, nbgrader's generate_assignment
    preprocessors applied (solutions -> `raise NotImplementedError()`, hidden tests removed,
    outputs cleared, check cells locked with checksums). With keep_outputs (the student edition of
    the book, built from an executed chapter) only the outputs of the exercise cells (solutions,
    written answers, checks: what the instructor's solution produced) are cleared; the chapter's own
    figures and printed numbers stay."""
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if WRAPPER_TAG not in c.metadata.get("tags", [])]
    resources = {}
    for pre in (LockCells(), ClearSolutions(), None if keep_outputs else ClearOutput(), ClearHiddenTests(),
                ClearMarkScheme(), ComputeChecksums()):
        if pre is not None:
            nb, resources = pre.preprocess(nb, resources)
    if keep_outputs:
        for c in nb.cells:
            if c.cell_type == "code" and "nbgrader" in c.metadata:
                c.outputs, c.execution_count = [], None
    return nb


def leaked(student_nb, instructor_nb) -> list[str]:
    """Solution or hidden-test lines of the instructor notebook that appear in the student one."""
    text = "\n".join(c.source for c in student_nb.cells)
    lines = {line.strip() for line in text.splitlines()}
    markers = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "{solution-start}")
    found = [m for m in markers if m in text]
    for t in solution_texts(instructor_nb):
        for line in t.splitlines():
            line = line.strip()
            # a whole line long enough to be the solution's own (not `print("correct")` or an import)
            if len(line) >= 25 and not line.startswith(("import ", "from ")) and line in lines:
                found.append(line)
    return found


# MyST that Jupyter shows as raw text: directive blocks (```{exercise} Title / :::{prf:proposition} Title,
# options, body, closing fence) and roles ({prf:ref}`label`, {cite:t}`key`, {cite:p}`key`, {doc}`page`)
DIRECTIVE_RE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[a-z:-]+)\}[ \t]*(?P<title>[^\n]*)\n"
                          r"(?P<opts>(?::[a-z-]+:[^\n]*\n)*)(?P<body>.*?)^(?P=fence)[ \t]*$", re.S | re.M)
ROLE_RE = re.compile(r"\{(?P<role>prf:ref|cite:t|cite:p|doc)\}`(?P<arg>[^`]*)`")


@functools.lru_cache(maxsize=None)
def _bib() -> dict:
    """key -> (authors as cited, year) from book/references.bib: "Vural et al.", "2026"."""
    out = {}
    text = (BOOK / "references.bib").read_text(encoding="utf-8")
    for key, body in re.findall(r"@\w+\{([^,]+),(.*?)\n\}", text, re.S):
        authors = re.search(r"author\s*=\s*\{(.*)\},?\n", body).group(1).split(" and ")
        last = [a.split(",")[0].strip() for a in authors]
        cited = last[0] if len(last) == 1 else (" and ".join(last) if len(last) == 2 else f"{last[0]} et al.")
        out[key.strip()] = (cited, re.search(r"year\s*=\s*\{(\d+)\}", body).group(1))
    return out


def directive_titles(notebooks) -> dict:
    """label -> "Proposition (its title)" for every labelled directive of the chapters: what a
    {prf:ref} role names in a notebook that Jupyter shows without the book's cross-references."""
    titles = {}
    for path in notebooks:
        for c in nbformat.read(path, as_version=4).cells:
            if c.cell_type != "markdown":
                continue
            for m in DIRECTIVE_RE.finditer(c.source):
                label = re.search(r"^:label:\s*(\S+)", m.group("opts"), re.M)
                if label:
                    kind = m.group("name").split(":")[-1].capitalize()
                    title = m.group("title").strip()
                    titles[label.group(1)] = f"{kind} ({title})" if title else kind
    return titles


def plain_markdown(text: str, titles: dict) -> str:
    """The text with MyST's directives and roles written as plain Markdown, as Jupyter renders it:
    a directive block becomes a bold heading ("**Exercise: title.**", "**Proposition (title).**",
    "*Proof.*") over its body, math and all; {prf:ref} names its target (`titles`), {cite:t} and
    {cite:p} the authors and year, {doc} the page."""
    def block(m):
        kind = m.group("name").split(":")[-1]
        title, body = m.group("title").strip(), m.group("body").strip("\n")
        if kind == "proof":
            head = f"*Proof{' (' + title + ')' if title else ''}.*"
        elif kind == "exercise":
            head = f"**Exercise{': ' + title if title else ''}.**"
        else:
            head = f"**{kind.capitalize()}{' (' + title + ')' if title else ''}.**"
        return f"{head}\n\n{body}"

    while True:                                    # nested blocks: the outer one, then what it held
        new = DIRECTIVE_RE.sub(block, text)
        if new == text:
            break
        text = new
    bib = _bib()

    def role(m):
        r, arg = m.group("role"), m.group("arg")
        shown = re.match(r"(.*?)\s*<([^>]+)>$", arg)          # {prf:ref}`text <label>`
        if shown:
            return shown.group(1)
        if r == "prf:ref":
            return ROLE_RE.sub(role, titles.get(arg, arg))     # a title may cite
        if r == "doc":
            return arg
        cites = [bib.get(k.strip(), (k.strip(), "")) for k in arg.split(",")]
        if r == "cite:t":
            return "; ".join(f"{a} ({y})" for a, y in cites)
        return "(" + "; ".join(f"{a}, {y}" for a, y in cites) + ")"
    return ROLE_RE.sub(role, text)


@functools.lru_cache(maxsize=None)
def book_titles() -> dict:
    """`directive_titles` of the book's chapters (read once per process)."""
    return directive_titles(chapters())


def to_jupyter_markdown(nb, titles: dict) -> None:
    """Every markdown cell of nb through `plain_markdown` (in place)."""
    for c in nb.cells:
        if c.cell_type == "markdown":
            c.source = plain_markdown(c.source, titles)


GLUE_RE = re.compile(r"\{glue:text\}`([^`]*)`")
GLUE_MARKER = "(`{}`: computed when you run the notebook)"
EXECUTED = ROOT / "_build" / "jupyter_execute" / "book"
COURSE_EXECUTED = ROOT / "_build" / "course_execute"      # chapters run by `--execute` when no build is current


def glued_values(executed) -> dict:
    """name -> text/plain of every value an executed notebook glued (myst_nb.glue outputs)."""
    values = {}
    for c in executed.cells:
        for o in c.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is None:
                continue
            data = o.get("data", {})
            text = next((v for k, v in data.items() if k.endswith("text/plain")), None)
            if text is not None:
                values[name] = text
    return values


def is_current(executed, nb) -> bool:
    """True when the executed notebook ran exactly the code cells of nb (same sources, same order)."""
    code = lambda n: [c.source for c in n.cells if c.cell_type == "code"]
    return code(executed) == code(nb)


def fill_glue(nb, values: dict) -> int:
    """Replace, in every markdown cell, each {glue:text}`key` or {glue:text}`key:fmt` by the value
    formatted as the book formats it, or by GLUE_MARKER when values lacks the key. Returns the
    number of roles filled with a value."""
    from myst_nb.core.variables import format_plain_text
    filled = 0

    def one(m):
        nonlocal filled
        key, _, fmt_spec = m.group(1).partition(":")
        if key not in values:
            return GLUE_MARKER.format(key)
        filled += 1
        return format_plain_text(values[key], fmt_spec)

    for c in nb.cells:
        if c.cell_type == "markdown":
            c.source = GLUE_RE.sub(one, c.source)
    return filled


def current_glue(path: pathlib.Path, executed_dir: pathlib.Path | None = EXECUTED,
                 execute: bool = False) -> dict | None:
    """The glued values of the chapter at path, from its executed copy in executed_dir when that copy
    ran the chapter's current code cells and is newer than the chapter and every file of lib/ (an
    edit since the book build makes it stale); with `execute`, a chapter without one is run now
    (`execute_chapter`, into COURSE_EXECUTED, reused while current) and its values used; None otherwise."""
    executed = current_execution(path, executed_dir)
    if executed is None and execute:                 # an earlier --execute run of the same code, else run it
        executed = current_execution(path, COURSE_EXECUTED) or execute_chapter(path, COURSE_EXECUTED)
    if executed is not None:
        return glued_values(executed)
    if executed_dir is not None and (executed_dir / path.name).exists():
        print(f"{path.name}: {executed_dir / path.name} is not an execution of the current chapter and "
              "lib/ (other code, or older): glued numbers marked instead", file=sys.stderr)
    return None


def execute_chapter(path: pathlib.Path, out_dir: pathlib.Path, timeout: int = 3600):
    """Run the chapter at path from the top in its own folder, as the book build does (one kernel,
    `timeout` seconds a cell), write the executed copy to out_dir/<name> and return it: the glued
    values of a release made without a book build. A cell that fails stops the release (SystemExit
    2, naming the chapter and the error): no number is filled from a partial run."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    nb = nbformat.read(path, as_version=4)
    print(f"{path.name}: no current execution; running it now (chapters 10 and 11 take minutes)",
          file=sys.stderr, flush=True)
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    except CellExecutionError as e:
        raise SystemExit(f"{path.name}: a cell failed while executing it for its glued values: "
                         f"{str(e).strip().splitlines()[-1]}") from None
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_dir / path.name)
    return nb


def current_execution(path: pathlib.Path, executed_dir: pathlib.Path | None = EXECUTED):
    """The executed copy of the chapter at path in executed_dir (a book build's), when it ran the
    chapter's current code cells and is newer than the chapter and every file of lib/; else None."""
    ex_path = executed_dir / path.name if executed_dir is not None else None
    if ex_path is None or not ex_path.exists():
        return None
    executed = nbformat.read(ex_path, as_version=4)
    newest = max([path.stat().st_mtime] + [p.stat().st_mtime for p in (ROOT / "lib").rglob("*.py")])
    if is_current(executed, nbformat.read(path, as_version=4)) and ex_path.stat().st_mtime >= newest:
        return executed
    return None


def source_version(path: pathlib.Path, executed_dir: pathlib.Path | None = EXECUTED, execute: bool = False):
    """The chapter as an nbgrader source notebook: the dropdown fences (solution-wrapper cells)
    removed, the glued numbers filled in from a current executed copy, else marked. Returns
    (notebook, number of roles filled, whether an executed copy was used)."""
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if WRAPPER_TAG not in c.metadata.get("tags", [])]
    values = current_glue(path, executed_dir, execute)
    filled = fill_glue(nb, values or {})
    to_jupyter_markdown(nb, book_titles())
    return nb, filled, values is not None


def write_sources(out: pathlib.Path, notebooks: list[pathlib.Path],
                  executed_dir: pathlib.Path | None = EXECUTED, execute: bool = False) -> list[pathlib.Path]:
    written = []
    for path in notebooks:
        nb, filled, used = source_version(path, executed_dir, execute)
        target = out / path.stem / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        print(f"{target}: {filled} glued numbers filled" + ("" if used else " (no executed copy: marked)"))
        written.append(target)
    return written


def drop_unknown_cells(submitted: pathlib.Path, source: pathlib.Path) -> list[str]:
    """Strip the nbgrader metadata of the cells of a collected submission that nbgrader means to
    ignore but on which nbgrader 0.9 refuses the whole notebook: a cell whose grade_id the source
    notebook lacks (a cell a student invented: "nbgrader cell does not have a grade_id") and all but
    the last of the cells sharing one grade_id (a copied cell: nbgrader's DeduplicateIds keeps the
    last one too, but leaves the others with an empty nbgrader metadata that autograde rejects as
    "an old version of the nbgrader metadata format"). The cell kept is then restored from the
    gradebook by autograde. Returns the grade_ids dropped, "copy of <id>" for duplicates; the file is
    rewritten only when something was dropped."""
    nb = nbformat.read(submitted, as_version=4)
    dropped = unmark_unknown(nb, nbformat.read(source, as_version=4))
    if dropped:
        nbformat.write(nb, submitted)
    return dropped


def unmark_unknown(nb, instructor) -> list[str]:
    """Strip, in place, the nbgrader metadata of every cell of nb whose grade_id the instructor notebook
    lacks (invented) and of all but the last of the cells sharing one grade_id (copied): the cells
    nbgrader does not grade. Returns the grade_ids dropped, in order, "copy of <id>" for copies. The
    one rule of `drop_unknown_cells` (before nbgrader's autograde) and `restore_checks` (grade.sh)."""
    known = set(exercise_cells(instructor))
    dropped, seen = [], set()
    for c in reversed(nb.cells):                       # the last copy of a grade_id is the one kept
        if "nbgrader" not in c.metadata:
            continue
        gid = c.metadata["nbgrader"].get("grade_id")
        if gid not in known or gid in seen:
            dropped.append(f"copy of {gid}" if gid in seen else str(gid))
            del c.metadata["nbgrader"]
        else:
            seen.add(gid)
    return dropped[::-1]


def export_grades(course_dir: pathlib.Path, out: pathlib.Path) -> int:
    """Write one CSV row per (student, assignment, grade cell) of the course's gradebook: score and
    max_score as nbgrader counts them (a written answer scores 0 until graded by hand, and
    needs_manual_grade stays 1 until then). Rows follow the order of the cells in source/."""
    from nbgrader.api import Gradebook, MissingEntry
    rows = []
    with Gradebook(f"sqlite:///{course_dir.resolve() / 'gradebook.db'}") as gb:
        for a in sorted(gb.assignments, key=lambda a: a.name):
            order = {}
            for nbk in a.notebooks:
                src = course_dir / "source" / a.name / f"{nbk.name}.ipynb"
                if src.exists():
                    cells = nbformat.read(src, as_version=4).cells
                    order.update({c.metadata["nbgrader"]["grade_id"]: i for i, c in enumerate(cells)
                                  if nbg_utils.is_grade(c)})
            for st in sorted(gb.students, key=lambda s: s.id):
                try:
                    sub = gb.find_submission(a.name, st.id)
                except MissingEntry:
                    continue
                for snb in sorted(sub.notebooks, key=lambda n: n.name):
                    for g in sorted(snb.grades, key=lambda g: (order.get(g.name, len(order)), g.name)):
                        rows.append([st.id, a.name, snb.name, g.name, fmt(g.score), fmt(g.max_score),
                                     int(bool(g.needs_manual_grade))])
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "assignment", "notebook", "grade_id", "score", "max_score",
                    "needs_manual_grade"])
        w.writerows(rows)
    return len(rows)


def write_students(out: pathlib.Path, notebooks: list[pathlib.Path],
                   executed_dir: pathlib.Path | None = EXECUTED, execute: bool = False) -> list[pathlib.Path]:
    """Student notebooks (student_version), each glued number filled in or marked (source_version)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        student = student_version(nb)
        fill_glue(student, current_glue(path, executed_dir, execute) or {})
        to_jupyter_markdown(student, book_titles())
        bad = leaked(student, nb)
        if bad:
            raise RuntimeError(f"{path.name}: solution text left in the student notebook: {bad[:3]}")
        target = out / path.name
        nbformat.write(student, target)
        written.append(target)
    return written


def restore_checks(nb, instructor):
    """Make nb's graded cells what nbgrader's autograde grades: every check cell restored from the
    instructor's cell with the same grade_id (an edited or re-checksummed check counts for nothing);
    a cell whose grade_id the instructor notebook lacks (invented) and all but the last of the cells
    sharing one grade_id (copied) lose their nbgrader metadata (`unmark_unknown`), so they are never
    scored, as nbgrader ignores them. Returns the grade_ids of the instructor's checks that nb
    lacks (deleted): `score` counts them as 0 of their points."""
    ref = {c.metadata["nbgrader"]["grade_id"]: c for c in check_cells(instructor)}
    unmark_unknown(nb, instructor)
    seen = set()
    for i, c in enumerate(nb.cells):
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid in ref:
            nb.cells[i] = copy.deepcopy(ref[gid])
            seen.add(gid)
    return sorted(set(ref) - seen)


def execute(nb, cwd: pathlib.Path, timeout: int = 600, instructor=None):
    """Run every cell, errors allowed (nbgrader's Execute), in the working directory cwd; with the
    instructor notebook, each check cell runs in a clean process (scripts/course_guard.py)."""
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if instructor is None:
        ex = Execute(timeout=timeout, kernel_name="python3")
    else:
        sys.path.insert(0, str(ROOT / "scripts"))
        from course_guard import GuardedExecute
        ex = GuardedExecute(timeout=timeout, kernel_name="python3", instructor=instructor)
    nb, _ = ex.preprocess(nb, {"metadata": {"path": str(cwd)}})
    return nb


ONE_THREAD = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def grade(path: pathlib.Path, source: pathlib.Path = BOOK) -> tuple[float, float, object]:
    """Execute the notebook at path with the instructor's checks restored; (score, max, executed nb)
    over the check cells, as `score` counts them (written answers are graded by hand: see hand_points).

    The kernel runs in a scratch folder, deleted afterwards, so a chapter that writes files beside
    itself (the caches of chapters 10 and 11) leaves the student's folder as it was; and with one
    thread (OMP_NUM_THREADS etc. = 1 unless already set), as the book build and nbval run."""
    nb = nbformat.read(path, as_version=4)
    instructor_path = source / path.name
    instructor = nbformat.read(instructor_path, as_version=4) if instructor_path.exists() else None
    if instructor is not None:
        restore_checks(nb, instructor)
    # the kernel inherits this process's environment; patch.dict gives this process its own back
    with mock.patch.dict(os.environ, {var: os.environ.get(var, "1") for var in ONE_THREAD}), \
            tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        nb = execute(nb, pathlib.Path(scratch), instructor=instructor)
    return (*score(nb, instructor), nb)


def score(nb, instructor=None) -> tuple[float, float]:
    """(score, max) of an executed notebook over its check cells, as nbgrader's autograde counts
    them (nbgrader's determine_grade: a check's points unless its outputs hold an error or stderr);
    with the instructor notebook, each of its check cells that nb lacks (a deleted cell: nb has no
    cell with its grade_id) adds its points to max and 0 to the score. The one scoring rule of
    `grade` and of the tests that score the book build's own executions."""
    ref = None if instructor is None else {c.metadata["nbgrader"]["grade_id"]: c for c in check_cells(instructor)}
    got = max_score = 0.0
    counted = set()
    for c in check_cells(nb):
        gid = c.metadata["nbgrader"].get("grade_id")
        if ref is not None and (gid not in ref or gid in counted):   # only the instructor's checks, once
            continue
        counted.add(gid)
        s, m = nbg_utils.determine_grade(c)
        if ref is not None:                                           # the instructor's points, not the cell's
            m = float(ref[gid].metadata["nbgrader"]["points"])
            s = min(s, m)
        got, max_score = got + s, max_score + m
    if ref is not None:                 # a deleted check cell scores 0 of its points
        max_score += sum(float(c.metadata["nbgrader"]["points"]) for gid, c in ref.items() if gid not in counted)
    return got, max_score


def score_line(got: float, max_score: float, nb) -> str:
    """What `grade` prints after "NAME: ": S/M, then " +P by hand" when nb has written answers."""
    hand = hand_points(nb)
    return f"{fmt(got)}/{fmt(max_score)}" + (f" +{fmt(hand)} by hand" if hand else "")


def grade_execution(path: pathlib.Path, executed_dir: pathlib.Path | None = EXECUTED,
                    source: pathlib.Path = BOOK) -> tuple[float, float, object] | None:
    """(score, max, executed nb) of the book build's own execution of the chapter at path: its
    current executed copy in executed_dir (current_execution), scored by `score` against the
    instructor notebook source/<name> as `grade` scores its execution. The chapters of book/ are the
    instructor notebooks, so the build ran every check cell, hidden tests included: no second
    execution is needed. None when executed_dir holds no current execution of the chapter."""
    executed = current_execution(path, executed_dir)
    if executed is None:
        return None
    instructor_path = source / path.name
    instructor = nbformat.read(instructor_path, as_version=4) if instructor_path.exists() else None
    return (*score(executed, instructor), executed)


def hand_points(nb) -> float:
    """Points of the written answers, which a person grades (nbgrader's formgrader)."""
    return sum(float(c.metadata["nbgrader"]["points"]) for c in answer_cells(nb))


def fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    so = sub.add_parser("source", help="write nbgrader source notebooks (OUT/<stem>/<stem>.ipynb)")
    so.add_argument("out", type=pathlib.Path)
    so.add_argument("--executed", type=pathlib.Path, default=EXECUTED,
                    help="folder of executed chapters whose glued values fill the text (default %(default)s)")
    so.add_argument("--no-executed", action="store_true", help="mark every glued number instead")
    so.add_argument("--execute", action="store_true",
                    help="run each chapter that has no current execution now (into _build/course_execute/, "
                         "minutes for chapters 10 and 11) so that every glued number is filled")
    so.add_argument("notebooks", nargs="*", type=pathlib.Path)
    sa = sub.add_parser("sanitize", help="drop invented nbgrader cells of collected submissions")
    sa.add_argument("source", type=pathlib.Path)
    sa.add_argument("submitted", nargs="+", type=pathlib.Path)
    ex = sub.add_parser("export", help="per-exercise grades of a course's gradebook as CSV")
    ex.add_argument("course", type=pathlib.Path)
    ex.add_argument("out", type=pathlib.Path)
    s = sub.add_parser("student", help="write student notebooks")
    s.add_argument("out", type=pathlib.Path)
    s.add_argument("--execute", action="store_true",
                   help="run each chapter that has no current execution now, so that every glued number is filled")
    s.add_argument("notebooks", nargs="*", type=pathlib.Path)
    g = sub.add_parser("grade", help="execute notebooks and print NAME: S/M")
    g.add_argument("--source", type=pathlib.Path, default=BOOK,
                   help="folder of the instructor notebooks whose check cells are restored (default book/)")
    g.add_argument("--save-executed", type=pathlib.Path, default=None,
                   help="also write each executed notebook (with outputs) into this folder")
    g.add_argument("notebooks", nargs="+", type=pathlib.Path)
    a = ap.parse_args(argv)
    if a.cmd == "source":
        if a.no_executed and a.execute:
            ap.error("--execute and --no-executed exclude each other")
        write_sources(a.out, a.notebooks or exercise_chapters(), None if a.no_executed else a.executed, a.execute)
        return 0
    if a.cmd == "sanitize":
        for p in a.submitted:
            for gid in drop_unknown_cells(p, a.source):
                print(f"{p}: ignored a cell that is not the assignment's: {gid}")
        return 0
    if a.cmd == "export":
        n = export_grades(a.course, a.out)
        print(f"{a.out}: {n} rows")
        return 0
    if a.cmd == "student":
        for p in write_students(a.out, a.notebooks or chapters(), execute=a.execute):
            print(p)
        return 0
    status = 0
    for p in a.notebooks:
        if not p.exists():
            print(f"{p.name}: missing file", file=sys.stderr)
            status = 2
            continue
        got, max_score, nb = grade(p, a.source)
        print(f"{p.stem}: {score_line(got, max_score, nb)}", flush=True)
        if a.save_executed is not None:
            a.save_executed.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, a.save_executed / p.name)
    return status


if __name__ == "__main__":
    sys.exit(main())
