"""Facts: learnings with an optional stable key and an importance (seed 004 "Facts"; issue 20).

``model`` is pure (validation, the tags a fact carries, the ranking weight); ``store`` writes and reads facts over
any ``MemoryEngine``; ``pack`` orders a pack's learnings so a keyed fact's current value leads.
"""

from memory_core.facts.model import (
    DEFAULT_IMPORTANCE,
    IMPORTANCE_WEIGHT,
    MAX_FACT_CHARS,
    MAX_KEY_CHARS,
    FactTags,
    check_importance,
    check_key,
    check_text,
    content_hash,
    fact_tags,
    ranking_confidence,
    read_tags,
)

__all__ = [
    "DEFAULT_IMPORTANCE",
    "IMPORTANCE_WEIGHT",
    "MAX_FACT_CHARS",
    "MAX_KEY_CHARS",
    "FactTags",
    "check_importance",
    "check_key",
    "check_text",
    "content_hash",
    "fact_tags",
    "ranking_confidence",
    "read_tags",
]
