"""What a fact is, as pure values: its limits, the tags that carry its key and importance, its ranking weight.

A fact is a ``Learning`` of kind ``fact`` (the contract's item for facts, reference §1.4). What seed 004 adds
travels in the item's ``meta.tags``, which every engine stores, filters on (``MetaFilter.tags_any``) and returns,
so no engine's schema changes:

| tag | meaning |
| --- | --- |
| ``fact-key:<key>`` | the fact's stable semantic key (``ui.theme``); the current value replaces older ones |
| ``fact-hash:<24 hex>`` | SHA-256 of the normalised text: unkeyed facts deduplicate on it per scope |
| ``fact-importance:<x>`` | importance in ``[0, 1]`` (shortest decimal form, ``0.7``) |
| ``fact-stated:<RFC 3339>`` | when a keyed fact was stated (µs, UTC): the latest statement wins, whatever order
  queued writes are delivered in; part of the item's identity, so stating a value again is a new statement |

Limits (seed 004 "Privacy and boundaries"): text at most 2,000 characters, a key non-blank and at most 128
characters, importance a finite number in ``[0, 1]``. A key holds no control character (C0, DEL, C1) and no
bidirectional embedding, override or isolate (``control.BIDI_CONTROLS``, CVE-2021-42574): a key is an identifier
printed to terminals and logs, not text (*memory-core*, issue 17). A bad value is ``InvalidRequest`` naming the
field.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from memory_core._model import format_timestamp, utc
from memory_core.control import BIDI_CONTROLS
from memory_core.errors import InvalidRequest

__all__ = [
    "DEFAULT_IMPORTANCE",
    "HASH_TAG",
    "IMPORTANCE_TAG",
    "IMPORTANCE_WEIGHT",
    "KEY_TAG",
    "MAX_FACT_CHARS",
    "MAX_KEY_CHARS",
    "MAX_STATED_SKEW",
    "STATED_TAG",
    "FactTags",
    "check_importance",
    "check_key",
    "check_stated",
    "check_text",
    "content_hash",
    "fact_tags",
    "key_tag",
    "ranking_confidence",
    "read_tags",
]

MAX_FACT_CHARS: Final = 2_000
"""Longest fact text, characters (seed 004: "Every write path enforces the same 2,000-character fact limit")."""
MAX_KEY_CHARS: Final = 128
"""Longest key, characters (seed 004: "optional keys are non-empty and capped at 128 characters")."""
DEFAULT_IMPORTANCE: Final = 0.5
"""Importance of a fact that states none: the middle of ``[0, 1]``."""
MAX_STATED_SKEW: Final = timedelta(minutes=5)
"""How far ahead of the clock a statement's time may be (memory-core's choice: room for hosts' clock drift). The
latest statement of a key wins, so one dated years ahead would make every later statement "superseded on arrival"
and freeze the key (*memory-core*, issue 17)."""
IMPORTANCE_WEIGHT: Final = 0.5
"""Share of a fact's ranking confidence its importance sets (``ranking_confidence``; memory-core's choice)."""

KEY_TAG: Final = "fact-key:"
HASH_TAG: Final = "fact-hash:"
IMPORTANCE_TAG: Final = "fact-importance:"
STATED_TAG: Final = "fact-stated:"
_PREFIXES: Final = (KEY_TAG, HASH_TAG, IMPORTANCE_TAG, STATED_TAG)
_KEY_FORBIDDEN: Final = re.compile("[\x00-\x1f\x7f-\x9f" + BIDI_CONTROLS + "]")
"""What a key may not hold: C0 controls (NUL, ESC, newline, tab …), DEL, C1 controls, bidi controls."""


def check_text(text: object, field: str = "text") -> str:
    """``text`` when it is a non-blank string of at most ``MAX_FACT_CHARS`` characters.

    Raises:
        InvalidRequest: not a string, blank, or too long (naming ``field``).
    """
    if not isinstance(text, str):
        raise InvalidRequest(f"expected a string, got {type(text).__name__}", field=field)
    if not text.strip():
        raise InvalidRequest("a fact's text is blank", field=field)
    if len(text) > MAX_FACT_CHARS:
        raise InvalidRequest(f"a fact is at most {MAX_FACT_CHARS} characters, got {len(text)}", field=field)
    return text


def check_key(key: object, field: str = "key") -> str | None:
    """``key`` stripped, or None for None.

    Raises:
        InvalidRequest: not a string, blank, longer than ``MAX_KEY_CHARS``, or holding a control character
            (C0, DEL, C1) or a bidi control (naming ``field``).
    """
    if key is None:
        return None
    if not isinstance(key, str):
        raise InvalidRequest(f"expected a string, got {type(key).__name__}", field=field)
    stripped = key.strip()
    if not stripped:
        raise InvalidRequest("a key is blank", field=field)
    if len(stripped) > MAX_KEY_CHARS:
        raise InvalidRequest(f"a key is at most {MAX_KEY_CHARS} characters, got {len(stripped)}", field=field)
    if (bad := _KEY_FORBIDDEN.search(stripped)) is not None:
        raise InvalidRequest(
            f"a key holds the control character U+{ord(bad.group()):04X} at offset {bad.start()}", field=field
        )
    return stripped


def check_importance(importance: object, field: str = "importance") -> float:
    """``importance`` as a float in ``[0, 1]``.

    Raises:
        InvalidRequest: a bool, a non-number (a numeric string too), NaN or an infinity, or a value outside
            ``[0, 1]`` (naming ``field``).
    """
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise InvalidRequest(f"expected a number in [0, 1], got {type(importance).__name__}", field=field)
    value = float(importance)
    if not math.isfinite(value):
        raise InvalidRequest(f"must be a finite number in [0, 1], got {importance}", field=field)
    if not 0.0 <= value <= 1.0:
        raise InvalidRequest(f"must be within [0, 1], got {importance}", field=field)
    return value


def check_stated(at: object, now: datetime, field: str = "at") -> datetime:
    """``at`` when it is an aware time no more than ``MAX_STATED_SKEW`` ahead of ``now``.

    Raises:
        InvalidRequest: not a ``datetime``, naive, or more than ``MAX_STATED_SKEW`` after ``now`` (naming ``field``).
    """
    if not isinstance(at, datetime) or at.utcoffset() is None:
        raise InvalidRequest("a time with a timezone is required", field=field)
    if at - utc(now) > MAX_STATED_SKEW:
        raise InvalidRequest(
            f"{format_timestamp(utc(at))} is more than {int(MAX_STATED_SKEW.total_seconds())} s ahead of the clock"
            " (a statement from the future would supersede every later one)",
            field=field,
        )
    return at


def content_hash(text: str) -> str:
    """24 hex of SHA-256 over the text with whitespace collapsed and case folded (the dedupe identity)."""
    normal = " ".join(text.split()).casefold()
    return hashlib.sha256(normal.encode("utf-8")).hexdigest()[:24]


def key_tag(key: str) -> str:
    """The tag naming ``key``."""
    return KEY_TAG + key


def _number(value: float) -> str:
    return repr(round(value, 6))


def fact_tags(text: str, key: str | None, importance: float, stated: datetime | None) -> tuple[str, ...]:
    """The tags of a fact: its key (and when it was stated) or its content hash, then its importance.

    Args:
        text: The checked text.
        key: The checked key, or None.
        importance: The checked importance.
        stated: When it was stated (keyed facts; must be aware); None leaves the tag out.
    """
    tags = [key_tag(key)] if key is not None else [HASH_TAG + content_hash(text)]
    tags.append(IMPORTANCE_TAG + _number(importance))
    if key is not None and stated is not None:
        tags.append(STATED_TAG + format_timestamp(utc(stated)))
    return tuple(tags)


@dataclass(frozen=True)
class FactTags:
    """What an item's tags say about it as a fact (all None: not a fact)."""

    key: str | None = None
    importance: float | None = None
    content_hash: str | None = None
    stated: str | None = None

    @property
    def is_fact(self) -> bool:
        """True when any fact tag is present."""
        return any(v is not None for v in (self.key, self.importance, self.content_hash))


def read_tags(tags: Iterable[str]) -> FactTags:
    """The fact values ``tags`` carry; a malformed importance tag is ignored (as if absent)."""
    key = importance = digest = stated = None
    for tag in tags:
        if tag.startswith(KEY_TAG):
            key = tag[len(KEY_TAG) :]
        elif tag.startswith(HASH_TAG):
            digest = tag[len(HASH_TAG) :]
        elif tag.startswith(STATED_TAG):
            stated = tag[len(STATED_TAG) :]
        elif tag.startswith(IMPORTANCE_TAG):
            try:
                value = float(tag[len(IMPORTANCE_TAG) :])
            except ValueError:
                continue
            if 0.0 <= value <= 1.0:
                importance = value
    return FactTags(key=key, importance=importance, content_hash=digest, stated=stated)


def user_tags(tags: Sequence[str]) -> tuple[str, ...]:
    """``tags`` without the fact tags (what a caller filed the fact under)."""
    return tuple(t for t in tags if not t.startswith(_PREFIXES))


def ranking_confidence(confidence: float | None, tags: Iterable[str]) -> float | None:
    """The confidence a ranking weighs: a fact's blends in its importance; pure.

    ``(1 - IMPORTANCE_WEIGHT) × confidence + IMPORTANCE_WEIGHT × importance`` for an item carrying an importance
    tag (a missing confidence counts 0.5); ``confidence`` unchanged otherwise. The result stays in ``[0, 1]``, so
    an engine's score keeps its range (SQLite: ``0.05 × confidence`` of the weight, ``engines.sqlite.search``).
    """
    importance = read_tags(tags).importance
    if importance is None:
        return confidence
    base = 0.5 if confidence is None else confidence
    return (1.0 - IMPORTANCE_WEIGHT) * base + IMPORTANCE_WEIGHT * importance
