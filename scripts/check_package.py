"""Check the student package of the library (scripts/student_package.sh): a wheel or sdist of `lib`
must hold the library and its package metadata and nothing else.

    python scripts/check_package.py ARTIFACT [ARTIFACT ...] [--pyproject PYPROJECT] [--source LIBDIR]

ARTIFACT is a wheel (.whl) or an sdist (.tar.gz). Rejected, in this order, per file:
  - a path outside the allowed ones: in a wheel `lib/...` and `recall_lib-VERSION.dist-info/...`; in an
    sdist (below its one top folder `recall_lib-VERSION/`) `lib/...`, `recall_lib.egg-info/...`,
    `pyproject.toml`, `setup.cfg`, `PKG-INFO`;
  - a path with a part that is never the library's: book/, tests/, scripts/, .ci/, bench/, _build/,
    _cache/, .git/, .ipynb_checkpoints/, __pycache__/ (and absolute paths or `..`);
  - a notebook (.ipynb) or compiled file (.pyc, .pyo);
  - a file whose text holds an exercise marker (nbgrader's solution, hidden-test and mark-scheme
    delimiters, the book's solution-dropdown fences: MARKERS, a superset of scripts/course.py's).
Then, per artifact: each file of pyproject's [tool.setuptools.package-data] must be in it, and with
--source, each .py file of LIBDIR (the working tree's lib/) too (a subpackage without __init__.py
would be left out of the build silently).

Exit status 0 and one line per artifact ("ok ...") when all pass; else 1 and one line per artifact
that fails, naming the first offending file and how many more there are. 2: unusable arguments.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import posixpath
import re
import sys
import tarfile
import zipfile

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

MARKERS = (
    "BEGIN SOLUTION", "END SOLUTION",            # nbgrader solution regions (### BEGIN SOLUTION)
    "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",    # nbgrader hidden tests
    "BEGIN MARK SCHEME", "END MARK SCHEME",      # nbgrader mark schemes
    "{solution-start}", "{solution-end}",        # the book's solution dropdown fences
    "solution-wrapper",                          # the tag of those fence cells
)
FORBIDDEN_PARTS = {"book", "tests", "scripts", ".ci", "bench", "_build", "_cache", ".git",
                   ".ipynb_checkpoints", "__pycache__"}
FORBIDDEN_SUFFIXES = (".ipynb", ".pyc", ".pyo")
PACKAGE = "lib"
DIST = "recall_lib"
WHEEL_META_RE = re.compile(rf"^{DIST}-[^/]+\.dist-info/")
SDIST_TOP_RE = re.compile(rf"^{DIST}-[^/]+$")
SDIST_FILES = {"pyproject.toml", "setup.cfg", "PKG-INFO"}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def members(path: str) -> list[tuple[str, bytes]]:
    """(name, content) of every regular file of a wheel or an sdist; for an sdist the name is
    relative to its top folder, which must be recall_lib-VERSION/ (else a ValueError)."""
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as z:
            return [(i.filename, z.read(i)) for i in z.infolist() if not i.is_dir()]
    if path.endswith((".tar.gz", ".tgz")):
        out = []
        with tarfile.open(path, "r:gz") as t:
            for m in t.getmembers():
                if m.isdir():
                    continue
                top, _, rest = m.name.partition("/")
                if not SDIST_TOP_RE.match(top) or not rest:
                    out.append((m.name, b""))     # named whole: rejected by allowed() below
                    continue
                if not m.isfile():                # a link or device: never part of the package
                    out.append((rest + " (not a regular file)", b""))
                    continue
                out.append((rest, t.extractfile(m).read()))
        return out
    raise ValueError(f"{path}: not a wheel (.whl) or an sdist (.tar.gz)")


def allowed(name: str, kind: str) -> bool:
    if kind == "wheel":
        return name.startswith(PACKAGE + "/") or bool(WHEEL_META_RE.match(name))
    return name.startswith((PACKAGE + "/", DIST + ".egg-info/")) or name in SDIST_FILES


def problem(name: str, data: bytes, kind: str) -> str | None:
    """Why the file `name` (content `data`) must not be in the package, or None."""
    if name.startswith("/") or ".." in name.split("/"):
        return "a path outside the package"
    if not allowed(name, kind):
        return "outside lib/ and the package metadata"
    parts = set(posixpath.dirname(name).split("/"))
    bad = sorted(parts & FORBIDDEN_PARTS)
    if bad:
        return f"inside a {bad[0]}/ folder"
    if name.endswith(FORBIDDEN_SUFFIXES):
        return "a notebook or compiled file"
    text = data.decode("utf-8", errors="replace")
    found = [m for m in MARKERS if m in text]
    if found:
        return f"holds the exercise marker {found[0]!r}"
    return None


def package_data(pyproject: str) -> list[str]:
    """The glob patterns lib/<sub>/<pattern> of pyproject's [tool.setuptools.package-data]."""
    if tomllib is None:
        return []
    with open(pyproject, "rb") as f:
        data = tomllib.load(f).get("tool", {}).get("setuptools", {}).get("package-data", {})
    return [posixpath.join(pkg.replace(".", "/"), pat) for pkg, pats in data.items() for pat in pats]


def source_modules(libdir: str) -> list[str]:
    """lib/.../*.py of the working tree (no __pycache__), as paths inside the package."""
    out = []
    base = os.path.dirname(os.path.abspath(libdir))
    for d, dirs, files in os.walk(libdir):
        dirs[:] = sorted(x for x in dirs if x not in FORBIDDEN_PARTS and not x.endswith(".egg-info"))
        out += [os.path.relpath(os.path.join(d, f), base).replace(os.sep, "/") for f in sorted(files)
                if f.endswith(".py")]
    return out


def check(path: str, pyproject: str | None = None, source: str | None = None) -> list[str]:
    """Every problem of one artifact, as 'NAME: why' (empty: it passes)."""
    kind = "wheel" if path.endswith(".whl") else "sdist"
    files = members(path)
    bad = [f"{n}: {why}" for n, d in files if (why := problem(n, d, kind))]
    names = {n for n, _ in files}
    for pat in package_data(pyproject) if pyproject else []:
        if not any(fnmatch.fnmatchcase(n, pat) for n in names):
            bad.append(f"{pat}: package data missing")
    for mod in source_modules(source) if source else []:
        if mod not in names:
            bad.append(f"{mod}: module of {source} missing")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("artifacts", nargs="+", metavar="ARTIFACT")
    ap.add_argument("--pyproject", default=os.path.join(ROOT, "pyproject.toml"),
                    help="whose [tool.setuptools.package-data] files must be present ('' to skip)")
    ap.add_argument("--source", default=None, metavar="LIBDIR",
                    help="every .py file of this folder must be in each artifact")
    a = ap.parse_args(argv)
    status = 0
    for path in a.artifacts:
        try:
            bad = check(path, a.pyproject or None, a.source)
        except (OSError, ValueError, zipfile.BadZipFile, tarfile.TarError) as e:
            print(f"error: {path}: cannot be read ({e})", file=sys.stderr)
            return 2
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            print(f"error: {path}: {bad[0]}{more}", file=sys.stderr)
            status = 1
        else:
            print(f"ok {path}: {len(members(path))} files, {os.path.getsize(path)} bytes")
    return status


if __name__ == "__main__":
    sys.exit(main())
