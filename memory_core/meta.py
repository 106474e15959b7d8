"""Item metadata (``MemoryMeta``) and the metadata filter every read takes (``MetaFilter``).

Field order and omission rules follow the contract reference §1.5; the filter's match rules follow §1.6.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated, ClassVar, Final, Self

from pydantic import AfterValidator, Field, field_validator, model_validator

from memory_core._model import ContractModel, StrictBool, StrictInt, Timestamp
from memory_core.errors import InvalidRequest
from memory_core.namespace import ROOT, Namespace, Reach

__all__ = [
    "U32",
    "U32_MAX",
    "USIZE_MAX",
    "NUL_FREE",
    "ItemKind",
    "MemoryMeta",
    "MetaFilter",
    "NulFree",
    "ObservedActor",
    "SourceKind",
    "SourceRef",
    "ToolCallMeta",
    "TurnRange",
    "USize",
    "path_has_prefix",
]

U32_MAX: Final = 2**32 - 1
"""Largest Rust ``u32``: turn indices (``TurnRange``, ``PreTurn.turn_index``, ``in_prompt_from``) and
``build_beliefs_every`` are ``u32`` in the reference (``meta/mod.rs``, ``lifecycle/types.rs``)."""
USIZE_MAX: Final = 2**63 - 1
"""Largest ``usize`` accepted: counts and sizes (``max_scopes``, ``budget_tokens``) are ``usize`` in the reference;
bounded to SQLite's signed 64-bit ``INTEGER`` (below a 64-bit ``usize``'s 2**64 - 1) so no engine can overflow."""


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError(f"holds a NUL character (U+0000) at offset {value.index(chr(0))}")
    return value


NUL_FREE: Final = AfterValidator(_no_nul)
"""Refuses a string holding NUL (U+0000), naming its field (*memory-core*, issue 17): PostgreSQL's ``text`` cannot
hold it (so engines would differ and a write told "saved"/"queued" would fail later), C strings end at it, and no one
types it. Every string that is stored or matched against stored strings carries it (``Annotated[str, NUL_FREE]``)."""
NulFree = Annotated[str, NUL_FREE]
"""A string without NUL (``NUL_FREE``)."""

U32 = Annotated[StrictInt, Field(ge=0, le=U32_MAX)]
"""A ``u32``: a strict int in 0..=U32_MAX (a larger one is ``InvalidRequest`` naming the field, never stored)."""
USize = Annotated[StrictInt, Field(ge=0, le=USIZE_MAX)]
"""A ``usize``: a strict int in 0..=USIZE_MAX."""


class ItemKind(StrEnum):
    """The three item kinds, in the contract's order (``ItemKind.ALL``)."""

    DOCUMENT = "document"
    CONVERSATION = "conversation"
    LEARNING = "learning"

    @classmethod
    def all(cls) -> tuple[ItemKind, ...]:
        """Every kind, in contract order."""
        return (cls.DOCUMENT, cls.CONVERSATION, cls.LEARNING)


class SourceKind(StrEnum):
    """Where an item came from (reference §1.5); ``agent`` is the default."""

    FOLDER = "folder"
    FILE = "file"
    LINK = "link"
    GITHUB = "github"
    RSS = "rss"
    COMPOSIO = "composio"
    CONVERSATION = "conversation"
    AGENT = "agent"
    IMPORT = "import"


class SourceRef(ContractModel):
    """``{kind, id?}``: the source an item came from."""

    kind: SourceKind = SourceKind.AGENT
    id: NulFree | None = None


class TurnRange(ContractModel):
    """``{first, last}``: zero-based, inclusive turn indices, each a ``u32`` (0..=``U32_MAX``)."""

    first: U32
    last: U32

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.first > self.last:
            raise InvalidRequest("must be <= last", field="first")
        return self


class ToolCallMeta(ContractModel):
    """``{name, id?}``: the tool call an item came from. The id is left out of the fingerprint."""

    name: NulFree
    id: NulFree | None = None


class ObservedActor(ContractModel):
    """``{id, name?}``: who said it, when that is not the owner; ``id`` is ``type:id``. Not in the fingerprint."""

    id: NulFree
    name: NulFree | None = None


class MemoryMeta(ContractModel):
    """Metadata of a stored item. Every field is optional; ``source`` defaults to ``{kind: agent}``.

    ``namespace`` is where the item lives (left out of JSON at the root). ``observed_at`` is when the fact
    was observed, not when it was stored. ``derive = False`` asks engines to index but derive nothing.
    """

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"namespace", "tags"})

    namespace: Namespace = ROOT
    workspace: NulFree | None = None
    folder: NulFree | None = None
    file_path: NulFree | None = None
    language: NulFree | None = None
    repo: NulFree | None = None
    commit: NulFree | None = None
    url: NulFree | None = None
    thread_id: NulFree | None = None
    turns: TurnRange | None = None
    agent_id: NulFree | None = None
    tool_call: ToolCallMeta | None = None
    source: SourceRef = Field(default_factory=SourceRef)
    tags: tuple[NulFree, ...] = ()
    observed_at: Timestamp | None = None
    observed_actor: ObservedActor | None = None
    derive: StrictBool | None = None

    @classmethod
    def from_source(cls, kind: SourceKind, source_id: str | None = None) -> MemoryMeta:
        """Metadata naming only its source."""
        return cls(source=SourceRef(kind=kind, id=source_id))

    def at(self, namespace: Namespace | str) -> MemoryMeta:
        """A copy placed at ``namespace``."""
        ns = namespace if isinstance(namespace, Namespace) else Namespace.parse(namespace)
        return self.model_copy(update={"namespace": ns})

    def with_(self, **changes: object) -> MemoryMeta:
        """A validated copy with ``changes`` applied (``meta.with_(tags=("x",), agent_id=None)``)."""
        return MemoryMeta.model_validate({**self.__dict__, **changes})


def path_has_prefix(value: str, prefix: str) -> bool:
    """True when ``value`` equals ``prefix`` or lies below it on a ``/`` boundary.

    ``/a/b`` admits ``/a/b/c`` but not ``/a/bc``. Trailing ``/`` on the prefix are ignored, so ``/a/b/`` is
    ``/a/b`` and ``/`` is the empty prefix, which admits ``""`` and absolute paths but no relative path
    (reference §1.6; ``path_prefix`` in ``meta/filter.rs``).
    """
    if value == prefix:
        return True
    base = prefix.rstrip("/")
    return value == base or value.startswith(base + "/")


class MetaFilter(ContractModel):
    """Which items a read admits; every set field must match, and ``{}`` matches everything (reference §1.6).

    ``folder``/``file_path`` match as path prefixes on a ``/`` boundary, ``tool_call`` is the tool's name,
    ``kinds``/``sources`` match any listed value (empty = all), ``tags_any`` needs one tag in common, and the
    observed window is ``[observed_after, observed_before)``. An item without a value never matches a set
    field. No ``reach`` admits every namespace except ``service:`` sandboxes (read as ``subtree(root)``).
    """

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"kinds", "sources", "tags_any"})

    reach: Reach | None = None
    workspace: NulFree | None = None
    folder: NulFree | None = None
    file_path: NulFree | None = None
    language: NulFree | None = None
    repo: NulFree | None = None
    commit: NulFree | None = None
    url: NulFree | None = None
    thread_id: NulFree | None = None
    turns: TurnRange | None = None
    agent_id: NulFree | None = None
    tool_call: NulFree | None = None
    source_id: NulFree | None = None
    kinds: tuple[ItemKind, ...] = ()
    sources: tuple[SourceKind, ...] = ()
    tags_any: tuple[NulFree, ...] = ()
    observed_after: Timestamp | None = None
    observed_before: Timestamp | None = None

    @field_validator("kinds", "sources", "tags_any", mode="after")
    @classmethod
    def _dedupe(cls, value: tuple[object, ...]) -> tuple[object, ...]:
        return tuple(dict.fromkeys(value))

    # constructors ---------------------------------------------------------------------------------------
    @classmethod
    def of_kinds(cls, kinds: Iterable[ItemKind | str], reach: Reach | None = None) -> MetaFilter:
        """A filter admitting only ``kinds`` (under ``reach``, when given)."""
        return cls(kinds=tuple(ItemKind(k) for k in kinds), reach=reach)

    def narrowed(self, **changes: object) -> MetaFilter:
        """A validated copy with ``changes`` applied."""
        return MetaFilter.model_validate({**self.__dict__, **changes})

    # predicates -----------------------------------------------------------------------------------------
    def is_empty(self) -> bool:
        """True exactly when this is the default filter; a reach-only filter is not empty."""
        return self == _EMPTY

    def effective_reach(self) -> Reach:
        """The reach reads use: this filter's, else ``subtree(root)``."""
        return self.reach if self.reach is not None else _SUBTREE_ROOT

    def admits_kind(self, kind: ItemKind) -> bool:
        """True when ``kinds`` is empty or lists ``kind``."""
        return not self.kinds or kind in self.kinds

    def admits_namespace(self, ns: Namespace) -> bool:
        """True when the effective reach admits ``ns``."""
        return self.effective_reach().admits(ns)

    def matches(self, kind: ItemKind, meta: MemoryMeta) -> bool:
        """True when an item of ``kind`` with ``meta`` passes every set field."""
        if self.kinds and kind not in self.kinds:
            return False
        if not self.effective_reach().admits(meta.namespace):
            return False
        for name in ("workspace", "language", "repo", "commit", "url", "thread_id", "agent_id"):
            want = getattr(self, name)
            if want is not None and getattr(meta, name) != want:
                return False
        if self.folder is not None and (meta.folder is None or not path_has_prefix(meta.folder, self.folder)):
            return False
        if self.file_path is not None and (
            meta.file_path is None or not path_has_prefix(meta.file_path, self.file_path)
        ):
            return False
        if self.turns is not None and meta.turns != self.turns:
            return False
        if self.tool_call is not None and (meta.tool_call is None or meta.tool_call.name != self.tool_call):
            return False
        if self.source_id is not None and meta.source.id != self.source_id:
            return False
        if self.sources and meta.source.kind not in self.sources:
            return False
        if self.tags_any and not set(self.tags_any).intersection(meta.tags):
            return False
        if self.observed_after is not None or self.observed_before is not None:
            at = meta.observed_at
            if at is None:
                return False
            if self.observed_after is not None and at < self.observed_after:
                return False
            if self.observed_before is not None and at >= self.observed_before:
                return False
        return True


_EMPTY = MetaFilter()
_SUBTREE_ROOT = Reach.subtree(ROOT)
