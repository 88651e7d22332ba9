"""Sphinx extension: the PDF numbers the chapters as the HTML book does.

The table of contents (_toc.yml) has unnumbered parts (front and back matter: the preface, the page
for instructors, the robustness report) around the numbered chapters, and the text refers to chapters
by these numbers ("chapter 7"). Sphinx's LaTeX writer numbers every chapter of the one document it
writes, so the preface would be chapter 1 and every later number off by two. In the LaTeX output
this extension starts each part with the section numbering switched off (unnumbered part) or on
(numbered part); LaTeX then counts only the numbered chapters: 1 to 11, as on the pages.
"""
import pathlib

import yaml
from docutils import nodes

OFF = r"\ifdefined\booksecnumdepth\else\edef\booksecnumdepth{\the\value{secnumdepth}}\fi\setcounter{secnumdepth}{-1}"
ON = r"\ifdefined\booksecnumdepth\setcounter{secnumdepth}{\booksecnumdepth}\fi"


def part_starts(toc: dict) -> dict:
    """docname -> whether its part is numbered, for the first document of every part of a jb-book
    table of contents (the root page comes before the parts and is not a chapter)."""
    starts = {}
    for part in toc.get("parts", []):
        chapters = part.get("chapters", [])
        if chapters:
            starts[chapters[0]["file"]] = bool(part.get("numbered", False))
    return starts


def _mark(app, doctree):
    # a raw LaTeX node is ignored by every other builder (the HTML pages stay as they are)
    toc = pathlib.Path(app.srcdir, getattr(app.config, "external_toc_path", None) or "_toc.yml")
    numbered = part_starts(yaml.safe_load(toc.read_text())).get(app.env.docname)
    if numbered is not None:
        doctree.insert(0, nodes.raw("", ON if numbered else OFF, format="latex"))


def setup(app):
    app.connect("doctree-read", _mark)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
