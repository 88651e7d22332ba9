"""Every figure a reader sees has its axes labelled: `lib.plotting.show` refuses a figure with an axis that
neither it nor an axes sharing it labels (`lib.plotting.unlabelled`), and every figure cell of the book goes
through it (directly, through `finish`, or through a `lib.plotting` figure helper)."""
import glob
import json
import os
import re

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import lib  # noqa: E402

BOOK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "book")
MAKES_FIGURE = re.compile(r"plt\.subplots\(|plt\.figure\(|plotting\.axes\(|\.twinx\(")
HELPERS = ("capacity_figure(", "hand_built_accuracy_figure(", "linear_coefficient_figure(", "gradient_vs_eta(")


def test_unlabelled_names_each_missing_label():
    fig, (a, b) = plt.subplots(1, 2)
    a.plot([0, 1], [0, 1])
    b.plot([0, 1], [1, 0])
    a.set_title("left")
    a.set_xlabel("x")
    assert lib.plotting.unlabelled(fig) == ["left: y", "axes 1: x", "axes 1: y"]
    with pytest.raises(ValueError, match="left: y"):
        lib.plotting.show(fig)
    plt.close("all")


def test_shared_axes_twins_and_colorbars():
    fig, (a, b) = plt.subplots(1, 2, sharey=True)
    for ax in (a, b):
        ax.plot([0, 1], [0, 1])
        ax.set_xlabel("N")
    a.set_ylabel("accuracy")                                   # b shares it
    assert lib.plotting.unlabelled(fig) == []
    right = a.twinx()
    right.plot([0, 1], [2, 3])
    assert lib.plotting.unlabelled(fig) == ["axes 2: y"]      # a twin shares x, not y
    right.set_ylabel("loss")
    im = b.imshow([[0, 1], [1, 0]])
    fig.colorbar(im)                                           # a colorbar is not asked for labels
    assert lib.plotting.unlabelled(fig) == []
    empty = plt.figure().add_subplot()                         # draws nothing: nothing to read
    assert lib.plotting.unlabelled(empty.figure) == []
    plt.close("all")


def test_every_figure_cell_goes_through_the_check():
    missing = []
    for path in sorted(glob.glob(os.path.join(BOOK, "*.ipynb"))):
        for i, cell in enumerate(json.load(open(path))["cells"]):
            src = "".join(cell["source"])
            if cell["cell_type"] != "code":
                continue
            if "plt.show()" in src:
                missing.append(f"{os.path.basename(path)} cell {i}: plt.show() (use lib.plotting.show())")
            elif MAKES_FIGURE.search(src) and not ("plotting.show(" in src or "finish(" in src
                                                    or any(h in src for h in HELPERS)):
                missing.append(f"{os.path.basename(path)} cell {i}: a figure that is never checked")
    assert not missing, "\n".join(missing)
