"""The text a stored item is indexed with: a conversation turn with its neighbours (pure).

A turn rarely names what it is about: "Yes, it was last Friday!" answers the turn before it, and the question
that asks for it uses the words of that turn. So a conversation turn is indexed with the previous and the next
turn of the same thread (same namespace, same ``thread_id``), and a match on the window still returns the turn
itself. A document is indexed as it renders: its title, which for a brain passage is its heading path
(``Document title › Section › Subsection``, ``documents.passages``), then its text. The role prefixes of
conversation text (``user: ``) are not indexed: every turn holds one.

Measured on LoCoMo dev (evidence recall@10 of BM25 over one conversation's turns): stemmed 0.624, stemmed and
windowed 0.756 (issue 14's study).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from memory_core.items import Role

from .terms import index_text

__all__ = ["strip_roles", "window_text"]

_ROLE: Final = re.compile(rf"^(?:{'|'.join(re.escape(r.value) for r in Role)}): ", re.MULTILINE)


def strip_roles(text: str) -> str:
    """Conversation text without the ``role: `` prefix of each line."""
    return _ROLE.sub("", text)


def window_text(own: str, neighbours: Sequence[str] = ()) -> str:
    """``index_text`` of an item's rendered text and its neighbours' (roles stripped), own text first."""
    return " ".join(t for t in (index_text(strip_roles(x)) for x in (own, *neighbours)) if t)
