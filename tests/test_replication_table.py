"""The robustness page's table (book/replication.json, written by scripts/replicate.sh --publish)
covers every assert of every chapter: change a claim and the table must be regenerated."""
import glob
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import claims as C  # noqa: E402


def table():
    with open(os.path.join(ROOT, "book", "replication.json")) as f:
        return json.load(f)


def test_table_covers_every_assert_of_every_chapter():
    covered = {r["key"] for r in table()["rows"]}
    missing = []
    for path in sorted(glob.glob(os.path.join(ROOT, "book", "[0-9]*.ipynb"))):
        chapter = os.path.basename(path)[:-6]
        missing += [f"{c['chapter']} cell {c['cell']}: {c['text'][:90]}"
                    for c in C.claims(C.load(path), chapter) if c["key"] not in covered]
    assert not missing, ("asserts not in book/replication.json; rerun "
                         "`bash scripts/replicate.sh --draws 1 2 3 --publish`:\n" + "\n".join(missing))


def test_table_is_a_run_of_three_draws_or_more_with_its_command_and_date():
    t = table()
    assert len(t["summary"]["draws"]) >= 3 and 0 not in t["summary"]["draws"]
    assert t["command"].startswith("scripts/replicate.sh --draws") and len(t["date"]) == 10
    assert all(set(r) >= {"chapter", "cell", "text", "passed", "failed", "moves"} for r in t["rows"])
    # every claim is classed live (its values moved with the draw) or fixed (the same on every draw)
    assert all(r["moves"] in (True, False) for r in t["rows"]) and "note" not in t
    assert t["summary"]["live"] + t["summary"]["fixed"] == t["summary"]["claims"] == len(t["rows"])


def test_claims_finder_sees_every_assert_and_the_recorder_keeps_going():
    nb = {"cells": [{"cell_type": "code", "source": "x = 1\nassert x == 1\nfor i in range(2):\n    assert i < 1, 'big'\n"
                     "assert undefined_name > 0\n", "metadata": {}, "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    found = C.claims(nb, "ch")
    assert [c["text"] for c in found] == ["x == 1", "i < 1", "undefined_name > 0"]
    inst, _ = C.instrument(nb, "ch")
    records = {}
    ns = {"__name__": "__main__"}
    src = "".join(c["source"] for c in inst["cells"][1:-1])
    exec(inst["cells"][0]["source"], ns)
    exec(src, ns)
    records = ns["_CLAIMS"]
    assert records["ch|x == 1|0"][0] is True
    assert records["ch|i < 1|0"][0] is False                        # held for i = 0, failed for i = 1
    assert records["ch|undefined_name > 0|0"][0] is False and "NameError" in records["ch|undefined_name > 0|0"][1]


def _run_instrumented(src, ns):
    nb = {"cells": [{"cell_type": "code", "source": src, "metadata": {}, "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    inst, _ = C.instrument(nb, "ch")
    exec(inst["cells"][0]["source"], ns)
    exec("".join(c["source"] for c in inst["cells"][1:-1]), ns)
    return ns["_CLAIMS"]


def test_the_recorder_fingerprints_what_a_claim_reads():
    src = ("import numpy as np\nassert np.asarray(f(k)).sum() > 0\nassert 2 ** 10 == 1024\n"
           "assert all(x < 10 for x in table)\n")
    runs = [_run_instrumented(src, {"f": lambda k: [k, 1.0], "k": k, "table": [1, 2]}) for k in (1, 2, 2)]
    fp = lambda r, key: r[f"ch|{key}|0"][2]
    live, exact, shipped = "np.asarray(f(k)).sum() > 0", "2 ** 10 == 1024", "all(x < 10 for x in table)"
    assert fp(runs[0], live) != fp(runs[1], live) == fp(runs[2], live)   # a value read through a call moved
    assert fp(runs[0], exact) == fp(runs[1], exact)                     # an exact check: never moves
    assert fp(runs[0], shipped) == fp(runs[1], shipped)                 # data a redraw does not change
    import replicate as R
    row = {"values": {"1": "a", "2": "b"}}
    assert R.moves(row, [1, 2]) is True and R.moves({"values": {"1": "a", "2": "a"}}, [1, 2]) is False
    assert R.moves({"values": {"1": "a"}}, [1, 2]) is None


def test_merge_replaces_the_rerun_chapters_on_the_tables_draws():
    import replicate as R
    row = lambda ch, key, passed, failed, moves: {"chapter": ch, "cell": 1, "text": key, "occurrence": 0,  # noqa: E731
                                                   "key": f"{ch}|{key}|0", "passed": passed, "failed": failed,
                                                   "moves": moves}
    table = {"command": "scripts/replicate.sh --draws 1 2 3", "date": "2026-01-01",
             "summary": {"claims": 2, "failed": 0, "draws": [1, 2, 3], "wall_seconds": 10.0, "live": 1, "fixed": 1},
             "runs": [{"chapter": c, "draw": d, "seconds": 1.0, "errors": []} for c in ("a", "b") for d in (1, 2, 3)],
             "rows": [row("a", "x", [1, 2, 3], {}, True), row("b", "y", [1, 2, 3], {}, False)]}
    run = {"command": "scripts/replicate.sh --draws 1 2 3 9 b.ipynb", "date": "2026-02-02",
           "summary": {"draws": [1, 2, 3, 9]},
           "runs": [{"chapter": "b", "draw": d, "seconds": 2.0, "errors": []} for d in (1, 2, 3, 9)],
           "rows": [row("b", "y2", [1, 2, 3], {"9": "AssertionError"}, True), row("b", "z", [1, 3, 9], {"2": "no"}, False)]}
    out = R.merge_into(table, run)
    assert [r["key"] for r in out["rows"]] == ["a|x|0", "b|y2|0", "b|z|0"]
    assert out["rows"][1]["failed"] == {} and out["rows"][2]["passed"] == [1, 3] and out["rows"][2]["failed"] == {"2": "no"}
    assert out["summary"] == {**table["summary"], "claims": 3, "failed": 1, "live": 2, "fixed": 1}
    assert sorted((r["chapter"], r["draw"]) for r in out["runs"]) == [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("b", 3)]
    assert out["merged"] == [{"command": run["command"], "date": "2026-02-02", "chapters": ["b"], "other_draws": [9],
                              "failed_on_other_draws": 1}]
    with pytest.raises(ValueError, match="draws"):
        R.merge_into(table, {**run, "summary": {"draws": [1, 2]}})
    # a chapter too costly for every draw of the table keeps its own draws, and says which
    own = R.merge_into({**table, "summary": {**table["summary"], "draws": [1, 2, 3, 7, 8]}}, run, own_draws=True)
    assert own["rows"][2]["passed"] == [1, 3, 9] and own["rows"][2]["failed"] == {"2": "no"}
    assert own["merged"][-1]["draws"] == [1, 2, 3, 9] and own["merged"][-1]["other_draws"] == [9]
    assert sorted(d for r in own["runs"] if r["chapter"] == "b" for d in [r["draw"]]) == [1, 2, 3, 9]
    with pytest.raises(ValueError, match="own draws"):
        R.merge_into(table, {**run, "summary": {"draws": [1, 2, 3]}}, own_draws=True)


def test_main_does_not_shadow_the_modules_functions():
    """A name assigned in replicate.main that is also one of the module's functions makes Python treat it as a
    local everywhere in main, and the run path dies after executing every chapter (UnboundLocalError)."""
    import ast
    tree = ast.parse(open(os.path.join(ROOT, "scripts", "replicate.py")).read())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    assigned = {t.id for n in ast.walk(main) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    assert not assigned & {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_recell_reads_each_claims_cell_from_the_chapter_as_it_is_now(tmp_path):
    """A cell split after the run moves its claims; --merge rewrites the rows' cell numbers from the chapter."""
    import replicate as R
    code = lambda src: {"cell_type": "code", "source": src, "metadata": {}, "outputs": [],  # noqa: E731
                        "execution_count": None}
    nb = {"cells": [code("x = 1"), code("y = 2"), code("assert x == 1\nassert y == 2")],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "ch.ipynb").write_text(json.dumps(nb))
    row = lambda key, cell: {"chapter": "ch", "key": key, "cell": cell}                 # noqa: E731
    out = R.recell({"rows": [row("ch|x == 1|0", 0), row("ch|y == 2|0", 1), row("ch|gone|0", 5)]}, str(tmp_path))
    assert [r["cell"] for r in out["rows"]] == [2, 2, 5]
