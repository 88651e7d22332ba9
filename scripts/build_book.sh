#!/usr/bin/env bash
# Build the book from a clean state: every notebook is executed; warnings are errors.
# The HTML lands in _build/html/index.html, MathJax included (no network needed to read it).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${BOOK_SETUP_DONE:-}" = 1 ] || bash scripts/setup.sh  # scripts/test.sh ran it already
# Notebooks draw with the inline backend; MPLBACKEND=Agg in the caller's environment would reach
# the kernels and every figure would vanish from the pages while the build still passes.
unset MPLBACKEND
# One thread per kernel, as nbval (scripts/test.sh) and the grader use: reductions in torch depend on
# the thread count, and a search for N* near its threshold can flip on the last bit. With the same
# count everywhere the book's pages show exactly the numbers its tests checked.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
rm -rf _build
# Jupyter Book executes notebooks one at a time; execute them first, two kernels at once, into the
# (fresh) cache that the build reads (execute_notebooks: cache). A notebook that fails there is left
# out of the cache, and the build executes it again and reports its error.
mkdir -p _build
# Kernels at once: as many as the cores hold at OMP_NUM_THREADS threads each (2 on two cores with one
# thread; 1 with two threads: oversubscribed torch threads slowed cells past the timeout); BOOK_JOBS overrides.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)   # nproc itself honours OMP_NUM_THREADS
jobs=$(( cores / OMP_NUM_THREADS )); [ "$jobs" -ge 1 ] || jobs=1
.venv/bin/python scripts/execute_book.py --jobs "${BOOK_JOBS:-$jobs}" | tee _build/execution_times.txt
.venv/bin/jupyter-book build . -W -n --keep-going
# The executed notebooks as the pages show them (myst-nb leaves them without outputs in cache mode)
.venv/bin/python scripts/execute_book.py --export _build/jupyter_execute
# A directive whose fence failed to parse renders as literal text: treat that as an error too.
if grep -l '```{' _build/html/book/*.html; then
  echo "error: unparsed directive fences in the pages above" >&2
  exit 1
fi
# MathJax ships with the book (sphinx-mathjax-offline copies it only when the build succeeded).
if [ ! -s _build/html/_static/mathjax/tex-chtml.js ]; then
  echo "error: _build/html/_static/mathjax/tex-chtml.js missing: formulas would need a network" >&2
  exit 1
fi
echo "Book built: $(pwd)/_build/html/index.html"
