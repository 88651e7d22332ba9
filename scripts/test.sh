#!/usr/bin/env bash
# Run every test, then check the book a reader gets. This is the command CI runs (.ci/run).
#   1. the library's tests (tests/ except tests/book and the tests marked after_build, the slow ones
#      included; the 25 slowest printed; headless matplotlib: MPLBACKEND=Agg for this step only), in
#      two processes of one thread each (pytest-xdist, one test file at a time per process, so a
#      file's module fixtures are built once; the two files that grade notebooks first, as
#      tests/conftest.py orders them, so that both processes end near together);
#   2. every notebook under nbval (its asserts are the chapter's tests) and, at the same time, the
#      clean book build of scripts/build_book.sh (the very same book, with every figure): both
#      execute the notebooks, so they run side by side instead of one after the other;
#   3. the student edition and the PDF (build_book.sh --student --pdf), from the chapters step 2
#      executed: nothing runs twice; and, at the same time,
#   4. the tests marked after_build (tests/test_course.py, `pytest tests -m after_build`): every
#      exercise chapter scores full marks as the build executed it (its solutions and the
#      instructor's check cells, hidden tests included: not executed again; CI=true fails if the
#      build's executed copies are missing or stale), and its untouched student version, executed
#      by scripts/grade.sh in two processes (one kernel, one thread each), scores zero with no error
#      outside the exercises and prints no derivation's answer;
#   5. the built book (tests/book): every figure a chapter draws is on its page, and every page,
#      opened in headless Chromium with no network, has its math typeset by the bundled MathJax,
#      its images loaded, no console error and working solution dropdowns (screenshots in
#      _build/screenshots/); the student edition shows no solution and keeps the chapters'
#      figures; the PDF holds every chapter, figure and formula (two pages rendered in
#      _build/pdf/pages/). Chromium and TeX Live are installed first when this runs as root with apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
bash scripts/install_browser.sh
bash scripts/install_tex.sh
unset MPLBACKEND  # notebooks must draw with the inline backend: never Agg around them

# start_beside COMMAND...: run COMMAND in the background, its output kept for finish_beside.
# finish_beside TITLE FG_NAME FG_RC BG_NAME: wait for it, print its output under TITLE, and fail when
# either the foreground step (exit status FG_RC) or the background command failed.
start_beside() {
  beside_log=$(mktemp)
  "$@" >"$beside_log" 2>&1 &
  beside_pid=$!
}
finish_beside() {
  local bg_rc=0
  wait "$beside_pid" || bg_rc=$?
  echo "== $1"
  cat "$beside_log"
  rm -f "$beside_log"
  if [ "$3" != 0 ] || [ "$bg_rc" != 0 ]; then
    echo "error: $2 exit status $3, $4 exit status $bg_rc" >&2
    exit 1
  fi
}

echo "== library tests"
OMP_NUM_THREADS=1 MPLBACKEND=Agg .venv/bin/python -m pytest tests -q -p no:cacheprovider --ignore=tests/book \
  -m "not after_build" -n 2 --dist loadfile --no-loadscope-reorder --durations=25
t_lib=$(date +%s)

echo "== notebooks (nbval, CPU) alongside the book build (jupyter-book -W -n --keep-going)"
# nbval gets one thread so that, beside the build (which runs as build_book.sh does), the two
# executions share the CPU without oversubscribing it.
start_beside env OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" \
  .venv/bin/python -m pytest --nbval-lax --nbval-current-env -q -p no:cacheprovider --durations=0 book
build_rc=0
BOOK_SETUP_DONE=1 bash scripts/build_book.sh || build_rc=$?
finish_beside "nbval output" "book build" "$build_rc" "nbval"
t_build=$(date +%s)

echo "== the student edition and the PDF, from the executed chapters of the build;" \
     "alongside, the tests that grade the build's executions and the student notebooks (-m after_build)"
# the student notebooks run in two grade.sh kernels of one thread each (MPLBACKEND=Agg as in step 1:
# these tests read the printed text, not the figures), beside the editions' single-threaded builds
start_beside env MPLBACKEND=Agg .venv/bin/python -m pytest tests -q -p no:cacheprovider --ignore=tests/book -m after_build
editions=(--student)
if command -v xelatex >/dev/null && command -v latexmk >/dev/null; then
  editions+=(--pdf)
else
  echo "note: no TeX Live (xelatex, latexmk): the PDF is not built; its test is skipped (fails under CI=true)" >&2
fi
editions_rc=0
BOOK_SETUP_DONE=1 bash scripts/build_book.sh "${editions[@]}" || editions_rc=$?
t_editions=$(date +%s)
finish_beside "tests after the build (-m after_build) output" "editions build" "$editions_rc" "after-build tests"
t_graded=$(date +%s)

echo "== the built book: figures on the pages, every page in offline headless Chromium"
.venv/bin/python -m pytest tests/book -q -p no:cacheprovider -rs
t_book=$(date +%s)
echo "-- figures per chapter (_build/figures.txt)"
cat _build/figures.txt
if [ -f _build/browser.txt ]; then
  echo "-- pages checked in the browser (_build/browser.txt; screenshots in _build/screenshots/)"
  cat _build/browser.txt
fi
if [ -f _build/pdf.txt ]; then
  echo "-- the PDF (_build/pdf.txt; rendered pages in _build/pdf/pages/)"
  cat _build/pdf.txt
fi
echo "== all tests passed in $(( t_book - start )) s" \
     "(setup+library $(( t_lib - start )) s," \
     "nbval+build $(( t_build - t_lib )) s, student edition+PDF $(( t_editions - t_build )) s," \
     "after-build tests $(( t_graded - t_build )) s (beside the editions; $(( t_graded - t_editions )) s after them)," \
     "built-book tests $(( t_book - t_graded )) s)"
