"""``MemoryLayout``: where the brain, conversations and learnings live below one root (seed 000, reference §4.4).

| plan scope | namespace | kinds |
| --- | --- | --- |
| core | root | everything (holistic) |
| core/brain/<source> | root/source:<source> | documents |
| core/brain/<source>/<collection> | root/source:<source>/project:<collection> | documents |
| core/conversations/<agent> | root/agent:<agent> | conversations |
| core/learnings | root (shared) and any node (built beliefs) | learnings |
"""

from __future__ import annotations

from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from memory_core.errors import InvalidRequest
from memory_core.meta import ItemKind, MetaFilter, SourceKind
from memory_core.namespace import ROOT, Namespace, Reach, SegmentKind, sanitize_segment_id

__all__ = ["BrainSource", "MemoryLayout", "MAX_LAYOUT_ROOT_DEPTH"]

MAX_LAYOUT_ROOT_DEPTH = 7
"""Deepest layout root, so one level remains for its children (reference §4.4)."""

_FILE_SOURCES = frozenset({"files", "pdf", "markdown"})


class BrainSource:
    """The connector a brain document came from; serialises as its id string.

    ``files``, ``pdf`` and ``markdown`` (``md`` parses as ``markdown``) are local files; ``notion``, ``github``
    and ``web`` are connectors; any other slug (``gmail``) is a connected app.
    """

    __slots__ = ("id",)
    FILES: BrainSource
    PDF: BrainSource
    MARKDOWN: BrainSource
    NOTION: BrainSource
    GITHUB: BrainSource
    WEB: BrainSource

    def __init__(self, source_id: str) -> None:
        if not isinstance(source_id, str) or not source_id.strip():
            raise InvalidRequest("brain source id is blank", field="source")
        sid = source_id.strip().lower()
        self.id = "markdown" if sid == "md" else sid

    @classmethod
    def parse(cls, value: BrainSource | str) -> BrainSource:
        """Accept a ``BrainSource`` or its id string.

        Raises:
            InvalidRequest: a blank id.
        """
        return value if isinstance(value, BrainSource) else cls(value)

    def source_kind(self) -> SourceKind:
        """``file`` for files, pdf and markdown; ``import`` for every other source."""
        return SourceKind.FILE if self.id in _FILE_SOURCES else SourceKind.IMPORT

    def __str__(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return f"BrainSource({self.id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BrainSource) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @classmethod
    def _validate(cls, value: Any) -> BrainSource:
        try:
            return cls.parse(value)
        except InvalidRequest as exc:
            raise ValueError(exc.message) from None

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls._validate,
            serialization=core_schema.plain_serializer_function_ser_schema(str, return_schema=core_schema.str_schema()),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "description": "files, pdf, markdown, notion, github, web, or any slug"}


BrainSource.FILES = BrainSource("files")
BrainSource.PDF = BrainSource("pdf")
BrainSource.MARKDOWN = BrainSource("markdown")
BrainSource.NOTION = BrainSource("notion")
BrainSource.GITHUB = BrainSource("github")
BrainSource.WEB = BrainSource("web")


class MemoryLayout:
    """The standard layout below one root: the root namespace, or a host node such as ``team:acme``.

    Args:
        root: The layout root, at most 7 deep.

    Raises:
        InvalidRequest: the root is deeper than 7.
    """

    __slots__ = ("root",)

    def __init__(self, root: Namespace | str = ROOT) -> None:
        ns = root if isinstance(root, Namespace) else Namespace.parse(root)
        if ns.depth > MAX_LAYOUT_ROOT_DEPTH:
            raise InvalidRequest(f"layout root depth {ns.depth} exceeds {MAX_LAYOUT_ROOT_DEPTH}", field="root")
        self.root = ns

    def __repr__(self) -> str:
        return f"MemoryLayout({str(self.root)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemoryLayout) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    # nodes ---------------------------------------------------------------------------------------------
    def brain(self, source: BrainSource | str) -> Namespace:
        """``root/source:<id>``, the id sanitised."""
        return self.root.child(SegmentKind.SOURCE, sanitize_segment_id(BrainSource.parse(source).id))

    def brain_collection(self, source: BrainSource | str, collection: str) -> Namespace:
        """``root/source:<id>/project:<collection>``, both sanitised."""
        return self.brain(source).child(SegmentKind.PROJECT, sanitize_segment_id(collection))

    def conversations(self, agent_id: str) -> Namespace:
        """``root/agent:<id>``, the id sanitised.

        Raises:
            InvalidRequest: a blank agent id.
        """
        if not agent_id or not agent_id.strip():
            raise InvalidRequest("agent id is blank", field="agent_id")
        return self.root.child(SegmentKind.AGENT, sanitize_segment_id(agent_id.strip()))

    def learnings(self) -> Namespace:
        """The root: shared learnings live there."""
        return self.root

    def ancestors(self) -> list[Namespace]:
        """The strict ancestors of the root, root first."""
        return self.root.ancestors_and_self()[:-1]

    def admits_core(self, at: Namespace) -> bool:
        """True only for a strict ancestor of the root (a core scope)."""
        return at != self.root and self.root.is_within(at)

    # filters -------------------------------------------------------------------------------------------
    def brain_filter(self, source: BrainSource | str | None = None) -> MetaFilter:
        """Documents of one source (its subtree, collections included) or of the whole layout."""
        at = self.brain(source) if source is not None else self.root
        return MetaFilter(reach=Reach.subtree(at), kinds=(ItemKind.DOCUMENT,))

    def conversations_filter(self, agent_id: str | None = None) -> MetaFilter:
        """Conversations of one agent (its subtree) or of every agent."""
        at = self.conversations(agent_id) if agent_id is not None else self.root
        return MetaFilter(reach=Reach.subtree(at), kinds=(ItemKind.CONVERSATION,))

    def learnings_filter(self) -> MetaFilter:
        """Learnings anywhere below the root."""
        return MetaFilter(reach=Reach.subtree(self.root), kinds=(ItemKind.LEARNING,))

    def holistic_filter(self) -> MetaFilter:
        """Everything below the root (siblings of the root stay invisible)."""
        return MetaFilter(reach=Reach.subtree(self.root))
