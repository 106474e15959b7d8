"""Splitting a converted document into passages: one brain item per section-sized piece (pure).

Why: a brain item is what ranking scores and what a pack shows. A 50 KB document as one item matches almost any
query somewhere, its bullet shows its first 600 characters rather than the part that matched, and its
embedding is close to everything. A passage under one heading that fits in one bullet is scored on what it
says and shown whole, so what ranking matched is what the model reads. Each passage is a ``BrainDocument``
titled ``"<document title> › <heading>"`` with the document's source, mime and metadata (``file_path``,
``folder``…), so ``Brain`` keeps its rule of one document = one item, forgetting a source still removes every
passage, and re-ingesting the same file stores the same passages again, as replays (the split is deterministic).

The input is a converter's output (``documents.blocks``): blocks separated by one blank line, a heading being a
block of its own. Headings are not marked in plain text, so a block is taken as a heading (``is_heading``) when
it is one line of at most ``HEADING_MAX_CHARS`` characters and ``HEADING_MAX_WORDS`` words; starts with an
upper-case letter or a digit (code lines start lower-case: ``import this``, ``from typing import TypeVar``);
ends without sentence or list punctuation (``. , ; : !``; a ``?`` is allowed: "Tabs or Spaces?"); holds none
of the characters code lines are made of (``= { } [ ] < > ; ` | #``, ``->``, ``>>>``, an unclosed ``(``); is
not a list item; and is not the document's last block. A heading followed directly by another one (a section
with no text of its own, usually the parent) is kept in front of it: ``Specification › Syntax``. A misread
heading only moves a passage boundary and names a passage after it; no text is lost or reordered, and a heading
missed (one starting lower-case) stays in the text of the section before it.

Sizing: a document of at most ``PASSAGE_MAX_CHARS`` characters stays whole (unchanged, so its id is the one it
always had). Otherwise each section's blocks are packed in order into passages of up to
``PASSAGE_TARGET_CHARS`` (or ``PASSAGE_MAX_CHARS`` while the passage is under ``PASSAGE_MIN_CHARS``, so a
lead-in sentence stays with the list it introduces); a block longer than ``PASSAGE_MAX_CHARS`` is cut at line
ends, then sentence ends, then spaces, into pieces no longer than that; a section's short tail (under
``PASSAGE_MIN_CHARS``) joins the passage before it when the two fit in ``PASSAGE_MAX_CHARS``. Sections are
never merged, so a passage never mixes two headings' text.

The sizes come from the pack's bullet cap (``recall.bullets.MAX_BULLET_CHARS`` = 600, reference §4.1): a
passage of at most 550 characters plus its title fits in one bullet, so the part that matched is always shown.
Measured on the ten shared PEPs (442 KB → 1,114 passages) beside LoCoMo: with ~1.5k-character passages 13 of
the 17 brain-check questions (``tests/fixtures/brain``) were answered, the other 4 matched a passage whose answer
lay past the bullet's 600 characters; with these sizes all 17 are, and LoCoMo pack recall with the PEPs in the
brain equals recall without them (passages this short are matched by few generic words, and their bullets are
short). Passage-level retrieval units of ~100 words are also what dense-retrieval work settled on (Karpukhin et
al. 2020, "Dense Passage Retrieval").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from memory_core.documents.blocks import title_of
from memory_core.lifecycle.documents import BrainDocument

__all__ = [
    "HEADING_MAX_CHARS",
    "HEADING_MAX_WORDS",
    "PASSAGE_MAX_CHARS",
    "PASSAGE_MIN_CHARS",
    "PASSAGE_TARGET_CHARS",
    "TITLE_SEPARATOR",
    "Passage",
    "is_heading",
    "split_document",
    "split_text",
]

PASSAGE_TARGET_CHARS: Final = 450
"""A passage is filled with whole blocks up to this many characters (*memory-core*; see the module docstring)."""
PASSAGE_MAX_CHARS: Final = 550
"""No passage is longer (a longer block is cut): with a title it fits a 600-character bullet; a document this
short or shorter is not split."""
PASSAGE_MIN_CHARS: Final = 150
"""A section's last passage shorter than this joins the one before it when both fit in ``PASSAGE_MAX_CHARS``."""
HEADING_MAX_CHARS: Final = 80
"""Longest line taken as a heading, in characters."""
HEADING_MAX_WORDS: Final = 12
"""Most words in a line taken as a heading."""
TITLE_SEPARATOR: Final = " › "
"""Joins the document title and the headings in a passage title (``Data Classes › Specification``)."""

_CODE_MARKS: Final = re.compile(r"[={}\[\]<>;`|#]|->|>>>|\$ ")
_LIST_ITEM: Final = re.compile(r"^(?:[-*+•] |\d+[.)] |[a-zA-Z][.)] |\[\d+\])")
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+")
_CUTS: Final = ((re.compile(r"\n"), "\n"), (_SENTENCE_END, " "), (re.compile(r"\s+"), " "))
"""Where an over-long block is cut, in order of preference, and what joins the pieces packed back together."""


@dataclass(frozen=True, slots=True)
class Passage:
    """One piece of a document: the headings above it (outermost first) and its text."""

    headings: tuple[str, ...]
    text: str


def is_heading(block: str) -> bool:
    """True when ``block`` reads as a heading line (the rule in the module docstring, but the last-block one)."""
    line = block.strip()
    if not line or "\n" in line or len(line) > HEADING_MAX_CHARS or len(line.split()) > HEADING_MAX_WORDS:
        return False
    if not (line[0].isupper() or line[0].isdigit()) or line[-1] in ".,;:!":
        return False
    if _LIST_ITEM.match(line) or _CODE_MARKS.search(line):
        return False
    return line.count("(") == line.count(")")


def _cut(block: str, limit: int) -> list[str]:
    """``block`` in order, in pieces of at most ``limit`` characters: at line ends, sentence ends, then spaces."""
    if len(block) <= limit:
        return [block]
    for pattern, joiner in _CUTS:
        parts = [p for p in pattern.split(block) if p.strip()]
        if len(parts) > 1:
            return _pack_parts(parts, limit, joiner)
    return [block[i : i + limit] for i in range(0, len(block), limit)]


def _pack_parts(parts: list[str], limit: int, joiner: str) -> list[str]:
    out: list[str] = []
    current = ""
    for part in parts:
        for piece in _cut(part, limit):
            if current and len(current) + len(joiner) + len(piece) > limit:
                out.append(current)
                current = piece
            else:
                current = f"{current}{joiner}{piece}" if current else piece
    if current:
        out.append(current)
    return out


def _sections(blocks: list[str]) -> list[tuple[tuple[str, ...], list[str]]]:
    """``(headings, body blocks)`` per section, in order; text before the first heading has no heading."""
    out: list[tuple[tuple[str, ...], list[str]]] = []
    headings: tuple[str, ...] = ()
    body: list[str] = []
    pending: list[str] = []  # headings seen since the last body block
    for i, block in enumerate(blocks):
        if i < len(blocks) - 1 and is_heading(block):
            if body:
                out.append((headings, body))
                body = []
            pending.append(block.strip())
            continue
        if pending:
            headings = tuple(pending)
            pending = []
        body.append(block)
    if body:
        out.append((headings, body))
    return out


def _pack(blocks: list[str]) -> list[str]:
    pieces = [piece for block in blocks for piece in _cut(block, PASSAGE_MAX_CHARS)]
    out: list[str] = []
    current: list[str] = []
    size = 0
    for piece in pieces:
        grown = size + (2 if current else 0) + len(piece)
        if current and (grown > PASSAGE_MAX_CHARS or (grown > PASSAGE_TARGET_CHARS and size >= PASSAGE_MIN_CHARS)):
            out.append("\n\n".join(current))
            current, size = [piece], len(piece)
        else:
            current.append(piece)
            size = grown
    if current:
        tail = "\n\n".join(current)
        if out and len(tail) < PASSAGE_MIN_CHARS and len(out[-1]) + 2 + len(tail) <= PASSAGE_MAX_CHARS:
            out[-1] = f"{out[-1]}\n\n{tail}"
        else:
            out.append(tail)
    return out


def split_text(text: str) -> list[Passage]:
    """Split converted text into passages (see the module docstring); one passage when it is short.

    Args:
        text: A converter's plain text (blocks separated by blank lines).

    Returns:
        The passages in document order; their texts, joined, hold every non-blank block of ``text`` but the
        headings (which are in ``headings``). ``[]`` for blank text.
    """
    if not text.strip():
        return []
    if len(text) <= PASSAGE_MAX_CHARS:
        return [Passage((), text)]
    blocks = [b.strip("\n") for b in re.split(r"\n[ \t]*\n", text) if b.strip()]
    return [Passage(headings, piece) for headings, body in _sections(blocks) for piece in _pack(body)]


def _title(title: str | None, headings: tuple[str, ...]) -> str | None:
    parts = ([title] if title else []) + list(headings)
    return title_of(TITLE_SEPARATOR.join(parts)) if parts else None


def split_document(document: BrainDocument) -> list[BrainDocument]:
    """The document as passages, each a ``BrainDocument`` titled ``"<title> › <headings>"`` (module docstring).

    Source, mime and metadata are the document's. A document of at most ``PASSAGE_MAX_CHARS`` characters comes
    back as ``[document]`` itself.

    Args:
        document: A converted document (``brain_document``), not yet placed.

    Returns:
        One or more documents, in document order (``[document]`` when its text is blank: storing it reports the
        blank text).
    """
    passages = split_text(document.text)
    if len(passages) <= 1 and (not passages or passages[0].text == document.text):
        return [document]
    return [document.model_copy(update={"title": _title(document.title, p.headings), "text": p.text}) for p in passages]
