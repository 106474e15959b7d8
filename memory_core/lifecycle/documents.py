"""``BrainDocument``: a document bound for the brain, before it is placed (reference §4.5)."""

from __future__ import annotations

from pydantic import Field

from memory_core._model import ContractModel
from memory_core.errors import InvalidRequest
from memory_core.items import Document, DocumentBody, validate_item
from memory_core.lifecycle.layout import BrainSource, MemoryLayout
from memory_core.limits import MAX_TEXT_CHARS
from memory_core.meta import MemoryMeta, NulFree, SourceKind, SourceRef

__all__ = ["BrainDocument"]


class BrainDocument(ContractModel):
    """``{source, title?, text, mime?, meta}``: a document bound for the brain.

    ``into_item`` places it at its source's node, never with an agent id, whatever ``meta`` says.
    """

    source: BrainSource
    title: NulFree | None = None
    text: NulFree = Field(max_length=MAX_TEXT_CHARS)
    mime: NulFree | None = None
    meta: MemoryMeta = Field(default_factory=MemoryMeta)

    @classmethod
    def new(
        cls,
        source: BrainSource | str,
        text: str,
        *,
        title: str | None = None,
        mime: str | None = None,
        meta: MemoryMeta | None = None,
    ) -> BrainDocument:
        """A document for ``source``."""
        return cls(source=BrainSource.parse(source), text=text, title=title, mime=mime, meta=meta or MemoryMeta())

    def into_item(self, layout: MemoryLayout, collection: str | None = None) -> Document:
        """The stored form of this document.

        The namespace is forced to the source's node (or its collection), the agent id removed, and a default
        source (kind agent, no id) replaced by the brain source's kind.

        Args:
            layout: The layout whose brain the document joins.
            collection: A collection below the source's node, or None for the node itself.

        Raises:
            InvalidRequest: blank text, a blank ``collection`` (or any other invalid document).
        """
        if not self.text.strip():
            raise InvalidRequest("document text is blank", field="text")
        node = layout.brain(self.source) if collection is None else layout.brain_collection(self.source, collection)
        source = self.meta.source
        if source.kind is SourceKind.AGENT and source.id is None:
            source = SourceRef(kind=self.source.source_kind())
        meta = self.meta.model_copy(update={"namespace": node, "agent_id": None, "source": source})
        doc = Document(title=self.title, body=DocumentBody(text=self.text), mime=self.mime, meta=meta)
        validate_item(doc, field="document")
        return doc
