"""Where the data shipped with the book lives (chapters 2, 7, 9, 10 and 11 read it).

In a checkout of the repository it is book/data, next to lib/. The student package (scripts/student_package.sh)
installs lib alone, without book/, and carries a copy of book/data inside lib as lib/_data; `data_dir` finds
whichever exists, the checkout's first, so that the same loaders read the same files in both.
"""
from __future__ import annotations

import os

LIB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DATA = os.path.normpath(os.path.join(LIB_DIR, "..", "book", "data"))   # a checkout of the repository
PACKAGED_DATA = os.path.join(LIB_DIR, "_data")                              # lib installed alone


def data_dir() -> str:
    """book/data of the checkout that holds lib, else the copy installed with lib (lib/_data); book/data's path
    when neither exists, so that a loader's error names the file it looked for."""
    for d in (REPO_DATA, PACKAGED_DATA):
        if os.path.isdir(d):
            return d
    return REPO_DATA
