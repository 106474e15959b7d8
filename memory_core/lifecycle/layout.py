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

import base64
import hashlib
import re
from typing import Any, Final

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from memory_core.errors import InvalidRequest
from memory_core.limits import MAX_SEGMENT_ID_CHARS
from memory_core.meta import ItemKind, MetaFilter, SourceKind
from memory_core.namespace import ROOT, Namespace, Reach, SegmentKind, is_segment_id, sanitize_segment_id

__all__ = [
    "MAX_LAYOUT_ROOT_DEPTH",
    "UNSEGMENTED_PREFIX",
    "BrainSource",
    "MemoryLayout",
    "agent_segment_id",
    "check_agent_id",
    "check_collection",
    "check_layout",
    "parse_source_id",
]

MAX_LAYOUT_ROOT_DEPTH = 7
"""Deepest layout root, so one level remains for its children (reference §4.4)."""

UNSEGMENTED_PREFIX: Final = "--"
"""Leads the node id of every agent id that is not a segment id; a segment id with it is refused as an agent id."""

_ILLEGAL = re.compile(r"[^A-Za-z0-9_-]")
_DIGEST_CHARS: Final = 43
"""Characters of an unpadded base64url SHA-256 digest."""
_READABLE_KEEP: Final = MAX_SEGMENT_ID_CHARS - len(UNSEGMENTED_PREFIX) - 1 - _DIGEST_CHARS
_FILE_SOURCES = frozenset({"files", "pdf", "markdown"})
_SLUG = re.compile(rf"[a-z0-9_-]{{1,{MAX_SEGMENT_ID_CHARS}}}")


def parse_source_id(raw: object) -> str:
    """The canonical id of a brain source: ``raw`` stripped and lowercased, ``md`` read as ``markdown``.

    A source id is a slug (reference §4.4 ``Other(slug)``, seed 000 "a connected app's slug"): 1..=128
    characters of ``a-z``, ``0-9``, ``_`` and ``-``, the alphabet of the ``source:<id>`` namespace segment it
    names (reference §1.7), so the id a document reports and the node it lives at are the same string. Case is
    folded (``Notion`` is ``notion``); anything else (``Gmail App/x``) is refused, never rewritten.

    Raises:
        ValueError: the bare reason (no field prefix): not a string, blank, or not a slug.
    """
    if raw is None:
        raise ValueError("brain source is missing")
    if not isinstance(raw, str):
        raise ValueError(f"expected a brain source id string, got {type(raw).__name__}")
    sid = raw.strip().lower()
    if not sid:
        raise ValueError("brain source id is blank")
    if not _SLUG.fullmatch(sid):
        raise ValueError(
            f"brain source id {raw[:40]!r} is not a slug: use 1..={MAX_SEGMENT_ID_CHARS} characters of a-z, 0-9, "
            "'_' and '-'"
        )
    return "markdown" if sid == "md" else sid


class BrainSource:
    """The connector a brain document came from; serialises as its id string.

    ``files``, ``pdf`` and ``markdown`` (``md`` parses as ``markdown``) are local files; ``notion``, ``github``
    and ``web`` are connectors; any other slug (``gmail``, ``google-drive``) is a connected app. An id is
    stripped and lowercased and must then be a slug (see ``parse_source_id``).

    Raises:
        InvalidRequest: ``field="source"``: None, a blank id or one that is not a slug.
    """

    __slots__ = ("id",)
    FILES: BrainSource
    PDF: BrainSource
    MARKDOWN: BrainSource
    NOTION: BrainSource
    GITHUB: BrainSource
    WEB: BrainSource

    def __init__(self, source_id: str) -> None:
        try:
            self.id = parse_source_id(source_id)
        except ValueError as exc:
            raise InvalidRequest(str(exc), field="source") from None

    @classmethod
    def parse(cls, value: BrainSource | str) -> BrainSource:
        """Accept a ``BrainSource`` or its id string.

        Raises:
            InvalidRequest: ``field="source"``: None, a blank id or one that is not a slug.
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
        # a bare ValueError: pydantic names the field from its location, so the reason must not name it again
        return value if isinstance(value, BrainSource) else cls(parse_source_id(value))

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
        return {
            "type": "string",
            "pattern": f"^[A-Za-z0-9_-]{{1,{MAX_SEGMENT_ID_CHARS}}}$",
            "description": "files, pdf, markdown, notion, github, web, or any other slug (case-insensitive)",
        }


BrainSource.FILES = BrainSource("files")
BrainSource.PDF = BrainSource("pdf")
BrainSource.MARKDOWN = BrainSource("markdown")
BrainSource.NOTION = BrainSource("notion")
BrainSource.GITHUB = BrainSource("github")
BrainSource.WEB = BrainSource("web")


def check_collection(collection: object) -> str:
    """A brain collection name, stripped.

    Raises:
        InvalidRequest: ``field="collection"``: not a string, or blank.
    """
    if not isinstance(collection, str):
        raise InvalidRequest(f"expected a collection name, got {type(collection).__name__}", field="collection")
    if not collection.strip():
        raise InvalidRequest("collection is blank", field="collection")
    return collection.strip()


def check_agent_id(agent_id: object, field: str = "agent_id") -> str:
    """``agent_id`` stripped; an agent id is a non-blank string.

    Raises:
        InvalidRequest: ``field``: not a string (``must be a string, got int``), or blank.
    """
    if not isinstance(agent_id, str):
        raise InvalidRequest(f"must be a string, got {type(agent_id).__name__}", field=field)
    if not agent_id.strip():
        raise InvalidRequest("agent id is blank", field=field)
    stripped = agent_id.strip()
    if stripped.startswith(UNSEGMENTED_PREFIX) and is_segment_id(stripped):
        raise InvalidRequest(
            f"agent id {stripped[:40]!r} starts with {UNSEGMENTED_PREFIX!r}, which is kept for the nodes of ids that "
            "are not segment ids (so no id can name another's node)",
            field=field,
        )
    return stripped


def agent_segment_id(agent_id: object, field: str = "agent_id") -> str:
    """The id of the ``agent:<id>`` segment that holds ``agent_id``'s conversations; two ids never share one.

    An id that is already a segment id (1..=128 characters of ``[A-Za-z0-9_-]``, reference §1.7) is kept, as the
    contract's ``Segment::sanitized`` keeps it, so stored history stays where it was. Any other id maps to
    ``--<readable>-<digest>``: ``UNSEGMENTED_PREFIX``, the id with each illegal character as ``-`` cut to 82
    characters, ``-`` and the unpadded base64url SHA-256 of its UTF-8 bytes (43 characters). No valid agent id
    starts with ``--`` (``check_agent_id`` refuses it), so no id can name that node; the contract's own sanitised
    form (``<cleaned>-<fnv1a32>``) is itself a valid id, which is how a second agent could read the first one's
    history (issue 11 rule 7). Histories stored at that old node move with ``lifecycle.agent_ids``.

    Raises:
        InvalidRequest: ``field``: not a string, blank, or a segment id starting with ``--``.
    """
    aid = check_agent_id(agent_id, field)
    if is_segment_id(aid):
        return aid
    raw = aid.encode("utf-8", "surrogatepass")
    digest = base64.urlsafe_b64encode(hashlib.sha256(raw).digest()).decode("ascii").rstrip("=")
    return f"{UNSEGMENTED_PREFIX}{_ILLEGAL.sub('-', aid)[:_READABLE_KEEP]}-{digest}"


def check_layout(layout: object) -> MemoryLayout:
    """``layout`` when it is a ``MemoryLayout``; None: the root layout ``MemoryLayout()``.

    Raises:
        InvalidRequest: ``field="layout"``: anything else (a root string: wrap it, ``MemoryLayout("team:acme")``).
    """
    if layout is None:
        return MemoryLayout()
    if not isinstance(layout, MemoryLayout):
        raise InvalidRequest(f"expected a MemoryLayout or None, got {type(layout).__name__}", field="layout")
    return layout


class MemoryLayout:
    """The standard layout below one root: the root namespace, or a host node such as ``team:acme``.

    Args:
        root: The layout root, at most 7 deep: a ``Namespace`` or its text (``""`` and ``"root"`` are the root).

    Raises:
        InvalidRequest: ``field="root"``: not a ``Namespace`` or string, a malformed namespace, deeper than 7,
            or naming an agent (``team:acme/agent:x``: agents live below the root).
    """

    __slots__ = ("root",)

    def __init__(self, root: Namespace | str = ROOT) -> None:
        if not isinstance(root, Namespace | str):
            raise InvalidRequest(f"expected a Namespace or a namespace string, got {type(root).__name__}", "root")
        try:
            ns = root if isinstance(root, Namespace) else Namespace.parse(root)
        except InvalidRequest as exc:
            raise InvalidRequest(exc.reason, field="root") from None
        if ns.depth > MAX_LAYOUT_ROOT_DEPTH:
            raise InvalidRequest(f"layout root depth {ns.depth} exceeds {MAX_LAYOUT_ROOT_DEPTH}", field="root")
        if any(kind is SegmentKind.AGENT for kind, _ in ns.segments):
            raise InvalidRequest(
                f"{ns} names an agent: a layout holds agents below its root (agent:<id>), and its Brain "
                "documents would carry that agent's id",
                field="root",
            )
        self.root = ns

    def __repr__(self) -> str:
        return f"MemoryLayout({str(self.root)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemoryLayout) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    # nodes ---------------------------------------------------------------------------------------------
    def brain(self, source: BrainSource | str) -> Namespace:
        """``root/source:<id>`` (a source id is already a valid segment id, see ``parse_source_id``).

        Raises:
            InvalidRequest: ``field="source"``: None, a blank id or one that is not a slug.
        """
        return self.root.child(SegmentKind.SOURCE, BrainSource.parse(source).id)

    def brain_collection(self, source: BrainSource | str, collection: str) -> Namespace:
        """``root/source:<id>/project:<collection>``, the collection stripped and sanitised.

        Raises:
            InvalidRequest: ``field="source"`` for a bad source; ``field="collection"`` for a collection that is
                not a string or is blank (a blank one would be sanitised to ``_`` or a hash, a node nobody named).
        """
        return self.brain(source).child(SegmentKind.PROJECT, sanitize_segment_id(check_collection(collection)))

    def conversations(self, agent_id: str) -> Namespace:
        """``root/agent:<id>``: a segment id kept, any other id mapped apart (see ``agent_segment_id``).

        Raises:
            InvalidRequest: ``field="agent_id"``: not a string, blank, or a segment id starting with ``--``.
        """
        return self.root.child(SegmentKind.AGENT, agent_segment_id(agent_id))

    def contract_conversations(self, agent_id: str) -> Namespace:
        """``root/agent:<sanitised id>``: where versions before issue 11 rule 7 kept an agent id's turns.

        Equal to ``conversations`` for a segment id; for any other id, the contract's ``Segment::sanitized`` node
        (reference §1.7), which a valid id can also name.

        Raises:
            InvalidRequest: ``field="agent_id"``: not a string, blank, or a segment id starting with ``--``.
        """
        return self.root.child(SegmentKind.AGENT, sanitize_segment_id(check_agent_id(agent_id)))

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
        """Documents of one source (its subtree, collections included) or, for None, of the whole layout.

        None means every document below the root (reference §4.4 ``brain_filter(None)``): a caller that must
        name one source (``Brain.forget``) parses it first, so a missing source never widens to everything.

        Raises:
            InvalidRequest: ``field="source"``: a blank id or one that is not a slug.
        """
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
