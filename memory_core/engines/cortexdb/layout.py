"""Where items live on CortexDB: scope paths and lookup labels (contract reference §5.4); pure.

Scope layout (the legacy default): ``app:tinymemory/<namespace segments>/app:{documents|conversations|learnings}``,
so ``agent:a/agent:scout`` learnings live at ``app:tinymemory/agent:a/agent:scout/app:learnings``. With a v3
``scope_root`` (``org:42``) the root replaces ``app:tinymemory``, brain documents live under ``app:brain`` and
service sandboxes under ``app:flows`` (``scope_for``).

Lookup labels are ``tm:<tag>:`` + the first 16 hex digits of SHA-256(value): ``i`` item id, ``t`` thread,
``s`` source id, ``r`` repo, ``w`` workspace, ``a`` agent, ``l`` language, ``k`` source kind. A read narrows the
server's listing by one field's labels (``narrowing_labels``); the full ``MetaFilter`` is always re-applied
client-side.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from memory_core.meta import ItemKind, MemoryMeta, MetaFilter
from memory_core.namespace import Namespace, SegmentKind

__all__ = [
    "MAX_QUERY_LABELS",
    "SCOPE_ROOT",
    "check_root",
    "lookup_label",
    "lookup_labels",
    "narrowing_labels",
    "parse_scope",
    "scope_for",
    "scope_prefix",
    "strip_tenant",
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


_BRAIN: Final = "app:brain"
_FLOWS: Final = "app:flows"
_ROOT_SEGMENT = re.compile(r"[a-z][a-z0-9_]*:[A-Za-z0-9_.-]{1,128}")


def check_root(root: str) -> str:
    """A v3 ``scope_root`` (``org:42``, ``org:42/ws:main``): ``type:id`` segments.

    Raises:
        ValueError: naming what is wrong.
    """
    segments = root.strip("/").split("/")
    if not root.strip("/") or not all(_ROOT_SEGMENT.fullmatch(s) for s in segments):
        raise ValueError(f"scope_root {root!r} is not type:id segments (e.g. org:42)")
    if any(s.startswith("app:") for s in segments):
        raise ValueError(f"scope_root {root!r} must not hold an app: segment")
    return root.strip("/")


def scope_prefix(root: str | None = None) -> str | None:
    """The prefix every scope of the layout starts with (what the scopes listing asks for).

    None for the tenant layout (``root`` ``""``): the hosted backend pins the tenant's root itself, an
    unprefixed listing covers the whole tenant, and an empty ``prefix=`` is never sent (reference §5.4).
    """
    if root == "":
        return None
    return f"{SCOPE_ROOT}/" if root is None else f"{root}/"


_NODE_TYPES: Final = frozenset(kind.value for kind in SegmentKind) | {"app"}


def strip_tenant(path: str, root: str | None) -> str:
    """A hosted listing's ``path`` without the tenant prefix the backend put before what was sent; pure.

    The TinyHumans backend re-roots every scope under the caller's tenant (``org:<id>/…``), which the client
    cannot name, so the layout's root is matched at its last occurrence (legacy ``app:tinymemory``, a v3
    root), and under the tenant layout (``root`` ``""``) the leading segments of types no namespace uses are
    dropped (reference §5.4, "The hosted wire: the tenant's root").
    """
    parts = path.strip("/").split("/")
    if root == "":
        at = 0
        while at < len(parts) and parts[at].partition(":")[0] not in _NODE_TYPES:
            at += 1
        return "/".join(parts[at:])
    base = [SCOPE_ROOT] if root is None else root.split("/")
    for at in range(len(parts) - len(base), -1, -1):
        if parts[at : at + len(base)] == base:
            return "/".join(parts[at:])
    return path


def scope_for(namespace: Namespace, kind: ItemKind, root: str | None = None) -> str:
    """The scope holding ``kind`` items at ``namespace``.

    ``root``: None for the legacy layout, ``""`` for the tenant layout (v3 with no root segment: the hosted
    backend pins the tenant's ``org:<id>``), else a v3 root.

    Legacy (``root`` None): ``app:tinymemory/agent:a/app:learnings``. v3 (``root`` ``org:42``, reference §5.4):
    ``org:42/agent:a/app:learnings``; a document under a ``source:`` segment lives at
    ``org:42/…/app:brain/source:…`` (no leaf); anything under a ``service:`` segment gets ``app:flows`` inserted
    before the first ``service:``.
    """
    segments = [f"{seg_kind.value}:{seg_id}" for seg_kind, seg_id in namespace.segments]
    leaf = f"app:{_LEAVES[kind]}"
    if root is None:
        return "/".join([SCOPE_ROOT, *segments, leaf])
    head = [root] if root else []  # "": the tenant layout, whose root the hosted backend pins
    services = [i for i, seg in enumerate(segments) if seg.startswith("service:")]
    if services:
        segments.insert(services[0], _FLOWS)
        return "/".join([*head, *segments, leaf])
    sources = [i for i, seg in enumerate(segments) if seg.startswith("source:")]
    if kind is ItemKind.DOCUMENT and sources:
        segments.insert(sources[0], _BRAIN)
        return "/".join([*head, *segments])
    return "/".join([*head, *segments, leaf])


def parse_scope(path: str, root: str | None = None) -> tuple[Namespace, ItemKind] | None:
    """The namespace and kind of a scope ``scope_for`` wrote under ``root``; None for any other path."""
    parts = path.strip("/").split("/")
    base = [SCOPE_ROOT] if root is None else (root.split("/") if root else [])
    if parts[: len(base)] != base:
        return None
    rest = parts[len(base) :]
    if root is not None and _BRAIN in rest and _FLOWS not in rest:
        at = rest.index(_BRAIN)
        if (
            at + 1 >= len(rest)
            or not rest[at + 1].startswith("source:")
            or any(s.startswith("app:") for s in rest[at + 1 :])
        ):
            return None
        kind: ItemKind | None = ItemKind.DOCUMENT
        middle = rest[:at] + rest[at + 1 :]
    else:
        if not rest or not rest[-1].startswith("app:"):
            return None
        kind = _KINDS.get(rest[-1].removeprefix("app:"))
        middle = rest[:-1]
        if root is not None and _FLOWS in middle:
            at = middle.index(_FLOWS)
            if at + 1 >= len(middle) or not middle[at + 1].startswith("service:"):
                return None
            middle = middle[:at] + middle[at + 1 :]
    if kind is None or any(s.startswith("app:") for s in middle):
        return None
    try:
        namespace = Namespace.parse("/".join(middle))
    except ValueError:
        return None
    if scope_for(namespace, kind, root) != "/".join(parts):
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
