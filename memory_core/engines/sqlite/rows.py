"""Pure conversions between contract values and SQLite column values.

* A namespace is stored as its path plus a trailing ``/`` (``team:acme/agent:w/``), the root as ``''``, so a
  subtree is the prefix range ``[p, p[:-1] + '0')`` (``'0'`` follows ``'/'``) and ancestors are exact keys.
* Times are integer microseconds since the Unix epoch (UTC), so window bounds compare exactly.
* Vectors are little-endian float32 blobs of ``EMBED_DIM`` values.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from memory_core._model import utc
from memory_core.meta import MemoryMeta
from memory_core.namespace import ROOT, Namespace
from memory_core.scoring import EMBED_DIM

__all__ = [
    "EPOCH",
    "IN_LIST_MAX",
    "chunks",
    "from_us",
    "meta_columns",
    "now_us",
    "ns_key",
    "placeholders",
    "ns_of_key",
    "to_us",
    "vec_blob",
    "vec_from_blob",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
IN_LIST_MAX: Final = 400
"""Most values bound in one ``IN (…)`` list, well under SQLite's bound-parameter limit (999 before 3.32,
32766 since: sqlite.org/limits.html §9) together with a statement's other parameters."""
_US = timedelta(microseconds=1)
META_COLUMN_NAMES = (
    "workspace",
    "folder",
    "file_path",
    "language",
    "repo",
    "commit_sha",
    "url",
    "thread_id",
    "turn_first",
    "turn_last",
    "agent_id",
    "tool_call",
    "source_kind",
    "source_id",
    "observed_at",
)
"""The filter columns shared by ``items`` and ``beliefs``, in ``meta_columns`` order."""


def now_us() -> int:
    """Wall-clock time in µs since the epoch."""
    return time.time_ns() // 1000


def ns_key(ns: Namespace) -> str:
    """The stored form of a namespace: its path with a trailing ``/``; ``''`` for the root."""
    return "" if ns.is_root else f"{ns}/"


@lru_cache(maxsize=16384)
def ns_of_key(key: str) -> Namespace:
    """The namespace a stored key names (kept per process: a pack's scope choices parse every scope's key).

    Raises:
        InvalidRequest: a malformed key (never kept: the next call parses it again).
    """
    return ROOT if key == "" else Namespace.parse(key[:-1])


def to_us(at: datetime) -> int:
    """Microseconds since the epoch (a naive datetime is read as UTC)."""
    return (utc(at) - EPOCH) // _US


def from_us(us: int) -> datetime:
    """The UTC datetime ``us`` microseconds after the epoch."""
    return EPOCH + timedelta(microseconds=us)


def meta_columns(meta: MemoryMeta) -> tuple[Any, ...]:
    """The values of ``META_COLUMN_NAMES`` for ``meta``."""
    return (
        meta.workspace,
        meta.folder,
        meta.file_path,
        meta.language,
        meta.repo,
        meta.commit,
        meta.url,
        meta.thread_id,
        meta.turns.first if meta.turns else None,
        meta.turns.last if meta.turns else None,
        meta.agent_id,
        meta.tool_call.name if meta.tool_call else None,
        meta.source.kind.value,
        meta.source.id,
        to_us(meta.observed_at) if meta.observed_at is not None else None,
    )


def vec_blob(vec: list[float] | npt.NDArray[np.float32]) -> bytes:
    """A vector as a float32 blob."""
    return np.asarray(vec, dtype="<f4").tobytes()


def vec_from_blob(blob: bytes) -> npt.NDArray[np.float32]:
    """A float32 blob back as a vector of ``EMBED_DIM`` values."""
    out = np.frombuffer(blob, dtype="<f4")
    if out.shape != (EMBED_DIM,):
        raise ValueError(f"vector blob holds {out.size} values, expected {EMBED_DIM}")
    return out


def chunks(values: Sequence[Any], size: int = IN_LIST_MAX) -> Iterator[list[Any]]:
    """``values`` in order as lists of at most ``size``, one per ``IN (…)`` statement."""
    for start in range(0, len(values), size):
        yield list(values[start : start + size])


def placeholders(n: int) -> str:
    """``n`` comma-separated ``?`` parameters, for ``IN ({placeholders(n)})``."""
    return ", ".join("?" for _ in range(n))
