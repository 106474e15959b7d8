"""What a file is, how big it may be, and how its bytes become text (pure apart from reading the file).

Formats: Markdown, reStructuredText, HTML, plain text and PDF. The format comes from, in order:

1. the ``%PDF-`` magic number (a PDF is a PDF whatever it is called);
2. the caller's ``mime`` (``text/markdown``, ``text/x-rst``, ``text/html``, ``text/plain``, ``application/pdf``
   and their common aliases; a ``charset=`` parameter is honoured);
3. the file extension (``SUPPORTED_EXTENSIONS``); an unknown extension is refused, never guessed;
4. content sniffing, for bytes without a name or a file without an extension: ``<!doctype html`` or
   ``<html`` → HTML, an RFC-822 header with ``Title:`` (a PEP) or reST section underlines and directives →
   reST, ATX headings, fences or inline links → Markdown, anything else → plain text. Content with a
   byte-order mark is sniffed as the text the mark says it is (UTF-16 ``<!doctype html`` is HTML).

Text decoding (``decode_text``) never guesses a legacy encoding: a byte-order mark (UTF-8, UTF-16, UTF-32)
wins when what follows it is text in that encoding (else the content is refused as binary, as NUL bytes are,
for every text format alike), then a ``charset`` the caller names, then strict UTF-8, then (HTML only) the
charset the document itself declares in its first 1024 bytes, as browsers do. Anything else is refused with a
message saying how to re-encode. Guessing (cp1252 vs latin-1 vs shift-jis) is wrong often enough on short
texts that the damage would be stored, embedded and recalled silently; a clear error is cheap to fix at the
source.

Error messages speak to whoever holds the file, often a ``memory-core ingest`` user with no ``mime`` option:
they say what the file looked like (``describe_content``) and which formats are accepted
(``accepted_formats``), not which Python argument would force another reading.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from memory_core.errors import InvalidRequest
from memory_core.lifecycle.layout import BrainSource

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "SUPPORTED_EXTENSIONS",
    "DocumentFormat",
    "RawInput",
    "accepted_formats",
    "decode_text",
    "describe_content",
    "detect_format",
    "format_for_extension",
    "read_input",
]

MAX_DOCUMENT_BYTES: Final = 20 * 1024 * 1024
"""Largest input accepted for conversion, in bytes (20 MiB; *memory-core*).

The whole file is held in memory, several times over while a PDF or HTML tree is parsed, inside a worker that
may convert many files in a row; 20 MiB bounds that to well under a gigabyte. It is generous for text: a
converted document must also fit ``MAX_TEXT_CHARS`` (1,000,000 characters, about 1 MB), and the formats that
need more bytes than characters (PDF with fonts and images, HTML with markup) rarely exceed 20 bytes a
character. A larger file should be split before ingestion."""


class DocumentFormat(StrEnum):
    """A supported input format, with its canonical mime type and default brain source."""

    MARKDOWN = "markdown"
    RST = "rst"
    HTML = "html"
    TEXT = "text"
    PDF = "pdf"

    @property
    def mime(self) -> str:
        """The mime type a converted document carries (``text/markdown``, ``text/x-rst``, …)."""
        return _MIME[self]

    @property
    def label(self) -> str:
        """The format's name for people: ``Markdown``, ``reStructuredText``, ``HTML``, ``plain text``, ``PDF``."""
        return _LABEL[self]

    @property
    def default_source(self) -> BrainSource:
        """``markdown`` for Markdown, ``pdf`` for PDF, ``files`` for the rest (reference §4.4 source ids)."""
        if self is DocumentFormat.MARKDOWN:
            return BrainSource.MARKDOWN
        if self is DocumentFormat.PDF:
            return BrainSource.PDF
        return BrainSource.FILES


_MIME: Final = {
    DocumentFormat.MARKDOWN: "text/markdown",
    DocumentFormat.RST: "text/x-rst",
    DocumentFormat.HTML: "text/html",
    DocumentFormat.TEXT: "text/plain",
    DocumentFormat.PDF: "application/pdf",
}

_LABEL: Final = {
    DocumentFormat.MARKDOWN: "Markdown",
    DocumentFormat.RST: "reStructuredText",
    DocumentFormat.HTML: "HTML",
    DocumentFormat.TEXT: "plain text",
    DocumentFormat.PDF: "PDF",
}

_MIME_ALIASES: Final = {
    "text/markdown": DocumentFormat.MARKDOWN,
    "text/x-markdown": DocumentFormat.MARKDOWN,
    "text/x-rst": DocumentFormat.RST,
    "text/prs.fallenstein.rst": DocumentFormat.RST,
    "text/html": DocumentFormat.HTML,
    "application/xhtml+xml": DocumentFormat.HTML,
    "text/plain": DocumentFormat.TEXT,
    "application/pdf": DocumentFormat.PDF,
}

SUPPORTED_EXTENSIONS: Final = {
    ".md": DocumentFormat.MARKDOWN,
    ".markdown": DocumentFormat.MARKDOWN,
    ".mdown": DocumentFormat.MARKDOWN,
    ".mkd": DocumentFormat.MARKDOWN,
    ".mkdn": DocumentFormat.MARKDOWN,
    ".rst": DocumentFormat.RST,
    ".rest": DocumentFormat.RST,
    ".html": DocumentFormat.HTML,
    ".htm": DocumentFormat.HTML,
    ".xhtml": DocumentFormat.HTML,
    ".txt": DocumentFormat.TEXT,
    ".text": DocumentFormat.TEXT,
    ".pdf": DocumentFormat.PDF,
}
"""File extensions (lowercase, with the dot) and the format each one means."""

PDF_MAGIC: Final = b"%PDF-"

_BOMS: Final = (  # UTF-32 first: its little-endian mark starts with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_HTML_START = re.compile(rb"^\s*(?:<!--.*?-->\s*)*(?:<!doctype\s+html|<html[\s>])", re.IGNORECASE | re.DOTALL)
_HTML_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?\s*([a-zA-Z0-9_.:-]+)", re.IGNORECASE)
_HEADER_BLOCK = re.compile(r"\A(?:[A-Za-z][A-Za-z0-9-]*:[ \t].*\n(?:[ \t]+\S.*\n)*)+", re.MULTILINE)
_MD_SIGNS = re.compile(r"^(?:#{1,6}[ \t]+\S|```|~~~)|\[[^\]\n]+\]\([^)\s]+\)", re.MULTILINE)
_RST_SIGNS = re.compile(
    r"^\.\. [A-Za-z][\w-]*::|:[a-z][\w:+-]*:`[^`]+`|^(\S[^\n]*)\n([=\-~^\"'`#*+:.])\2{2,}[ \t]*$", re.MULTILINE
)


@dataclass(frozen=True, slots=True)
class RawInput:
    """Bytes to convert with what is known about them.

    Attributes:
        data: The file's bytes, at most ``MAX_DOCUMENT_BYTES``.
        label: How errors name the input: the path as given, the caller's ``name``, or ``<bytes>``.
        path: The absolute path, when the input was read from a file.
        name: The name used for the extension: the caller's ``name``, else the path's file name.
    """

    data: bytes
    label: str
    path: Path | None
    name: str | None


def _too_large(label: str, size: int) -> InvalidRequest:
    return InvalidRequest(
        f"{label} is {size:,} bytes, over the {MAX_DOCUMENT_BYTES:,}-byte limit; split it before ingesting",
        field="file",
    )


def read_input(raw: Path | str | bytes, name: str | None = None) -> RawInput:
    """Read a path (``Path`` or ``str``) or take ``bytes``, enforcing ``MAX_DOCUMENT_BYTES``.

    A ``str`` is always a path; pass document content as ``bytes``.

    Raises:
        InvalidRequest: ``field="file"``: a missing path, a directory or other non-regular file, an unreadable
            file, or more than ``MAX_DOCUMENT_BYTES``; ``field="raw"``: neither a path nor bytes.
    """
    if isinstance(raw, bytes | bytearray | memoryview):
        data = bytes(raw)
        label = name or "<bytes>"
        if len(data) > MAX_DOCUMENT_BYTES:
            raise _too_large(label, len(data))
        return RawInput(data=data, label=label, path=None, name=name)
    if not isinstance(raw, str | Path):
        raise InvalidRequest(f"expected a path or bytes, got {type(raw).__name__}", field="raw")
    label = str(raw)
    path = Path(os.path.abspath(Path(raw).expanduser()))  # absolute and normalised; symlinks kept
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InvalidRequest(f"{label}: no such file", field="file") from None
    except OSError as exc:
        raise InvalidRequest(f"{label}: cannot read ({exc.strerror or exc})", field="file") from None
    if stat.S_ISDIR(st.st_mode):
        raise InvalidRequest(f"{label} is a directory, not a file", field="file")
    if not stat.S_ISREG(st.st_mode):
        raise InvalidRequest(f"{label} is not a regular file", field="file")
    if st.st_size > MAX_DOCUMENT_BYTES:
        raise _too_large(label, st.st_size)
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_DOCUMENT_BYTES + 1)  # the file may have grown since stat
    except OSError as exc:
        raise InvalidRequest(f"{label}: cannot read ({exc.strerror or exc})", field="file") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise _too_large(label, len(data))
    return RawInput(data=data, label=label, path=path, name=name or path.name)


def parse_mime(mime: str) -> tuple[DocumentFormat, str | None]:
    """The format a mime type names and its ``charset`` parameter, if any.

    Raises:
        InvalidRequest: ``field="mime"``: a mime type that is none of the supported formats.
    """
    kind, *params = (part.strip() for part in mime.split(";"))
    fmt = _MIME_ALIASES.get(kind.lower())
    if fmt is None:
        supported = ", ".join(sorted(_MIME_ALIASES))
        raise InvalidRequest(f"unsupported mime type {kind!r} (supported: {supported})", field="mime")
    charset = None
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return fmt, charset


def accepted_formats() -> str:
    """The accepted formats with their extensions, for error messages: ``Markdown (.md, …), …, PDF (.pdf)``."""
    by_format: dict[DocumentFormat, list[str]] = {}
    for extension, fmt in SUPPORTED_EXTENSIONS.items():
        by_format.setdefault(fmt, []).append(extension)
    return ", ".join(f"{fmt.label} ({', '.join(exts)})" for fmt, exts in by_format.items())


def describe_content(data: bytes) -> str:
    """What bytes look like, for an error message: ``binary data``, ``empty``, or the sniffed text format."""
    if not data.strip():
        return "empty"
    head = data[:4096]
    if not any(head.startswith(bom) for bom, _ in _BOMS) and b"\x00" in head:
        return "binary data"
    fmt = sniff(data)
    return "a PDF" if fmt is DocumentFormat.PDF else fmt.label


def format_for_extension(name: str) -> DocumentFormat | None:
    """The format a file name's extension means, or None for an unknown or missing extension."""
    return SUPPORTED_EXTENSIONS.get(Path(name).suffix.lower())


def _head_text(head: bytes) -> str:
    """The start of a file as text, for sniffing: decoded by its byte-order mark (dropped), else as UTF-8.

    A UTF-16 or UTF-32 head read as UTF-8 is NUL-riddled, so no HTML, reST or Markdown sign would match it and
    a marked ``<!doctype html>`` file without an extension would be stored as plain text, tags and all. Bytes
    that do not decode become U+FFFD; a code unit cut at the end of ``head`` is left out.
    """
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return codecs.getincrementaldecoder(encoding)(errors="replace").decode(head)
    return head.decode("utf-8", errors="replace")


def sniff(data: bytes) -> DocumentFormat:
    """Guess the format of unnamed bytes from their content (see the module docstring for the rules)."""
    if data.startswith(PDF_MAGIC):
        return DocumentFormat.PDF
    text = _head_text(data[:4096])
    if _HTML_START.match(text.encode("utf-8")):
        return DocumentFormat.HTML
    header = _HEADER_BLOCK.match(text)
    if header and re.search(r"^Title:", header.group(0), re.MULTILINE):
        return DocumentFormat.RST
    if _MD_SIGNS.search(text):
        return DocumentFormat.MARKDOWN
    if _RST_SIGNS.search(text):
        return DocumentFormat.RST
    return DocumentFormat.TEXT


def detect_format(raw: RawInput, mime: str | None = None) -> tuple[DocumentFormat, str | None]:
    """The format of ``raw`` and the charset the caller's mime names (see the module docstring for the order).

    Raises:
        InvalidRequest: ``field="mime"`` for an unsupported mime type; ``field="file"`` for an unsupported
            extension, or a file said to be a PDF (by name or mime) without the ``%PDF-`` header.
    """
    if raw.data.startswith(PDF_MAGIC):
        return DocumentFormat.PDF, None
    if mime:
        fmt, charset = parse_mime(mime)
    elif raw.name and Path(raw.name).suffix:
        suffix = Path(raw.name).suffix.lower()
        found = SUPPORTED_EXTENSIONS.get(suffix)
        if found is None:
            raise InvalidRequest(
                f"{raw.label}: unsupported file type {suffix!r} (its content looks like {describe_content(raw.data)});"
                f" accepted: {accepted_formats()}",
                field="file",
            )
        fmt, charset = found, None
    else:
        fmt, charset = sniff(raw.data), None
    if fmt is DocumentFormat.PDF:
        raise InvalidRequest(
            f"{raw.label} is not a PDF (no %PDF- header; its content looks like {describe_content(raw.data)})",
            field="file",
        )
    return fmt, charset


def _decode(data: bytes, encoding: str, label: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"{label} is not valid {encoding} (byte 0x{data[exc.start]:02x} at offset {exc.start})", field="file"
        ) from None


def _binary(label: str, why: str) -> InvalidRequest:
    """The refusal of content that is not text: ``<label> is binary (<why>), not a supported document``."""
    return InvalidRequest(f"{label} is binary ({why}), not a supported document", field="file")


def _decode_marked(data: bytes, bom: bytes, encoding: str, label: str) -> str:
    """``data``, which starts with ``bom``, decoded as the Unicode encoding the mark names (the mark dropped).

    The mark is trusted only when what follows it is that encoding's text: bytes that do not decode, text
    holding NUL (U+0000), or UTF-8 text behind a UTF-16 or UTF-32 mark are refused as binary, as NUL bytes in
    unmarked content are, so no format stores mojibake. UTF-8 text behind the mark is recognised by its bytes:
    no NUL byte (UTF-16 text with any character below U+0100, a space or a line break, has one, and UTF-32
    text always has), valid UTF-8 holding a line feed; then the decoded text holds no line feed, as UTF-8 read
    two bytes at a time never does (*memory-core*).

    Raises:
        InvalidRequest: ``field="file"``: the content after the mark is not text in its encoding.
    """
    name = encoding.removesuffix("-sig").upper()
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        why = f"it starts with a {name} byte-order mark, but byte 0x{data[exc.start]:02x} at offset {exc.start} "
        raise _binary(label, why + f"does not decode as {name}") from None
    if "\x00" in text:
        raise _binary(label, f"its {name} text holds NUL (U+0000) at character {text.index(chr(0))}")
    body = data[len(bom) :]
    if encoding != "utf-8-sig" and b"\x00" not in body and b"\n" in body and "\n" not in text:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return text
        raise _binary(
            label,
            f"it starts with a {name} byte-order mark, but the bytes after it are UTF-8 text; "
            f"remove the first {len(bom)} bytes, or save it again as UTF-8",
        )
    return text


def _known_codec(charset: str) -> str | None:
    try:
        return codecs.lookup(charset).name
    except LookupError:
        return None


def decode_text(raw: RawInput, fmt: DocumentFormat, charset: str | None = None) -> str:
    """The text of a text-format input (see the module docstring for the decoding order).

    Args:
        raw: The input.
        fmt: Its detected format; only HTML consults an in-document charset declaration.
        charset: A charset the caller named (the ``charset=`` of its mime), trusted over UTF-8.

    Raises:
        InvalidRequest: ``field="file"`` for binary content (NUL bytes without a UTF-16/32 byte-order mark, or
            a byte-order mark before bytes that are not text in its encoding: the same "is binary" refusal) or
            bytes that do not decode; ``field="mime"`` for a charset Python does not know.
    """
    data = raw.data
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _decode_marked(data, bom, encoding, raw.label)
    if b"\x00" in data:
        raise _binary(raw.label, "it contains NUL bytes")
    if charset:
        codec = _known_codec(charset)
        if codec is None:
            raise InvalidRequest(f"unknown charset {charset!r}", field="mime")
        return _decode(data, codec, raw.label)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    if fmt is DocumentFormat.HTML:
        declared = _HTML_CHARSET.search(data[:1024])
        codec = _known_codec(declared.group(1).decode("ascii")) if declared else None
        if codec is not None and codec != "utf-8":
            return _decode(data, codec, raw.label)
    if _mostly_text(data):
        looks = "it looks like text in a legacy 8-bit encoding such as cp1252 or latin-1"
        advice = "re-encode it as UTF-8, e.g. iconv -f cp1252 -t utf-8"
    else:
        looks, advice = "it looks like binary data", "only text documents and PDFs are accepted"
    raise InvalidRequest(
        f"{raw.label} is not valid UTF-8 (byte 0x{data[first_bad]:02x} at offset {first_bad}; {looks}): {advice}",
        field="file",
    )


_BINARY_BYTES = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]")


def _mostly_text(data: bytes) -> bool:
    """True when at most 1% of the first 4 KiB are control bytes other than whitespace and ESC (*memory-core*)."""
    head = data[:4096]
    return len(_BINARY_BYTES.findall(head)) * 100 <= len(head)
