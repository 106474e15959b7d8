"""Work budgets of the document converters: what converting one file may cost, checked before the work is done.

Parsers can cost far more than linear time in their input: Lexbor's HTML tree builder scans its stack of open
elements for each start tag, so 100,000 nested ``<div>`` (1.1 MB) took over 60 s; docutils recurses once per
nesting level; markdown-it silently drops what lies deeper than its nesting limit. So each converter measures its
input with a linear pre-scan (nesting depth, element count) before parsing, checks what the parse produced
(nodes) before walking it, and refuses a file over budget with ``OverBudget``, which the caller reports as
``InvalidRequest`` naming the file (issue 11 rule 5). With the byte cap (``detect.MAX_DOCUMENT_BYTES``), depth
and node caps bound the time and memory of a conversion by the input's size.

| format | depth | nodes |
| --- | --- | --- |
| HTML (and Markdown's rendered HTML) | 256 open elements | 250,000 elements |
| Markdown | 48 block levels (markdown-it token levels) | 250,000 tokens |
| reStructuredText | 48 indentation and list levels | 250,000 doctree nodes |
| PDF | 32 page-tree levels | 5,000 pages, ``MAX_TEXT_CHARS`` of text |

The depths are far above what documents use (Blink's HTML parser itself caps its tree at 512) and below where
the converters' recursion would fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "HTML_BUDGET",
    "MARKDOWN_BUDGET",
    "MAX_PDF_PAGES",
    "PDF_BUDGET",
    "RST_BUDGET",
    "OverBudget",
    "WorkBudget",
    "html_shape",
    "rst_depth",
]


class OverBudget(ValueError):
    """A file would cost more to convert than its format's ``WorkBudget`` allows.

    Attributes:
        measure: What was measured (``"HTML nesting depth"``).
        found: The value found (a lower bound when the scan stopped early).
        limit: The budget.
    """

    def __init__(self, measure: str, found: int, limit: int) -> None:
        self.measure = measure
        self.found = found
        self.limit = limit
        super().__init__(f"{measure} {found:,} is over the budget of {limit:,}")


@dataclass(frozen=True, slots=True)
class WorkBudget:
    """The most nesting and nodes one conversion may take."""

    max_depth: int
    max_nodes: int

    def check_depth(self, depth: int, what: str) -> None:
        """Raise ``OverBudget`` when ``depth`` exceeds ``max_depth``."""
        if depth > self.max_depth:
            raise OverBudget(f"{what} nesting depth", depth, self.max_depth)

    def check_nodes(self, nodes: int, what: str) -> None:
        """Raise ``OverBudget`` when ``nodes`` exceeds ``max_nodes``."""
        if nodes > self.max_nodes:
            raise OverBudget(f"{what} count", nodes, self.max_nodes)


HTML_BUDGET: Final = WorkBudget(max_depth=256, max_nodes=250_000)
MARKDOWN_BUDGET: Final = WorkBudget(max_depth=48, max_nodes=250_000)
RST_BUDGET: Final = WorkBudget(max_depth=48, max_nodes=250_000)
PDF_BUDGET: Final = WorkBudget(max_depth=32, max_nodes=100_000)
"""PDF: page-tree depth, and page-tree nodes visited."""
MAX_PDF_PAGES: Final = 5_000
"""Most pages of one PDF."""

# HTML ------------------------------------------------------------------------------------------------------
_HTML_TOKEN = re.compile(
    r"<!--.*?(?:-->|\Z)"  # a comment (to its end, or the end of the file)
    r"|<(script|style|textarea|title|xmp|iframe|noembed|noframes|noscript|plaintext)\b[^>]*>.*?(?:</\1\s*>|\Z)"
    r"|<(/?)([A-Za-z][A-Za-z0-9:-]*)\b([^>]*)>",
    re.DOTALL | re.IGNORECASE,
)
_VOID: Final = frozenset(
    "area base br col embed hr img input link meta param source track wbr basefont bgsound frame keygen image".split()
)
_OPTIONAL_END: Final = frozenset(
    "p li dt dd option optgroup tr td th thead tbody tfoot colgroup caption rb rt rtc rp html head body".split()
)
"""Elements whose end tag may be left out: a new one closes the open one, so they do not deepen the tree."""


def html_shape(source: str, budget: WorkBudget = HTML_BUDGET) -> tuple[int, int]:
    """``(elements, depth)`` of an HTML source by a linear scan of its tags, refusing as soon as one is over budget.

    Depth is the size of a stack of open elements kept as the HTML tree builder keeps it: a void element or one
    whose end tag is optional does not deepen it; an end tag pops up to the matching open element, and an end
    tag matching none is ignored (so ``<div></x>`` repeated still nests). Comments and the text of raw-text
    elements (scripts, styles) are skipped. Each end tag searches at most ``max_depth`` entries, so the scan is
    linear in the source.

    Raises:
        OverBudget: more elements than ``max_nodes`` or a depth over ``max_depth``.
    """
    stack: list[str] = []
    elements = 0
    deepest = 0
    for match in _HTML_TOKEN.finditer(source):
        raw_text, closing, name, rest = match.group(1), match.group(2), match.group(3), match.group(4)
        if raw_text is not None:
            elements += 1
        elif name is not None:
            tag = name.lower()
            if closing:
                if tag in stack:
                    del stack[len(stack) - 1 - stack[::-1].index(tag) :]
                continue
            elements += 1
            if tag not in _VOID and tag not in _OPTIONAL_END and not rest.rstrip().endswith("/"):
                stack.append(tag)
                if len(stack) > deepest:
                    deepest = len(stack)
                    budget.check_depth(deepest, "HTML")
        else:
            continue
        if elements > budget.max_nodes:
            budget.check_nodes(elements, "HTML element")
    return elements, deepest


# reStructuredText ----------------------------------------------------------------------------------------
_RST_MARKER = re.compile(r"(?:[-*+•‣⁃]|\(?(?:\d+|[A-Za-z#]|[ivxlcdmIVXLCDM]+)[.)]|\|)[ \t]+(?=\S)")
"""A bullet, an enumerator or a line-block bar that opens a nested body on the same line (``- - - x``)."""


def rst_depth(source: str, budget: WorkBudget = RST_BUDGET) -> int:
    """The nesting depth of a reST source: indentation levels plus list markers opening a line, linear scan.

    Each increase of indentation over the enclosing block opens a level (a block quote, a list or directive body);
    each bullet, enumerator or ``|`` that starts a line's text opens one more (``- - - x`` is three nested lists).

    Raises:
        OverBudget: a depth over ``max_depth``.
    """
    stack = [0]
    deepest = 0
    for line in source.splitlines():
        if not line.strip():
            continue
        expanded = line.expandtabs(8)
        text = expanded.lstrip()
        indent = len(expanded) - len(text)
        while indent < stack[-1]:
            stack.pop()
        if indent > stack[-1]:
            stack.append(indent)
        markers = 0
        while (match := _RST_MARKER.match(text)) is not None:
            markers += 1
            text = text[match.end() :]
            if markers > budget.max_depth:
                break
        depth = len(stack) - 1 + markers
        if depth > deepest:
            deepest = depth
            budget.check_depth(deepest, "reStructuredText")
    return deepest
