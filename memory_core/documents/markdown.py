"""Markdown → (title, readable text), with markdown-it-py (CommonMark, plus GFM tables and strikethrough).

The Markdown is rendered to HTML by markdown-it-py and read back by ``documents.html``, so both formats obey the
same text rules. A leading front-matter block (``---`` YAML or ``+++`` TOML) is removed from the text; its
``title`` field, when present, is the title. Otherwise the title is the first level-1 heading (``# Title`` or a
``===`` setext heading).
"""

from __future__ import annotations

import re
from functools import cache

from markdown_it import MarkdownIt

from memory_core.documents.blocks import title_of
from memory_core.documents.budget import MARKDOWN_BUDGET
from memory_core.documents.html import html_to_text

__all__ = ["markdown_to_text", "split_front_matter"]

_FRONT_MATTER = re.compile(r"\A(?:\ufeff)?(---|\+\+\+)[ \t]*\n(.*?)\n\1[ \t]*(?:\n|\Z)", re.DOTALL)
_FRONT_TITLE = re.compile(r"^title[ \t]*[:=][ \t]*(.+?)[ \t]*$", re.MULTILINE | re.IGNORECASE)


@cache
def _parser() -> MarkdownIt:
    # "commonmark" allows raw HTML, which html_to_text then reads as HTML (scripts and styles dropped).
    # markdown-it stops nesting at maxNesting and silently drops what lies deeper; two levels above the budget,
    # a file it would cut is over the budget and refused instead (``markdown_to_text``).
    md = MarkdownIt("commonmark", {"maxNesting": MARKDOWN_BUDGET.max_depth + 2}).enable(["table", "strikethrough"])
    return md


def split_front_matter(source: str) -> tuple[str | None, str]:
    """``(front-matter title or None, body)`` of a Markdown source; the body is the source without the block."""
    match = _FRONT_MATTER.match(source)
    if match is None:
        return None, source
    found = _FRONT_TITLE.search(match.group(2))
    title = found.group(1).strip().strip("\"'") if found else None
    return title_of(title), source[match.end() :]


def markdown_to_text(source: str) -> tuple[str | None, list[str]]:
    """Convert Markdown source.

    Returns:
        ``(title, blocks)``: the front-matter title, else the first ``<h1>``; and the blocks of the rendered body.

    Raises:
        OverBudget: nesting deeper than ``MARKDOWN_BUDGET`` (48 token levels, where markdown-it would drop the
            rest), more than 250,000 tokens, or rendered HTML over ``HTML_BUDGET``.
    """
    front_title, body = split_front_matter(source)
    md = _parser()
    env: dict[str, object] = {}
    tokens = md.parse(body, env)
    count = len(tokens) + sum(len(t.children or ()) for t in tokens)
    MARKDOWN_BUDGET.check_nodes(count, "Markdown token")
    deepest = 0
    for token in tokens:
        deepest = max(deepest, token.level, *(token.level + child.level for child in token.children or ()))
    MARKDOWN_BUDGET.check_depth(deepest, "Markdown")
    heading_title, blocks = html_to_text(md.renderer.render(tokens, md.options, env))
    return front_title or heading_title, blocks
