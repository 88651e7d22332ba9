"""Execute the book's notebooks in parallel into the Jupyter cache that `jupyter-book build` reads.

    python scripts/execute_book.py [--jobs 2] [--cache _build/.jupyter_cache] [--timeout 300]

Jupyter Book (v1) executes notebooks one after the other. The build (`execute_notebooks: cache` in
_config.yml) instead finds each notebook already executed in the cache this script fills, with
jupyter-cache's own parallel executor, each kernel in the notebook's folder, as the build would run
it. A notebook that fails here is not cached: the build then executes it itself and reports the
error (`-W` makes it fatal). Prints each notebook's execution time.

    python scripts/execute_book.py --export _build/jupyter_execute

after the build writes each notebook as the pages show it (its outputs merged from the cache) to
the folder. In cache mode myst-nb renders the merged notebook but leaves in `_build/jupyter_execute`
the notebook as read, without outputs; the tests of the built book read the executed copies there.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def notebooks() -> list[str]:
    """Every notebook the table of contents names, in its order."""
    with open(os.path.join(ROOT, "_toc.yml")) as f:
        toc = yaml.safe_load(f)
    files = []

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(toc)
    return [os.path.join(ROOT, f + ".ipynb") for f in files if os.path.exists(os.path.join(ROOT, f + ".ipynb"))]


def config_timeout() -> int:
    """The per-cell timeout of _config.yml (execute: timeout), so that both executions agree."""
    with open(os.path.join(ROOT, "_config.yml")) as f:
        return int(yaml.safe_load(f)["execute"]["timeout"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="kernels at once (default 2)")
    ap.add_argument("--cache", default=os.path.join(ROOT, "_build", ".jupyter_cache"))
    ap.add_argument("--timeout", type=int, default=config_timeout(), help="seconds per cell (default: _config.yml's)")
    ap.add_argument("--export", metavar="DIR", help="write the cached executed notebooks under DIR instead")
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error("--jobs must be a positive integer")
    if a.export:
        return export(a.cache, a.export)
    import multiprocessing

    from jupyter_cache import get_cache
    from jupyter_cache.executors import load_executor

    cache = get_cache(a.cache)
    paths = notebooks()
    # longest first, so that the kernels finish together
    paths.sort(key=lambda p: -os.path.getsize(p))
    for p in paths:
        cache.add_nb_to_project(p)
    t0 = time.perf_counter()
    executor = load_executor("local-parallel", cache=cache)
    # jupyter-cache's pool takes one process per core; cap it at --jobs
    real_pool = multiprocessing.Pool
    multiprocessing.Pool = lambda *args, **kw: real_pool(a.jobs)
    try:
        result = executor.run_and_cache(timeout=a.timeout, allow_errors=False)
    finally:
        multiprocessing.Pool = real_pool
    wall = time.perf_counter() - t0
    for rec in cache.list_cache_records():
        print(f"  {os.path.relpath(rec.uri, ROOT)}: {rec.data.get('execution_seconds', float('nan')):.1f} s")
    failed = result.errored
    print(f"executed {len(result.succeeded)} notebooks in {wall:.0f} s with {a.jobs} kernels at once"
          + (f"; failed (the build will report them): {failed}" if failed else ""))
    return 0


def export(cache_path: str, folder: str) -> int:
    """Write every notebook of the book, with its outputs from the cache, to folder/<path>.ipynb."""
    import nbformat
    from jupyter_cache import get_cache

    cache, missing = get_cache(cache_path), []
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        try:
            _, merged = cache.merge_match_into_notebook(nb)
        except KeyError:
            missing.append(os.path.relpath(path, ROOT))
            continue
        out = os.path.join(folder, os.path.relpath(path, ROOT))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        nbformat.write(merged, out)
    if missing:
        print(f"error: not in the cache {cache_path}: {missing}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
