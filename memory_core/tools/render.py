"""How tool results render hits and citations (reference §4.7); pure.

A hit is ``{id, kind, text, score, confidence?, meta: {source, file_path?, url?, thread_id?, tags?,
observed_at?}}``: scores rounded to 4 places, absent fields left out, the namespace never shown.
"""

from __future__ import annotations

from typing import Any

from memory_core._model import format_timestamp
from memory_core.meta import MemoryMeta
from memory_core.query import Citation, Hit

__all__ = ["render_citation", "render_hit", "render_meta"]


def render_meta(meta: MemoryMeta) -> dict[str, Any]:
    """``{source, file_path?, url?, thread_id?, tags?, observed_at?}``; never the namespace."""
    out: dict[str, Any] = {"source": meta.source.to_dict()}
    for name in ("file_path", "url", "thread_id"):
        value = getattr(meta, name)
        if value is not None:
            out[name] = value
    if meta.tags:
        out["tags"] = list(meta.tags)
    if meta.observed_at is not None:
        out["observed_at"] = format_timestamp(meta.observed_at)
    return out


def render_hit(hit: Hit) -> dict[str, Any]:
    """One hit as a tool result holds it."""
    out: dict[str, Any] = {"id": hit.id, "kind": hit.kind.value, "text": hit.text, "score": round(hit.score, 4)}
    if hit.confidence is not None:
        out["confidence"] = hit.confidence
    out["meta"] = render_meta(hit.meta)
    return out


def render_citation(citation: Citation) -> dict[str, Any]:
    """``{id, kind, snippet, score?, meta}``."""
    out: dict[str, Any] = {"id": citation.id, "kind": citation.kind.value, "snippet": citation.snippet}
    if citation.score is not None:
        out["score"] = round(citation.score, 4)
    out["meta"] = render_meta(citation.meta)
    return out
