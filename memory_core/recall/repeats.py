"""Repeated content in a pack (pure): one utterance logged twice, and beliefs whose shown sources say it all.

The contract lists each item once, by id (reference §4.1 "Settle"). Two *memory-core* rules extend that to
content, so a pack does not spend its budget saying one thing twice:

* **Same utterance.** A host with one agent per speaker logs every utterance once per agent: the speaker's agent
  as ``user``, the listener's as ``assistant`` (how ``replay`` maps LoCoMo speakers to agents), so two
  conversation items with different ids hold the same words. A conversation hit whose ``utterance_key`` (its
  turns' text without the role, whitespace collapsed, and its ``observed_at``) equals that of a hit already
  listed is not listed again. The copy kept is the earlier one, in the higher-priority section, which trimming
  removes last, so leaving the other out never loses the utterance. Two undated hits with the same text count as
  one utterance too: their bullets would read the same.
* **Covered belief.** A belief (a hit with ``derived_from``) is extracted from its sources: a sentence of a user
  turn, put in the third person and dated, or a document's title or a key sentence of it (``beliefs.extract``).
  When every source is itself shown in the rendered pack, or an utterance equal to it is, the belief repeats
  what the pack already says, and the belief is dropped, not the source: the source holds the belief's content
  plus its context (the rest of the turn or passage, who said it, when), so this keeps the most information per
  token, while dropping the source would lose that context. A belief with any source not shown is kept (it
  carries something the pack does not). On LoCoMo (383 questions) such beliefs were 1.9 bullets of a pack's 16
  (2.3 of 20 with the PEP brain); three beliefs are often sentences of one turn.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Final

from memory_core.items import Role
from memory_core.meta import ItemKind
from memory_core.query import Hit
from memory_core.recall.render import single_line

__all__ = ["UtteranceKey", "covered_beliefs", "utterance_key", "utterance_text"]

UtteranceKey = tuple[datetime | None, str]
"""``(observed_at, text)``: what makes two conversation hits the same utterance."""

_ROLE: Final = re.compile(rf"^(?:{'|'.join(re.escape(r.value) for r in Role)}): ", re.MULTILINE)
"""A ``role: `` prefix at the start of a line (``Turn.render``)."""


def utterance_text(text: str) -> str:
    """A conversation hit's text without the ``role: `` prefix of each turn, on one line.

    Args:
        text: ``Hit.text`` of a conversation (``Conversation.render_text``: one ``role: text`` line per turn).

    Returns:
        The turns' words, whitespace collapsed: ``user: Wow,`` + newline + ``assistant: great pic!`` reads
        ``Wow, great pic!``.
    """
    return single_line(_ROLE.sub("", text))


def utterance_key(hit: Hit) -> UtteranceKey | None:
    """``(meta.observed_at, utterance_text(text))`` for a conversation hit; None for any other kind."""
    if hit.kind != ItemKind.CONVERSATION:
        return None
    return (hit.meta.observed_at, utterance_text(hit.text))


def covered_beliefs(
    beliefs: Iterable[Hit], shown: Collection[str], same_as: Mapping[str, str] | None = None
) -> set[str]:
    """The ids of the beliefs every source of which is shown (see the module docstring).

    Args:
        beliefs: Hits of the pack; those without ``derived_from`` (stored items) are never covered.
        shown: The ids the rendered pack cites.
        same_as: Item id → the id of the listed hit it repeats (an utterance left out as a repeat).

    Returns:
        The ids of the covered beliefs.
    """
    aliases = same_as or {}

    def is_shown(item_id: str) -> bool:
        return item_id in shown or aliases.get(item_id) in shown

    return {b.id for b in beliefs if b.derived_from and all(is_shown(s) for s in b.derived_from)}
