"""Where items live on CortexDB: scope paths and lookup labels (contract reference §5.4); pure.

Scope layout (the legacy default): ``app:tinymemory/<namespace segments>/app:{documents|conversations|learnings}``,
so ``agent:a/agent:scout`` learnings live at ``app:tinymemory/agent:a/agent:scout/app:learnings``.

Lookup labels are ``tm:<tag>:`` + the first 16 hex digits of SHA-256(value): ``i`` item id, ``t`` thread,
``s`` source id, ``r`` repo, ``w`` workspace, ``a`` agent, ``l`` language, ``k`` source kind. A read narrows the
server's listing by one field's labels (``narrowing_labels``); the full ``MetaFilter`` is always re-applied
client-side.
"""

from __future__ import annotations

import hashlib
from typing import Final

from memory_core.meta import ItemKind, MemoryMeta, MetaFilter
from memory_core.namespace import Namespace

__all__ = [
    "MAX_QUERY_LABELS",
    "SCOPE_ROOT",
    "lookup_label",
    "lookup_labels",
    "narrowing_labels",
    "parse_scope",
    "scope_for",
]

SCOPE_ROOT: Final = "app:tinymemory"
"""First segment of every scope memory-core writes (reference §5.4, legacy layout)."""
MAX_QUERY_LABELS: Final = 50
"""Most labels one listing's comma-joined ``labels=`` may carry (reference §5.3, List)."""
_LEAVES: Final = {
    ItemKind.DOCUMENT: "documents",
    ItemKind.CONVERSATION: "conversations",
    ItemKind.LEARNING: "learnings",
}
_KINDS: Final = {leaf: kind for kind, leaf in _LEAVES.items()}


def scope_for(namespace: Namespace, kind: ItemKind) -> str:
    """The scope path holding ``kind`` items at ``namespace`` (``app:tinymemory/agent:a/app:learnings``)."""
    middle = "".join(f"/{seg_kind.value}:{seg_id}" for seg_kind, seg_id in namespace.segments)
    return f"{SCOPE_ROOT}{middle}/app:{_LEAVES[kind]}"


def parse_scope(path: str) -> tuple[Namespace, ItemKind] | None:
    """The namespace and kind of a scope ``scope_for`` wrote; None for any other path (foreign scopes)."""
    parts = path.strip("/").split("/")
    if len(parts) < 2 or parts[0] != SCOPE_ROOT or not parts[-1].startswith("app:"):
        return None
    kind = _KINDS.get(parts[-1].removeprefix("app:"))
    if kind is None:
        return None
    try:
        namespace = Namespace.parse("/".join(parts[1:-1]))
    except ValueError:
        return None
    return namespace, kind


def lookup_label(tag: str, value: str) -> str:
    """``tm:<tag>:`` + the first 16 hex of SHA-256(value) (reference §5.4, lookup labels)."""
    return f"tm:{tag}:{hashlib.sha256(value.encode('utf-8')).hexdigest()[:16]}"


def lookup_labels(item_id: str, meta: MemoryMeta) -> list[str]:
    """Every lookup label an event of item ``item_id`` carries: its id, then each set field of ``meta``."""
    labels = [lookup_label("i", item_id)]
    fields = (
        ("t", meta.thread_id),
        ("s", meta.source.id),
        ("r", meta.repo),
        ("w", meta.workspace),
        ("a", meta.agent_id),
        ("l", meta.language),
        ("k", meta.source.kind.value),
    )
    labels.extend(lookup_label(tag, value) for tag, value in fields if value is not None)
    return labels


def narrowing_labels(flt: MetaFilter) -> list[str]:
    """The labels a read sends (any-of) to narrow the server's answer (reference §5.4).

    The first set field among thread, source id, repo, workspace, agent and language, else the source kinds,
    else none.
    """
    for tag, value in (
        ("t", flt.thread_id),
        ("s", flt.source_id),
        ("r", flt.repo),
        ("w", flt.workspace),
        ("a", flt.agent_id),
        ("l", flt.language),
    ):
        if value is not None:
            return [lookup_label(tag, value)]
    return [lookup_label("k", kind.value) for kind in flt.sources]
