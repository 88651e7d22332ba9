#!/usr/bin/env bash
# Build the library alone (lib/, the package recall-lib of pyproject.toml) for students, who get it
# without the repository (whose book/*.ipynb hold every solution): a wheel and an sdist in OUT.
#   bash scripts/student_package.sh [OUT]      (default: _build/student_package/)
# Only pyproject.toml, lib/ (no __pycache__) and the data of book/data (as lib/_data, where lib.core.paths
# finds it when lib is installed alone) are copied to a temporary folder and built there with
# the venv's setuptools, offline (pip wheel --no-deps --no-build-isolation; setuptools' build_sdist),
# so nothing else of the repository can reach the build and it leaves no build/ or egg-info behind.
# scripts/check_package.py then lists every file of both and fails (exit 1, one line naming the
# file) on anything outside lib/ and the package metadata, a notebook, a file of book/, tests/,
# scripts/, .ci/, a compiled file, a file holding an exercise marker (### BEGIN SOLUTION, hidden
# tests, the solution dropdown fences), a missing package-data file or a missing lib/ module.
# Students install the wheel with `pip install recall_lib-VERSION-py3-none-any.whl`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh >&2
py=$(pwd)/.venv/bin/python
out=${1:-_build/student_package}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/recall_lib-*.whl "$out"/recall_lib-*.tar.gz   # earlier builds: one version per folder

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp pyproject.toml "$stage/"
tar -C . --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' -cf - lib | tar -C "$stage" -xf -
# the data the chapters read (book/data) goes inside the package as lib/_data (lib.core.paths finds it there)
mkdir -p "$stage/lib/_data"
cp book/data/*.json book/data/*.jsonl "$stage/lib/_data/"
sed -i 's|^\[tool.setuptools.package-data\]$|&\n"lib" = ["_data/*.json", "_data/*.jsonl"]|' "$stage/pyproject.toml"
grep -q '^"lib" = \["_data' "$stage/pyproject.toml" || { echo "error: could not add lib/_data to the package data" >&2; exit 1; }

"$py" -m pip wheel "$stage" --no-deps --no-build-isolation --no-index -q -w "$out" >&2
if ! (cd "$stage" && "$py" -c 'import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])' \
      "$out" >"$stage/sdist.log" 2>&1); then
  tail -n 20 "$stage/sdist.log" >&2
  echo "error: the sdist build failed (its last lines above)" >&2
  exit 1
fi

shopt -s nullglob
wheels=("$out"/recall_lib-*.whl)
sdists=("$out"/recall_lib-*.tar.gz)
if [ ${#wheels[@]} -ne 1 ] || [ ${#sdists[@]} -ne 1 ]; then
  echo "error: expected one wheel and one sdist in $out, found ${#wheels[@]} and ${#sdists[@]}" >&2
  exit 1
fi
"$py" scripts/check_package.py --source lib --pyproject "$stage/pyproject.toml" "${wheels[0]}" "${sdists[0]}" || exit 1
size=$(stat -c %s "${wheels[0]}")
echo "wheel: ${wheels[0]} ($size bytes, $(( (size + 1023) / 1024 )) KiB)"
echo "sdist: ${sdists[0]} ($(stat -c %s "${sdists[0]}") bytes)"
