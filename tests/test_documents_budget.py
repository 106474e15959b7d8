"""Every document converter works within a budget of nesting and nodes (issue 11 rule 5).

Main handed 100,000 nested ``<div>`` (1.1 MB) to Lexbor, whose tree builder is quadratic in nesting (over 60 s),
let docutils recurse until ``RecursionError`` and let markdown-it silently drop what lay past 20 levels. These
tests count: what is refused, with which measure, and how many times the parser ran (0 when refused up front);
never time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memory_core.documents import brain_document, budget, html, pdf, rst
from memory_core.documents.budget import (
    HTML_BUDGET,
    MAX_PDF_PAGES,
    MAX_RST_NESTED_SUBSTITUTIONS,
    RST_BUDGET,
    html_shape,
    rst_depth,
    rst_substitutions,
)
from memory_core.errors import InvalidRequest


def _refused(data: bytes, name: str, measure: str) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        brain_document(data, name=name)
    assert info.value.field == "file"
    message = str(info.value)
    assert name in message and "over the conversion budget" in message and measure in message, message
    return info.value


@pytest.fixture
def parser_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Count the runs of the HTML parser and of docutils."""
    calls = {"html": 0, "rst": 0}

    def counting(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(html, "LexborHTMLParser", counting("html", html.LexborHTMLParser))
    monkeypatch.setattr(rst, "publish_doctree", counting("rst", rst.publish_doctree))
    yield calls


# HTML -----------------------------------------------------------------------------------------------------
def test_the_issues_100k_nested_divs_are_refused_before_parsing(parser_calls: dict[str, int]) -> None:
    data = ("<html><body>" + "<div>" * 100_000 + "x" + "</div>" * 100_000).encode()
    _refused(data, "deep.html", f"HTML nesting depth {HTML_BUDGET.max_depth + 1}")
    assert parser_calls["html"] == 0


@pytest.mark.parametrize(
    "body",
    [
        "<div></x>" * 1_000,  # end tags that close nothing must not hide the nesting
        "".join(f"<b id={i}>" for i in range(300)) + "<p>x" * 300,  # unclosed formatting elements
        "<table><tr><td>" * 300,
        "<span>" * 300,
    ],
    ids=["stray-end-tags", "formatting", "tables", "inline"],
)
def test_adversarial_html_nesting_is_refused(parser_calls: dict[str, int], body: str) -> None:
    _refused(body.encode(), "attack.html", "HTML nesting depth 257")
    assert parser_calls["html"] == 0


def test_too_many_html_elements_are_refused_by_count(parser_calls: dict[str, int]) -> None:
    _refused(b"<p>a<br>" * (HTML_BUDGET.max_nodes // 2 + 1), "wide.html", "HTML element count 250,001")
    assert parser_calls["html"] == 0


def test_html_within_the_budget_converts_whole(parser_calls: dict[str, int]) -> None:
    doc = brain_document(("<div>" * 200 + "deep text" + "</div>" * 200).encode(), name="ok.html")
    assert doc.text == "deep text" and parser_calls["html"] == 1


def test_the_html_scan_keeps_the_tree_builders_stack() -> None:
    assert html_shape("<ul><li>a<li>b</ul><p>c<p>d") == (5, 1)  # optional end tags do not nest
    assert html_shape("<div><span></div><div>") == (3, 2)  # </div> closes the span too
    assert html_shape("<div><!-- <div><div> --><script>'<div>'</script><br/><img></div>") == (4, 1)


# Markdown -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "source",
    [">" * 100 + " deep\n", "- " * 100 + "deep\n", "\n".join("  " * i + "- item" for i in range(100))],
    ids=["blockquotes", "inline-lists", "indented-lists"],
)
def test_adversarial_markdown_nesting_is_refused_not_cut(source: str) -> None:
    _refused(source.encode(), "deep.md", "Markdown nesting depth")


def test_raw_html_in_markdown_is_held_to_the_html_budget(parser_calls: dict[str, int]) -> None:
    _refused(("# Notes\n\n" + "<div>" * 5_000 + "\n").encode(), "raw.md", "HTML nesting depth 257")
    assert parser_calls["html"] == 0


def test_markdown_within_the_budget_keeps_its_deepest_text() -> None:
    source = "\n".join("    " * i + "- level" + str(i) for i in range(8))
    doc = brain_document(source.encode(), name="ok.md")
    assert "level7" in doc.text


# reStructuredText -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "source",
    [
        "\n\n".join("  " * i + "para" for i in range(300)),  # block quotes by indentation
        "- " * 300 + "x",  # lists opened on one line
        "\n\n".join("  " * i + ".. note::" for i in range(200)),  # directive bodies
    ],
    ids=["indentation", "bullets", "directives"],
)
def test_adversarial_rst_nesting_is_refused_before_docutils_runs(parser_calls: dict[str, int], source: str) -> None:
    _refused(source.encode(), "deep.rst", f"reStructuredText nesting depth {RST_BUDGET.max_depth + 1}")
    assert parser_calls["rst"] == 0


def test_rst_depth_counts_levels_and_markers() -> None:
    assert rst_depth("Title\n=====\n\nPara.\n\n  Quote.\n\n    Deeper.\n\nBack.\n") == 2
    assert rst_depth("- a\n\n  - b\n\n    1. c\n") == 3
    assert rst_depth("- - - x\n") == 3


def test_rst_within_the_budget_converts() -> None:
    source = "\n\n".join("  " * i + f"level{i}" for i in range(10))
    assert "level9" in brain_document(source.encode(), name="ok.rst").text


def test_too_many_rst_nodes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rst, "RST_BUDGET", budget.WorkBudget(max_depth=48, max_nodes=50))
    _refused(
        ("\n\n".join(f"Paragraph {i}." for i in range(100))).encode(), "wide.rst", "reStructuredText node count 51"
    )


# PDF ------------------------------------------------------------------------------------------------------
def _pdf(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (object 1 the catalog), with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _nested_pages(depth: int) -> bytes:
    """A page tree ``depth`` levels deep over one page saying Hello."""
    stream = b"BT /F1 12 Tf 72 720 Td (Hello nested pages) Tj ET"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(depth):
        number = 2 + level
        parent = b" /Parent %d 0 R" % (number - 1) if level else b""
        objects.append(b"<< /Type /Pages /Kids [%d 0 R] /Count 1%s >>" % (number + 1, parent))
    page = 2 + depth
    objects.append(
        b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >> "
        b"/Contents %d 0 R >>" % (page - 1, page + 1, page + 2)
    )
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    return _pdf(objects)


def test_a_deeply_nested_pdf_page_tree_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    extracted: list[int] = []
    real = pdf.PdfReader

    class Counting(real):  # type: ignore[misc, valid-type]
        @property
        def pages(self) -> Any:
            extracted.append(1)
            return super().pages

    monkeypatch.setattr(pdf, "PdfReader", Counting)
    _refused(_nested_pages(500), "deep.pdf", "PDF page tree nesting depth 33")
    assert extracted == []  # refused before pypdf flattened (recursively) the page tree


def test_a_pdf_page_tree_within_the_budget_converts() -> None:
    assert "Hello nested pages" in brain_document(_nested_pages(5), name="ok.pdf").text


def test_a_pdf_with_too_many_pages_is_refused_before_extracting_text(monkeypatch: pytest.MonkeyPatch) -> None:
    count = MAX_PDF_PAGES + 1
    kids = b" ".join(b"%d 0 R" % (3 + i) for i in range(count))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, count)]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"] * count
    monkeypatch.setattr(pdf, "PDF_BUDGET", budget.WorkBudget(max_depth=32, max_nodes=10 * count))
    _refused(_pdf(objects), "long.pdf", f"PDF page count {count:,}")


# reStructuredText substitutions -----------------------------------------------------------------------------
def _chain(levels: int) -> str:
    """``|a0|`` expanding to ``2**levels`` copies of ``x`` through chained ``replace`` definitions."""
    definitions = [f".. |a{i}| replace:: |a{i + 1}| |a{i + 1}|" for i in range(levels)]
    return "\n".join(["Bomb", "====", "", "|a0|", "", *definitions, f".. |a{levels}| replace:: x", ""])


def test_the_issues_40_level_substitution_bomb_is_refused_before_docutils_runs(parser_calls: dict[str, int]) -> None:
    _refused(_chain(40).encode(), "bomb.rst", "reStructuredText substituted characters")
    assert parser_calls["rst"] == 0


def test_16_levels_are_refused_by_their_nested_substitutions(parser_calls: dict[str, int]) -> None:
    """16 levels expand to only 131,071 characters, but docutils' cycle check is quadratic in nested references."""
    _refused(
        _chain(16).encode(),
        "bomb16.rst",
        f"nested substitution count 131,070 is over the budget of {MAX_RST_NESTED_SUBSTITUTIONS:,}",
    )
    assert parser_calls["rst"] == 0
    assert rst_substitutions(_chain(12)) == (2**13 - 1, 2**13 - 1, 2**13 - 2)  # within the budget


def test_a_substitution_bomb_is_found_across_case_and_multi_line_definitions(parser_calls: dict[str, int]) -> None:
    definitions = [f".. |A{i}|\n   replace:: |a{i + 1}|\n   |A{i + 1}| |a{i + 1}|" for i in range(30)]
    source = "\n\n".join(["Text |a0| here.", *definitions, ".. |a30| unicode:: U+0078"])
    _refused(source.encode(), "bomb.rst", "reStructuredText substituted characters")
    assert parser_calls["rst"] == 0


def test_too_many_substitutions_are_refused_by_count(parser_calls: dict[str, int]) -> None:
    source = ".. |e| replace:: x\n\n" + "|e| " * (RST_BUDGET.max_nodes + 1)
    _refused(source.encode(), "many.rst", f"reStructuredText substitution count {RST_BUDGET.max_nodes + 1:,}")
    assert parser_calls["rst"] == 0


def test_rst_with_a_few_substitutions_converts(parser_calls: dict[str, int]) -> None:
    source = (
        "Title\n=====\n\nThe |Project| release |ver| is out; |project| again.\n\n"
        ".. |project| replace:: *Memory Core*\n.. |ver| replace:: |project| 2.0\n.. |copy| unicode:: 0xA9\n"
    )
    assert rst_substitutions(source) == (len("*Memory Core*") * 3 + len(" 2.0"), 4, 1)
    doc = brain_document(source.encode(), name="ok.rst")
    assert "The Memory Core release Memory Core 2.0 is out; Memory Core again." in doc.text
    assert parser_calls["rst"] == 1


def test_a_substitution_cycle_is_counted_once_and_left_to_docutils(parser_calls: dict[str, int]) -> None:
    """docutils reports a cycle (and keeps the reference); a cycle with repeated references trips a docutils bug."""
    loop = "Loop |a|.\n\n.. |a| replace:: |b|\n.. |b| replace:: |a|\n"
    assert rst_substitutions(loop) == (len("|a|"), 2, 1)
    assert brain_document(loop.encode(), name="loop.rst").text == "Loop b."  # docutils keeps the reference
    doubled = "Loop |a| and |b|.\n\n.. |a| replace:: |b| |b|\n.. |b| replace:: |a| |a|\n"
    assert rst_substitutions(doubled) == (len("|a| |a| |a| |a|") + len("|a| |a|"), 4, 2)  # |b| inside |a| once
    with pytest.raises(InvalidRequest, match="could not be converted"):
        brain_document(doubled.encode(), name="loop2.rst")
    assert parser_calls["rst"] == 2
