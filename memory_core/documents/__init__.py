"""Document conversion: files and bytes into ``BrainDocument`` values, and the folder walker ``ingest`` uses.

``brain_document(path_or_bytes)`` converts one Markdown, reStructuredText, HTML, plain-text or PDF file;
``iter_documents(paths)`` walks files and folders and converts each file, reporting failures and skips per
file; ``split_document`` splits a converted document into section-sized passages (what ``memory-core ingest``
stores). None of them stores anything.
"""

from memory_core.documents.convert import brain_document, convert_text
from memory_core.documents.detect import (
    MAX_DOCUMENT_BYTES,
    SUPPORTED_EXTENSIONS,
    DocumentFormat,
    format_for_extension,
)
from memory_core.documents.passages import split_document, split_text
from memory_core.documents.walk import Converted, DocumentResult, Failed, Skipped, iter_documents, walk_paths

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "SUPPORTED_EXTENSIONS",
    "Converted",
    "DocumentFormat",
    "DocumentResult",
    "Failed",
    "Skipped",
    "brain_document",
    "convert_text",
    "format_for_extension",
    "iter_documents",
    "split_document",
    "split_text",
    "walk_paths",
]
