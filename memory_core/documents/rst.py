"""reStructuredText → (title, readable text), with docutils.

The title is the document title docutils promotes (a lone top-level section title), or the ``Title:`` field of
a leading RFC-822 header block such as every PEP has (``PEP: 8`` / ``Title: …`` / ``Author: …`` up to the
first blank line; docutils' own PEP reader would also rewrite the body, so the header is handled here). The
body comes first; the header's other non-empty fields follow at the end, under a ``Header`` heading
(``HEADER_HEADING``), compacted to one line ``Name: value; Name: value`` (their inline markup parsed). Why at
the end: the start of a document is what a reader sees first (a pack's bullet shows a document's first 600
characters), and a PEP header is ~400 characters of names, e-mail addresses and dates that say nothing about
the subject; kept at the end, every field is still stored and searchable, and a split document
(``passages``) keeps them as a passage of their own.

Parsing is safe on untrusted input: ``include`` and ``raw`` are disabled (no file is read, no markup passed
through), no configuration file is read, and no problem is reported or raised. Sphinx-only markup is not
registered with docutils (its registries are process-global); instead an unknown role keeps its text
(``:class:`Foo <a.Foo>``` → ``Foo``, ``:func:`~a.b``` → ``b``) and an unknown directive keeps its argument and
content, parsed again as reST (``.. versionadded:: 3.2`` → ``3.2`` and the content's paragraphs).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from typing import Any, Final

from docutils import nodes
from docutils.core import publish_doctree

from memory_core.documents.blocks import HARD_BREAK, bullet, code, one_line, prose, title_of
from memory_core.documents.budget import RST_BUDGET, rst_depth, rst_substitutions

__all__ = ["HEADER_FIELD_SEPARATOR", "HEADER_HEADING", "rst_to_text", "split_header"]

HEADER_HEADING: Final = "Header"
"""The heading above a header block's fields at the end of the text (*memory-core*)."""
HEADER_FIELD_SEPARATOR: Final = "; "
"""Joins the header's ``Name: value`` fields into one line (*memory-core*)."""

_SETTINGS: Final[dict[str, Any]] = {
    "report_level": 5,  # report nothing
    "halt_level": 5,  # never raise on a problem in the source
    "warning_stream": False,
    "file_insertion_enabled": False,  # `include` and friends would read arbitrary files
    "raw_enabled": False,
    "_disable_config": True,  # ignore docutils.conf in the working or home directory
    "docinfo_xform": False,  # keep a leading field list as fields, not bibliographic metadata
    "syntax_highlight": "none",
    "smart_quotes": False,
    "input_encoding": "unicode",
}
_HEADER_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):(?:[ \t]+(.*)|[ \t]*)$")
_ROLE = re.compile(r"^:[\w:+.-]+:`(.*)`$|^`(.*)`:[\w:+.-]+:$", re.DOTALL)
_TITLED_TARGET = re.compile(r"^(.*?)\s*<[^<>]+>$", re.DOTALL)
_UNKNOWN_DIRECTIVE = re.compile(r'^Unknown directive type "([^"]+)"')
_OPTION_LINE = re.compile(r"^\s+:[\w-]+:")
_SKIP: Final = (
    nodes.comment, nodes.substitution_definition, nodes.target, nodes.raw, nodes.pending, nodes.decoration,
    nodes.transition, nodes.colspec, nodes.meta,
)  # fmt: skip
_ADMONITIONS: Final = (
    nodes.attention, nodes.caution, nodes.danger, nodes.error, nodes.hint, nodes.important, nodes.note,
    nodes.tip, nodes.warning,
)  # fmt: skip


def split_header(source: str) -> tuple[list[tuple[str, str]], str]:
    """Split a leading RFC-822 header block (with a ``Title:`` field) from a reST source.

    Returns:
        ``(fields, body)``: ``[(name, value), …]`` in order, continuation lines joined with spaces, and the
        source after the block; ``([], source)`` when the source does not start with such a block.
    """
    lines = source.lstrip("\ufeff").split("\n")
    fields: list[tuple[str, str]] = []
    end = 0
    for i, line in enumerate(lines):
        header = _HEADER_LINE.match(line)
        if header:
            fields.append((header.group(1), (header.group(2) or "").strip()))
        elif fields and line[:1] in (" ", "\t") and line.strip():
            name, value = fields[-1]
            fields[-1] = (name, f"{value} {line.strip()}".strip())
        elif not line.strip() and fields:
            end = i
            break
        else:
            return [], source
    else:
        end = len(lines)
    if not any(name.lower() == "title" for name, _ in fields):
        return [], source
    return fields, "\n".join(lines[end:])


def _salvage_role(raw: str) -> str:
    match = _ROLE.match(raw)
    if match is None:
        return raw.strip("`_|")
    content = match.group(1) if match.group(1) is not None else match.group(2)
    titled = _TITLED_TARGET.match(content)
    if titled and titled.group(1):
        return titled.group(1)
    content = content.lstrip("!")
    return content[1:].rsplit(".", 1)[-1] if content.startswith("~") else content


def _inline(node: nodes.Node) -> str:
    if isinstance(node, nodes.Text):
        return node.astext()
    if isinstance(node, nodes.footnote_reference | nodes.citation_reference):
        return f"[{node.astext()}]"
    if isinstance(node, nodes.problematic):
        return _salvage_role(node.astext())
    if isinstance(node, nodes.image):
        return str(node.get("alt", ""))
    if isinstance(node, nodes.system_message | nodes.raw | nodes.comment | nodes.substitution_definition):
        return ""
    return "".join(_inline(child) for child in node.children)


def _salvage_directive(message: nodes.system_message) -> list[str]:
    """The argument and content of an unknown directive, parsed as reST (its options dropped)."""
    literal = next(iter(message.findall(nodes.literal_block)), None)
    if literal is None or not _UNKNOWN_DIRECTIVE.match(message.children[0].astext()):
        return []
    first, *rest = literal.astext().split("\n")
    argument = first.partition("::")[2].strip()
    while rest and _OPTION_LINE.match(rest[0]):
        rest.pop(0)
    source = f"{argument}\n\n{textwrap.dedent(chr(10).join(rest))}"
    return _children_blocks(_parse(source).children)


def _enum_marker(node: nodes.enumerated_list, index: int) -> str:
    n = int(node.get("start", 1)) + index
    kind = node.get("enumtype", "arabic")
    if kind in ("loweralpha", "upperalpha") and 1 <= n <= 26:
        letter = chr(ord("a") + n - 1)
        return f"{letter.upper() if kind == 'upperalpha' else letter}. "
    return f"{n}. "


def _table(node: nodes.table) -> str:
    rows: list[str] = []
    for row in node.findall(nodes.row):
        cells = [one_line(" ".join(_children_blocks(entry.children))) for entry in row.children]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _blocks(node: nodes.Node) -> list[str]:  # noqa: C901 - one dispatch over docutils' node types
    if isinstance(node, nodes.Text):
        return [prose(node.astext())]
    if isinstance(node, nodes.system_message):
        return _salvage_directive(node)
    if isinstance(node, _SKIP) or (isinstance(node, nodes.topic) and "contents" in node.get("classes", ())):
        return []
    if isinstance(node, nodes.title | nodes.subtitle | nodes.rubric):
        return [one_line(_inline(node))]
    if isinstance(node, nodes.literal_block | nodes.doctest_block | nodes.math_block):
        return [code(node.astext())]
    if isinstance(node, nodes.line_block):
        return [HARD_BREAK.join(_line_block_lines(node))]
    if isinstance(node, nodes.bullet_list):
        return ["\n".join(bullet("- ", _children_blocks(item.children)) for item in node.children)]
    if isinstance(node, nodes.enumerated_list):
        items = (bullet(_enum_marker(node, i), _children_blocks(item.children)) for i, item in enumerate(node.children))
        return ["\n".join(items)]
    if isinstance(node, nodes.definition_list):
        return ["\n".join(_definition_item(item) for item in node.children)]
    if isinstance(node, nodes.field_list):
        return ["\n".join(_field(field) for field in node.children)]
    if isinstance(node, nodes.option_list):
        return ["\n".join(_option(item) for item in node.children)]
    if isinstance(node, nodes.table):
        return [_table(node)]
    if isinstance(node, nodes.footnote | nodes.citation):
        label = next((c.astext() for c in node.children if isinstance(c, nodes.label)), "")
        body = [c for c in node.children if not isinstance(c, nodes.label)]
        return [bullet(f"[{label}] ", _children_blocks(body))]
    if isinstance(node, _ADMONITIONS):
        name = f"{node.tagname.capitalize()}: "
        return [bullet(name, _children_blocks(node.children))]
    if isinstance(node, nodes.attribution):
        return [prose("— " + _inline(node))]
    if isinstance(node, nodes.image):
        return [prose(node.get("alt", ""))]
    if isinstance(node, nodes.TextElement):
        return [prose(_inline(node))]
    if isinstance(node, nodes.Element):
        return _children_blocks(node.children)
    return []


def _children_blocks(children: Iterable[nodes.Node]) -> list[str]:
    return [block for child in children for block in _blocks(child) if block]


def _line_block_lines(node: nodes.line_block, depth: int = 0) -> list[str]:
    lines: list[str] = []
    for child in node.children:
        if isinstance(child, nodes.line_block):
            lines.extend(_line_block_lines(child, depth + 1))
        else:
            lines.append("    " * depth + one_line(_inline(child)))
    return lines


def _definition_item(item: nodes.Node) -> str:
    parts = [c for c in item.children if isinstance(c, nodes.term | nodes.classifier)]
    term = " : ".join(one_line(_inline(c)) for c in parts)
    definition = [b for c in item.children if isinstance(c, nodes.definition) for b in _children_blocks(c.children)]
    return "\n".join([term, bullet("    ", definition)]).strip("\n")


def _field(field: nodes.Node) -> str:
    if isinstance(field, nodes.field):
        name = one_line(_inline(field.children[0]))
        return bullet(f"{name}: ", _children_blocks(field.children[1:])) or f"{name}:"
    return "\n".join(_blocks(field))


def _option(item: nodes.Node) -> str:
    options = one_line(_inline(item.children[0]))
    description = _children_blocks(item.children[1:])
    return bullet(f"{options}  ", description) or options


def _parse(source: str, *, doctitle: bool = True) -> nodes.document:
    """Parse within ``RST_BUDGET``: nesting and substitutions are measured before docutils runs, nodes before the walk.

    Raises:
        OverBudget: nesting deeper than 48 levels, substitutions expanding past ``MAX_TEXT_CHARS`` characters
            or 250,000 substitutions, or more than 250,000 doctree nodes.
    """
    rst_depth(source)
    rst_substitutions(source)
    doc = publish_doctree(source, settings_overrides={**_SETTINGS, "doctitle_xform": doctitle})
    for count, _ in enumerate(doc.findall(), start=1):
        if count > RST_BUDGET.max_nodes:
            RST_BUDGET.check_nodes(count, "reStructuredText node")
    return doc


def _header_block(fields: list[tuple[str, str]]) -> str:
    """The header's non-empty fields but the title, parsed as a field list, on one line (``HEADER_HEADING``)."""
    rows = [f":{name}: {value}" for name, value in fields if name.lower() != "title" and value]
    if not rows:
        return ""
    lines = [line for block in _children_blocks(_parse("\n".join(rows)).children) for line in block.split("\n")]
    return HEADER_FIELD_SEPARATOR.join(one_line(line) for line in lines if line.strip())


def rst_to_text(source: str) -> tuple[str | None, list[str]]:
    """Convert reST source (with or without a leading RFC-822 header).

    Returns:
        ``(title, blocks)``: the header's ``Title:``, else docutils' document title, else None; and the blocks of
        the text, then, for a header, ``HEADER_HEADING`` and its other fields on one line.

    Raises:
        OverBudget: the source is over ``budget.RST_BUDGET`` (nesting, nodes).
    """
    fields, body = split_header(source)
    if fields:  # the header names the title: docutils must not promote a lone section title in its place
        title = title_of(next(value for name, value in fields if name.lower() == "title"))
        header = _header_block(fields)
        blocks = _children_blocks(_parse(body, doctitle=False).children)
        return title, [*blocks, HEADER_HEADING, header] if header else blocks
    children = list(_parse(body).children)
    title = None
    if children and isinstance(children[0], nodes.title):
        title = title_of(_inline(children.pop(0)))
    return title, _children_blocks(children)
