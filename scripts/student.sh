#!/usr/bin/env bash
# Write one student notebook per chapter into OUT (default: student/): solutions replaced by
# `raise NotImplementedError()`, solution prose and hidden tests removed, check cells kept and locked.
#   bash scripts/student.sh OUT [NOTEBOOK ...]      (default: every book/*.ipynb)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh >&2
if [ $# -lt 1 ]; then
  echo "usage: bash scripts/student.sh OUT [NOTEBOOK ...]" >&2
  exit 2
fi
exec .venv/bin/python scripts/course.py student "$@"
