#!/usr/bin/env bash
# Execute each notebook (errors allowed) with the instructor's check cells restored from book/
# (matched by grade_id, so hidden tests count), and print one line per notebook: NAME: S/M.
# Each check cell runs in a clean process fed the student's answers as data (scripts/course_guard.py),
# as nbgrader's autograde does under scripts/course.sh.
#   bash scripts/grade.sh NOTEBOOK [NOTEBOOK ...]   (e.g. a student's 02_interference.ipynb)
set -euo pipefail
here=$(pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$root/.venv/bin/python" ] || (cd "$root" && bash scripts/setup.sh >&2)
if [ $# -lt 1 ]; then
  echo "usage: bash scripts/grade.sh NOTEBOOK [NOTEBOOK ...]" >&2
  exit 2
fi
cd "$here"
exec "$root/.venv/bin/python" "$root/scripts/course.py" grade "$@"
