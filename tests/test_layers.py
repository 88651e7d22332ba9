"""The package docstring (lib/__init__.py) lists every module bottom-up, each importing only modules
above it; this test reads the imports (also those inside functions) and checks that it is true.
Every test file a module of lib cites exists."""
import ast
import pathlib
import re

import lib

LIB = pathlib.Path(lib.__file__).parent
MODULES = sorted(p.stem for p in LIB.glob("*.py") if p.stem not in ("__init__", "__main__"))


def listed() -> list[str]:
    return re.findall(r"^  ([a-z_]+) {2,}\S", lib.__doc__, flags=re.M)


def lib_imports(name: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse((LIB / f"{name}.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lib."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("lib."))
    return found & set(MODULES)


def test_every_module_is_listed_once():
    assert sorted(listed()) == MODULES


def test_each_module_imports_only_modules_above_it():
    order = listed()
    wrong = [f"{m} imports {dep}, listed below it" for i, m in enumerate(order)
             for dep in sorted(lib_imports(m)) if dep not in order[:i]]
    assert not wrong, wrong


def test_the_import_reader_sees_imports_inside_functions():
    # store and experiment import trainer inside functions: an earlier docstring listed trainer below
    # both, and a reader of top-level imports only would not have noticed
    assert "trainer" in lib_imports("store") and "trainer" in lib_imports("experiment")
    assert "native" in lib_imports("counts")


def test_cited_test_files_exist():
    root = LIB.parent
    cited = {ref for p in LIB.glob("*.py") for ref in re.findall(r"tests/[\w/]+\.py", p.read_text())}
    assert cited and all((root / ref).exists() for ref in cited), sorted(r for r in cited if not (root / r).exists())
