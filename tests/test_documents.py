"""Document conversion (issue 3 item 6) and the folder walker behind ``memory-core ingest`` (issue 6)."""

from __future__ import annotations

import codecs
import logging
import os
import re
from pathlib import Path

import pytest
from _data import DATA_DIR, require_data

from memory_core.documents import (
    MAX_DOCUMENT_BYTES,
    Converted,
    DocumentFormat,
    Failed,
    Skipped,
    brain_document,
    convert_text,
    iter_documents,
    walk_paths,
)
from memory_core.errors import InvalidRequest
from memory_core.lifecycle.layout import BrainSource, MemoryLayout
from memory_core.limits import MAX_TEXT_CHARS
from memory_core.meta import MemoryMeta

FIXTURES = Path(__file__).parent / "fixtures" / "documents"
PEPS = DATA_DIR / "docs" / "peps"


def needs_peps() -> None:
    """Skip without the shared PEPs (a bare checkout), but fail when CI=true (``_data.require_data``)."""
    require_data("docs/peps")


def make_pdf(pages: list[list[str]], title: str | None = None) -> bytes:
    """A minimal, valid PDF: one Helvetica text line per string, pages in order, an optional /Info title."""

    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    page_ids = [4 + 2 * i for i in range(len(pages))]
    kids = " ".join(f"{p} 0 R" for p in page_ids)
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for page_id, lines in zip(page_ids, pages, strict=True):
        stream = ("BT /F1 12 Tf 14 TL 72 720 Td " + " ".join(f"({esc(x)}) Tj T*" for x in lines) + " ET").encode()
        objs.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            + f"/Contents {page_id + 1} 0 R >>".encode()
        )
        objs.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    info = b""
    if title is not None:
        objs.append(f"<< /Title ({esc(title)}) >>".encode("latin-1"))
        info = b" /Info %d 0 R" % len(objs)
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R" % (len(objs) + 1) + info + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def invalid_file(raw: Path | str | bytes, name_in_message: str, **kwargs: object) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        brain_document(raw, **kwargs)  # type: ignore[arg-type]
    assert info.value.field == "file"
    assert name_in_message in str(info.value)
    return info.value


# --- reStructuredText, on the real PEPs ----------------------------------------------------------------------


def test_pep8_title_comes_from_its_header_and_the_body_is_kept() -> None:
    needs_peps()
    doc = brain_document(PEPS / "pep-0008.rst")
    assert doc.title == "Style Guide for Python Code"
    assert doc.mime == "text/x-rst"
    assert doc.source == BrainSource.FILES
    assert "Limit all lines to a maximum of 79 characters." in doc.text
    assert "Spaces are the preferred indentation method." in doc.text
    lines = doc.text.split("\n")
    assert lines[0] == "Introduction"  # the body comes first: the header says nothing about the subject
    assert lines[-3:-1] == ["Header", ""]  # … its fields follow at the end, on one line
    assert lines[-1].startswith("PEP: 8; Author: Guido van Rossum <guido@python.org>, Barry Warsaw <barry@python.org>,")
    assert "; Status: Active; Type: Process; Created: 05-Jul-2001; Post-History: 05-Jul-2001, 01-Aug-2013" in lines[-1]
    assert not any(line.startswith("Title:") or "Title: " in line for line in lines)  # the title is the title
    assert "\n\nTabs or Spaces?\n\n" in doc.text  # headings are lines of their own, underlines gone
    assert "As PEP 20 says, " in doc.text  # the :pep: role reads as text
    assert "\n\nimport os\nimport sys\n\n" in doc.text  # code blocks keep their lines


def test_every_pep_converts_without_markup_residue() -> None:
    needs_peps()
    residue = re.compile(r":(?:pep|ref|class|func):`|^\.\. [\w-]+::|^={3,}$|^-{3,}$|Unknown directive", re.MULTILINE)
    for path in sorted(PEPS.glob("pep-*.rst")):
        header_title = re.search(r"^Title: (.+)$", path.read_text(), re.MULTILINE)
        assert header_title is not None
        doc = brain_document(path)
        assert doc.title == header_title.group(1).strip(), path.name
        assert residue.search(doc.text) is None, (path.name, residue.search(doc.text))
        assert "\n\n\n" not in doc.text and doc.text == doc.text.strip()
    zen = brain_document(PEPS / "pep-0020.rst")
    assert "Beautiful is better than ugly.\nExplicit is better than implicit." in zen.text


def test_rst_document_title_sphinx_markup_and_no_file_inclusion(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-VALUE")
    source = f"""
=========
Changelog
=========

Use :class:`Engine <memory_core.engine.MemoryEngine>` and :func:`~memory_core.documents.brain_document`.

.. versionadded:: 1.2
   :option: dropped

   Brains can *ingest* PDF files.

.. include:: {secret}

.. raw:: html

   <b>raw markup</b>

Term
   Its definition.
"""
    doc = brain_document(source.encode(), name="CHANGES.rst")
    assert doc.title == "Changelog"
    assert doc.text == (
        "Use Engine and brain_document.\n\n1.2\n\nBrains can ingest PDF files.\n\nTerm\n    Its definition."
    )


# --- Markdown, HTML, plain text ------------------------------------------------------------------------------


def test_markdown_fixture_converts_to_plain_text() -> None:
    doc = brain_document(FIXTURES / "guide.md")
    assert doc.title == "Deployment Guide"
    assert doc.mime == "text/markdown"
    assert doc.source == BrainSource.MARKDOWN
    assert doc.text == (
        "Deploy the service with one command: make deploy. See the runbook for details.\n"
        "\n"
        "Steps\n"
        "\n"
        "1. Build the image.\n"
        "2. Push it to the registry.\n"
        "   - tag it first\n"
        "\n"
        "make deploy ENV=prod\n"
        "\n"
        "Roll back with make rollback."
    )


def test_markdown_front_matter_title_wins_and_is_removed() -> None:
    doc = brain_document(b'---\ntitle: "Ops notes"\ntags: [a]\n---\n# Heading\n\nBody.\n', name="ops.md")
    assert doc.title == "Ops notes"
    assert doc.text == "Heading\n\nBody."  # the heading is not the title, so it stays


def test_html_fixture_drops_chrome_and_keeps_structure() -> None:
    doc = brain_document(FIXTURES / "page.html")
    assert doc.title == "Team Handbook"
    assert doc.mime == "text/html"
    assert doc.source == BrainSource.FILES
    assert doc.text == (
        "Welcome\n\nNew members start on Monday & meet the team.\n\nContacts\n\n"
        "- Alice: infrastructure\n- Bob: billing\n\nDay | Meeting\nMon | Standup"
    )


def test_html_title_falls_back_to_first_h1_which_is_not_repeated() -> None:
    doc = brain_document(
        b"<html><body><h1>Release 2</h1><p>Line one<br>line two</p><pre>  a\n    b</pre></body></html>"
    )
    assert doc.title == "Release 2"
    assert doc.text == "Line one\nline two\n\na\n  b"


def test_plain_text_normalises_whitespace_and_takes_its_first_line_as_title() -> None:
    doc = brain_document(FIXTURES / "notes.txt")
    assert doc.title == "Meeting notes"
    assert doc.mime == "text/plain"
    assert doc.source == BrainSource.FILES
    assert doc.text == "Meeting notes\n\nWe agreed to ship on Friday.\n\nOpen question: who owns the pager?"


def test_text_encodings_bom_utf16_and_named_charset() -> None:
    assert brain_document(b"\xef\xbb\xbfcaf\xc3\xa9", name="a.txt").text == "café"
    assert brain_document("naïve\nline".encode("utf-16"), name="b.txt").text == "naïve\nline"
    latin = brain_document(b"caf\xe9", name="c.txt", mime="text/plain; charset=latin-1")
    assert latin.text == "café"
    html = b'<html><head><meta charset="windows-1252"><title>Q</title></head><body><p>\x93quoted\x94</p></body></html>'
    assert brain_document(html, name="legacy.html").text == "\u201cquoted\u201d"


_BOM_TEXT = {
    "html": "<!doctype html><html><head><title>Café</title></head><body><h1>Über</h1><p>naïve</p></body></html>",
    "markdown": "# Café\n\nÜber [a link](https://x.test) naïve\n",
}


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32"])
@pytest.mark.parametrize("fmt", sorted(_BOM_TEXT))
def test_bom_marked_text_without_an_extension_is_sniffed_as_its_format_and_decoded(fmt: str, encoding: str) -> None:
    bom = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}.get(encoding, b"")
    data = bom + _BOM_TEXT[fmt].encode(encoding)
    for named in ("page", None):  # an extensionless name, and bare bytes
        doc = brain_document(data, name=named)
        assert doc.mime == f"text/{fmt}"
        assert (doc.title, doc.text) == ("Café", "Über\n\nnaïve" if fmt == "html" else "Über a link naïve")
    for named in ("page.txt", "page.md", "page.html"):  # a named format decodes by the mark too: no mojibake
        assert "Ã" not in brain_document(data, name=named).text and "\x00" not in brain_document(data, name=named).text


def test_a_leading_byte_order_mark_in_decoded_text_is_dropped() -> None:
    assert convert_text("\ufeff# Café\n\nbody", DocumentFormat.MARKDOWN) == ("Café", "body")
    assert convert_text("\ufeffnotes\nmore", DocumentFormat.TEXT) == ("notes", "notes\nmore")


# --- PDF -----------------------------------------------------------------------------------------------------


def test_pdf_metadata_title_and_pages() -> None:
    data = make_pdf([["Quarterly Report", "Revenue   grew (a lot) in Q3."], ["Page two."]], title="Q3 Report")
    doc = brain_document(data, name="q3.pdf")
    assert doc.title == "Q3 Report"
    assert doc.mime == "application/pdf"
    assert doc.source == BrainSource.PDF
    assert doc.text == "Quarterly Report\nRevenue grew (a lot) in Q3.\n\nPage two."


def test_pdf_without_metadata_title_uses_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "memo.pdf"
    path.write_bytes(make_pdf([["Memo to staff", "Body text."]]))
    doc = brain_document(path)
    assert doc.title == "Memo to staff"
    assert doc.meta.file_path == str(path)


def test_pdf_is_recognised_by_its_magic_whatever_its_name() -> None:
    assert brain_document(make_pdf([["hello pdf"]]), name="misnamed.txt").mime == "application/pdf"
    assert brain_document(make_pdf([["hello pdf"]])).source == BrainSource.PDF


# --- detection, source and meta ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        (b"<!DOCTYPE html><html><body><p>x</p></body></html>", DocumentFormat.HTML),
        (b"  <html lang='en'><p>x</p></html>", DocumentFormat.HTML),
        (b"PEP: 1\nTitle: A header\n\nBody text.\n", DocumentFormat.RST),
        (b"Title\n=====\n\n.. note:: careful\n", DocumentFormat.RST),
        (b"# Heading\n\nSome *text*.\n", DocumentFormat.MARKDOWN),
        (b"Just words, nothing else.\n", DocumentFormat.TEXT),
    ],
)
def test_unnamed_bytes_are_sniffed(data: bytes, fmt: DocumentFormat) -> None:
    assert brain_document(data).mime == fmt.mime


def test_pep_header_sniffed_from_bytes_keeps_title_and_body() -> None:
    doc = brain_document(b"PEP: 1\nTitle: A header\nAuthor: Someone\n\nBody text.\n")
    assert doc.title == "A header"
    assert doc.text == "Body text.\n\nHeader\n\nPEP: 1; Author: Someone"


def test_empty_header_fields_are_dropped_and_markup_in_values_is_parsed() -> None:
    source = b"PEP: 2\nTitle: T\nBDFL-Delegate:\nReplaces: :pep:`722`\n\nOnly section\n============\n\nText.\n"
    doc = brain_document(source)
    assert doc.title == "T"  # the header names the title; a lone section title is not promoted in its place
    assert doc.text == "Only section\n\nText.\n\nHeader\n\nPEP: 2; Replaces: PEP 722"


def test_mime_overrides_the_extension() -> None:
    doc = brain_document(b"# Not a heading here\n", name="x.md", mime="text/plain")
    assert doc.mime == "text/plain"
    assert doc.text == "# Not a heading here"


def test_source_defaults_from_format_and_the_callers_wins() -> None:
    md = b"# T\n\nbody\n"
    assert brain_document(md, name="a.md").source == BrainSource.MARKDOWN
    assert brain_document(md, name="a.md", source="notion").source == BrainSource("notion")
    assert brain_document(md, BrainSource.WEB, name="a.md").source == BrainSource.WEB
    with pytest.raises(InvalidRequest) as info:
        brain_document(md, "  ", name="a.md")
    assert info.value.field == "source"


def test_meta_gets_absolute_file_path_and_folder_keeping_callers_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "n.txt").write_text("hello")
    monkeypatch.chdir(tmp_path)
    doc = brain_document("sub/../sub/n.txt", meta=MemoryMeta(tags=("ops",), agent_id="a1", url="https://x"))
    assert doc.meta.file_path == str(tmp_path / "sub" / "n.txt")
    assert doc.meta.folder == str(tmp_path / "sub")
    assert doc.meta.tags == ("ops",) and doc.meta.url == "https://x" and doc.meta.agent_id == "a1"
    kept = brain_document(Path("sub/n.txt"), meta=MemoryMeta(file_path="/docs/n.txt", folder="/docs"))
    assert (kept.meta.file_path, kept.meta.folder) == ("/docs/n.txt", "/docs")
    assert brain_document(b"hello", name="n.txt").meta.file_path is None
    # the brain still strips the agent id when the document is placed
    assert doc.into_item(MemoryLayout()).meta.agent_id is None


# --- bad input -----------------------------------------------------------------------------------------------


def test_missing_directory_and_special_paths_are_refused(tmp_path: Path) -> None:
    invalid_file(tmp_path / "nope.md", "nope.md")
    invalid_file(tmp_path, str(tmp_path))
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    invalid_file(fifo, "pipe.txt")


def test_oversized_input_is_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "huge.txt"
    with big.open("wb") as fh:
        fh.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: stat says too big, nothing is read
    error = invalid_file(big, "huge.txt")
    assert f"{MAX_DOCUMENT_BYTES:,}" in str(error)
    invalid_file(b"a" * (MAX_DOCUMENT_BYTES + 1), "big.md", name="big.md")


def test_binary_and_undecodable_input_are_refused() -> None:
    assert "binary" in str(invalid_file(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "img.txt", name="img.txt"))
    assert "binary" in str(invalid_file(b"abc\x00def", "<bytes>"))
    error = invalid_file(b"caf\xe9 au lait", "menu.txt", name="menu.txt")
    assert "not valid UTF-8" in str(error) and "offset 3" in str(error)
    invalid_file(b"caf\xe9", "bad.md", name="bad.md", mime="text/markdown; charset=utf-8")


def test_unsupported_type_mime_and_fake_pdf_are_refused() -> None:
    error = invalid_file(b"print('x')", "script.py", name="script.py")
    assert "unsupported file type '.py'" in str(error)
    invalid_file(b"not a pdf at all", "fake.pdf", name="fake.pdf")
    with pytest.raises(InvalidRequest) as info:
        brain_document(b"x", name="x.txt", mime="image/png")
    assert info.value.field == "mime"
    with pytest.raises(InvalidRequest) as info:
        brain_document(b"x", name="x.txt", mime="text/plain; charset=no-such-codec")
    assert info.value.field == "mime"


def test_pdfs_that_cannot_give_text_are_refused() -> None:
    assert "no extractable text" in str(invalid_file(make_pdf([[]]), "scan.pdf", name="scan.pdf"))
    assert "not a readable PDF" in str(invalid_file(b"%PDF-1.7\ntruncated", "broken.pdf", name="broken.pdf"))


def test_empty_and_too_long_text_are_refused() -> None:
    invalid_file(b"   \n\n\t\n", "blank.txt", name="blank.txt")
    invalid_file(b"<!-- only a comment -->\n", "empty.md", name="empty.md")
    invalid_file(
        b"<html><head><title>T</title></head><body><script>x()</script></body></html>", "e.html", name="e.html"
    )
    error = invalid_file(b"a" * (MAX_TEXT_CHARS + 1), "long.txt", name="long.txt")
    assert f"{MAX_TEXT_CHARS:,}" in str(error)


# --- the folder walker ---------------------------------------------------------------------------------------


def _tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "config.md").write_text("# secret")
    (root / ".hidden.md").write_text("# hidden")
    (root / "b.md").write_text("# Bee\n\nbody b\n")
    (root / "a.txt").write_text("alpha\n")
    (root / "c.html").write_text("<title>Sea</title><p>body c</p>")
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (root / "Makefile").write_text("all:\n")
    (root / "sub" / "d.rst").write_text("Dee\n===\n\nbody d\n")
    (root / "sub" / "bad.txt").write_bytes(b"caf\xe9")
    (root / "sub" / "empty.md").write_text("\n")
    (root / "link").symlink_to(root / "sub", target_is_directory=True)


def _summary(results: list[Converted | Failed | Skipped], root: Path) -> list[tuple[str, str]]:
    out = []
    for r in results:
        rel = r.path.relative_to(root).as_posix()
        if isinstance(r, Converted):
            out.append(("converted", rel))
        elif isinstance(r, Failed):
            out.append(("failed", rel))
        else:
            out.append((f"skipped: {r.reason}", rel))
    return out


def test_iter_documents_walks_sorted_skips_and_reports_per_file(tmp_path: Path) -> None:
    _tree(tmp_path)
    results = list(iter_documents([tmp_path]))
    assert _summary(results, tmp_path) == [
        ("skipped: hidden folder", ".git"),
        ("skipped: hidden file", ".hidden.md"),
        ("skipped: unsupported file type (no extension)", "Makefile"),
        ("converted", "a.txt"),
        ("converted", "b.md"),
        ("converted", "c.html"),
        ("skipped: unsupported file type .png", "image.png"),
        ("skipped: symbolic link to a folder (not followed)", "link"),
        ("failed", "sub/bad.txt"),
        ("converted", "sub/d.rst"),
        ("failed", "sub/empty.md"),
    ]
    docs = {r.path.name: r.document for r in results if isinstance(r, Converted)}
    assert [docs[n].title for n in ("a.txt", "b.md", "c.html", "d.rst")] == ["alpha", "Bee", "Sea", "Dee"]
    assert [docs[n].source for n in ("b.md", "d.rst")] == [BrainSource.MARKDOWN, BrainSource.FILES]
    assert docs["d.rst"].meta.folder == str(tmp_path / "sub")
    failures = {r.path.name: r.error for r in results if isinstance(r, Failed)}
    assert "bad.txt" in str(failures["bad.txt"]) and failures["bad.txt"].field == "file"
    assert "empty.md" in str(failures["empty.md"])


def test_iter_documents_source_meta_and_non_recursive(tmp_path: Path) -> None:
    _tree(tmp_path)
    results = list(iter_documents([tmp_path], source="github", meta=MemoryMeta(tags=("kb",)), recursive=False))
    converted = [r for r in results if isinstance(r, Converted)]
    assert [r.path.name for r in converted] == ["a.txt", "b.md", "c.html"]
    assert {r.document.source for r in converted} == {BrainSource.GITHUB}
    assert all(r.document.meta.tags == ("kb",) for r in converted)
    assert [r.document.meta.file_path for r in converted] == [str(tmp_path / n) for n in ("a.txt", "b.md", "c.html")]
    assert ("skipped: folder (not recursive)", "sub") in _summary(results, tmp_path)


def test_named_paths_convert_or_fail_and_are_listed_once(tmp_path: Path) -> None:
    _tree(tmp_path)
    named = [tmp_path / "image.png", tmp_path / "missing.md", tmp_path / "sub" / "d.rst", tmp_path / "sub"]
    results = list(iter_documents(named))
    assert _summary(results, tmp_path) == [
        ("failed", "image.png"),  # named by the caller: an unsupported type is an error, not a skip
        ("failed", "missing.md"),
        ("converted", "sub/d.rst"),
        ("failed", "sub/bad.txt"),
        ("skipped: already listed", "sub/d.rst"),
        ("failed", "sub/empty.md"),
    ]
    missing = results[1]
    assert isinstance(missing, Failed) and "missing.md" in str(missing.error)


def test_walk_paths_lists_files_without_converting_and_blank_source_fails_at_once(tmp_path: Path) -> None:
    _tree(tmp_path)
    files = [p for p in walk_paths([tmp_path]) if isinstance(p, Path)]
    assert [p.relative_to(tmp_path).as_posix() for p in files] == [
        "a.txt", "b.md", "c.html", "sub/bad.txt", "sub/d.rst", "sub/empty.md",
    ]  # fmt: skip
    with pytest.raises(InvalidRequest) as info:
        iter_documents([tmp_path], source=" ")
    assert info.value.field == "source"


# --- terminal escapes, pypdf's log, messages for people ------------------------------------------------------


def test_terminal_escape_sequences_are_removed_whole() -> None:
    log = b"\x1b[1;31mERROR\x1b[0m disk full\n\x1b]0;build log\x07step \x1b[2K\x1b[1Gtwo \x1b(Bdone\n"
    doc = brain_document(log, name="build.txt")
    assert doc.title == "ERROR disk full"
    assert doc.text == "ERROR disk full\nstep two done"
    assert not re.search(r"\[[0-9;]*[A-Za-z]", doc.text)
    # an unterminated control string loses only its introducer, never the rest of the file
    assert brain_document(b"keep \x1b]this\nand this\n", name="a.txt").text == "keep this\nand this"
    md = brain_document(b"# \x1b[32mGuide\x1b[0m\n\nRun \x1b[1mmake\x1b[0m first.\n", name="g.md")
    assert (md.title, md.text) == ("Guide", "Run make first.")


def test_a_damaged_pdf_is_refused_without_pypdf_warnings(caplog: pytest.LogCaptureFixture) -> None:
    level = logging.getLogger("pypdf").level
    with caplog.at_level(logging.DEBUG):
        error = invalid_file(b"%PDF-1.7\ntruncated", "broken.pdf", name="broken.pdf")
    assert "not a readable PDF" in str(error)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("pypdf") and r.levelno >= logging.WARNING] == []
    assert logging.getLogger("pypdf").level == level  # restored after the conversion


def test_messages_say_what_the_file_looked_like_and_what_is_accepted() -> None:
    error = str(invalid_file(b"print('x')\n", "script.py", name="script.py"))
    assert "its content looks like plain text" in error
    assert "accepted: Markdown (.md" in error and "PDF (.pdf)" in error and "mime" not in error
    assert "looks like binary data" in str(invalid_file(b"\x89PNG\x00\x00", "img.png", name="img.png"))
    assert "looks like HTML" in str(invalid_file(b"<!doctype html><p>x", "fake.pdf", name="fake.pdf"))
    legacy = str(invalid_file(b"caf\xe9 au lait", "menu.txt", name="menu.txt"))
    assert "legacy 8-bit encoding" in legacy and "re-encode it as UTF-8" in legacy and "mime" not in legacy
    assert "looks like binary data" in str(invalid_file(bytes(range(1, 256)) * 4, "blob.txt", name="blob.txt"))


# --- byte-order marks: decoded by the mark, or refused as binary ---------------------------------------------

_TEXT_NAMES = ("notes.md", "notes.txt", "notes.rst", "notes.html")


@pytest.mark.parametrize("name", _TEXT_NAMES)
def test_utf8_text_behind_a_utf16_mark_is_refused_as_binary_not_stored_as_mojibake(name: str) -> None:
    """``\\xff\\xfe`` glued to UTF-8 text decoded as UTF-16 (CJK junk) for every text format."""
    error = invalid_file(b"\xff\xfe# Hello world\nThis is text in utf8.\n", name, name=name)
    assert str(error).endswith(
        f"{name} is binary (it starts with a UTF-16 byte-order mark, but the bytes after it are UTF-8 text; "
        "remove the first 2 bytes, or save it again as UTF-8), not a supported document"
    )


@pytest.mark.parametrize("name", _TEXT_NAMES)
def test_bytes_that_do_not_decode_after_a_mark_get_the_binary_error(name: str) -> None:
    odd = invalid_file(b"\xff\xfe# Hello\nThis is text in utf8\n", name, name=name)  # odd length after the mark
    assert f"{name} is binary (it starts with a UTF-16 byte-order mark, but byte 0x0a at offset 30 " in str(odd)
    surrogate = invalid_file(codecs.BOM_UTF16_LE + b"a\x00\x00\xd8b\x00", name, name=name)  # a lone surrogate
    assert "does not decode as UTF-16), not a supported document" in str(surrogate)
    nul = invalid_file("# T\n\x00x\n".encode("utf-16"), name, name=name)
    assert f"{name} is binary (its UTF-16 text holds NUL (U+0000) at character 4)" in str(nul)
    assert "is binary (it contains NUL bytes), not a supported document" in str(
        invalid_file(b"a\x00b", name, name=name)
    )


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_real_utf16_and_utf32_files_decode_by_their_mark(tmp_path: Path, encoding: str) -> None:
    bom = {"utf-16-be": codecs.BOM_UTF16_BE}.get(encoding, b"")
    path = tmp_path / "notes.md"
    path.write_bytes(bom + "# Réunion\n\nOrdre du jour : budget.\n".encode(encoding))
    doc = brain_document(path)
    assert (doc.title, doc.text) == ("Réunion", "Ordre du jour : budget.")
    cjk = "你好世界。".encode("utf-16")  # no NUL byte, no line feed: a UTF-16 text all the same
    assert brain_document(cjk, name="cjk.txt").text == "你好世界。"
