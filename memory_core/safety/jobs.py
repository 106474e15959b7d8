"""Scrub a background job before it is submitted; pure.

Scrubbed where text enters the job flow, no secret sits in the broker, the outbox, Flower's task arguments, the
result backend or a dead letter (seed 001: "scrubbed outbox entries").

An ``IngestBrain``'s documents are scrubbed as ``scrub_item`` scrubs a document (title, text, metadata); a
``ToolWrite``'s learning as ``scrub_item`` scrubs a learning (text, evidence, ``meta.url``); a ``BuildBeliefs``
carries no text and comes back as is. A job with nothing to scrub is the same object. A job whose ids (its
documents' or learning's metadata ids, a build's namespace) hold a credential is refused (``safety.ids``).
"""

from __future__ import annotations

from typing import TypeVar

from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain
from memory_core.safety.detector import Policy
from memory_core.safety.ids import check_namespace
from memory_core.safety.items import scrub_item, scrub_meta
from memory_core.safety.scrub import scrub
from memory_core.tools.jobs import ToolWrite

__all__ = ["scrub_brain_document", "scrub_job"]

Job = TypeVar("Job")


def scrub_brain_document(document: BrainDocument, policy: Policy | None = None) -> BrainDocument:
    """``document`` with its title, text and metadata (``scrub_meta``) scrubbed (the same object when unchanged)."""
    title = None if document.title is None else scrub(document.title, policy)
    text = scrub(document.text, policy)
    meta = scrub_meta(document.meta, policy)
    if (title, text) == (document.title, document.text) and meta is document.meta:
        return document
    return document.model_copy(update={"title": title, "text": text, "meta": meta})


def scrub_job(job: Job, policy: Policy | None = None) -> Job:
    """``job`` with every text it carries scrubbed; jobs carrying no text come back unchanged.

    Args:
        job: A background job (``IngestBrain``, ``BuildBeliefs``, …).
        policy: The scrub policy; None: ``Policy.default()``.

    Raises:
        InvalidRequest: an id the job carries holds a credential, naming the field.
    """
    if isinstance(job, BuildBeliefs):
        check_namespace(job.request.reach.at, "request.reach.at")
        return job
    if isinstance(job, IngestBrain):
        documents = tuple(scrub_brain_document(doc, policy) for doc in job.documents)
        if all(a is b for a, b in zip(documents, job.documents, strict=True)):
            return job
        scrubbed: Job = job.model_copy(update={"documents": documents})
        return scrubbed
    if isinstance(job, ToolWrite) and job.learning is not None:
        learning = scrub_item(job.learning, policy)
        if learning is job.learning:
            return job
        tool_write: Job = job.model_copy(update={"learning": learning})
        return tool_write
    return job
