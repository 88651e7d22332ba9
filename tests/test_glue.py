"""Numbers glued into the pages must be Python numbers: `{glue:text}` formats the repr of the
value, and NumPy 2 writes `np.float64(0.86)`, which the build cannot format (a warning, and the
build runs with -W)."""
import sys
import types

import numpy as np
import pytest
import torch

from lib.plotting import glue_values


@pytest.fixture
def glued(monkeypatch):
    got = {}
    fake = types.ModuleType("myst_nb")
    fake.glue = lambda name, value, display=True: got.__setitem__(name, value)
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    return got


def test_numpy_and_torch_scalars_become_python_numbers(glued):
    glue_values(a=np.float64(0.5), b=np.int64(3), c=torch.tensor(1.25, dtype=torch.float64),
                d=np.array(2.0), e=np.bool_(True), f=torch.tensor(7))
    assert glued == {"a": 0.5, "b": 3, "c": 1.25, "d": 2.0, "e": True, "f": 7}
    for name in "abcdf":
        float(repr(glued[name]))  # what {glue:text}`name:.2f` does with the text/plain output
    assert type(glued["b"]) is int and type(glued["a"]) is float


def test_other_values_pass_through(glued):
    arr = np.arange(3)
    glue_values(s="text", x=1.5, n=2, arr=arr)
    assert glued["s"] == "text" and glued["x"] == 1.5 and glued["n"] == 2 and glued["arr"] is arr


def _glued_names(source: str) -> list:
    """The names a code cell glues: the keywords of each glue_values(...) call and glue("name", ...)."""
    import re
    names, pos = [], 0
    while (j := source.find("glue_values(", pos)) >= 0:
        k, depth = j + len("glue_values("), 1
        while depth and k < len(source):
            depth += {"(": 1, ")": -1}.get(source[k], 0)
            k += 1
        args, top, level, quote = source[j + len("glue_values("):k - 1], [], 0, None
        for ch in args:                                  # keep the call's own level: nested calls blanked
            if quote:
                quote = None if ch == quote else quote
            elif ch in "\"'":
                quote = ch
            else:
                level += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
            top.append(ch if level == 0 and not quote and ch not in ")]}" else " ")
        names += re.findall(r"(?:^|[,\n]\s*)(\w+)\s*=(?!=)", "".join(top))
        pos = k
    return names + re.findall(r"\bglue\(\s*[\"'](\w+)[\"']", source)


@pytest.mark.parametrize("path", sorted(__import__("pathlib").Path(__file__).resolve().parents[1].glob("book/*.ipynb")),
                         ids=lambda p: p.name)
def test_no_name_is_glued_by_two_cells(path):
    # myst-nb keeps the last value of a name glued twice and warns (the build runs with -W): the page would
    # show the later cell's number where the earlier cell's text refers to it
    import json
    seen, twice = {}, set()
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "code":
            for name in set(_glued_names("".join(cell["source"]))):
                if name in seen:
                    twice.add(name)
                seen[name] = i
    assert not twice, f"{path.name}: glued by two cells: {sorted(twice)}"
    assert _glued_names('glue_values(a=1, b=f(x, c=2),\n    d=3)\nglue("e", 4)') == ["a", "b", "d", "e"]
