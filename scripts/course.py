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
each notebook, after removing the solution-wrapper cells (the dropdown fences).
`grade` executes a notebook and scores its check cells; before executing, it puts back the
instructor's version of every check cell (matched by grade_id), so hidden tests count and an edited
check cell does not. Written answers are not scored (their points are reported, to grade by hand).
No nbgrader course directory or gradebook is needed.

Usage:
  python scripts/course.py student OUT_DIR [NOTEBOOK ...]     (default: every book/*.ipynb)
  python scripts/course.py grade [--source DIR] [--save-executed DIR] NOTEBOOK ...
        (prints NAME: S/M per notebook, S/M over the check cells, then "+P by hand" when the
         notebook has written answers worth P points)
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import re
import sys

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


def exercise_cells(nb) -> dict:
    """grade_id -> cell for every nbgrader cell of a notebook."""
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
            if "nbgrader" in c.metadata and "grade_id" in c.metadata["nbgrader"]}


def grade_cells(nb) -> list:
    return [c for c in nb.cells if nbg_utils.is_grade(c)]


def check_cells(nb) -> list:
    """The autograded grade cells (code, locked): the exercises' checks."""
    return [c for c in grade_cells(nb) if not nbg_utils.is_solution(c)]


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


def student_version(nb):
    """The student notebook: solution-wrapper cells removed, nbgrader's generate_assignment
    preprocessors applied (solutions -> `raise NotImplementedError()`, hidden tests removed,
    outputs cleared, check cells locked with checksums)."""
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if WRAPPER_TAG not in c.metadata.get("tags", [])]
    resources = {}
    for pre in (LockCells(), ClearSolutions(), ClearOutput(), ClearHiddenTests(), ClearMarkScheme(),
                ComputeChecksums()):
        nb, resources = pre.preprocess(nb, resources)
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


def write_students(out: pathlib.Path, notebooks: list[pathlib.Path]) -> list[pathlib.Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        student = student_version(nb)
        bad = leaked(student, nb)
        if bad:
            raise RuntimeError(f"{path.name}: solution text left in the student notebook: {bad[:3]}")
        target = out / path.name
        nbformat.write(student, target)
        written.append(target)
    return written


def restore_checks(nb, instructor):
    """Replace every check cell of nb by the instructor's cell with the same grade_id; add the
    instructor's check cells that nb lacks are counted as missing (0 points)."""
    ref = {c.metadata["nbgrader"]["grade_id"]: c for c in check_cells(instructor)}
    seen = set()
    for i, c in enumerate(nb.cells):
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid in ref:
            nb.cells[i] = copy.deepcopy(ref[gid])
            seen.add(gid)
    return sorted(set(ref) - seen)


def execute(nb, cwd: pathlib.Path, timeout: int = 600):
    """Run every cell, errors allowed (nbgrader's Execute), in the working directory cwd."""
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    ex = Execute(timeout=timeout, kernel_name="python3")
    nb, _ = ex.preprocess(nb, {"metadata": {"path": str(cwd)}})
    return nb


def grade(path: pathlib.Path, source: pathlib.Path = BOOK) -> tuple[float, float, object]:
    """Execute the notebook at path with the instructor's checks restored; (score, max, executed nb)
    over the check cells (written answers are graded by hand: see hand_points)."""
    nb = nbformat.read(path, as_version=4)
    instructor_path = source / path.name
    missing = []
    if instructor_path.exists():
        missing = restore_checks(nb, nbformat.read(instructor_path, as_version=4))
    nb = execute(nb, path.parent.resolve())
    score = max_score = 0.0
    for c in check_cells(nb):
        s, m = nbg_utils.determine_grade(c)
        score, max_score = score + s, max_score + m
    if missing:                         # a deleted check cell scores 0 of its points
        ref = exercise_cells(nbformat.read(instructor_path, as_version=4))
        max_score += sum(float(ref[g].metadata["nbgrader"]["points"]) for g in missing)
    return score, max_score, nb


def hand_points(nb) -> float:
    """Points of the written answers, which a person grades (nbgrader's formgrader)."""
    return sum(float(c.metadata["nbgrader"]["points"]) for c in answer_cells(nb))


def fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("student", help="write student notebooks")
    s.add_argument("out", type=pathlib.Path)
    s.add_argument("notebooks", nargs="*", type=pathlib.Path)
    g = sub.add_parser("grade", help="execute notebooks and print NAME: S/M")
    g.add_argument("--source", type=pathlib.Path, default=BOOK,
                   help="folder of the instructor notebooks whose check cells are restored (default book/)")
    g.add_argument("--save-executed", type=pathlib.Path, default=None,
                   help="also write each executed notebook (with outputs) into this folder")
    g.add_argument("notebooks", nargs="+", type=pathlib.Path)
    a = ap.parse_args(argv)
    if a.cmd == "student":
        for p in write_students(a.out, a.notebooks or chapters()):
            print(p)
        return 0
    status = 0
    for p in a.notebooks:
        if not p.exists():
            print(f"{p.name}: missing file", file=sys.stderr)
            status = 2
            continue
        score, max_score, nb = grade(p, a.source)
        hand = hand_points(nb)
        print(f"{p.stem}: {fmt(score)}/{fmt(max_score)}" + (f" +{fmt(hand)} by hand" if hand else ""),
              flush=True)
        if a.save_executed is not None:
            a.save_executed.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, a.save_executed / p.name)
    return status


if __name__ == "__main__":
    sys.exit(main())
