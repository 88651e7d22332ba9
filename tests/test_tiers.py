"""The test tiers: the markers that split the suite are registered (pyproject.toml), so that the fast
tier `pytest tests -m "not after_build and not slow"` selects by a real marker and none of its names
warns (PytestUnknownMarkWarning), and the slow tier is not empty."""
import pathlib
import re

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
BUILTIN = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}


def _registered(pytestconfig):
    return {line.split(":")[0].split("(")[0].strip() for line in pytestconfig.getini("markers")}


def test_the_tier_markers_are_registered(pytestconfig):
    assert {"slow", "after_build"} <= _registered(pytestconfig)


def test_every_marker_the_tests_use_is_registered_and_some_tests_are_slow(pytestconfig):
    used = {}
    for path in TESTS.rglob("*.py"):
        for name in re.findall(r"pytest\.mark\.(\w+)", path.read_text()):
            used.setdefault(name, set()).add(path.name)
    unknown = set(used) - BUILTIN - _registered(pytestconfig)
    assert not unknown, f"markers used but not registered in pyproject.toml: {sorted(unknown)}"
    assert len(used.get("slow", ())) >= 5, "the slow tier lost its tests"

