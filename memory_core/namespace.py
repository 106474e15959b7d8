"""Namespaces (where an item lives) and reaches (which namespaces a read admits).

A ``Namespace`` is a path of ``kind:id`` segments joined by ``/`` (``team:acme/agent:writer``); the root is
the empty path, written ``root``. A ``Reach`` is a node plus two switches, ``inherit`` (its ancestors) and
``descendants`` (its subtree). A sibling is never admitted. Source: contract reference §1.7.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from enum import StrEnum
from typing import Any, ClassVar, Self

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from memory_core._model import ContractModel, StrictBool
from memory_core.errors import InvalidRequest
from memory_core.limits import MAX_NAMESPACE_DEPTH, MAX_SEGMENT_ID_CHARS

__all__ = ["Namespace", "Reach", "SegmentKind", "fnv1a32", "is_segment_id", "sanitize_segment_id"]

_ID_RE = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_SEGMENT_ID_CHARS}}}")
"""A whole segment id; always used with ``fullmatch`` (``$`` would also match before a final newline)."""
_ILLEGAL = re.compile(r"[^A-Za-z0-9_-]")
_SANITIZED_KEEP = 119
"""Characters kept of an illegal raw id before ``-`` and the 8-hex hash (reference §1.7)."""


class SegmentKind(StrEnum):
    """Kinds of namespace segment; the value is the path prefix (``ws`` for a workspace)."""

    AGENT = "agent"
    TEAM = "team"
    USER = "user"
    WORKSPACE = "ws"
    PROJECT = "project"
    SOURCE = "source"
    SERVICE = "service"


def fnv1a32(data: bytes) -> int:
    """32-bit FNV-1a hash (offset 0x811c9dc5, prime 0x01000193), as the reference uses (§1.7, §3)."""
    h = 0x811C9DC5
    for byte in data:
        h ^= byte
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def is_segment_id(raw: object) -> bool:
    """True when ``raw`` is a valid segment id: 1..=128 characters of ``[A-Za-z0-9_-]`` (reference §1.7)."""
    return isinstance(raw, str) and _ID_RE.fullmatch(raw) is not None


def sanitize_segment_id(raw: str) -> str:
    """Make any string a valid segment id, never failing (reference §1.7 ``Segment::sanitized``).

    A valid id is kept. Otherwise each illegal character becomes ``-``, the result is cut to 119 characters,
    and ``-`` plus the 8-hex FNV-1a hash of the original UTF-8 bytes is appended. An empty id becomes ``_``.
    """
    if _ID_RE.fullmatch(raw):
        return raw
    if raw == "":
        return "_"
    cleaned = _ILLEGAL.sub("-", raw)[:_SANITIZED_KEEP]
    return f"{cleaned}-{fnv1a32(raw.encode('utf-8')):08x}"


def _check_id(segment_id: str, field: str = "namespace") -> str:
    if not isinstance(segment_id, str) or not _ID_RE.fullmatch(segment_id):
        raise InvalidRequest(
            f"segment id {str(segment_id)[:40]!r} must be 1..={MAX_SEGMENT_ID_CHARS} characters of [A-Za-z0-9_-]",
            field=field,
        )
    return segment_id


class Namespace:
    """An immutable path of ``(SegmentKind, id)`` segments; at most 8 deep. Hashable and ordered by its string.

    Example:
        ``Namespace.parse("team:acme/agent:writer").child(SegmentKind.AGENT, "helper")``
    """

    __slots__ = ("_segments", "_str")
    ROOT: ClassVar[Namespace]

    def __init__(self, segments: tuple[tuple[SegmentKind, str], ...] = ()) -> None:
        if len(segments) > MAX_NAMESPACE_DEPTH:
            raise InvalidRequest(f"depth {len(segments)} exceeds {MAX_NAMESPACE_DEPTH}", field="namespace")
        checked: list[tuple[SegmentKind, str]] = []
        for kind, segment_id in segments:
            checked.append((SegmentKind(kind), _check_id(segment_id)))
        self._segments = tuple(checked)
        self._str = "/".join(f"{k.value}:{i}" for k, i in self._segments) or "root"

    # construction ---------------------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> Namespace:
        """Parse ``kind:id/kind:id``; ``""`` and ``"root"`` are the root.

        Whitespace around the whole string is trimmed first, as the reference's ``FromStr`` does
        (``namespace/mod.rs``), so ``" team:a"`` with a final newline is ``team:a``; nothing inside it is
        trimmed, so a blank or a line break within a path (between ``team:a`` and ``/agent:b``) is a bad id.

        Raises:
            InvalidRequest: a segment without ``:``, an unknown kind, a bad id, or more than 8 segments.
        """
        if not isinstance(text, str):
            raise InvalidRequest(f"expected a namespace string, got {type(text).__name__}", field="namespace")
        text = text.strip()
        if text in ("", "root"):
            return ROOT
        parts = text.split("/")
        if len(parts) > MAX_NAMESPACE_DEPTH:
            raise InvalidRequest(f"depth {len(parts)} exceeds {MAX_NAMESPACE_DEPTH}", field="namespace")
        segments: list[tuple[SegmentKind, str]] = []
        for part in parts:
            kind_text, sep, segment_id = part.partition(":")
            if not sep:
                raise InvalidRequest(f"segment {part!r} is not kind:id", field="namespace")
            try:
                kind = SegmentKind(kind_text)
            except ValueError:
                known = ", ".join(k.value for k in SegmentKind)
                raise InvalidRequest(
                    f"unknown segment kind {kind_text!r} (known: {known})", field="namespace"
                ) from None
            segments.append((kind, _check_id(segment_id)))
        return cls(tuple(segments))

    @classmethod
    def agent(cls, agent_id: str) -> Namespace:
        """``agent:<id>`` directly under the root, the id sanitised."""
        return ROOT.child(SegmentKind.AGENT, sanitize_segment_id(agent_id))

    def child(self, kind: SegmentKind | str, segment_id: str) -> Namespace:
        """This namespace with one more segment.

        Raises:
            InvalidRequest: the id is invalid or the result would be deeper than 8.
        """
        return Namespace((*self._segments, (SegmentKind(kind), segment_id)))

    # inspection -----------------------------------------------------------------------------------------
    @property
    def segments(self) -> tuple[tuple[SegmentKind, str], ...]:
        """The ``(kind, id)`` segments, outermost first."""
        return self._segments

    @property
    def depth(self) -> int:
        """Number of segments; the root is 0."""
        return len(self._segments)

    @property
    def is_root(self) -> bool:
        """True for the root namespace."""
        return not self._segments

    @property
    def parent(self) -> Namespace | None:
        """The namespace one segment up, or None for the root."""
        if not self._segments:
            return None
        return Namespace(self._segments[:-1])

    @property
    def last(self) -> tuple[SegmentKind, str] | None:
        """The innermost segment, or None for the root."""
        return self._segments[-1] if self._segments else None

    def ancestors_and_self(self) -> list[Namespace]:
        """Every node from the root down to this one, root first."""
        return [Namespace(self._segments[:i]) for i in range(len(self._segments) + 1)]

    def is_within(self, other: Namespace) -> bool:
        """True when this namespace is ``other`` or lies below it."""
        n = len(other._segments)
        return self._segments[:n] == other._segments and len(self._segments) >= n

    def shared_ancestor(self) -> Namespace:
        """The nearest node at or above this one whose last segment is not an agent."""
        node: Namespace = self
        while node.last is not None and node.last[0] is SegmentKind.AGENT:
            node = Namespace(node._segments[:-1])
        return node

    # dunder ---------------------------------------------------------------------------------------------
    def __str__(self) -> str:
        return self._str

    def __repr__(self) -> str:
        return f"Namespace({self._str!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Namespace) and other._segments == self._segments

    def __hash__(self) -> int:
        return hash(self._segments)

    def __lt__(self, other: Namespace) -> bool:
        return self._str < other._str

    def __iter__(self) -> Iterator[tuple[SegmentKind, str]]:
        return iter(self._segments)

    # pydantic -------------------------------------------------------------------------------------------
    @classmethod
    def _validate(cls, value: Any) -> Namespace:
        if isinstance(value, Namespace):
            return value
        try:
            return cls.parse(value)
        except InvalidRequest as exc:
            raise ValueError(exc.reason) from None

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
        return {"type": "string", "description": "kind:id/kind:id, or 'root'"}


ROOT = Namespace()
Namespace.ROOT = ROOT


class Reach(ContractModel):
    """Which namespaces a read admits: ``at``, plus its ancestors (``inherit``) and/or its subtree (``descendants``).

    JSON: ``{"at": "agent:x", "inherit": false, "descendants": false}``.

    | constructor | inherit | descendants | sees |
    | --- | --- | --- | --- |
    | ``Reach.of(at)`` | yes | no | ``at`` and its ancestors |
    | ``Reach.exact(at)`` | no | no | ``at`` only |
    | ``Reach.subtree(at)`` | no | yes | ``at`` and everything below it |

    A sibling is never admitted, and a descendant read never enters a ``service:`` sandbox below ``at``
    (reference §1.7).
    """

    at: Namespace = ROOT
    inherit: StrictBool = True
    descendants: StrictBool = False

    @classmethod
    def of(cls, at: Namespace | str) -> Self:
        """``at`` and its ancestors: an agent's normal reach."""
        return cls(at=_ns(at), inherit=True, descendants=False)

    @classmethod
    def exact(cls, at: Namespace | str) -> Self:
        """``at`` only."""
        return cls(at=_ns(at), inherit=False, descendants=False)

    @classmethod
    def subtree(cls, at: Namespace | str = ROOT) -> Self:
        """``at`` and everything below it, without ancestors."""
        return cls(at=_ns(at), inherit=False, descendants=True)

    def admits(self, ns: Namespace) -> bool:
        """True when a read under this reach sees items stored at ``ns``."""
        if ns == self.at:
            return True
        if self.inherit and self.at.is_within(ns):
            return True
        if self.descendants and ns.is_within(self.at):
            return all(kind is not SegmentKind.SERVICE for kind, _ in ns.segments[self.at.depth :])
        return False

    def nodes(self) -> list[Namespace]:
        """The nodes this reach reads exactly, root first (descendants are not enumerable)."""
        return self.at.ancestors_and_self() if self.inherit else [self.at]

    def within(self, outer: Reach) -> bool:
        """True when every namespace this reach admits is admitted by ``outer`` (used to refuse widening)."""
        if not all(outer.admits(n) for n in self.nodes()):
            return False
        if self.descendants:
            return outer.descendants and self.at.is_within(outer.at)
        return True


def _ns(value: Namespace | str) -> Namespace:
    return value if isinstance(value, Namespace) else Namespace.parse(value)
