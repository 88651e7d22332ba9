#!/usr/bin/env bash
# Regenerate book/data/ch10_points.jsonl, the evaluated points chapter 10 reads at draw 0 (its N* searches):
#   bash scripts/ship_ch10_store.sh
# The chapter runs in a scratch folder with an empty shipped store and a fresh cache, so every point it
# needs is computed there (one torch thread; a few minutes on one core) and nothing else; that cache
# becomes the shipped store. The old store is kept until the run succeeds.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
store=book/data/ch10_points.jsonl
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"; [ -f "$scratch.old" ] && mv "$scratch.old" "$store"; true' EXIT
cp book/10_beyond_three_steps.ipynb "$scratch"/
[ -f "$store" ] && mv "$store" "$scratch.old"
: > "$store"
root=$PWD
(cd "$scratch" && OMP_NUM_THREADS=1 "$root/.venv/bin/jupyter" nbconvert --to notebook \
    --execute --ExecutePreprocessor.timeout=7200 10_beyond_three_steps.ipynb --output executed.ipynb)
mv "$scratch/_cache/ch10_points.jsonl" "$store"
rm -f "$scratch.old"
echo "shipped $(wc -l < "$store") points in $store"
