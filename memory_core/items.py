"""The item model: ``StoreItem`` = ``Document`` | ``Conversation`` | ``Learning``, tagged ``"type"``.

Identity is a content hash: ``fingerprint()`` is the first 20 bytes (40 hex) of SHA-256 over the item's
compact JSON, with ``meta.observed_at``, ``meta.observed_actor`` and ``meta.tool_call.id`` cleared. The
namespace is part of identity, so the same text at two nodes is two items, and storing the same item again is
a replay. Source: contract reference §1.4.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, ClassVar, Final, Literal, Self

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from memory_core._model import ContractModel, StrictFloat, Timestamp, invalid_from, reading_wire, wire_input
from memory_core.errors import InvalidRequest
from memory_core.limits import MAX_TEXT_CHARS
from memory_core.meta import NUL_FREE, ItemKind, MemoryMeta

__all__ = [
    "DEFAULT_LEARNING_CONFIDENCE",
    "DEFAULT_LEARNING_KIND",
    "NUL_FREE",
    "Conversation",
    "Document",
    "DocumentBody",
    "Learning",
    "LearningKind",
    "Role",
    "StoreItem",
    "ToolCallRef",
    "Turn",
    "canonical_json",
    "fingerprint",
    "is_memory_id",
    "parse_item",
    "validate_item",
]


class Role(StrEnum):
    """Who spoke a turn."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class LearningKind(StrEnum):
    """What sort of learning an item is (reference §1.4)."""

    PREFERENCE = "preference"
    FACT = "fact"
    PROCEDURE = "procedure"
    CORRECTION = "correction"
    OTHER = "other"


class ToolCallRef(ContractModel):
    """``{name, id?}``: a tool call a turn made (NUL-free: ``meta.NUL_FREE``)."""

    name: Annotated[str, NUL_FREE]
    id: Annotated[str, NUL_FREE] | None = None


class Turn(ContractModel):
    """One turn of a conversation: ``{role, text, at?, tool_calls?}`` (``tool_calls`` left out when empty)."""

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"tool_calls"})

    role: Role
    text: str = Field(max_length=MAX_TEXT_CHARS)
    at: Timestamp | None = None
    tool_calls: tuple[ToolCallRef, ...] = ()

    def render(self) -> str:
        """``role: text``, plus `` [tools: name (id), name]`` when the turn made tool calls."""
        line = f"{self.role.value}: {self.text}"
        if self.tool_calls:
            calls = ", ".join(f"{c.name} ({c.id})" if c.id else c.name for c in self.tool_calls)
            line += f" [tools: {calls}]"
        return line


class DocumentBody(ContractModel):
    """A document's body: ``{"text": …}`` or ``{"uri": …}``. A ``uri`` body is refused at store time."""

    text: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    uri: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.text is None) == (self.uri is None):
            raise InvalidRequest("a body is exactly one of text or uri", field="text")
        return self


class _Item(ContractModel):
    """Shared behaviour of the three item kinds."""

    kind_of: ClassVar[ItemKind]

    @property
    def item_kind(self) -> ItemKind:
        """This item's ``ItemKind``."""
        return self.kind_of

    def render_text(self) -> str:
        """The item's text as hits carry it (``Hit.text``)."""
        raise NotImplementedError

    @cached_property
    def id(self) -> str:
        """The item's id: its ``fingerprint()``, computed once."""
        return fingerprint(self)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy (``update`` is not validated, as in pydantic); its ``id`` is computed afresh."""
        copy = super().model_copy(update=update, deep=deep)
        copy.__dict__.pop("id", None)
        return copy

    def fingerprint(self) -> str:
        """40 lowercase hex: SHA-256 of the canonical JSON without observed_at, observed_actor, tool-call id."""
        return self.id

    @property
    def item_meta(self) -> MemoryMeta:
        """The item's metadata."""
        meta: MemoryMeta = self.__dict__["meta"]
        return meta

    def with_meta(self, meta: MemoryMeta) -> Self:
        """A copy carrying ``meta``."""
        fields = {name: value for name, value in self.__dict__.items() if name in type(self).model_fields}
        return type(self).model_validate({**fields, "meta": meta})

    def confidence_value(self) -> float | None:
        """The learning's confidence; None for documents and conversations."""
        return None


class Document(_Item):
    """``{type: "document", title?, body, mime?, meta}``."""

    kind_of: ClassVar[ItemKind] = ItemKind.DOCUMENT
    type: Literal["document"] = "document"
    title: str | None = None
    body: DocumentBody
    mime: str | None = None
    meta: MemoryMeta = Field(default_factory=MemoryMeta)

    @classmethod
    def of(
        cls, text: str, meta: MemoryMeta | None = None, *, title: str | None = None, mime: str | None = None
    ) -> Document:
        """A text document (no title or mime unless given)."""
        return cls(title=title, body=DocumentBody(text=text), mime=mime, meta=meta or MemoryMeta())

    @property
    def text(self) -> str:
        """The body text ('' for a uri body)."""
        return self.body.text or ""

    def render_text(self) -> str:
        """``# {title}`` + blank line + body when titled, else the body alone."""
        body = self.body.text if self.body.text is not None else (self.body.uri or "")
        if self.title and self.title.strip():
            return f"# {self.title}\n\n{body}"
        return body


class Conversation(_Item):
    """``{type: "conversation", turns, meta}``."""

    kind_of: ClassVar[ItemKind] = ItemKind.CONVERSATION
    type: Literal["conversation"] = "conversation"
    turns: tuple[Turn, ...]
    meta: MemoryMeta = Field(default_factory=MemoryMeta)

    def render_text(self) -> str:
        """One ``role: text`` line per turn, joined by newlines."""
        return "\n".join(t.render() for t in self.turns)

    def first_user_text(self) -> str | None:
        """The text of the first ``user`` turn, if any."""
        return next((t.text for t in self.turns if t.role is Role.USER), None)


DEFAULT_LEARNING_KIND: Final = LearningKind.FACT
"""The kind ``Learning(...)`` takes when none is given: the tool layer's ``learn`` default (reference §6.4)."""

DEFAULT_LEARNING_CONFIDENCE: Final = 0.8
"""The confidence ``Learning(...)`` takes when none is given: the tool layer's ``learn`` default (reference §6.4)."""


_WIRE_REQUIRED: Final = ("kind", "confidence")
"""Learning fields the wire must name although the Python constructor defaults them (reference §1.4)."""


def _wire_required(schema: dict[str, Any]) -> None:
    required = [name for name in schema.get("required", []) if name not in _WIRE_REQUIRED]
    schema["required"] = [*required, *_WIRE_REQUIRED]


class Learning(_Item):
    """``{type: "learning", text, kind, confidence, evidence?, meta}``; confidence in 0..=1.

    On the wire (JSON text, a mapping, ``parse_item``, ``model_validate``) ``kind`` and ``confidence`` are
    required, as in the reference's item model (§1.4: neither is optional there), and the JSON schema says so.
    Only the Python constructor defaults them, to what the reference's tool layer gives a ``learn`` call
    (``DEFAULT_LEARNING_KIND``, ``DEFAULT_LEARNING_CONFIDENCE``; §6.4 ``memory.learn``), so
    ``Learning(text="…")`` stays short. What a learning serialises always names both.
    """

    model_config = ConfigDict(json_schema_extra=_wire_required)

    kind_of: ClassVar[ItemKind] = ItemKind.LEARNING
    type: Literal["learning"] = "learning"
    text: str = Field(max_length=MAX_TEXT_CHARS)
    kind: LearningKind = DEFAULT_LEARNING_KIND
    confidence: StrictFloat = Field(default=DEFAULT_LEARNING_CONFIDENCE, ge=0.0, le=1.0, allow_inf_nan=False)
    evidence: str | None = None
    meta: MemoryMeta = Field(default_factory=MemoryMeta)

    @model_validator(mode="before")
    @classmethod
    def _wire_names_kind_and_confidence(cls, data: Any) -> Any:
        if isinstance(data, dict) and reading_wire():
            for name in _WIRE_REQUIRED:
                if name not in data:
                    raise InvalidRequest("field required: a learning names its kind and confidence", field=name)
        return data

    def render_text(self) -> str:
        """The learning's text."""
        return self.text

    def confidence_value(self) -> float | None:
        """The learning's confidence."""
        return self.confidence


StoreItem = Annotated[Document | Conversation | Learning, Field(discriminator="type")]
"""Any storable item, tagged by ``"type"``."""

_ITEM_ADAPTER: TypeAdapter[Document | Conversation | Learning] = TypeAdapter(StoreItem)
_ITEM_TAGS = frozenset(kind.value for kind in ItemKind)


def parse_item(value: Any, field: str | None = None) -> Document | Conversation | Learning:
    """Accept an item, a JSON object or JSON text, and return the item.

    Raises:
        InvalidRequest: an unknown ``type`` tag or a malformed field; the error names the field.
    """
    if isinstance(value, Document | Conversation | Learning):
        return value
    try:
        with wire_input():
            if isinstance(value, str | bytes | bytearray):
                return _ITEM_ADAPTER.validate_json(value)
            if isinstance(value, dict):
                return _ITEM_ADAPTER.validate_python(value)
    except ValidationError as exc:
        raise invalid_from(exc, prefix=field, union_tags=_ITEM_TAGS) from None
    raise InvalidRequest(f"expected an item object, got {type(value).__name__}", field=field)


def _blank(text: str | None) -> bool:
    return text is None or not text.strip()


def _refuse_nul(text: str | None, field: str) -> None:
    """Refuse NUL in stored text (*memory-core*, issue 17).

    PostgreSQL's ``text`` cannot hold it (so engines would differ), C strings end at it, and no one types it.
    Other control characters are kept as said and neutralised where packs are rendered
    (``control.neutralise_control_chars``).

    Raises:
        InvalidRequest: ``field``: ``text`` holds NUL.
    """
    if text is not None and "\x00" in text:
        raise InvalidRequest(f"holds a NUL character (U+0000) at offset {text.index(chr(0))}", field=field)


def validate_item(item: Document | Conversation | Learning, field: str = "item") -> None:
    """Check the store-time rules of reference §1.4; metadata is not checked beyond its types.

    Raises:
        InvalidRequest: a blank or ``uri`` document body, a conversation without turns or with a blank turn,
            a blank learning text, a confidence outside 0..=1 (NaN included), or a NUL character in a document's
            title or body, a turn's text, or a learning's text or evidence (``_refuse_nul``).
    """
    if isinstance(item, Document):
        if item.body.uri is not None:
            raise InvalidRequest("a uri body must be resolved to text before it is stored", field=f"{field}.body.uri")
        if _blank(item.body.text):
            raise InvalidRequest("document body is blank", field=f"{field}.body.text")
        _refuse_nul(item.title, f"{field}.title")
        _refuse_nul(item.body.text, f"{field}.body.text")
    elif isinstance(item, Conversation):
        if not item.turns:
            raise InvalidRequest("conversation has no turns", field=f"{field}.turns")
        for i, turn in enumerate(item.turns):
            if _blank(turn.text):
                raise InvalidRequest("turn text is blank", field=f"{field}.turns.{i}.text")
            _refuse_nul(turn.text, f"{field}.turns.{i}.text")
    elif isinstance(item, Learning):
        if _blank(item.text):
            raise InvalidRequest("learning text is blank", field=f"{field}.text")
        _refuse_nul(item.text, f"{field}.text")
        _refuse_nul(item.evidence, f"{field}.evidence")
        c = item.confidence
        if math.isnan(c) or not 0.0 <= c <= 1.0:
            raise InvalidRequest("confidence must be within 0..=1", field=f"{field}.confidence")
    else:  # pragma: no cover - typed away
        raise InvalidRequest(f"not an item: {type(item).__name__}", field=field)


def canonical_json(item: _Item) -> str:
    """The compact JSON the fingerprint hashes.

    Declared field order, tag first; Nones, empty lists and a root namespace left out; non-ASCII kept raw;
    ``meta.observed_at``, ``meta.observed_actor`` and ``meta.tool_call.id`` cleared.
    """
    data = item.model_dump(mode="json")
    meta = data.get("meta", {})
    meta.pop("observed_at", None)
    meta.pop("observed_actor", None)
    tool_call = meta.get("tool_call")
    if isinstance(tool_call, dict):
        tool_call.pop("id", None)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def fingerprint(item: _Item) -> str:
    """The item id: first 20 bytes of SHA-256 over ``canonical_json(item)``, as 40 lowercase hex."""
    return hashlib.sha256(canonical_json(item).encode("utf-8")).hexdigest()[:40]


def is_memory_id(text: str) -> bool:
    """True when ``text`` has the shape of a memory's id: 40 lowercase hex; pure.

    Items (``fingerprint``) and built beliefs (``beliefs.model.belief_id``) alike are named so, so a prefix, an
    upper-case copy or any other text names no memory (``memory-core history`` says so rather than "no records").
    """
    return len(text) == 40 and all(c in "0123456789abcdef" for c in text)
