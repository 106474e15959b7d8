"""Files and folders → one result per file: converted, failed or skipped (for ``memory-core ingest``).

``iter_documents`` converts lazily and never stores anything, so a caller can convert every file, report each
one, and store only when it is satisfied. The rules:

- A path named by the caller is always converted, whatever its name: it converts or it fails (an unsupported
  extension is then an error, as in ``brain_document``). A missing path fails.
- A folder is walked depth-first with each folder's entries sorted by name (code-point order), so the order is
  the same on every machine. Found there, hidden entries (name starting with ``.``), files of unsupported type,
  symbolic links to folders (never followed, so no cycles), other non-regular files and, when not
  ``recursive``, subfolders are skipped, each with a reason.
- A file reached twice (named and inside a named folder, or through a link) is converted once; the later
  occurrence is skipped as already listed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from memory_core.documents.convert import brain_document
from memory_core.documents.detect import format_for_extension
from memory_core.errors import InvalidRequest
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.layout import BrainSource
from memory_core.meta import MemoryMeta

__all__ = ["Converted", "DocumentResult", "Failed", "Skipped", "iter_documents", "walk_paths"]


@dataclass(frozen=True, slots=True)
class Converted:
    """A file converted into ``document`` (not stored)."""

    path: Path
    document: BrainDocument


@dataclass(frozen=True, slots=True)
class Failed:
    """A file that could not be converted; ``error`` names it (``field="file"``)."""

    path: Path
    error: InvalidRequest


@dataclass(frozen=True, slots=True)
class Skipped:
    """An entry found while walking a folder and left alone, with the ``reason`` (``"hidden file"``, …)."""

    path: Path
    reason: str


DocumentResult: TypeAlias = Converted | Failed | Skipped
"""One file's outcome: ``match result: case Converted(path, doc): … case Failed(path, err): …``."""


def _walk_dir(folder: Path, recursive: bool, seen: set[str]) -> Iterator[Path | Skipped | Failed]:
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        yield Failed(folder, InvalidRequest(f"{folder}: cannot list folder ({exc.strerror or exc})", field="file"))
        return
    for entry in entries:
        path = folder / entry.name
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            is_link = entry.is_symlink()
            is_file = entry.is_file()  # follows a link to a file
            points_to_dir = is_link and entry.is_dir()
        except OSError as exc:
            yield Failed(path, InvalidRequest(f"{path}: cannot read ({exc.strerror or exc})", field="file"))
            continue
        if entry.name.startswith("."):
            yield Skipped(path, "hidden folder" if is_dir or points_to_dir else "hidden file")
        elif is_dir:
            if recursive:
                yield from _walk_dir(path, recursive, seen)
            else:
                yield Skipped(path, "folder (not recursive)")
        elif points_to_dir:
            yield Skipped(path, "symbolic link to a folder (not followed)")
        elif not is_file:
            yield Skipped(path, "broken symbolic link" if is_link else "not a regular file")
        elif format_for_extension(entry.name) is None:
            yield Skipped(path, f"unsupported file type {Path(entry.name).suffix.lower() or '(no extension)'}")
        else:
            yield from _once(path, seen)


def _once(path: Path, seen: set[str]) -> Iterator[Path | Skipped]:
    key = os.path.realpath(path)
    if key in seen:
        yield Skipped(path, "already listed")
    else:
        seen.add(key)
        yield path


def walk_paths(paths: Iterable[Path | str], *, recursive: bool = True) -> Iterator[Path | Skipped | Failed]:
    """The files to convert below ``paths``, in order, with what was skipped or missing along the way.

    Yields:
        A ``Path`` for each file to convert (as found: relative when the caller's path was), a ``Skipped`` for
        each entry left alone, and a ``Failed`` for a missing or unlistable path. Use it to count files before
        converting (for a progress bar); ``iter_documents`` converts the same sequence.
    """
    seen: set[str] = set()
    for given in paths:
        path = Path(given).expanduser()
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            yield Failed(path, InvalidRequest(f"{path}: no such file or folder", field="file"))
            continue
        except OSError as exc:
            yield Failed(path, InvalidRequest(f"{path}: cannot read ({exc.strerror or exc})", field="file"))
            continue
        if stat.S_ISDIR(mode):
            yield from _walk_dir(path, recursive, seen)
        else:
            yield from _once(path, seen)


def _convert_all(
    paths: Iterable[Path | str], source: BrainSource | None, meta: MemoryMeta | None, recursive: bool
) -> Iterator[DocumentResult]:
    for found in walk_paths(paths, recursive=recursive):
        if not isinstance(found, Path):
            yield found
            continue
        try:
            yield Converted(found, brain_document(found, source, meta))
        except InvalidRequest as exc:
            yield Failed(found, exc)


def iter_documents(
    paths: Iterable[Path | str],
    *,
    source: BrainSource | str | None = None,
    meta: MemoryMeta | None = None,
    recursive: bool = True,
) -> Iterator[DocumentResult]:
    """Convert every supported file named by or found below ``paths``, one result per file, storing nothing.

    Example:
        ``docs = [r.document for r in iter_documents(["docs/"]) if isinstance(r, Converted)]``

    Args:
        paths: Files and folders, walked in the order given (see the module docstring for the rules).
        source: The brain source of every document; by default each file's format decides (``brain_document``).
        meta: Metadata every document keeps; each gets its own ``file_path`` and ``folder`` unless set here.
        recursive: Walk subfolders (default); otherwise they are skipped.

    Returns:
        A lazy iterator of ``Converted``, ``Failed`` and ``Skipped`` results. A failure is reported and the walk
        goes on.

    Raises:
        InvalidRequest: ``field="source"`` for a blank source, at once (before any file is read).
    """
    brain_source = BrainSource.parse(source) if source is not None else None
    return _convert_all(paths, brain_source, meta, recursive)
