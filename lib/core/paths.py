"""Where the data shipped with the book lives (chapters 2, 7, 9, 10 and 11 read it).

In a checkout of the repository it is book/data, next to lib/. The student package (scripts/student_package.sh)
installs lib alone, without book/, and carries a copy of book/data inside lib as lib/_data; `data_dir` finds
whichever this lib has, so that the same loaders read the same files in both.
"""
from __future__ import annotations

import os

LIB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(LIB_DIR)
REPO_DATA = os.path.join(REPO_ROOT, "book", "data")                          # a checkout of the repository
PACKAGED_DATA = os.path.join(LIB_DIR, "_data")                              # lib installed alone


def data_dir() -> str:
    """The copy installed with lib (lib/_data, present only in a built package), else book/data of the checkout
    that holds lib (recognised by the book's _config.yml beside lib/, so that an installed lib never reads some
    other folder's book/data). Where neither exists, the path a loader's error should name: book/data in a
    checkout, lib/_data otherwise."""
    checkout = os.path.isfile(os.path.join(REPO_ROOT, "_config.yml"))
    if os.path.isdir(PACKAGED_DATA):
        return PACKAGED_DATA
    if checkout and os.path.isdir(REPO_DATA):
        return REPO_DATA
    return REPO_DATA if checkout else PACKAGED_DATA
