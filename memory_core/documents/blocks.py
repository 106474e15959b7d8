r"""Plain-text shaping shared by the converters: blocks in, readable text out (pure).

Every converter reduces its format to a list of *blocks*: a heading, a paragraph, a list, a table or a code
block, each a string. ``join_blocks`` separates them by one blank line and ``tidy`` applies the whitespace
rules every converted text obeys:

- line endings are ``\n``; no line ends in whitespace; no more than one blank line in a row;
- prose is one line per paragraph, its inner whitespace collapsed to single spaces (a hard break stays a
  line break); code keeps its lines and relative indentation;
- text is Unicode NFC, without terminal escape sequences (a colour code ``ESC[31m`` goes whole, not just its
  ``ESC``, so no ``[31m`` is left behind) and without C0/C1 control characters other than newline and tab.
"""

from __future__ import annotations

import re
import textwrap
import unicodedata
from collections.abc import Iterable

__all__ = [
    "HARD_BREAK",
    "MAX_TITLE_CHARS",
    "bullet",
    "code",
    "join_blocks",
    "one_line",
    "prose",
    "strip_escapes",
    "tidy",
    "title_of",
]

HARD_BREAK = "\u2028"
"""Marks a forced line break (HTML ``<br>``, a reST line block) inside prose; ``prose`` turns it into ``\\n``."""

MAX_TITLE_CHARS = 200
"""Longest title kept, in characters; a longer one is cut at a word boundary and ends in ``…`` (*memory-core*:
a title is a label for listings, and a PDF's first line can be a whole paragraph)."""

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_ESCAPE = re.compile(
    r"""
    (?:\x1b\[|\x9b) [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]                  # CSI: colours, cursor moves (ESC [ 3 1 m)
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]) [^\x07\x1b\x9c\n]* (?:\x07|\x1b\\|\x9c)   # OSC, DCS, … strings
    | \x1b [\x20-\x2f]* [\x30-\x7e]                                          # any other escape (ESC c, ESC ( B)
    """,
    re.VERBOSE,
)
"""Terminal escape sequences, by the ECMA-48 grammar (5th ed., §5.3-§5.6): a control sequence is CSI, parameter
bytes 0x30-0x3F, intermediate bytes 0x20-0x2F and one final byte 0x40-0x7E; a control string (OSC …) runs to
BEL or the string terminator, here within one line (an unterminated one loses only its introducer, never the
rest of the document); an escape sequence is ESC, intermediates and one final byte."""
_BLANK_RUN = re.compile(r"\n{3,}")
_TRAILING = re.compile(r"[ \t\f\v\u00a0]+$", re.MULTILINE)


def strip_escapes(text: str) -> str:
    """``text`` without terminal escape sequences (colour codes, cursor moves, window titles; see ``_ESCAPE``).

    A log or ``script`` capture saved as ``.txt`` carries them; removing only the ``ESC`` control character
    would leave ``[31m`` and ``[0m`` in the stored text.
    """
    return _ESCAPE.sub("", text) if ("\x1b" in text or "\x9b" in text or "\x9d" in text) else text


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) collapsed to one space, and stripped."""
    return " ".join(text.split())


def prose(text: str) -> str:
    """A paragraph: whitespace collapsed to single spaces, each ``HARD_BREAK`` kept as a line break."""
    lines = (one_line(part) for part in text.split(HARD_BREAK))
    return "\n".join(line for line in lines if line)


def code(text: str) -> str:
    """A code or preformatted block: its lines kept, dedented, trailing whitespace and outer blank lines removed."""
    lines = [line.rstrip() for line in text.expandtabs(4).splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return textwrap.dedent("\n".join(lines))


def bullet(marker: str, blocks: Iterable[str]) -> str:
    r"""One list item: ``marker`` before its first line, later lines indented to line up under the text.

    ``bullet("- ", ["a", "b\nc"])`` is ``"- a\n  b\n  c"``.
    """
    text = "\n".join(b for b in blocks if b)
    if not text:
        return ""
    pad = " " * len(marker)
    first, *rest = text.split("\n")
    return "\n".join([marker + first, *((pad + line) if line else "" for line in rest)])


def join_blocks(blocks: Iterable[str]) -> str:
    """Non-empty blocks separated by one blank line, then ``tidy``."""
    return tidy("\n\n".join(b for b in blocks if b and b.strip()))


def tidy(text: str) -> str:
    r"""Apply the module's whitespace rules to a whole text (NFC, ``\n`` endings, no control characters)."""
    text = unicodedata.normalize("NFC", strip_escapes(text).replace("\r\n", "\n").replace("\r", "\n"))
    text = _CONTROL.sub("", text.replace(HARD_BREAK, "\n").replace("\u2029", "\n\n"))
    text = _TRAILING.sub("", text)
    return _BLANK_RUN.sub("\n\n", text).strip("\n")


def title_of(text: str | None) -> str | None:
    """A cleaned title: one line, at most ``MAX_TITLE_CHARS`` characters, or None when blank."""
    if text is None:
        return None
    title = one_line(_CONTROL.sub("", unicodedata.normalize("NFC", strip_escapes(text))))
    if not title:
        return None
    if len(title) > MAX_TITLE_CHARS:
        cut = title[: MAX_TITLE_CHARS - 1]
        space = cut.rfind(" ")
        title = (cut[:space] if space > MAX_TITLE_CHARS // 2 else cut).rstrip() + "…"
    return title
