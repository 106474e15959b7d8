"""HTML → (title, readable text), on selectolax's Lexbor parser (a WHATWG-conformant HTML5 parser).

Whatever the browser would show as the document's content becomes text: headings as their own lines,
paragraphs separated by blank lines, list items as ``- item`` (``1. item`` when ordered), table rows as
``cell | cell``, ``<pre>`` kept line by line, images as their ``alt`` text. Scripts, styles, templates, embedded
media, form controls, ``<nav>`` menus and elements marked ``hidden`` or ``aria-hidden="true"`` are dropped. The title
is the ``<title>``, else the first ``<h1>``.
"""

from __future__ import annotations

from typing import Final

from selectolax.lexbor import LexborHTMLParser, LexborNode

from memory_core.documents.blocks import HARD_BREAK, bullet, code, one_line, prose, title_of
from memory_core.documents.budget import HTML_BUDGET, html_shape

__all__ = ["html_blocks", "html_to_text"]

_DROP: Final = frozenset(
    {
        "script", "style", "noscript", "template", "svg", "math", "canvas", "iframe", "object", "embed",
        "head", "title", "meta", "link", "nav", "button", "select", "input", "textarea", "dialog", "audio",
        "video", "source", "track", "map", "area",
    }
)  # fmt: skip
_HEADINGS: Final = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_CONTAINERS: Final = frozenset(
    {
        "html", "body", "div", "section", "article", "main", "header", "footer", "aside", "address", "figure",
        "figcaption", "details", "summary", "fieldset", "legend", "form", "center", "hgroup", "search", "caption",
        "li", "dd", "dt", "td", "th", "blockquote", "p",
    }
)  # fmt: skip
_BLOCKS: Final = _CONTAINERS | _HEADINGS | {"ul", "ol", "menu", "dl", "table", "pre", "hr", "listing", "plaintext"}


def _hidden(node: LexborNode) -> bool:
    attrs = node.attributes
    return "hidden" in attrs or (attrs.get("aria-hidden") or "").lower() == "true"


def _inline_text(node: LexborNode) -> str:
    """The text of an element read as inline content (block children are run together with spaces)."""
    parts: list[str] = []
    for child in node.iter(include_text=True):
        tag = child.tag
        if tag == "-text":
            parts.append(child.text_content or "")
        elif tag is None or tag.startswith("-") or tag in _DROP or _hidden(child):
            continue
        elif tag == "br":
            parts.append(HARD_BREAK)
        elif tag == "img":
            parts.append(child.attributes.get("alt") or "")
        else:
            inner = _inline_text(child)
            parts.append(f" {inner} " if tag in _BLOCKS else inner)
    return "".join(parts)


def _list_block(node: LexborNode) -> str:
    ordered = node.tag == "ol"
    start = node.attributes.get("start") or "1"
    number = int(start) if start.lstrip("-").isdigit() else 1
    items: list[str] = []
    for child in node.iter(include_text=False):
        if child.tag != "li" or _hidden(child):
            continue
        marker = f"{number}. " if ordered else "- "
        number += 1
        item = bullet(marker, html_blocks(child))
        if item:
            items.append(item)
    return "\n".join(items)


def _table_block(node: LexborNode) -> str:
    rows: list[str] = []
    for part in node.iter(include_text=False):
        for row in [part] if part.tag == "tr" else part.iter(include_text=False):
            if row.tag != "tr" or _hidden(row):
                continue
            cells = [one_line(" ".join(html_blocks(c))) for c in row.iter(include_text=False) if c.tag in ("td", "th")]
            if any(cells):
                rows.append(" | ".join(cells))
    return "\n".join(rows)


def _definition_block(node: LexborNode) -> str:
    lines: list[str] = []
    for child in node.iter(include_text=False):
        if child.tag == "dt":
            lines.append(prose(_inline_text(child)))
        elif child.tag == "dd":
            lines.append(bullet("  ", html_blocks(child)))
    return "\n".join(line for line in lines if line)


def _block(node: LexborNode) -> list[str]:
    tag = node.tag
    if tag in _HEADINGS:
        return [one_line(_inline_text(node))]
    if tag in ("pre", "listing", "plaintext"):
        return [code(node.text(deep=True, separator="", strip=False))]
    if tag in ("ul", "ol", "menu"):
        return [_list_block(node)]
    if tag == "dl":
        return [_definition_block(node)]
    if tag == "table":
        return [_table_block(node)]
    if tag == "hr":
        return []
    return html_blocks(node)


def html_blocks(node: LexborNode) -> list[str]:
    """The blocks of an element's content: runs of inline content become paragraphs, block children recurse."""
    blocks: list[str] = []
    inline: list[str] = []

    def flush() -> None:
        text = prose("".join(inline))
        if text:
            blocks.append(text)
        inline.clear()

    for child in node.iter(include_text=True):
        tag = child.tag
        if tag == "-text":
            inline.append(child.text_content or "")
        elif tag is None or tag.startswith("-") or tag in _DROP or _hidden(child):
            continue
        elif tag == "br":
            inline.append(HARD_BREAK)
        elif tag == "img":
            inline.append(child.attributes.get("alt") or "")
        elif tag in _BLOCKS:
            flush()
            blocks.extend(b for b in _block(child) if b)
        else:
            inline.append(_inline_text(child))
    flush()
    return blocks


def html_to_text(html: str) -> tuple[str | None, list[str]]:
    """Parse an HTML document or fragment.

    Returns:
        ``(title, blocks)``: the ``<title>`` (else the first ``<h1>``) cleaned by ``title_of``, or None; and the
        body's blocks, to be joined with ``join_blocks``.

    Raises:
        OverBudget: the source is over ``budget.HTML_BUDGET``: its tags nest deeper than 256 or number more than
            250,000 (measured before parsing), or the parsed tree holds more than 250,000 elements.
    """
    html_shape(html)
    tree = LexborHTMLParser(html)
    HTML_BUDGET.check_nodes(len(tree.css("*")), "HTML element")
    title = None
    for selector in ("head > title", "title", "h1"):
        found = tree.css_first(selector)
        if found is not None:
            title = title_of(_inline_text(found) if selector == "h1" else found.text(deep=True))
            if title:
                break
    root = tree.body or tree.root
    return title, html_blocks(root) if root is not None else []
