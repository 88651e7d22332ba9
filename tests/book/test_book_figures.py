"""Every figure a chapter draws reaches its page in the built book.

Two ways a figure can silently vanish while the build still passes:

1. the notebook draws, but execution records no image (``MPLBACKEND=Agg`` in the environment of the
   build turns every ``plt.show()`` into a no-op, and the inline backend never sees the figure);
2. the executed notebook holds the image, but the page does not show it (a ``remove-output`` tag, a
   renderer choosing another mime type, an image file missing from ``_build/html/_images``).

For (1), each code cell that draws (``plt.subplots``/``plt.figure``/``plt.show``, or a function of
``lib.plotting`` that opens a figure itself) must carry an image output in the build's executed copy
(``_build/jupyter_execute``), and must not be removed from the page. For (2), every image output of
a cell shown on the page must be an ``<img>`` of that page whose file (named by the SHA-256 of the
image, as myst-nb names it) exists and is not empty.
"""
import ast
import base64
import hashlib
import html.parser
import json
import pathlib
import re

import pytest

from book_build import EXECUTED, HTML, ROOT, built_book, chapter_notebooks, record  # noqa: F401 (fixture)

NOTEBOOKS = chapter_notebooks()
REMOVED = {"remove-cell", "remove_cell", "remove-output", "remove_output"}
# myst-nb's choice among an output's mime types for HTML, highest priority first.
HTML_PRIORITY = ["application/vnd.jupyter.widget-view+json", "application/javascript", "text/html",
                 "image/svg+xml", "image/png", "image/jpeg", "image/gif", "text/markdown",
                 "text/latex", "text/plain"]
BINARY_IMAGES = {"image/png", "image/jpeg", "image/gif"}
DRAWING_CALL = r"\bplt\.(?:subplots|subplot_mosaic|figure|show)\s*\(|\bfig\w*\.show\s*\("


def plotting_functions_that_draw() -> list[str]:
    """Names of lib.plotting functions that open a figure themselves (plt.subplots/figure/show)."""
    path = ROOT / "lib" / "plotting.py"
    if not path.exists():
        return []
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            if re.search(DRAWING_CALL, ast.get_source_segment(path.read_text(), node) or ""):
                names.append(node.name)
    return names


DRAWING = re.compile("|".join([DRAWING_CALL] + [rf"\bplotting\.{name}\s*\(" for name in
                                                plotting_functions_that_draw()]))


def source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def rendered_image(output):
    """(mime, sha256) of the image myst-nb renders for this output on an HTML page, or None."""
    data = output.get("data", {})
    mime = next((m for m in HTML_PRIORITY if m in data), None)
    if mime is None or not mime.startswith("image/"):
        return None
    value = data[mime]
    value = "".join(value) if isinstance(value, list) else value
    raw = base64.b64decode(value) if mime in BINARY_IMAGES else value.encode("utf8")
    return mime, hashlib.sha256(raw).hexdigest()


def glue_name(output):
    return output.get("metadata", {}).get("scrapbook", {}).get("name")


class ImgCollector(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.srcs = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.srcs.append(dict(attrs).get("src", ""))


def page_images(page: pathlib.Path) -> list[str]:
    collector = ImgCollector()
    collector.feed(page.read_text())
    return collector.srcs


def expected_figures(executed_nb: dict):
    """[(cell index, sha256)] of the images that must appear on the page, plus the problems found
    in the executed notebook itself (drawing cells without an image, drawing cells removed)."""
    expected, problems = [], []
    markdown = "\n".join(source(c) for c in executed_nb["cells"] if c["cell_type"] == "markdown")
    for i, cell in enumerate(executed_nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src, removed = source(cell), bool(tags(cell) & REMOVED)
        images, glued = [], []
        for output in cell.get("outputs", []):
            image = rendered_image(output)
            if image is None:
                continue
            name = glue_name(output)
            if name is None:
                images.append(image)
            elif re.search(rf"\{{glue(?::\w+)?\}}`?\s*{re.escape(name)}\b", markdown):
                glued.append(image)  # a glued figure shows where the text references it
        if DRAWING.search(src):
            first_line = next((line for line in src.splitlines() if DRAWING.search(line)), "").strip()
            if not images and not glued:
                problems.append(f"cell {i} draws a figure ({first_line!r}) but its executed copy "
                                "holds no image (was the build run with MPLBACKEND=Agg?)")
            elif removed and not glued:
                problems.append(f"cell {i} draws a figure but is tagged {sorted(tags(cell) & REMOVED)}: "
                                "the reader never sees it")
        if not removed:
            expected += [(i, digest) for _, digest in images]
        expected += [(i, digest) for _, digest in glued]
    return expected, problems


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_drawn_figure_reaches_the_page(built_book, notebook):
    rel = notebook.relative_to(ROOT)
    executed = EXECUTED / rel
    page = HTML / rel.with_suffix(".html")
    assert executed.exists(), f"{rel}: the build left no executed copy at {executed}"
    assert page.exists(), f"{rel}: the build left no page at {page}"
    expected, problems = expected_figures(json.loads(executed.read_text()))
    srcs = page_images(page)
    stems = {pathlib.PurePosixPath(s).stem: s for s in srcs}
    for i, digest in expected:
        if digest not in stems:
            problems.append(f"cell {i}: its image {digest[:12]}… is not an <img> of {page.name}")
            continue
        file = (page.parent / stems[digest]).resolve()
        if not file.is_file() or file.stat().st_size == 0:
            problems.append(f"cell {i}: {stems[digest]} is missing or empty in the build")
    record("figures", f"{rel.stem}: {len(expected)} figures drawn, {len(srcs)} <img> on the page")
    assert not problems, f"{rel}: figures lost on the way to the page:\n  " + "\n  ".join(problems)
