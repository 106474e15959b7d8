"""Holistic recall: several scopes read concurrently, rendered as one token-budgeted ``ContextPack``.

``build_pack(engine, HolisticRecall(...))`` is the one read primitive of the lifecycle (seed 000, reference
§4.1); ``compile_context`` is its ``context.md`` preset (reference §4.2).
"""

from memory_core.recall.bullets import MAX_BULLET_CHARS, bullet, bullet_text
from memory_core.recall.context import (
    BRIEF_CITATIONS,
    BRIEF_INSTRUCTIONS,
    CONTEXT_TITLE,
    LEARNINGS_HEADING,
    Brief,
    ContextDoc,
    ContextSpec,
    compile_context,
    context_recall,
)
from memory_core.recall.gather import newest_first
from memory_core.recall.pack import EMPTY_REASON, build_pack, skip_wording
from memory_core.recall.pool import RECALL_WORKERS
from memory_core.recall.render import estimate_tokens
from memory_core.recall.types import (
    DEFAULT_BUDGET_TOKENS,
    DEFAULT_TITLE,
    AnswerQuery,
    ContextPack,
    FetchQuery,
    HolisticRecall,
    LatestQuery,
    ScopeSection,
    SectionHits,
    SectionQuery,
    Skipped,
    ThreadWindow,
)

__all__ = [
    "BRIEF_CITATIONS",
    "BRIEF_INSTRUCTIONS",
    "CONTEXT_TITLE",
    "DEFAULT_BUDGET_TOKENS",
    "DEFAULT_TITLE",
    "EMPTY_REASON",
    "LEARNINGS_HEADING",
    "MAX_BULLET_CHARS",
    "RECALL_WORKERS",
    "AnswerQuery",
    "Brief",
    "ContextDoc",
    "ContextPack",
    "ContextSpec",
    "FetchQuery",
    "HolisticRecall",
    "LatestQuery",
    "ScopeSection",
    "SectionHits",
    "SectionQuery",
    "Skipped",
    "ThreadWindow",
    "build_pack",
    "bullet",
    "bullet_text",
    "compile_context",
    "context_recall",
    "estimate_tokens",
    "newest_first",
    "skip_wording",
]
