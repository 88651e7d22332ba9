"""The printable book (`bash scripts/build_book.sh --pdf`, `_build/pdf/book.pdf`) is the whole book.

Read with poppler's tools (pdfinfo, pdftotext, pdfimages, pdffonts, pdftoppm): a sane page count; every
document of the table of contents under its title, the chapters numbered 1 to 11 as on the pages
(the text cites chapters by number); every figure the chapters draw embedded as an image; every
formula typeset (no TeX source left in the text outside the code, no character missing from a font in
the LaTeX log); no hidden test; and two pages, one with a figure and one with a numbered equation,
rendered to images that are not blank (kept in `_build/pdf/pages/` to look at).
"""
import json
import re
import shutil
import subprocess

import pytest

from book_build import (BUILD, EXECUTED, ROOT, built_book, chapter_notebooks, record,  # noqa: F401 (fixture)
                        skip_or_fail, toc_files)
from test_book_figures import expected_figures
from test_book_hidden_tests import BLOCK, NOTE

PDF = BUILD / "pdf" / "book.pdf"
LOG = BUILD / "pdf" / "book.log"
PAGES = BUILD / "pdf" / "pages"
TOOLS = ("pdfinfo", "pdftotext", "pdfimages", "pdftoppm", "pdffonts")   # poppler-utils
# TeX source that a typeset formula never leaves in the text
RAW_TEX = re.compile(r"\\(?:frac|mathbb|mathrm|sqrt|sum|left|right|begin|end|top|bar|hat|\|)(?![a-zA-Z])"
                     r"|\$\$|\\\(|\\\[")
# a display formula: a line set far in from the margin, with an equals sign
DISPLAY_LINE = re.compile(r"^\s{15,}\S.*=", re.M)


def run(*args) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="session")
def pdf(built_book):
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        skip_or_fail(f"poppler-utils missing ({', '.join(missing)}): run `bash scripts/install_tex.sh` as root")
    if not PDF.exists():
        skip_or_fail(f"no PDF at {PDF}: run `bash scripts/build_book.sh --pdf`")
    executed = [EXECUTED / nb.relative_to(ROOT) for nb in chapter_notebooks()]
    if any(e.stat().st_mtime > PDF.stat().st_mtime for e in executed if e.exists()):
        skip_or_fail(f"{PDF} is older than the last book build: run `bash scripts/build_book.sh --pdf`")
    return PDF


@pytest.fixture(scope="session")
def pages(pdf) -> list[str]:
    """The text of each page."""
    return run("pdftotext", "-layout", str(pdf), "-").split("\f")


def words(text: str) -> str:
    """text with white space folded, typographic quotes typed, and words split at a line's end joined."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    return re.sub(r"(\w)- (\w)", r"\1-\2", " ".join(text.split()))


def title(doc: str) -> str:
    """The first heading of a document of the table of contents."""
    path = next(p for p in (ROOT / f"{doc}.ipynb", ROOT / f"{doc}.md") if p.exists())
    texts = (["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]
             if path.suffix == ".ipynb" else [path.read_text()])
    return next(m.group(1).strip() for t in texts for m in [re.search(r"^# (.+)$", t, re.M)] if m)


def test_page_count_is_sane(pdf):
    n = int(re.search(r"^Pages:\s+(\d+)", run("pdfinfo", str(pdf)), re.M).group(1))
    record("pdf", f"pages: {n}")
    # about 15 pages a chapter today; fewer than 10 means chapters are missing
    assert 10 * len(chapter_notebooks()) <= n <= 1000, f"{pdf}: {n} pages"


def test_every_document_is_in_the_pdf_and_chapters_keep_their_numbers(pages):
    text = words("\n".join(pages))
    missing = [title(doc) for doc in toc_files() if words(title(doc)) not in text]
    assert not missing, f"titles missing from the PDF: {missing}"
    numbered = [f for f in toc_files() if re.match(r"book/\d\d_", f) and not f.startswith("book/00_")]
    wrong = [f"{i} {title(doc)}" for i, doc in enumerate(numbered, 1) if words(f"{i} {title(doc)}") not in text]
    assert not wrong, f"chapters not numbered as on the HTML pages: {wrong}"


def test_every_figure_is_embedded(pdf):
    expected = {digest for nb in chapter_notebooks()
                for _, digest in expected_figures(json.loads((EXECUTED / nb.relative_to(ROOT)).read_text()))[0]}
    rows = [line.split() for line in run("pdfimages", "-list", str(pdf)).splitlines()[2:]]
    images = [r for r in rows if len(r) > 2 and r[2] == "image"]
    record("pdf", f"images: {len(images)} embedded, {len(expected)} distinct figures drawn")
    assert len(images) >= len(expected), f"{len(images)} images in the PDF, {len(expected)} figures in the chapters"


def test_every_formula_is_typeset(pages, pdf):
    code = "\n".join(
        "".join(c["source"]) + "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                                       for o in c.get("outputs", []))
        for nb in chapter_notebooks() for c in json.loads((EXECUTED / nb.relative_to(ROOT)).read_text())["cells"]
        if c["cell_type"] == "code")
    code = words(code)
    raw = []
    for n, page in enumerate(pages, 1):
        for line in page.splitlines():
            # a code line (matplotlib labels hold TeX) is printed as written: it is in a cell's source
            if RAW_TEX.search(line) and words(line.replace("\u2423", " ").lstrip("→,")) not in code:
                raw.append(f"page {n}: {line.strip()[:100]}")
    assert not raw, f"{len(raw)} lines of TeX source in the PDF's text:\n  " + "\n  ".join(raw[:10])
    assert re.search(r"CMMI|LMMath|LatinModernMath", run("pdffonts", str(pdf))), "no math font in the PDF"
    assert LOG.exists(), f"{LOG} missing: build_book.sh --pdf keeps the LaTeX log there"
    missing = sorted(set(re.findall(r"Missing character: There is no (.+?) in font", LOG.read_text(errors="replace"))))
    assert not missing, f"characters dropped from the PDF (no glyph in the font): {missing}"


def test_no_hidden_test_in_the_pdf(pages):
    text = "\n".join(pages)
    blocks = [m.group(1) for nb in chapter_notebooks() for c in json.loads(nb.read_text())["cells"]
              if c["cell_type"] == "code" for m in BLOCK.finditer("".join(c["source"]))]
    # the marker may be named in the prose (the page for instructors explains it), never more often
    prose = [(ROOT / f"{doc}.md").read_text() for doc in toc_files() if (ROOT / f"{doc}.md").exists()] + [
        "".join(c["source"]) for nb in chapter_notebooks() for c in json.loads(nb.read_text())["cells"]
        if c["cell_type"] == "markdown"]
    marker = "BEGIN HIDDEN TESTS"
    assert words(text).count(marker) == sum(words(t).count(marker) for t in prose), "a hidden-test block in the PDF"
    assert words(text).count(NOTE) == len(blocks), "one placeholder line per hidden-test block"
    lines = {words(line) for line in text.splitlines()}
    elsewhere = "\n".join(BLOCK.sub("", "".join(c["source"])) for nb in chapter_notebooks()
                          for c in json.loads(nb.read_text())["cells"])
    hidden = {words(line) for block in blocks for line in block.splitlines() if len(line.strip()) > 20}
    leaked = sorted(h for h in hidden if h in lines and h not in words(elsewhere))
    assert not leaked, f"hidden test lines in the PDF: {leaked[:3]}"


def render(pdf, page: int, name: str):
    """Render one page at 60 dpi into PAGES/<name>-<page>.png; return (path, mean, std of the gray levels)."""
    from PIL import Image, ImageStat
    PAGES.mkdir(parents=True, exist_ok=True)
    stem = PAGES / f"{name}-{page}"
    run("pdftoppm", "-r", "60", "-png", "-singlefile", "-f", str(page), "-l", str(page), str(pdf), str(stem))
    path = stem.with_suffix(".png")
    stat = ImageStat.Stat(Image.open(path).convert("L"))
    return path, stat.mean[0], stat.stddev[0]


def test_a_figure_page_and_an_equation_page_render(pdf, pages):
    rows = [line.split() for line in run("pdfimages", "-list", str(pdf)).splitlines()[2:]]
    figure_page = next(int(r[0]) for r in rows if len(r) > 2 and r[2] == "image")
    image_pages = {int(r[0]) for r in rows if len(r) > 2 and r[2] == "image"}
    # in the chapters (chapter 1 opens under its title in capitals), the first page without a figure
    # that has a display formula set in TeX's large math symbols
    first = words(title(next(f for f in toc_files() if f.startswith("book/01_"))).upper())
    start = next(i for i, p in enumerate(pages, 1) if first in words(p))
    equation_page = next(i for i, p in enumerate(pages, 1) if i > start and i not in image_pages
                         and DISPLAY_LINE.search(p)
                         and "CMEX10" in run("pdffonts", "-f", str(i), "-l", str(i), str(pdf)))
    for page, name in ((figure_page, "figure"), (equation_page, "equation")):
        path, mean, std = render(pdf, page, name)
        record("pdf", f"{name} page: {page} ({path.relative_to(ROOT)}, gray mean {mean:.0f}, std {std:.0f})")
        # a blank page is uniform (std 0); a page of text and a figure varies strongly
        assert std > 20 and mean < 250, f"page {page} of {pdf} renders blank ({path}: mean {mean:.0f}, std {std:.0f})"


# the least paper a word leaves at the right edge: the text block ends an inch in; a box title, table
# column or display formula set wider than the block spills into that margin and, past it, off the sheet
MARGIN_PT = 36
PAGE = re.compile(r'<page width="([\d.]+)"[^>]*>(.*?)</page>', re.S)
WORD = re.compile(r'<word xMin="[\d.]+" yMin="[\d.]+" xMax="([\d.]+)" yMax="[\d.]+">([^<]*)</word>')


def test_nothing_runs_off_the_paper(pdf):
    over = [f"page {n}: {word!r} ends at {float(x_max):.0f} pt of {float(width):.0f}"
            for n, (width, body) in enumerate(PAGE.findall(run("pdftotext", "-bbox", str(pdf), "-")), 1)
            for x_max, word in WORD.findall(body) if float(x_max) > float(width) - MARGIN_PT]
    record("pdf", f"words within {MARGIN_PT} pt of the paper's right edge or past it: {len(over)}")
    assert not over, f"{len(over)} words run into the right margin or off the paper:\n  " + "\n  ".join(over[:12])
