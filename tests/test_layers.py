"""The package docstring (lib/__init__.py) lists every module bottom-up, package by package, each
importing only modules listed above it; this test reads the imports (also those inside functions)
and checks that it is true. Every test file a module of lib cites exists."""
import ast
import pathlib
import re

import lib

LIB = pathlib.Path(lib.__file__).parent


def name_of(path: pathlib.Path) -> str:
    """'core.config' for lib/core/config.py; 'theory' for lib/theory/__init__.py (a package is a unit
    listed after its modules)."""
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {name_of(p): p for p in LIB.rglob("*.py") if p.name != "__main__.py" and p.parent != LIB or
         p.name not in ("__init__.py", "__main__.py")}
FILES.pop("", None)
MODULES = sorted(FILES)


def listed() -> list[str]:
    """Modules in the docstring's order: `  pkg/  ...` opens a package, `    mod  ...` lists its
    modules (the package itself counts as listed after them), `  mod  ...` a top-level module."""
    order, pkg = [], None
    for line in lib.__doc__.splitlines():
        m_pkg = re.match(r"^  ([a-z_]+)/ {2,}\S", line)
        m_sub = re.match(r"^    ([a-z_0-9]+) {2,}\S", line)
        m_top = re.match(r"^  ([a-z_]+) {2,}\S", line)
        if (m_pkg or m_top) and pkg:
            order.append(pkg)
            pkg = None
        if m_pkg:
            pkg = m_pkg.group(1)
        elif m_sub and pkg:
            order.append(f"{pkg}.{m_sub.group(1)}")
        elif m_top:
            order.append(m_top.group(1))
    if pkg:
        order.append(pkg)
    return order


def resolve(name: str, node: ast.ImportFrom) -> list[str]:
    """The lib modules an import names, as dotted names relative to lib."""
    path = FILES[name]
    here = list(path.relative_to(LIB).parts[:-1])               # the package the file sits in
    if node.level:
        base = here[: len(here) - (node.level - 1)]
    elif (node.module or "").startswith("lib.") or node.module == "lib":
        base = []
        node = ast.ImportFrom(module=node.module[4:] or None, names=node.names, level=1)
    else:
        return []
    mod = base + (node.module.split(".") if node.module else [])
    subs = [".".join(mod + [a.name]) for a in node.names]
    if all(s in FILES for s in subs):                            # `from . import native`: modules only
        return subs
    return [".".join(mod)] if mod else []


def lib_imports(name: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(FILES[name].read_text())):
        if isinstance(node, ast.ImportFrom):
            found.update(resolve(name, node))
        elif isinstance(node, ast.Import):
            found.update(a.name[4:] for a in node.names if a.name.startswith("lib."))
    return (found & set(MODULES)) - {name}


def test_every_module_is_listed_once():
    assert sorted(listed()) == MODULES


def test_each_module_imports_only_modules_above_it():
    order = listed()
    wrong = [f"{m} imports {dep}, listed below it" for i, m in enumerate(order)
             for dep in sorted(lib_imports(m)) if dep not in order[:i]]
    assert not wrong, wrong


def test_the_import_reader_sees_imports_inside_functions_and_packages():
    # store and experiment import trainer inside functions: an earlier docstring listed trainer below
    # both, and a reader of top-level imports only would not have noticed
    assert "learning.trainer" in lib_imports("experiments.store")
    assert "learning.trainer" in lib_imports("experiments.experiment")
    assert "fast.native" in lib_imports("fast.limit")            # `from . import native`
    assert "core.embeddings" in lib_imports("fast.counts")        # `from ..core.embeddings import ...`
    assert {"core", "fast", "learning"} <= set(listed()) and listed().index("core.steps") < listed().index("core")


def test_no_module_is_longer_than_about_400_lines():
    long = {n: len(p.read_text().splitlines()) for n, p in FILES.items()}
    assert all(v <= 440 for v in long.values()), {n: v for n, v in long.items() if v > 440}


def test_cited_test_files_exist():
    root = LIB.parent
    cited = {ref for p in LIB.rglob("*.py") for ref in re.findall(r"tests/[\w/]+\.py", p.read_text())}
    assert cited and all((root / ref).exists() for ref in cited), sorted(r for r in cited if not (root / r).exists())


def test_one_version_number():
    # pyproject.toml takes the version from lib.__version__ (no second literal to drift), and the
    # installed distribution reports it
    import importlib.metadata
    import tomllib
    with open(LIB.parent / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "lib.__version__"}
    assert importlib.metadata.version("recall-lib") == lib.__version__
