"""The student package (scripts/student_package.sh, scripts/check_package.py): the library alone, as a
wheel and an sdist, for students who get `lib` without the repository (whose notebooks hold every
solution). The build is checked from outside: the wheel holds lib/ and its metadata only, its package
data is there, and it installs and imports away from the repository. The checker is checked on
doctored artifacts: each kind of file it must reject, it rejects with one line naming the file."""
import importlib.util
import io
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_package", ROOT / "scripts" / "check_package.py")
check_package = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_package)

META_RE = re.compile(r"^recall_lib-[^/]+\.dist-info/")


def package_data_files() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        data = tomllib.load(f)["tool"]["setuptools"]["package-data"]
    return [f"{pkg.replace('.', '/')}/{name}" for pkg, names in data.items() for name in names]


# ----------------------------------------------------------------------------- the checker, on small fakes

GOOD = {
    "lib/__init__.py": "__version__ = '0.2.0'\n",
    "lib/theory/__init__.py": "",
    "lib/theory/capacity_calibration.json": "{}",
    "lib/theory/attention_moments.json": "{}",
    "recall_lib-0.2.0.dist-info/METADATA": "Name: recall-lib\n",
    "recall_lib-0.2.0.dist-info/RECORD": "",
}


def fake_wheel(path, files):
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return str(path)


def fake_sdist(path, files, top="recall_lib-0.2.0"):
    with tarfile.open(path, "w:gz") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return str(path)


def sdist_files(extra=None):
    files = {k: v for k, v in GOOD.items() if not META_RE.match(k)}
    files.update({"pyproject.toml": "", "PKG-INFO": "", "setup.cfg": "", "recall_lib.egg-info/SOURCES.txt": ""})
    files.update(extra or {})
    return files


def test_checker_passes_a_clean_fake(tmp_path):
    pyproject = str(ROOT / "pyproject.toml")
    assert check_package.check(fake_wheel(tmp_path / "a.whl", GOOD), pyproject) == []
    assert check_package.check(fake_sdist(tmp_path / "a.tar.gz", sdist_files()), pyproject) == []


@pytest.mark.parametrize("name, text, why", [
    ("book/01_task.ipynb", "{}", "outside lib/"),
    ("book/data/ch07_curves_slice.jsonl", "{}", "outside lib/"),
    ("tests/test_recall.py", "", "outside lib/"),
    ("scripts/course.py", "", "outside lib/"),
    (".ci/run", "", "outside lib/"),
    ("README.md", "", "outside lib/"),
    ("lib/01_task.ipynb", "{}", "notebook"),
    ("lib/tests/test_x.py", "", "tests/ folder"),
    ("lib/book/notes.txt", "", "book/ folder"),
    ("lib/__pycache__/cli.cpython-311.pyc", "", "__pycache__/ folder"),
    ("lib/answers.py", "x = 1\n### BEGIN SOLUTION\nx = 2\n### END SOLUTION\n", "BEGIN SOLUTION"),
    ("lib/checks.py", "# BEGIN HIDDEN TESTS\nassert True\n", "BEGIN HIDDEN TESTS"),
    ("lib/notes.md", "```{solution-start} ex-1\n", "{solution-start}"),
    ("recall_lib-0.2.0.dist-info/extra.txt", "### BEGIN SOLUTION", "BEGIN SOLUTION"),
])
def test_checker_rejects_each_kind(tmp_path, name, text, why):
    wheel = fake_wheel(tmp_path / "bad.whl", {**GOOD, name: text})
    bad = check_package.check(wheel)
    assert len(bad) == 1 and bad[0].startswith(name + ":") and why in bad[0], bad
    if not META_RE.match(name):   # the same file in an sdist
        bad = check_package.check(fake_sdist(tmp_path / "bad.tar.gz", sdist_files({name: text})))
        assert len(bad) == 1 and bad[0].startswith(name + ":") and why in bad[0], bad


def test_checker_rejects_missing_data_and_foreign_sdist_top(tmp_path):
    pyproject = str(ROOT / "pyproject.toml")
    files = {k: v for k, v in GOOD.items() if not k.endswith("capacity_calibration.json")}
    bad = check_package.check(fake_wheel(tmp_path / "a.whl", files), pyproject)
    assert bad == ["lib/theory/capacity_calibration.json: package data missing"]
    bad = check_package.check(fake_sdist(tmp_path / "b.tar.gz", {"book/01_task.ipynb": "{}"}, top="main"))
    assert bad and bad[0].startswith("main/book/01_task.ipynb:")
    bad = check_package.check(fake_wheel(tmp_path / "c.whl", {**GOOD, "../evil.py": ""}))
    assert bad == ["../evil.py: a path outside the package"]


def test_checker_cli_one_line_naming_the_file(tmp_path):
    wheel = fake_wheel(tmp_path / "bad.whl", {**GOOD, "book/01_task.ipynb": "{}", "tests/conftest.py": ""})
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_package.py"), wheel],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "book/01_task.ipynb" in lines[0] and "(and 1 more)" in lines[0], r.stderr
    ok = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_package.py"), fake_wheel(tmp_path / "a.whl", GOOD)],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("ok "), ok.stderr


def test_markers_cover_course_py():
    """Every solution or hidden-test marker scripts/course.py looks for is one the checker rejects."""
    text = (ROOT / "scripts" / "course.py").read_text()
    found = set(re.findall(r"### (?:BEGIN|END) [A-Z ]*[A-Z]", text)) | set(re.findall(r"\{solution-[a-z]+\}", text))
    assert {"### BEGIN SOLUTION", "{solution-start}"} <= found
    for m in found:
        assert any(k in m for k in check_package.MARKERS), m


# ----------------------------------------------------------------------------- the real build

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("student_package")
    r = subprocess.run(["bash", "scripts/student_package.sh", str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    wheels, sdists = list(out.glob("recall_lib-*.whl")), list(out.glob("recall_lib-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, os.listdir(out)
    return r.stdout, wheels[0], sdists[0]


def installed(wheel, tmp_path) -> pathlib.Path:
    """The wheel installed (no dependencies, offline) into a folder of its own."""
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(site), str(wheel)], check=True, timeout=300)
    return site


def run_away(code: str, site, tmp_path):
    """`code` run with only `site` on the path, from a folder outside the repository; it must exit 0."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env["PYTHONPATH"] = str(site)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.slow
def test_wheel_and_sdist_hold_lib_only(built):
    stdout, wheel, sdist = built
    assert f"wheel: {wheel} ({wheel.stat().st_size} bytes" in stdout
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if not (n.startswith("lib/") or META_RE.match(n))] == []
    assert not any(n.endswith((".ipynb", ".pyc")) or "__pycache__" in n for n in names)
    for f in package_data_files():
        assert f in names, f
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "lib").rglob("*.py") if "__pycache__" not in p.parts)
    assert modules and set(modules) <= set(names)
    with tarfile.open(sdist) as t:
        snames = [m.name.partition("/")[2] for m in t.getmembers() if m.isfile()]
    allowed = {"pyproject.toml", "setup.cfg", "PKG-INFO"}
    assert [n for n in snames if not (n.startswith(("lib/", "recall_lib.egg-info/")) or n in allowed)] == []
    for f in package_data_files():
        assert f in snames, f


@pytest.mark.slow
def test_wheel_installs_and_imports_away_from_the_repository(built, tmp_path):
    _, wheel, _ = built
    site = installed(wheel, tmp_path)
    code = ("import lib, os\n"
            "p = lib.make_problem(lib.TaskConfig(V=8, d=8, L=4), 0)\n"
            "from lib.theory import ch07_law\n"
            "print(lib.__file__, lib.__version__, p.cfg.V, len(ch07_law.calibration()) > 0)\n")
    r = run_away(code, site, tmp_path)
    path, version, V, calibrated = r.stdout.split()
    assert pathlib.Path(path).resolve().is_relative_to(site.resolve()), path
    assert not pathlib.Path(path).resolve().is_relative_to(ROOT)
    assert V == "8" and calibrated == "True" and wheel.name.startswith(f"recall_lib-{version}-")


@pytest.mark.slow
def test_the_installed_package_reads_every_shipped_dataset(built, tmp_path):
    """Away from the repository, the chapters' loaders read the data installed with lib (lib/_data), the same
    files as the repository's book/data."""
    _, wheel, _ = built
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(p.name for p in (ROOT / "book" / "data").iterdir() if p.suffix in (".json", ".jsonl"))
    assert shipped and all(f"lib/_data/{n}" in names for n in shipped)
    site = installed(wheel, tmp_path)
    code = ("import os, lib\n"
            "from lib.core.paths import data_dir\n"
            "from lib.experiments.memory_capacity import shipped_every_pair\n"
            "from lib.analysis import attention_curve as ac, lowerbound_beyond as bb, lowerbound_pairs as lp\n"
            "from lib import factual as F\n"
            "from lib.experiments.records import BOOK_DATA, read_records\n"
            "n = [len(shipped_every_pair()['n']), len(ac.shipped_curves('slice')), len(lp.shipped_pair_rows()),\n"
            "     len(bb.shipped_beyond_rows()), len(F.load_nichani_reference()),\n"
            "     len(F.load_nichani_book_runs('nichani_book_seeds')), len(F.FactStore(None, read_also=F.CAPACITY_STORE)),\n"
            "     len(read_records(os.path.join(BOOK_DATA, 'ch10_points.jsonl'))[0])]\n"
            "print(data_dir(), *n)\n")
    r = run_away(code, site, tmp_path)
    where, *counts = r.stdout.split()
    assert pathlib.Path(where).resolve() == (site / "lib" / "_data").resolve()
    assert all(int(c) > 0 for c in counts), counts


@pytest.mark.slow
def test_checker_rejects_the_real_wheel_doctored(built, tmp_path):
    _, wheel, _ = built
    doctored = tmp_path / wheel.name
    shutil.copy(wheel, doctored)
    with zipfile.ZipFile(doctored, "a") as z:
        z.writestr("book/00_preface.ipynb", '{"cells": [{"source": "### BEGIN SOLUTION"}]}')
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_package.py"), str(doctored)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "book/00_preface.ipynb" in r.stderr, r.stderr


def test_data_dir_reads_a_checkout_only_when_it_is_the_books(tmp_path):
    """lib.core.paths.data_dir: lib/_data when present (a built package); book/data beside lib only in the book's
    checkout (its _config.yml there), never some other folder's book/data beside an installed lib."""
    def load(root):
        (root / "lib" / "core").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "lib" / "core" / "paths.py", root / "lib" / "core" / "paths.py")
        spec = importlib.util.spec_from_file_location(f"paths_{root.name}", root / "lib" / "core" / "paths.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    stray = tmp_path / "site"                                  # an installed lib next to an unrelated book/data
    (stray / "book" / "data").mkdir(parents=True)
    assert pathlib.Path(load(stray).data_dir()) == stray / "lib" / "_data"
    (stray / "lib" / "_data").mkdir()
    assert pathlib.Path(load(stray).data_dir()) == stray / "lib" / "_data"
    book = tmp_path / "checkout"                               # the book's checkout
    (book / "book" / "data").mkdir(parents=True)
    (book / "_config.yml").write_text("title: x\n")
    assert pathlib.Path(load(book).data_dir()) == book / "book" / "data"
    from lib.core.paths import data_dir
    assert pathlib.Path(data_dir()) == ROOT / "book" / "data"
