"""The one monotone search (lib.core.search): its real form, and no bisection written by hand elsewhere."""
import ast
import math
import random
from pathlib import Path

import pytest

from lib.core.search import first_true_real, largest_true, smallest_true, threshold_search

LIB = Path(__file__).resolve().parents[1] / "lib"


@pytest.mark.parametrize("root", [1.0001, 3.7, 1234.5, 2.0 ** 40])
@pytest.mark.parametrize("grow", [False, True])
def test_first_true_real_brackets_the_root_to_its_tolerance(root, grow):
    calls = []

    def ok(x):
        calls.append(x)
        return x >= root

    x = first_true_real(ok, 1.0, 2.0 ** 50, 1e-6, grow=grow)
    assert root <= x <= root * (1 + 1e-6)
    if grow:      # doubling first: about log2(root) + log2(log2 / tol) evaluations, not a halving of [1, 2^50]
        assert len(calls) <= math.log2(root) + 30


def test_first_true_real_on_the_line_and_at_the_ends():
    r = first_true_real(lambda x: x >= -2.5, -10.0, 40.0, 1e-9, "linear")
    assert -2.5 <= r <= -2.5 + 1e-9
    assert first_true_real(lambda x: True, 2.0, 8.0, 0.01) == 2.0                   # ok(lo): lo
    assert first_true_real(lambda x: False, 2.0, 8.0, 0.01) == math.inf            # never: inf
    assert first_true_real(lambda x: x >= 5, 8.0, 8.0, 0.01) == 8.0               # lo >= hi: hi when ok(hi)


def test_first_true_real_stops_at_the_float_spacing():
    # a tolerance below what floats resolve ends where halving makes no progress, right of the root
    x = first_true_real(lambda x: x >= math.pi, 1.0, 10.0, 1e-30)
    assert x >= math.pi and x - math.pi <= 4 * math.ulp(math.pi)
    y = first_true_real(lambda x: x >= math.pi, 0.0, 10.0, 0.0 + 1e-300, "linear")
    assert y >= math.pi and y - math.pi <= 4 * math.ulp(math.pi)


@pytest.mark.parametrize("bad, name", [
    (dict(lo=0.0, hi=1.0, tol=0.1), "lo and hi"),
    (dict(lo=1.0, hi=math.inf, tol=0.1), "lo and hi"),
    (dict(lo=1.0, hi=2.0, tol=0.0), "tol"),
    (dict(lo=1.0, hi=2.0, tol=0.1, scale="cubic"), "scale"),
    (dict(lo=-1.0, hi=2.0, tol=0.1, scale="linear", grow=True), "grow"),
])
def test_first_true_real_names_a_bad_argument(bad, name):
    with pytest.raises(ValueError, match=name):
        first_true_real(lambda x: x > 0.5, **bad)


def test_integer_forms_are_exact():
    for k in (1, 2, 3, 17, 1000, 4097):
        assert smallest_true(lambda n: n >= k) == k
        assert largest_true(lambda n: n <= k, 10 ** 6) == k
    assert threshold_search(lambda n: n >= 50, 1, 40, 0.01).first_true is None


def _bisections(tree):
    """Loops that halve a bracket: a while loop whose body assigns a name from (a + b) // 2, (a + b) / 2
    or sqrt(a * b)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.While):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign):
                src = ast.unparse(sub.value).replace(" ", "")
                if any(p in src for p in (")//2", ")/2", "sqrt(lo*hi)", "sqrt(a*b)")):
                    yield node.lineno


def test_no_module_bisects_by_hand():
    found = {}
    for path in LIB.rglob("*.py"):
        if path.name == "search.py" and path.parent.name == "core":
            continue
        lines = list(_bisections(ast.parse(path.read_text())))
        if lines:
            found[str(path.relative_to(LIB))] = lines
    assert found == {}, found
    # the detector does find a bisection: the one left, in lib/core/search.py
    assert list(_bisections(ast.parse((LIB / "core" / "search.py").read_text())))


def test_first_true_on_grid_brackets_its_answer_with_its_own_evaluations():
    """Against brute force on monotone predicates; on predicates that are not monotone (a measured
    accuracy up to noise), whatever it returns is bracketed by what it evaluated: ok(size - 1) asked
    first, the answer i evaluated True and i - 1 evaluated False (or i = 0), None only when ok(size - 1)
    is False, and at most 2 + ceil(log2(size)) evaluations."""
    from lib.core.search import first_true_on_grid
    rng = random.Random(0)
    for _ in range(2000):
        size = rng.randint(1, 40)
        cut = rng.randint(0, size)                                 # ok from index cut on (cut = size: never)
        assert first_true_on_grid(lambda i: i >= cut, size) == (cut if cut < size else None)
        flags = [rng.random() < 0.5 for _ in range(size)]           # not monotone
        asked = []
        i = first_true_on_grid(lambda j: asked.append(j) or flags[j], size)
        assert asked[0] == size - 1 and len(asked) <= (2 + math.ceil(math.log2(size)) if size > 1 else 1)
        if i is None:
            assert not flags[size - 1]
        else:
            assert i in asked and flags[i] and (i == 0 or (i - 1 in asked and not flags[i - 1]))
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="size"):
            first_true_on_grid(lambda i: True, bad)
