#!/usr/bin/env bash
# Build the book. Warnings are errors in every edition.
#   bash scripts/build_book.sh            the HTML book from a clean state, every notebook executed:
#                                         _build/html/index.html, MathJax included (no network needed)
#   bash scripts/build_book.sh --student  the student edition: HTML with no solution code, solution
#                                         prose or hidden test (written answers read "YOUR ANSWER HERE"),
#                                         the chapters' own figures and numbers kept: _build/student/index.html
#   bash scripts/build_book.sh --pdf      the whole book as one PDF (LaTeX, xelatex): _build/pdf/book.pdf
# --student and --pdf (together or alone) execute nothing: they take the executed chapters of the last
# build (_build/jupyter_execute). When that build is missing or older than a chapter or lib/, the
# HTML build runs first. --pdf needs TeX Live (scripts/install_tex.sh installs it as root).
set -euo pipefail
cd "$(dirname "$0")/.."
student=0 pdf=0
for arg in "$@"; do
  case "$arg" in
    --student) student=1 ;;
    --pdf) pdf=1 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: bash scripts/build_book.sh [--student] [--pdf]" >&2; exit 2 ;;
  esac
done
[ "${BOOK_SETUP_DONE:-}" = 1 ] || bash scripts/setup.sh  # scripts/test.sh ran it already
# Notebooks draw with the inline backend; MPLBACKEND=Agg in the caller's environment would reach
# the kernels and every figure would vanish from the pages while the build still passes.
unset MPLBACKEND
# One thread per kernel, as nbval (scripts/test.sh) and the grader use: reductions in torch depend on
# the thread count, and a search for N* near its threshold can flip on the last bit. With the same
# count everywhere the book's pages show exactly the numbers its tests checked.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

# An edition: its Jupyter Book source folder _build/<edition>_src, written from the executed chapters
# (scripts/editions.py), built with execution off into _build/<edition>_src/_build/.
edition() {  # edition student|full BUILDER
  local src="_build/$1_src"
  .venv/bin/python scripts/editions.py "$1" "$src"
  .venv/bin/jupyter-book build "$src" --builder "$2" -W -n --keep-going
}

if [ "$student" = 1 ] || [ "$pdf" = 1 ]; then
  if ! .venv/bin/python scripts/editions.py check; then
    echo "== no current book build in _build/: building it first (bash scripts/build_book.sh)"
    BOOK_SETUP_DONE=1 bash "$0"
  fi
  if [ "$student" = 1 ]; then
    edition student html
    rm -rf _build/student
    mv _build/student_src/_build/html _build/student
    if [ ! -s _build/student/_static/mathjax/tex-chtml.js ]; then
      echo "error: _build/student/_static/mathjax/tex-chtml.js missing" >&2
      exit 1
    fi
    echo "Student edition built: $(pwd)/_build/student/index.html"
  fi
  if [ "$pdf" = 1 ]; then
    if ! command -v xelatex >/dev/null || ! command -v latexmk >/dev/null; then
      echo "error: --pdf needs xelatex and latexmk (TeX Live): run scripts/install_tex.sh as root, or" \
           "install Debian's texlive-xetex texlive-latex-extra latexmk fonts-dejavu-core" >&2
      exit 1
    fi
    # jupyter-book's pdflatex builder writes the LaTeX, then runs latexmk (xelatex) on it
    edition full pdflatex
    rm -rf _build/pdf && mkdir -p _build/pdf
    cp _build/full_src/_build/latex/book.pdf _build/full_src/_build/latex/book.log _build/pdf/
    echo "PDF built: $(pwd)/_build/pdf/book.pdf ($(pdfinfo _build/pdf/book.pdf 2>/dev/null | awk '/^Pages:/ {print $2}') pages)"
  fi
  exit 0
fi

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
