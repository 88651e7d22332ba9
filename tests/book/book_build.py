"""Shared helpers for the tests of the *built* book (`_build/html`).

These tests read what `bash scripts/build_book.sh` (or `bash scripts/test.sh`, which calls it) left
in `_build/`: the pages in `_build/html` and the executed notebooks in `_build/jupyter_execute`.
Without a build they are skipped with a message saying so; under CI (`CI=true`) a missing build
fails instead, so CI can never pass without having looked at the pages.
"""
import json
import os
import pathlib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build"
HTML = BUILD / "html"
EXECUTED = BUILD / "jupyter_execute"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def skip_or_fail(message: str):
    """Skip with `message` on a developer's machine; fail under CI, where every check must run."""
    if in_ci():
        pytest.fail(f"{message} (CI=true: this check must run in CI)", pytrace=False)
    pytest.skip(message)


def toc_files() -> list[str]:
    """Every document of the table of contents (`_toc.yml`), as paths without suffix, in order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    found = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({k: v for k, v in toc.items() if k != "root"})
    return found


def chapter_notebooks() -> list[pathlib.Path]:
    """Every notebook the book is built from (the `.ipynb` documents of `_toc.yml`)."""
    return [ROOT / f"{f}.ipynb" for f in toc_files() if (ROOT / f"{f}.ipynb").exists()]


def code_sources(nb: dict) -> list[str]:
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.fixture(scope="session")
def built_book():
    """The build directory, checked to exist and to be built from the current notebooks."""
    if not (HTML / "index.html").exists():
        skip_or_fail(f"no built book in {HTML}: run `bash scripts/build_book.sh` first")
    stale = []
    for src in chapter_notebooks():
        rel = src.relative_to(ROOT).with_suffix(".ipynb")
        executed = EXECUTED / rel
        if not executed.exists():
            stale.append(f"{rel} (never executed by the build)")
            continue
        if code_sources(json.loads(src.read_text())) != code_sources(json.loads(executed.read_text())):
            stale.append(f"{rel} (code changed since the build)")
    if stale:
        skip_or_fail("the build in _build/ is older than the notebooks, rebuild with "
                     "`bash scripts/build_book.sh`: " + ", ".join(stale))
    return BUILD


def record(name: str, line: str):
    """Keep one line of a test's findings in _build/<name>.txt (printed by scripts/test.sh)."""
    path = BUILD / f"{name}.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    key = line.split(":")[0]
    lines = [old for old in lines if old.split(":")[0] != key] + [line]
    path.write_text("\n".join(sorted(lines)) + "\n")

