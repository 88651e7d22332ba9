#!/usr/bin/env bash
# Run the chapters under other random draws and report which asserted claims held on each:
#   bash scripts/replicate.sh [--draws 1 2 3] [--jobs 2] [NOTEBOOK ...]
# Each chapter runs in its own kernel with RECALL_DRAW=k (every problem, batch and test set changes),
# its asserts recorded rather than fatal; the table is printed and written to _build/replication.json.
# Exit status 1 when any claim failed on any draw. Draw 0 is the book as built.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
unset MPLBACKEND
exec .venv/bin/python scripts/replicate.py "$@"
