"""``brain_document``: a file or bytes → ``BrainDocument`` (issue 3 item 6; reference §4.5 brain documents).

Conversion is pure apart from reading the file: nothing is stored, no network is used, no file other than the
one named is read (reST ``include`` is disabled). Every failure caused by the input is an ``InvalidRequest``
with ``field="file"`` whose message starts with the file's name, so a caller converting many files can report
each one and store none until all are converted (``Brain.ingest_many`` converts first).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from memory_core.documents.blocks import join_blocks, strip_escapes, tidy, title_of
from memory_core.documents.budget import OverBudget
from memory_core.documents.detect import DocumentFormat, RawInput, decode_text, detect_format, read_input
from memory_core.documents.html import html_to_text
from memory_core.documents.markdown import markdown_to_text
from memory_core.documents.pdf import pdf_to_text
from memory_core.documents.rst import rst_to_text
from memory_core.errors import InvalidRequest, MemoryCoreError
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.layout import BrainSource
from memory_core.limits import MAX_TEXT_CHARS
from memory_core.meta import MemoryMeta

__all__ = ["brain_document", "convert_text"]

_TEXT_CONVERTERS: dict[DocumentFormat, Callable[[str], tuple[str | None, list[str]]]] = {
    DocumentFormat.MARKDOWN: markdown_to_text,
    DocumentFormat.RST: rst_to_text,
    DocumentFormat.HTML: html_to_text,
}
_HEADING_TITLED = frozenset({DocumentFormat.MARKDOWN, DocumentFormat.HTML})


def _first_line(text: str) -> str | None:
    return next((line for line in text.split("\n") if line.strip()), None)


def convert_text(source: str, fmt: DocumentFormat) -> tuple[str | None, str]:
    """Convert decoded source text of a text format (not PDF) to ``(title, plain text)``.

    A Markdown or HTML title taken from a heading that opens the text is not repeated as the text's first
    line: ``Document.render_text()`` already shows ``# {title}`` above the body. Plain text keeps its lines
    (only whitespace is normalised); its title is its first line. Terminal escape sequences (``ESC[31m``) are
    removed before any parsing, so no format sees them (``blocks.strip_escapes``), and so is a leading
    byte-order mark (U+FEFF) left by a caller that decoded UTF-8-sig bytes as UTF-8: it would hide a Markdown
    heading or a PEP header and start the title.

    Raises:
        OverBudget: the source is over its format's work budget (``documents.budget``: nesting, nodes).
    """
    source = strip_escapes(source.removeprefix("\ufeff"))
    if fmt is DocumentFormat.TEXT:
        text = tidy(source)
        return title_of(_first_line(text)), text
    title, blocks = _TEXT_CONVERTERS[fmt](source)
    if fmt in _HEADING_TITLED and title and blocks and blocks[0] == title:
        blocks = blocks[1:]
    return title, join_blocks(blocks)


def _convert(raw: RawInput, mime: str | None) -> tuple[DocumentFormat, str | None, str]:
    """``_convert_within_budget``, a converter's ``OverBudget`` or ``RecursionError`` refused naming the file."""
    try:
        return _convert_within_budget(raw, mime)
    except OverBudget as exc:
        raise InvalidRequest(
            f"{raw.label} is over the conversion budget: {exc} (split or simplify it before ingesting)", field="file"
        ) from None
    except RecursionError:
        raise InvalidRequest(
            f"{raw.label} nests deeper than the converter can follow (split or simplify it before ingesting)",
            field="file",
        ) from None


def _convert_within_budget(raw: RawInput, mime: str | None) -> tuple[DocumentFormat, str | None, str]:
    fmt, charset = detect_format(raw, mime)
    if fmt is DocumentFormat.PDF:
        title, blocks = pdf_to_text(raw.data, raw.label)
        text = join_blocks(blocks)
        if not text:
            raise InvalidRequest(
                f"{raw.label} has no extractable text (scanned pages need OCR first)",
                field="file",
            )
        return fmt, title or title_of(_first_line(text)), text
    source = decode_text(raw, fmt, charset)
    try:
        title, text = convert_text(source, fmt)
    except (MemoryCoreError, OverBudget, RecursionError):
        raise
    except Exception as exc:  # a parser bug on odd input must not stop a batch: report it against the file
        reason = f"{type(exc).__name__}: {exc}"
        raise InvalidRequest(f"{raw.label} could not be converted as {fmt} ({reason})", field="file") from exc
    return fmt, title, text


def brain_document(
    raw: Path | str | bytes,
    source: BrainSource | str | None = None,
    meta: MemoryMeta | None = None,
    *,
    name: str | None = None,
    mime: str | None = None,
) -> BrainDocument:
    """Convert a Markdown, reStructuredText, HTML, plain-text or PDF file into a ``BrainDocument``.

    The format comes from the ``%PDF-`` magic, then ``mime``, then the extension of ``name`` (or of the path),
    then the content (see ``documents.detect``). The document's ``text`` is readable plain text: headings as
    their own lines, no markup, paragraphs separated by one blank line; its ``title`` comes from the format
    (Markdown's first ``#`` heading or front matter, reST's document title or a PEP's ``Title:``, HTML's
    ``<title>`` or first ``<h1>``, PDF's metadata title or first line, plain text's first line); its ``mime`` is
    the format's (``text/markdown``, ``text/x-rst``, ``text/html``, ``text/plain``, ``application/pdf``).

    Example:
        ``brain_document(Path("docs/guide.md"))`` → a ``markdown``-source document with ``meta.file_path`` set.

    Args:
        raw: A path (``Path`` or ``str``; a ``str`` is always a path) or the file's ``bytes``.
        source: The brain source; defaults from the format (``markdown``, ``pdf``, else ``files``).
        meta: Metadata to keep; ``file_path`` (absolute) and ``folder`` (its directory) are filled in from a path
            when not already set.
        name: A file name for bytes (used for the extension and in errors), or to override a path's.
        mime: Forces the format (and, with ``charset=``, the text encoding).

    Returns:
        The document, not yet placed or stored (``BrainDocument.into_item`` places it).

    Raises:
        InvalidRequest: ``field="file"``, the message naming the file: a missing, unreadable or non-regular
            path; over ``MAX_DOCUMENT_BYTES`` (20 MiB); over its format's work budget (``documents.budget``:
            nesting depth, elements, pages; "is over the conversion budget: HTML nesting depth 257 is over the
            budget of 256"); an unsupported extension; binary content; text that is
            not UTF-8 (or the named charset); a damaged or encrypted PDF, or one with no extractable text; no text
            left after conversion, or more than ``MAX_TEXT_CHARS`` characters. ``field="mime"``: an unsupported
            mime type or unknown charset. ``field="source"``: a blank source.
    """
    brain_source = BrainSource.parse(source) if source is not None else None
    data = read_input(raw, name)
    fmt, title, text = _convert(data, mime)
    if not text.strip():
        raise InvalidRequest(f"{data.label} has no text after conversion", field="file")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidRequest(
            f"{data.label} converts to {len(text):,} characters, over the {MAX_TEXT_CHARS:,}-character limit of one "
            "document; split it before ingesting",
            field="file",
        )
    kept = meta or MemoryMeta()
    if data.path is not None:
        absolute = str(data.path)
        updates: dict[str, object] = {}
        if kept.file_path is None:
            updates["file_path"] = absolute
        if kept.folder is None:
            updates["folder"] = str(data.path.parent)
        if updates:
            kept = kept.with_(**updates)
    return BrainDocument.new(brain_source or fmt.default_source, text, title=title, mime=fmt.mime, meta=kept)
