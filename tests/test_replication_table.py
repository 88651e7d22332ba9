"""The robustness page's table (book/replication.json, written by scripts/replicate.sh --publish)
covers every assert of every chapter: change a claim and the table must be regenerated."""
import glob
import json
import os
import sys

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
    assert all(set(r) >= {"chapter", "cell", "text", "passed", "failed"} for r in t["rows"])


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
