"""The instructor's walk on one chapter through nbgrader's own pipeline (scripts/course.sh): init, release,
collect, autograde, export, feedback, with eight students: correct (the instructor's solutions), untouched,
the five tamperers of scripts/course_students.py (asserts stripped from the input or the syntax tree, lib
patched, a float subclass that passes every comparison, builtins patched) and a shortcut student (every
derivation answered by its shortcut there, every other exercise solved). The course tests grade the same students.

    .venv/bin/python scripts/course_walk.py 04_value_step /tmp/walk04

Prints each student's score on the checks and on the derivations' checks, the feedback pages' hidden-test lines
shown (a line the student's own submission holds is not counted), the export CSV's rows, and writes
summary.json beside grades.csv. The course's cell time limit is cut from 900 s to 60 s for the walk: a shortcut's
brute force is stopped there (a cell that runs out of time scores 0 either way).
"""
import csv, os, re, subprocess, sys, pathlib, html as html_lib
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nbformat
import course_students as S
course = S.course
ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}


def sh(*args):
    """One command of scripts/course.sh; stops the walk with its output when it fails."""
    r = subprocess.run(["bash", str(ROOT / "scripts" / "course.sh"), *map(str, args)], capture_output=True,
                       text=True, env=ENV)
    if r.returncode != 0:
        sys.exit(f"course.sh {args[0]} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r


if len(sys.argv) != 3:
    sys.exit("usage: course_walk.py CHAPTER_STEM OUT_DIR (OUT_DIR new or empty)")
stem, tmp = sys.argv[1], pathlib.Path(sys.argv[2])
if not (course.BOOK / f"{stem}.ipynb").is_file():
    sys.exit(f"CHAPTER_STEM must name a chapter of book/, got {stem!r}")
if tmp.exists() and (not tmp.is_dir() or any(tmp.iterdir())):
    sys.exit(f"OUT_DIR must be a new or empty folder, got {tmp}")
tmp.mkdir(parents=True, exist_ok=True)
c, subs = tmp / "course", tmp / "SUBMISSIONS"
chapter = course.BOOK / f"{stem}.ipynb"
sh("init", c, "--id", "walk", "--no-executed", chapter)
cfg = c / "nbgrader_config.py"      # brute force at the hidden tests' arguments: stopped after 60 s, not 900
cfg.write_text(cfg.read_text().replace("c.Execute.timeout = 900", "c.Execute.timeout = 60"))
sh("release", c)
source = nbformat.read(c / "source" / stem / f"{stem}.ipynb", as_version=4)
released = nbformat.read(c / "release" / stem / f"{stem}.ipynb", as_version=4)
labels = sorted({g.rsplit("-check", 1)[0] for g in course.exercise_cells(source) if "-check" in g})
derivs = [l for l in labels if l in S.DERIVATIONS]
shortcut = S.fill(released, source, labels)
for cell in shortcut.cells:
    gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
    if gid.endswith("-solution") and gid[: -len("-solution")] in derivs:
        cell.source = S.SOLUTION_PRELUDE + S.SHORTCUTS[gid[: -len("-solution")]]
students = {"correct": S.fill(released, source, labels), "untouched": released, "shortcut": shortcut,
            **{f"cheat_{k}": S.cheat_notebook(released, code) for k, code in S.chapter_cheats(source).items()}}
for s, nb in students.items():
    (subs / s).mkdir(parents=True)
    nbformat.write(nb, subs / s / f"{stem}.ipynb")
sh("collect", c, subs)
sh("autograde", c)
sh("export", c, tmp / "grades.csv")
sh("feedback", c)
rows = list(csv.DictReader(open(tmp / "grades.csv", newline="")))
print("derivations:", derivs)
for s in students:
    mine = [r for r in rows if r["student"] == s and "-check" in r["grade_id"]]
    got = sum(float(r["score"]) for r in mine); mx = sum(float(r["max_score"]) for r in mine)
    per = {r["grade_id"]: float(r["score"]) for r in mine}
    der = {g: v for g, v in per.items() if g.rsplit("-check", 1)[0] in derivs}
    print(f"{s:22s} checks {got:g}/{mx:g}; on the derivations' checks {sum(der.values()):g}/{len(der)}")
hidden = [l.strip() for t in course.HIDDEN_RE.findall("\n".join(x.source for x in course.check_cells(source)))
          for l in t.splitlines() if len(l.strip()) >= 12 and not l.strip().startswith("#")]
shown_rel = "\n".join(x.source for x in released.cells)
hidden = [h for h in hidden if h not in shown_rel]
leak = {}
for s, nb in students.items():        # a line the student's own submission holds is the student's, not a leak
    own = "\n".join(x.source for x in nb.cells)
    page = html_lib.unescape(re.sub(r"<[^>]+>", "", (c / "feedback" / s / stem / f"{stem}.html").read_text()))
    leak[s] = [h for h in hidden if h in page and h not in own]
print(f"feedback pages: {len(students)}, hidden-test lines checked: {len(hidden)}, shown: {sum(map(len, leak.values()))}")
print("CSV:", tmp / "grades.csv", sum(1 for _ in open(tmp / "grades.csv")) - 1, "rows")
import json
summary = {"chapter": stem, "derivations": derivs, "hidden_lines": len(hidden), "leaks": leak,
           "csv_rows": sum(1 for _ in open(tmp / "grades.csv")) - 1, "students": {}}
for s in students:
    mine = [r for r in rows if r["student"] == s and "-check" in r["grade_id"]]
    summary["students"][s] = {"score": sum(float(r["score"]) for r in mine), "max": sum(float(r["max_score"]) for r in mine),
                              "passed": [r["grade_id"] for r in mine if float(r["score"]) > 0]}
json.dump(summary, open(tmp / "summary.json", "w"), indent=1)
