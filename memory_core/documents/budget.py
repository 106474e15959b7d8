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
| reStructuredText | 48 indentation and list levels | 250,000 doctree nodes (and substitutions, below) |
| PDF | 32 page-tree levels | 5,000 pages, ``MAX_TEXT_CHARS`` of text |

A reST file's substitutions are expanded by a linear count first (``rst_substitutions``): at most
``MAX_TEXT_CHARS`` characters, 250,000 references and ``MAX_RST_NESTED_SUBSTITUTIONS`` nested ones.

The depths are far above what documents use (Blink's HTML parser itself caps its tree at 512) and below where
the converters' recursion would fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from memory_core.limits import MAX_TEXT_CHARS

__all__ = [
    "HTML_BUDGET",
    "MARKDOWN_BUDGET",
    "MAX_PDF_PAGES",
    "MAX_RST_NESTED_SUBSTITUTIONS",
    "PDF_BUDGET",
    "RST_BUDGET",
    "OverBudget",
    "WorkBudget",
    "html_shape",
    "rst_depth",
    "rst_substitutions",
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
MAX_RST_NESTED_SUBSTITUTIONS: Final = RST_BUDGET.max_nodes // 25
"""Most substitution references inside substitutions one reST file may expand (see ``rst_substitutions``)."""
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


_RST_SUBSTITUTION_DEF = re.compile(r"^([ \t]*)\.\.[ \t]+\|")
"""The first line of a substitution definition (``.. |name| replace:: …``); its name may go on to the next lines."""
_RST_SUBSTITUTION_HEAD = re.compile(r"\.\.\s+\|(?!\s)([^|]+?)(?<!\s)\|\s+([^\s:]+(?::[^\s:]+)*)::", re.DOTALL)
_RST_SUBSTITUTION_REF = re.compile(r"\|(?![\s|])((?:[^|\n]|\n(?![ \t]*\n))+?)(?<!\s)\|")
"""A substitution reference ``|name|`` (within a paragraph: it may cross single line breaks, not a blank line)."""


def _substitution_key(name: str) -> str:
    """Like docutils' ``fully_normalize_name``: case and runs of whitespace do not tell substitution names apart."""
    return " ".join(name.split()).lower()


def _rst_definitions(source: str) -> tuple[dict[str, list[str]], str]:
    """``({name: [replacement text, …]}, the source without its definitions)``, one linear pass over the lines.

    A definition is its ``..`` line and the blank or more indented lines after it (docutils' indented block).
    Only ``replace`` substitutes references inside its text; any other directive (``unicode``, ``date``,
    ``image``) is counted as its own text. Duplicate names keep every text (the largest counts).
    """
    lines = source.splitlines()
    definitions: dict[str, list[str]] = {}
    rest: list[str] = []
    i = 0
    while i < len(lines):
        start = _RST_SUBSTITUTION_DEF.match(lines[i])
        if start is None:
            rest.append(lines[i])
            i += 1
            continue
        indent = len(start.group(1).expandtabs(8))
        end = i + 1
        while end < len(lines) and (
            not lines[end].strip() or len(lines[end].expandtabs(8)) - len(lines[end].lstrip()) > indent
        ):
            end += 1
        block = " ".join(line.strip() for line in lines[i:end])
        head = _RST_SUBSTITUTION_HEAD.match(block)
        if head is not None:
            text = block[head.end() :].strip()
            if head.group(2).lower() != "replace":
                text = text.replace("|", "")
            definitions.setdefault(_substitution_key(head.group(1)), []).append(text)
        rest.append("")
        i = end
    return definitions, "\n".join(rest)


def rst_substitutions(
    source: str,
    budget: WorkBudget = RST_BUDGET,
    max_chars: int = MAX_TEXT_CHARS,
    max_nested: int = MAX_RST_NESTED_SUBSTITUTIONS,
) -> tuple[int, int, int]:
    """``(characters, substitutions, nested)`` the body's substitution references expand to, without expanding them.

    docutils copies a substitution's text for every reference, and references inside ``replace`` text are
    substituted in turn: 40 chained definitions ``.. |a0| replace:: |a1| |a1|`` expand ``|a0|`` to 2**40
    copies. Each definition's expanded size is computed once (memoised, in an explicit stack, not recursion) and
    the body's references are summed. A reference in a cycle is counted as its own text: docutils reports a
    circular definition and keeps the reference as it is. Counts are capped just over the budget, so a
    refusal's figure is a lower bound. References inside literal blocks are counted too (an overestimate).

    *substitutions* counts every reference substituted, *nested* those inside a substitution's text. docutils
    checks each nested one for a cycle against a list of all earlier nested ones of the same name, quadratic
    work (16 chained levels, 131,070 nested references, ran past 120 s), so nested ones get a budget of their own,
    ``MAX_RST_NESTED_SUBSTITUTIONS`` (a twenty-fifth of the node budget: 10,000 take docutils about 0.5 s).

    Raises:
        OverBudget: more than ``max_chars`` characters (``MAX_TEXT_CHARS``: no longer text is kept), more than
            ``max_nodes`` substitutions, or more than ``max_nested`` nested ones.
    """
    definitions, body = _rst_definitions(source)
    char_cap, node_cap = max_chars + 1, budget.max_nodes + 1
    sizes: dict[str, tuple[int, int]] = {}
    refs = {
        key: [_substitution_key(m.group(1)) for t in texts for m in _RST_SUBSTITUTION_REF.finditer(t)]
        for key, texts in definitions.items()
    }

    def size_of(key: str) -> tuple[int, int]:
        visiting: set[str] = set()
        stack = [key]
        while stack:
            top = stack[-1]
            if top in sizes:
                stack.pop()
                continue
            pending = [k for k in refs[top] if k in definitions and k not in sizes and k not in visiting]
            if top not in visiting and pending:
                visiting.add(top)
                stack.extend(pending)
                continue
            best = (0, 0)
            for text in definitions[top]:
                chars, subs = len(text), 1
                for match in _RST_SUBSTITUTION_REF.finditer(text):
                    inner = _substitution_key(match.group(1))
                    if inner in sizes:
                        chars += sizes[inner][0] - len(match.group(0))
                        subs += sizes[inner][1]
                best = (max(best[0], min(chars, char_cap)), max(best[1], min(subs, node_cap)))
            sizes[top] = best
            visiting.discard(top)
            stack.pop()
        return sizes[key]

    chars = subs = nested = 0
    for match in _RST_SUBSTITUTION_REF.finditer(body):
        key = _substitution_key(match.group(1))
        if key in definitions:
            more_chars, more_subs = size_of(key)
            chars = min(chars + more_chars, char_cap)
            subs = min(subs + more_subs, node_cap)
            nested += more_subs - 1
            if chars > max_chars:
                raise OverBudget("reStructuredText substituted characters", chars, max_chars)
            if subs > budget.max_nodes:
                budget.check_nodes(subs, "reStructuredText substitution")
            if nested > max_nested:
                raise OverBudget("reStructuredText nested substitution count", nested, max_nested)
    return chars, subs, nested
