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
