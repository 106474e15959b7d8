"""Facts in a pack: a keyed fact's current value leads its section and outranks beliefs about its key; pure.

Seed 004 ranks "explicit importance" and lets facts upsert "the current value for that key"; issue 20 adds that a
keyed fact's current value outranks a belief that says otherwise. ``facts_first`` does it over one section's
hits, after the engine's ranking and the beliefs' fold:

1. of the keyed facts of one key, only the latest statement stays (``stated_at``, then id): a write race or an
   engine that serves superseded values never shows two values of a key;
2. keyed facts move to the front, in their ranked order;
3. beliefs (tagged ``belief``) that name the key's subject (a word of the key's last segment, ``theme`` for
   ``ui.theme``) move to the end, so they are the first trimmed when the pack is over budget;
4. everything else keeps its rank.

A section without keyed facts is returned as it came.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from memory_core.facts.model import read_tags
from memory_core.facts.store import stated_at
from memory_core.limits import BELIEF_TAG
from memory_core.query import Hit

__all__ = ["facts_first", "key_subject"]

_WORD: Final = re.compile(r"[^\W_]+", re.UNICODE)
_SEGMENTS: Final = re.compile(r"[./:]")


def key_subject(key: str) -> frozenset[str]:
    """The words of a key's last segment, case folded: ``ui.theme`` → ``{theme}``, ``user.home_city`` → both words."""
    last = _SEGMENTS.split(key)[-1]
    return frozenset(w.casefold() for w in _WORD.findall(last) if len(w) > 1)


def facts_first(hits: Sequence[Hit]) -> list[Hit]:
    """``hits`` with keyed facts first (one value per key) and beliefs about their keys last (module docstring)."""
    latest: dict[str, Hit] = {}
    for hit in hits:
        key = read_tags(hit.meta.tags).key
        if key is None:
            continue
        held = latest.get(key)
        if held is None or (stated_at(hit.meta), hit.id) > (stated_at(held.meta), held.id):
            latest[key] = hit
    if not latest:
        return list(hits)
    keep = {h.id for h in latest.values()}
    subjects = frozenset().union(*(key_subject(k) for k in latest))
    facts: list[Hit] = []
    rest: list[Hit] = []
    demoted: list[Hit] = []
    for hit in hits:
        if read_tags(hit.meta.tags).key is not None:
            if hit.id in keep:
                facts.append(hit)
        elif BELIEF_TAG in hit.meta.tags and subjects & {w.casefold() for w in _WORD.findall(hit.text)}:
            demoted.append(hit)
        else:
            rest.append(hit)
    return [*facts, *rest, *demoted]
