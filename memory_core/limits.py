"""Named limits of the engine contract, each with its source.

Unless noted, values come from the TinyMemory engine contract's limits (its §1.2, restated in docs/limits.md and
docs/engines.md); those marked *memory-core* are this project's own bounds.
"""

from __future__ import annotations

from typing import Final

MAX_STORE_MANY: Final = 100
"""Most items in one ``store_many`` batch (reference §1.2)."""

MAX_GET_IDS: Final = 200
"""Most ids in one ``get`` request (reference §1.2, §1.8)."""

MAX_FORGET_IDS: Final = 10_000
"""Most ids one ``forget`` by ids may name (*memory-core*: bounds one request; page larger deletions)."""

MAX_BUCKETS: Final = 500
"""Most buckets an ``explore`` may ask for (reference §1.8)."""

DEFAULT_SCAN_LIMIT: Final = 5_000
"""Items ``explore`` scans by default (reference §1.8)."""

MAX_SCAN_LIMIT: Final = 50_000
"""Most items ``explore`` may scan (reference §1.8)."""

LISTING_PAGE_SIZE: Final = 200
"""Page size of the listing-based defaults (``get``, ``explore``, ``forget_within``) (reference §1.2)."""

MAX_NAMESPACE_DEPTH: Final = 8
"""Most segments in a namespace (reference §1.7)."""

MAX_SEGMENT_ID_CHARS: Final = 128
"""Longest namespace segment id, in characters of ``[A-Za-z0-9_-]`` (reference §1.7)."""

MAX_PAGE_LIMIT: Final = 1_000
"""Most hits one fetch, list, export or recall page may ask for (*memory-core*: bounds one response)."""

MAX_TEXT_CHARS: Final = 1_000_000
"""Longest text of one stored item, in characters (*memory-core*: about 1 MB, below CortexDB's 1 MiB event cap,
reference §5.4)."""

USER_TEXT_CAP: Final = 4_000
"""Characters of a user turn's text memory keeps (seed 004 "Retention": user text is capped at 4,000 characters
with an explicit truncation marker; the host's transcript holds the full text). ``MEMORY_CORE_USER_TEXT_CAP``."""

ASSISTANT_TEXT_CAP: Final = 8_000
"""Characters of an assistant turn's text memory keeps (seed 004 "Retention": 8,000 characters, with an explicit
truncation marker). ``MEMORY_CORE_ASSISTANT_TEXT_CAP``."""

BELIEF_TAG: Final = "belief"
"""Tag carried by every belief hit (reference §1.10)."""

CONSOLIDATED_TAG: Final = "consolidated"
"""Tag the reference engine puts on the facts it distils (reference §3)."""
