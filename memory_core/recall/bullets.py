"""The text a hit's bullet shows in a pack (reference §4.1 "Bullet text", seed 000 "Dates").

* A conversation hit whose ``meta.observed_at`` is set is led by it, ``[YYYY-MM-DD HH:MM] `` in UTC, so a
  reader can tell a superseded value from its correction.
* A titled document (``# Title`` + blank line + body) reads ``Title: body``, without the body's own repeated
  ``# Title`` heading when converted markdown carries one.
* Whitespace is collapsed to single spaces, and a bullet longer than 600 characters keeps its first 600
  (cut back to a near word boundary) followed by ``…``, so one long document cannot crowd out a section.
"""

from __future__ import annotations

from typing import Final

from memory_core._model import utc
from memory_core.meta import ItemKind
from memory_core.query import Hit
from memory_core.recall.render import shorten, single_line

__all__ = ["MAX_BULLET_CHARS", "bullet", "bullet_text"]

MAX_BULLET_CHARS: Final = 600
"""Longest bullet, in characters, before it is shortened (reference §4.1)."""


def bullet_text(hit: Hit) -> str:
    """The hit's bullet text before whitespace is collapsed and the length is capped.

    Args:
        hit: A hit as a read returned it.

    Returns:
        ``[YYYY-MM-DD HH:MM] text`` for a dated conversation, ``Title: body`` for a titled document, else the
        hit's text unchanged.
    """
    if hit.kind == ItemKind.CONVERSATION and hit.meta.observed_at is not None:
        at = utc(hit.meta.observed_at)
        return f"[{at.year:04d}-{at:%m-%d %H:%M}] {hit.text}"  # four-digit year, as %Y is not on glibc
    if hit.kind == ItemKind.DOCUMENT:
        titled = _title_and_body(hit.text)
        if titled is not None:
            return f"{titled[0]}: {titled[1]}"
    return hit.text


def _title_and_body(text: str) -> tuple[str, str] | None:
    """Split ``# Title`` + blank line + body into ``(Title, body)``, dropping a repeated ``# Title`` heading."""
    if not text.startswith("# "):
        return None
    title, sep, body = text[2:].partition("\n\n")
    title = title.strip()
    if not sep or "\n" in title or not title:
        return None
    body = body.lstrip()
    repeated = f"# {title}"
    if body.startswith(repeated):
        after = body[len(repeated) :]
        if after == "" or after.startswith("\n"):
            body = after.lstrip()
    return title, body


def bullet(hit: Hit) -> str:
    """The final bullet text: ``bullet_text`` on one line, capped at 600 characters plus ``…``.

    Args:
        hit: A hit as a read returned it.

    Returns:
        The text rendered after ``- `` in a lines-section.
    """
    text = single_line(bullet_text(hit))
    if len(text) > MAX_BULLET_CHARS:
        return shorten(text, MAX_BULLET_CHARS)
    return text
