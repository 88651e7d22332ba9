#!/usr/bin/env bash
# Write one student notebook per chapter into OUT: solutions replaced by `raise NotImplementedError()`,
# written answers by "YOUR ANSWER HERE", hidden tests and dropdown fences removed, check cells kept
# and locked, glued numbers filled in from a current book build (else marked; with --execute the
# chapter is run first, so that none is), the book's MyST markup written as Markdown Jupyter renders.
# For a course on nbgrader's own pipeline (release, autograde, gradebook, feedback) use scripts/course.sh.
#   bash scripts/student.sh OUT [--execute] [NOTEBOOK ...]      (default: every book/*.ipynb)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh >&2
if [ $# -lt 1 ]; then
  echo "usage: bash scripts/student.sh OUT [--execute] [NOTEBOOK ...]" >&2
  exit 2
fi
exec .venv/bin/python scripts/course.py student "$@"
