"""Run the book's chapters under other random draws and report which asserted claims held.

    python scripts/replicate.py [--draws 1 2 3] [--jobs 2] [--out _build/replication.json] [--publish] [NOTEBOOK ...]

Each (chapter, draw) is executed in its own kernel with RECALL_DRAW set (lib.core.seed: every problem,
batch, test set and global seed changes with the draw), one torch thread, the chapter's folder as
working directory, and every assert rewritten to record its outcome instead of stopping the chapter
(scripts/claims.py). Errors are collected, never fatal: a claim that raised or was never reached
counts as failed. Prints a table (chapter, cell, claim, draws passed) and writes it as JSON; exits 1
when any claim failed on any draw. `--publish` also writes book/replication.json, the table of the
book's page "How robust is each claim" (tests/test_replication_table.py checks that it covers every
assert of every chapter). `--merge RUN` executes nothing: it takes RUN (a finished run's --out, of some
chapters, on the table's draws or more) and replaces those chapters' rows and runs in book/replication.json,
read on the table's own draws, so that a chapter changed after the table was published can be rerun alone.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import claims as C  # noqa: E402


def chapters() -> list[str]:
    """The chapters in the order of the table of contents (every notebook under book/)."""
    import glob
    return sorted(glob.glob(os.path.join(ROOT, "book", "[0-9]*.ipynb")))


def run_one(path: str, draw: int, timeout: int) -> dict:
    """Execute one instrumented chapter under one draw in a child process; its records."""
    chapter = os.path.splitext(os.path.basename(path))[0]
    nb, found = C.instrument(C.load(path), chapter)
    with tempfile.TemporaryDirectory() as tmp:
        nb_path, rec_path = os.path.join(tmp, "nb.ipynb"), os.path.join(tmp, "records.json")
        with open(nb_path, "w") as f:
            json.dump(nb, f)
        env = dict(os.environ, RECALL_DRAW=str(draw), REPLICATE_RECORDS=rec_path,
                   OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        env.pop("MPLBACKEND", None)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _EXECUTE, nb_path, os.path.dirname(path), str(timeout)],
                              env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        records = {}
        if os.path.exists(rec_path):
            with open(rec_path) as f:
                records = json.load(f)
    errors = [line for line in proc.stdout.splitlines() if line.startswith("cell ")]
    if proc.returncode != 0:
        errors.append(f"execution failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
    return {"chapter": chapter, "draw": draw, "seconds": round(seconds, 1), "errors": errors,
            "claims": found, "records": records}


# Runs in the child: nbclient executes every cell (errors allowed) and prints each cell error.
_EXECUTE = r"""
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
client = NotebookClient(nb, timeout=int(sys.argv[3]), kernel_name="python3", allow_errors=True,
                        resources={"metadata": {"path": sys.argv[2]}})
client.execute()
for i, cell in enumerate(nb.cells):
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            print(f"cell {i - 1}: {out['ename']}: {out['evalue'][:200]}")
"""


def table(results: list[dict], draws: list[int]) -> list[dict]:
    rows = {}
    for res in results:
        for c in res["claims"]:
            row = rows.setdefault(c["key"], {k: c[k] for k in ("chapter", "cell", "text", "occurrence", "key")}
                                  | {"passed": [], "failed": {}})
            rec = res["records"].get(c["key"])
            if rec is None:
                row["failed"][str(res["draw"])] = "not reached"
            else:
                if rec[0]:
                    row["passed"].append(res["draw"])
                else:
                    row["failed"][str(res["draw"])] = rec[1] or "False"
                if len(rec) > 2:
                    row.setdefault("values", {})[str(res["draw"])] = rec[2]
    out = list(rows.values())
    for row in out:
        row["passed"].sort()
        row["moves"] = moves(row, draws)
    return out


def moves(row: dict, draws: list[int]) -> bool | None:
    """Whether a redraw moved the values the claim read: True when their fingerprints differ between
    two draws (a live claim), False when they are equal on every draw (the claim reads shipped data or
    an exact computation: a redraw cannot change it), None when fewer than two draws recorded them."""
    fps = [row.get("values", {}).get(str(k)) for k in draws]
    fps = [f for f in fps if f is not None]
    if len(fps) < 2:
        return None
    return len(set(fps)) > 1


def merge_into(table: dict, run: dict, own_draws: bool = False) -> dict:
    """`table` (book/replication.json) with the chapters of `run` (a run's JSON) replaced: their rows and runs
    restricted to the table's draws (every one of which `run` must have), the summary's counts recomputed,
    and `run`'s command, date, other draws and how many claims failed on those added to the table's "merged"
    list. The wall time stays the table's.

    `own_draws=True`: the chapters keep every draw of `run` instead (a chapter too costly to run on all the
    table's draws: its rows then say which draws they held on, and the "merged" entry names them as
    "draws"); the run must still include draws 1, 2 and 3 and at least one draw beyond them."""
    draws = table["summary"]["draws"]
    if own_draws:
        mine = run["summary"]["draws"]
        if not ({1, 2, 3} <= set(mine) and len(set(mine)) >= 4):
            raise ValueError(f"with own draws the run's draws {mine} must include 1, 2, 3 and one more")
        draws = mine
    elif not set(draws) <= set(run["summary"]["draws"]):
        raise ValueError(f"the run's draws {run['summary']['draws']} must include the table's {draws}")
    chapters = {r["chapter"] for r in run["runs"]}
    keep = lambda r: r["chapter"] not in chapters                                      # noqa: E731
    rows = [r for r in table["rows"] if keep(r)] + [
        {**r, "passed": [d for d in r["passed"] if d in draws],
         "failed": {k: v for k, v in r["failed"].items() if int(k) in draws}} for r in run["rows"]]
    rows.sort(key=lambda r: (r["chapter"] == "robustness", r["chapter"]))     # book order; a chapter's rows in place
    runs = [r for r in table["runs"] if keep(r)] + [r for r in run["runs"] if r["draw"] in draws]
    summary = {**table["summary"], "claims": len(rows), "failed": sum(bool(r["failed"]) for r in rows),
               "live": sum(r["moves"] is True for r in rows), "fixed": sum(r["moves"] is False for r in rows)}
    other = [d for d in run["summary"]["draws"] if d not in table["summary"]["draws"]]   # beyond the table's
    failed_other = sum(any(int(k) in other for k in r["failed"]) for r in run["rows"])
    entry = {"command": run["command"], "date": run["date"], "chapters": sorted(chapters),
             "other_draws": other, "failed_on_other_draws": failed_other}
    if own_draws:
        entry["draws"] = list(draws)
    merged = table.get("merged", []) + [entry]
    return {**table, "summary": summary, "runs": runs, "rows": rows, "merged": merged}


def recell(table: dict, book: str = os.path.join(ROOT, "book")) -> dict:
    """`table` with each row's cell number read from the chapter as it is now (a claim is keyed by its
    chapter, text and occurrence, not by its cell: a cell split or inserted after the run moves it);
    rows whose claim is no longer in its chapter keep theirs (the coverage test reports those)."""
    where = {}
    for ch in {r["chapter"] for r in table["rows"]}:
        path = os.path.join(book, ch + ".ipynb")
        if os.path.isfile(path):
            where.update({c["key"]: c["cell"] for c in C.claims(C.load(path), ch)})
    return {**table, "rows": [{**r, "cell": where.get(r["key"], r["cell"])} for r in table["rows"]]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", help="chapters to run (default: every notebook under book/)")
    ap.add_argument("--draws", nargs="+", type=int, default=[1, 2, 3], help="draws to run (default 1 2 3)")
    ap.add_argument("--jobs", type=int, default=2, help="chapters executed at once (default 2)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell (default 1800)")
    ap.add_argument("--publish", action="store_true",
                    help="also write the table the book shows (book/replication.json); needs every chapter")
    ap.add_argument("--out", default=os.path.join(ROOT, "_build", "replication.json"), help="JSON output")
    ap.add_argument("--merge", default=None, metavar="RUN",
                    help="run nothing: replace RUN's chapters in book/replication.json (RUN: a finished --out)")
    ap.add_argument("--own-draws", action="store_true",
                    help="with --merge: RUN's chapters keep RUN's draws (1, 2, 3 and more) instead of the table's")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--draws" in argv:          # --draws takes the integers after it; what follows is notebooks
        i = argv.index("--draws") + 1
        j = i
        while j < len(argv) and argv[j].lstrip("-").isdigit():
            j += 1
        argv = argv[:j] + (["--"] if "--" not in argv[j:] and j < len(argv) and not argv[j].startswith("-") else []) + argv[j:]
    a = ap.parse_args(argv)
    if a.merge is not None:
        path = os.path.join(ROOT, "book", "replication.json")
        with open(path) as f, open(a.merge) as g:
            out = recell(merge_into(json.load(f), json.load(g), own_draws=a.own_draws))
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
        print(f"written: {path} ({out['summary']['claims']} claims, {out['summary']['failed']} failed)")
        return 1 if out["summary"]["failed"] else 0
    if any(k < 0 for k in a.draws):
        ap.error("--draws must be non-negative integers")
    if a.jobs < 1:
        ap.error("--jobs must be a positive integer")
    paths = [os.path.abspath(p) for p in a.notebooks] or chapters()
    for p in paths:
        if not (p.endswith(".ipynb") and os.path.isfile(p)):
            ap.error(f"notebooks: {p} is not a notebook file")
    # longest chapters first, so the two workers finish together
    jobs = [(p, k) for p in paths for k in a.draws]
    jobs.sort(key=lambda job: -os.path.getsize(job[0]))
    t0 = time.perf_counter()
    with ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(lambda job: run_one(job[0], job[1], a.timeout), jobs))
    wall = time.perf_counter() - t0
    rows = table(results, a.draws)
    order = {os.path.splitext(os.path.basename(p))[0]: i for i, p in enumerate(paths)}
    rows.sort(key=lambda r: (order[r["chapter"]], r["cell"]))
    failed = [r for r in rows if r["failed"]]
    width = max([len(r["chapter"]) for r in rows] + [7])
    print(f"{'chapter':<{width}}  cell  draws passed  kind   claim")
    for r in rows:
        mark = "" if not r["failed"] else "  <-- FAILED on " + ", ".join(
            f"draw {k} ({v[:120]})" for k, v in r["failed"].items())
        kind = {True: "live ", False: "fixed", None: "  ?  "}[r["moves"]]
        print(f"{r['chapter']:<{width}}  {r['cell']:>4}  {len(r['passed']):>2}/{len(a.draws):<9}  {kind}  "
              f"{r['text'][:100]}{mark}")
    print("\nchapter seconds per draw:")
    for res in sorted(results, key=lambda r: (order[r["chapter"]], r["draw"])):
        print(f"  {res['chapter']} draw {res['draw']}: {res['seconds']} s" +
              ("" if not res["errors"] else "  errors: " + "; ".join(res["errors"])[:400]))
    summary = {"claims": len(rows), "failed": len(failed), "draws": a.draws, "wall_seconds": round(wall, 1),
               "live": sum(r["moves"] is True for r in rows), "fixed": sum(r["moves"] is False for r in rows)}
    print(f"\n{len(rows) - len(failed)} of {len(rows)} claims held on every draw ({a.draws}); "
          f"{len(failed)} failed; {wall:.0f} s")
    print(f"{summary['live']} claims read values that the draws moved (live); {summary['fixed']} read the same "
          "values on every draw (shipped data or exact computations)")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    data = {"command": "scripts/replicate.sh --draws " + " ".join(map(str, a.draws)) +
                       ("" if not a.notebooks else " " + " ".join(a.notebooks)),
            "date": datetime.date.today().isoformat(),
            "threads": os.environ.get("OMP_NUM_THREADS", "1"),
            "native": os.environ.get("RECALL_NATIVE", "1") != "0",
            "summary": summary,
            "chapters": {res["chapter"]: {} for res in results},
            "runs": [{k: res[k] for k in ("chapter", "draw", "seconds", "errors")} for res in results],
            "rows": [{k: r[k] for k in ("chapter", "cell", "text", "occurrence", "key", "passed", "failed", "moves")}
                     for r in rows]}
    data.pop("chapters")
    with open(a.out, "w") as f:
        json.dump(data, f, indent=1)
    print(f"written: {a.out}")
    if a.publish:
        if a.notebooks or len(a.draws) < 3:
            ap.error("--publish needs every chapter (no NOTEBOOK arguments) and at least three draws")
        with open(os.path.join(ROOT, "book", "replication.json"), "w") as f:
            json.dump(data, f, indent=1)
        print("written: book/replication.json (the robustness page's table)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
