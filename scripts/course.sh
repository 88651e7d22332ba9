#!/usr/bin/env bash
# Run a course on the book's chapters with nbgrader's own pipeline (nbgrader 0.9, from .venv/).
# One assignment per chapter, named by its file stem (01_task, 02_interference, ...).
#
#   bash scripts/course.sh init COURSE [--id ID] [--executed DIR | --no-executed] [--execute] [CHAPTER.ipynb ...]
#       COURSE/nbgrader_config.py and COURSE/source/<stem>/<stem>.ipynb for each chapter (default:
#       every chapter with exercises): the dropdown fences removed, each glued number of the text
#       filled in from the current executed chapter in DIR (default _build/jupyter_execute/book,
#       left by the book build) or, without one, replaced by a marker; with --execute a chapter without
#       one is run first (into _build/course_execute/), so that no marker is left.
#   bash scripts/course.sh release COURSE [ASSIGNMENT ...]   nbgrader generate_assignment -> COURSE/release/
#   bash scripts/course.sh collect COURSE SUBMISSIONS        SUBMISSIONS/<student>/<stem>.ipynb ->
#       COURSE/submitted/<student>/<stem>/<stem>.ipynb (the notebook only; a cell with a grade_id the
#       assignment lacks, or an earlier copy of a duplicated one, loses its nbgrader metadata: nbgrader
#       would refuse the whole notebook), students added to the gradebook
#   bash scripts/course.sh autograde COURSE [ASSIGNMENT ...] nbgrader autograde, one thread -> gradebook.db
#       (each check cell runs in a clean process, fed the student's answers as data: course_guard.py)
#   bash scripts/course.sh export COURSE OUT.csv             one row per student, assignment and grade cell
#   bash scripts/course.sh feedback COURSE [ASSIGNMENT ...]  nbgrader generate_feedback -> COURSE/feedback/
#
# Without ASSIGNMENT, every folder of COURSE/source/. Grading never writes into SUBMISSIONS: the
# notebooks are executed in COURSE/autograded/<student>/<stem>/ (where chapters 10 and 11 keep
# their _cache/). Written answers count 0 until graded by hand (nbgrader formgrader).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$root/.venv/bin/nbgrader" ] || (cd "$root" && bash scripts/setup.sh >&2)
# nbgrader runs alembic from PATH, and the notebooks' kernel (python3) is the venv's python
export PATH="$root/.venv/bin:$PATH"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
py="$root/.venv/bin/python"

usage() {
  sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
  exit 2
}
[ $# -ge 2 ] || usage
cmd=$1
course=$2
shift 2
[ "$cmd" = init ] && mkdir -p "$course"
[ -d "$course" ] || { echo "error: no course folder $course (run: course.sh init $course)" >&2; exit 2; }
course=$(cd "$course" && pwd)

assignments() {  # the assignments named, or every folder of source/
  if [ $# -gt 0 ]; then printf '%s\n' "$@"; else (cd "$course/source" && ls -d -- */ | sed 's#/$##'); fi
}

case "$cmd" in
  init)
    id=$(basename "$course")
    opts=()
    files=()
    while [ $# -gt 0 ]; do
      case "$1" in
        --id) id=$2; shift 2 ;;
        --executed) opts+=("$1" "$2"); shift 2 ;;
        --no-executed) opts+=("$1"); shift ;;
        --execute) opts+=("$1"); shift ;;
        -*) usage ;;
        *) files+=("$1"); shift ;;
      esac
    done
    cat >"$course/nbgrader_config.py" <<EOF
# nbgrader configuration written by scripts/course.sh init
c = get_config()
c.CourseDirectory.course_id = "$id"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "_cache"]
c.Execute.timeout = 900             # seconds per cell (nbgrader's default, 30, is too short)
c.Execute.kernel_name = "python3"   # the book's venv kernel (course.sh puts .venv/bin first on PATH)
# feedback without the hidden tests (scripts/course_feedback.py): students may see their feedback and
# the assignment can still be reused
import sys
sys.path.insert(0, "$root/scripts")
from course_feedback import HideHiddenTests
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import GetGrades
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
# each check cell runs in a clean process fed the student's answers as plain data
# (scripts/course_guard.py): a student cell cannot strip asserts or patch lib or builtins for it
from course_guard import GuardedExecute
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute
c.Autograde.autograde_preprocessors = [GuardedExecute if p is Execute else p
                                       for p in Autograde.class_traits()["autograde_preprocessors"].default()]
c.GuardedExecute.source_dir = "$course/source"
EOF
    # relative chapter paths are taken from where the command was run
    "$py" "$root/scripts/course.py" source ${opts[@]+"${opts[@]}"} "$course/source" ${files[@]+"${files[@]}"}
    ;;
  release)
    cd "$course"
    for a in $(assignments "$@"); do nbgrader generate_assignment "$a" --force; done
    ;;
  collect)
    [ $# -eq 1 ] && [ -d "$1" ] || { echo "usage: course.sh collect COURSE SUBMISSIONS" >&2; exit 2; }
    subs=$(cd "$1" && pwd)
    students=()
    for dir in "$subs"/*/; do
      s=$(basename "$dir")
      [[ "$s" =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "skipping $dir: not a student id" >&2; continue; }
      for a in $(assignments); do
        if [ -f "$dir/$a.ipynb" ]; then
          mkdir -p "$course/submitted/$s/$a"
          cp "$dir/$a.ipynb" "$course/submitted/$s/$a/$a.ipynb"
          echo "collected $s/$a.ipynb"
          # an invented or duplicated grade_id would make nbgrader refuse the whole notebook
          "$py" "$root/scripts/course.py" sanitize "$course/source/$a/$a.ipynb" "$course/submitted/$s/$a/$a.ipynb"
        fi
      done
      students+=("$s")
    done
    if [ ${#students[@]} -gt 0 ]; then
      list=$(mktemp)
      { echo id; printf '%s\n' "${students[@]}"; } >"$list"
      (cd "$course" && nbgrader db student import "$list")
      rm -f "$list"
    fi
    ;;
  autograde)
    cd "$course"
    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
    rc=0   # a notebook nbgrader cannot grade is reported, and the others are still graded
    for a in $(assignments "$@"); do nbgrader autograde "$a" --force || rc=1; done
    exit $rc
    ;;
  export)
    [ $# -eq 1 ] || { echo "usage: course.sh export COURSE OUT.csv" >&2; exit 2; }
    "$py" "$root/scripts/course.py" export "$course" "$1"
    ;;
  feedback)
    cd "$course"
    for a in $(assignments "$@"); do nbgrader generate_feedback "$a" --force; done
    ;;
  *) usage ;;
esac
