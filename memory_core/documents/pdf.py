"""PDF → (title, readable text), with pypdf (pure Python, no system libraries).

Text is pypdf's extraction of each page in reading order; pages are separated by a blank line, each line has
its runs of spaces collapsed (PDF extraction pads columns with spaces), and blank-line runs shrink to one. A
PDF keeps no paragraph structure, so lines stay as laid out. The title is the document information
dictionary's ``/Title`` when it is not blank, else the first non-blank line of the text.

A PDF encrypted with a user password cannot be read (an empty password is tried, as viewers do). Scanned
pages carry images, not text; a PDF with no extractable text at all is refused by the caller (no OCR here).

pypdf reports the repairs it makes on damaged files ("EOF marker not found", …) as log warnings; with no logging
configured Python prints them to standard error, where a CLI user sees them beside (or instead of) the real
outcome. While a PDF converts, the ``pypdf`` logger is held at ``CRITICAL`` (``quiet_pypdf``): an unreadable
file is still refused with ``InvalidRequest``, and the traceback goes to this module's debug log.
"""

from __future__ import annotations

import io
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pypdf import PdfReader
from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject

from memory_core.documents.blocks import title_of
from memory_core.documents.budget import MAX_PDF_PAGES, PDF_BUDGET, OverBudget
from memory_core.errors import InvalidRequest
from memory_core.limits import MAX_TEXT_CHARS

__all__ = ["pdf_to_text", "quiet_pypdf"]

_SPACES = re.compile(r"[ \t\u00a0]{2,}")
_PYPDF_LOGGER = logging.getLogger("pypdf")
_log = logging.getLogger(__name__)
_quiet_lock = threading.Lock()
_quiet_depth = 0
_saved_level = logging.NOTSET


@contextmanager
def quiet_pypdf() -> Iterator[None]:
    """Hold the ``pypdf`` logger (and its children, ``pypdf._reader`` …) at ``CRITICAL`` inside the block.

    Reentrant and thread-safe: the level set before the first block is restored when the last one ends, so
    conversions on several threads at once neither race nor leave pypdf silenced.
    """
    global _quiet_depth, _saved_level
    with _quiet_lock:
        if _quiet_depth == 0:
            _saved_level = _PYPDF_LOGGER.level
            _PYPDF_LOGGER.setLevel(logging.CRITICAL)
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                _PYPDF_LOGGER.setLevel(_saved_level)


def _page_block(text: str) -> str:
    lines = (_SPACES.sub(" ", line).strip() for line in text.splitlines())
    return "\n".join(lines)


def pdf_to_text(data: bytes, label: str) -> tuple[str | None, list[str]]:
    """Extract the title and one block of text per page.

    Args:
        data: The PDF file's bytes (starting ``%PDF-``).
        label: How errors name the file.

    Returns:
        ``(title, blocks)``: the metadata title (else None; the caller falls back to the first line), and one
        block per page that has text.

    Raises:
        InvalidRequest: ``field="file"``: a PDF pypdf cannot parse, or one encrypted with a password.
        OverBudget: a page tree nested deeper than 32 levels or of more than 100,000 nodes (checked before pypdf
            walks it, recursively), more than 5,000 pages, or text past ``MAX_TEXT_CHARS`` (extraction stops
            there).
        RecursionError: objects nested deeper than pypdf's recursive parser can follow.
    """
    with quiet_pypdf():
        return _extract(data, label)


def _check_page_tree(reader: PdfReader) -> None:
    """Walk the page tree iteratively within ``PDF_BUDGET`` (depth, nodes); a node seen twice is walked once."""
    catalog = reader.trailer["/Root"]
    root = catalog.get("/Pages") if isinstance(catalog, DictionaryObject) else None
    stack: list[tuple[object, int]] = [(root, 1)]
    seen: set[int] = set()
    visited = 0
    while stack:
        ref, depth = stack.pop()
        PDF_BUDGET.check_depth(depth, "PDF page tree")
        if isinstance(ref, IndirectObject):
            if ref.idnum in seen:
                continue
            seen.add(ref.idnum)
            ref = ref.get_object()
        visited += 1
        PDF_BUDGET.check_nodes(visited, "PDF page-tree node")
        kids = ref.get("/Kids") if isinstance(ref, DictionaryObject) else None
        kids = kids.get_object() if isinstance(kids, IndirectObject) else kids
        if isinstance(kids, ArrayObject):
            stack.extend((kid, depth + 1) for kid in kids)


def _extract(data: bytes, label: str) -> tuple[str | None, list[str]]:
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise InvalidRequest(f"{label} is an encrypted PDF (a password is needed to read it)", field="file")
        _check_page_tree(reader)
        if len(reader.pages) > MAX_PDF_PAGES:
            raise OverBudget("PDF page count", len(reader.pages), MAX_PDF_PAGES)
        info = reader.metadata
        title = title_of(info.title) if info is not None and isinstance(info.title, str) else None
        blocks: list[str] = []
        chars = 0
        for page in reader.pages:
            blocks.append(_page_block(page.extract_text() or ""))
            chars += len(blocks[-1])
            if chars > MAX_TEXT_CHARS:  # stop extracting: the document is refused at this size anyway
                raise OverBudget("PDF text characters", chars, MAX_TEXT_CHARS)
    except (InvalidRequest, OverBudget, RecursionError):
        raise
    except Exception as exc:  # pypdf raises many types on damaged files: every one means "unreadable"
        _log.debug("pypdf failed on %s", label, exc_info=True)
        raise InvalidRequest(f"{label} is not a readable PDF ({type(exc).__name__}: {exc})", field="file") from None
    return title, [b for b in blocks if b.strip()]
