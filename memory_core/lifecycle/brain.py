"""``Brain``: the company brain, documents shared by every agent and kept apart by source (reference §4.5).

| call | writes | returns |
| --- | --- | --- |
| ``ingest(doc)`` | one document at its source's node, ``visible`` | ``Ingested{receipt, job?}`` |
| ``ingest_with(doc, wait)`` | the same with a wait policy | ``Ingested`` |
| ``ingest_many(docs)`` | every document, in ``store_many`` chunks of 100 | ``BrainBatch{receipts, jobs}`` |
| ``search(query, source?)`` | — | hits within one source or the whole brain |
| ``forget(source)`` | removes the source's documents, collections included | ``ForgetReport`` |
| ``build(source)`` | — | the ``BuildBeliefs`` job for the source |
| ``ingest_job(docs)`` | — | an ``IngestBrain`` for the workers, placed at this layout's root |

A brain document never carries an agent id and always lives at its source's node (or a collection below it),
whatever metadata the caller passes: ``BrainDocument.into_item`` enforces it. Under an engine that declares
``automatic`` consolidation no ingest returns a job; ``build`` still does.

A source is always named: only ``search`` reads the whole brain, and only when ``source`` is left out. None,
a blank id or a blank collection is refused, never read as "every source" (``forget(None)`` would otherwise
erase every document below the root).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memory_core._model import ContractModel
from memory_core.consolidation import ConsolidateRequest, Consolidation, WaitFor, WriteOptions
from memory_core.engine import MemoryEngine, check_engine
from memory_core.errors import InvalidRequest, Unsupported
from memory_core.items import Document
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain
from memory_core.lifecycle.layout import BrainSource, MemoryLayout, check_collection, check_layout
from memory_core.limits import MAX_PAGE_LIMIT, MAX_STORE_MANY
from memory_core.meta import ItemKind
from memory_core.namespace import Reach
from memory_core.query import FetchRequest, ForgetReport, ForgetTarget, Hit, StoreReceipt

__all__ = ["Brain", "BrainBatch", "Ingested", "prefixed"]

DocumentInput = BrainDocument | Mapping[str, Any] | str
"""A brain document as a model, a JSON object or JSON text."""


class Ingested(ContractModel):
    """``{receipt, job?}``: one stored document and the build for its source (None under ``automatic``)."""

    receipt: StoreReceipt
    job: BuildBeliefs | None = None


class BrainBatch(ContractModel):
    """``{receipts, jobs}``: receipts in document order, one build per distinct source (none under ``automatic``)."""

    receipts: tuple[StoreReceipt, ...] = ()
    jobs: tuple[BuildBeliefs, ...] = ()


def _options(wait: WaitFor | WriteOptions | str) -> WriteOptions:
    if isinstance(wait, WriteOptions):
        return wait
    try:
        return WriteOptions(wait=WaitFor(wait))
    except ValueError:
        raise InvalidRequest(f"unknown wait {wait!r} (known: accepted, visible)", field="wait") from None


class Brain:
    """The brain of one layout: ``Brain(engine, layout)``.

    Args:
        engine: Any ``MemoryEngine``.
        layout: Where the brain lives (``root/source:<id>``); None: ``MemoryLayout()``.

    Raises:
        InvalidRequest: ``field="engine"``: not a ``MemoryEngine``; ``field="layout"``: not a ``MemoryLayout``.
    """

    __slots__ = ("engine", "layout")

    def __init__(self, engine: MemoryEngine, layout: MemoryLayout | None = None) -> None:
        self.engine = check_engine(engine)
        self.layout = check_layout(layout)

    def __repr__(self) -> str:
        return f"Brain({self.engine.descriptor().id!r}, {self.layout!r})"

    # writes --------------------------------------------------------------------------------------------
    def ingest(self, doc: DocumentInput, *, collection: str | None = None) -> Ingested:
        """Store one document and wait until it is visible (``ingest_with(doc, visible)``).

        Args:
            doc: The document (model, JSON object or JSON text).
            collection: Store it in ``brain_collection(source, collection)`` instead of the source's node.

        Raises:
            InvalidRequest: a malformed document, blank text or a blank ``collection``; nothing is stored.
        """
        return self.ingest_with(doc, WaitFor.VISIBLE, collection=collection)

    def ingest_with(
        self, doc: DocumentInput, wait: WaitFor | WriteOptions | str, *, collection: str | None = None
    ) -> Ingested:
        """Store one document with a wait policy (``visible`` or ``accepted``).

        Returns:
            ``Ingested{receipt, job}``; ``job`` builds the source's subtree, None under ``automatic``.

        Raises:
            InvalidRequest: a malformed document, blank text, an unknown wait or a blank ``collection``; nothing
                is stored.
        """
        opts = _options(wait)
        _check_optional_collection(collection)
        document = BrainDocument.coerce(doc, "document")
        item = document.into_item(self.layout, collection)
        receipt = self.engine.store_with(item, opts)
        job = None if self._automatic() else self.build(document.source)
        return Ingested(receipt=receipt, job=job)

    def ingest_many(
        self,
        docs: Sequence[DocumentInput],
        wait: WaitFor | WriteOptions | str = WaitFor.VISIBLE,
        *,
        collection: str | None = None,
    ) -> BrainBatch:
        """Store many documents: every one is converted first, then stored in chunks of ``MAX_STORE_MANY``.

        Returns:
            ``BrainBatch``: receipts in document order; one ``BuildBeliefs`` per distinct source, in first-seen
            order (none under ``automatic``).

        Raises:
            InvalidRequest: no documents, any invalid one (named ``documents.<i>…``) or a blank ``collection``;
                nothing is stored.
        """
        opts = _options(wait)
        converted = self._convert_all(docs, collection)
        items = [item for _, item in converted]
        sources = dict.fromkeys(document.source for document, _ in converted)
        receipts: list[StoreReceipt] = []
        for start in range(0, len(items), MAX_STORE_MANY):
            receipts.extend(self.engine.store_many_with(items[start : start + MAX_STORE_MANY], opts))
        jobs = () if self._automatic() else tuple(self.build(src) for src in sources)
        return BrainBatch(receipts=tuple(receipts), jobs=jobs)

    def forget(self, source: BrainSource | str) -> ForgetReport:
        """Forget every document of ``source``, its collections included (``[document]``, its subtree).

        The source is parsed before any filter is built: None never means "the whole brain" here.

        Raises:
            InvalidRequest: ``field="source"``: None, a blank id or one that is not a slug; nothing is forgotten.
        """
        return self.engine.forget(ForgetTarget.by_filter(self.layout.brain_filter(BrainSource.parse(source))))

    # reads ---------------------------------------------------------------------------------------------
    def search(self, query: str, source: BrainSource | str | None = None, limit: int = 10) -> list[Hit]:
        """Ranked documents within one source (collections included) or the whole brain.

        Fetches in ``hybrid`` mode when the engine offers it, else in its first declared mode.

        Args:
            query: What to look for (non-blank).
            source: One source, or None for every document below the layout root.
            limit: Most hits (1..=1000).

        Raises:
            InvalidRequest: a blank query, a blank source, or a limit that is not an integer (``True`` is not)
                within range.
            Unsupported: the engine offers no fetch mode.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAGE_LIMIT:
            raise InvalidRequest(f"must be an integer within 1..={MAX_PAGE_LIMIT}, got {limit!r}", field="limit")
        flt = self.layout.brain_filter(None if source is None else BrainSource.parse(source))
        mode = self.engine.descriptor().preferred_mode()
        if mode is None:
            raise Unsupported(f"engine `{self.engine.descriptor().id}` offers no fetch mode")
        request = FetchRequest(query=query, mode=mode, filter=flt, limit=limit)
        return list(self.engine.fetch(request).hits)

    # jobs ----------------------------------------------------------------------------------------------
    def build(self, source: BrainSource | str) -> BuildBeliefs:
        """The belief build for ``source``: ``subtree(brain(source))``, kinds ``[document]``.

        Returned even under ``automatic``, where it asks for an immediate build.

        Raises:
            InvalidRequest: a blank source id.
        """
        reach = Reach.subtree(self.layout.brain(source))
        return BuildBeliefs(request=ConsolidateRequest(reach=reach, kinds=(ItemKind.DOCUMENT,)))

    def ingest_job(self, docs: Sequence[DocumentInput], *, collection: str | None = None) -> IngestBrain:
        """The ``IngestBrain`` job that stores ``docs`` in this brain when a worker runs it.

        Every document is checked as ``ingest_many`` would (so a bad one is refused here, not in the worker),
        and the job names this layout's ``root``: a worker configured for another root still stores the
        documents under this one.

        Raises:
            InvalidRequest: no documents, any invalid one (named ``documents.<i>…``) or a blank ``collection``.
        """
        converted = self._convert_all(docs, collection)
        documents = tuple(document for document, _ in converted)
        return IngestBrain(documents=documents, collection=collection, root=self.layout.root)

    # helpers -------------------------------------------------------------------------------------------
    def _automatic(self) -> bool:
        return self.engine.descriptor().consolidation is Consolidation.AUTOMATIC

    def _convert_all(
        self, docs: Sequence[DocumentInput], collection: str | None
    ) -> list[tuple[BrainDocument, Document]]:
        _check_optional_collection(collection)
        if isinstance(docs, Mapping | str | bytes) or not isinstance(docs, Sequence):
            raise InvalidRequest("expected a list of documents", field="documents")
        if not docs:
            raise InvalidRequest("no documents", field="documents")
        return [self._convert(raw, i, collection) for i, raw in enumerate(docs)]

    def _convert(self, raw: DocumentInput, index: int, collection: str | None) -> tuple[BrainDocument, Document]:
        prefix = f"documents.{index}"
        try:
            document = BrainDocument.coerce(raw, prefix)
            return document, document.into_item(self.layout, collection)
        except InvalidRequest as exc:
            raise prefixed(exc, prefix) from None


def _check_optional_collection(collection: object) -> None:
    """None means the source's node; anything else must name a collection (never ``""`` for "none")."""
    if collection is not None:
        check_collection(collection)


def prefixed(exc: InvalidRequest, prefix: str) -> InvalidRequest:
    """``exc`` with its field moved below ``prefix`` (``text`` → ``documents.3.text``); unchanged if already there.

    Args:
        exc: The error about one element of a list.
        prefix: The element's path, such as ``documents.3``.
    """
    if exc.field is not None and (exc.field == prefix or exc.field.startswith(prefix + ".")):
        return exc
    return InvalidRequest(exc.reason, field=f"{prefix}.{exc.field}" if exc.field else prefix)
