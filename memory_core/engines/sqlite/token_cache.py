"""``TokenCache``: the decoded token vectors (and ranking fields) of embedded items, kept per process.

The rerank (``rerank``) reads its candidates' stored token vectors on every hybrid fetch: four sections of a pack
read up to 100 candidates and their previous turns each, ~14 KB of blob per item decoded from int8
(``vectors.load``, ``late.dequantise``), and the next turn asks about the same conversation. What it reads of an
item never changes once the item is embedded by a model (the vectors, the turn before it, the speaker, the time,
the confidence), and seqs are never reused, so a decoded row is kept by ``(seq, model)`` until the byte budget
pushes it out (least recently used first). A row not yet embedded is read again next time (it may be embedded
by then). A kept row whose item was deleted since is left out (one primary-key read per call). A replaced file
(``meta.instance``) empties the cache.

``stats`` counts the rows served from the cache and the rows read from SQL.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from .rows import chunks, placeholders
from .vectors import Stored, load

__all__ = ["TOKEN_CACHE_BYTES", "TokenCache", "TokenCacheStats"]

TOKEN_CACHE_BYTES: Final = 48 * 2**20
"""Decoded float32 token vectors kept per engine (about 3,000 conversation turns of ~10 content tokens)."""
_OVERHEAD: Final = 200
"""Bytes counted per kept row besides its vectors (the row object, the key)."""


@dataclass
class TokenCacheStats:
    """Rows the rerank asked for since the engine opened.

    Attributes:
        hits: Served from the cache.
        read: Read from SQL (not cached, or not embedded yet).
    """

    hits: int = 0
    read: int = 0


def _existing(conn: sqlite3.Connection, seqs: list[int]) -> set[int]:
    found: set[int] = set()
    for chunk in chunks(seqs):
        marks = placeholders(len(chunk))
        found.update(int(r[0]) for r in conn.execute(f"SELECT seq FROM items WHERE seq IN ({marks})", chunk))
    return found


class TokenCache:
    """Decoded ``vectors.Stored`` rows by ``(seq, model)`` within a byte budget (module docstring).

    Args:
        budget: Bytes of decoded vectors kept.
    """

    def __init__(self, budget: int = TOKEN_CACHE_BYTES) -> None:
        self._budget = budget
        self._rows: OrderedDict[tuple[int, str], Stored] = OrderedDict()
        self._bytes = 0
        self._instance = ""
        self._lock = threading.Lock()
        self.stats = TokenCacheStats()

    def load(self, conn: sqlite3.Connection, seqs: Sequence[int], model: str, dims: int) -> dict[int, Stored]:
        """``seq → Stored`` for the ``seqs`` that exist, as ``vectors.load`` (same arguments), cached."""
        instance = str(conn.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()[0])
        out: dict[int, Stored] = {}
        missing: list[int] = []
        with self._lock:
            if instance != self._instance:
                self._rows.clear()
                self._bytes = 0
                self._instance = instance
            for seq in seqs:
                row = self._rows.get((seq, model))
                if row is None:
                    missing.append(seq)
                else:
                    self._rows.move_to_end((seq, model))
                    out[seq] = row
        if out:  # a kept row's item may have been deleted since (forget, erase): it must not rank
            alive = _existing(conn, list(out))
            for seq in [s for s in out if s not in alive]:
                del out[seq]
        with self._lock:
            self.stats.hits += len(out)
            self.stats.read += len(missing)
        if not missing:
            return out
        read = load(conn, missing, model, dims)
        out.update(read)
        with self._lock:
            if instance != self._instance:
                return out
            for seq, row in read.items():
                if row.tokens is None or (seq, model) in self._rows:
                    continue
                self._rows[(seq, model)] = row
                self._bytes += row.tokens.nbytes + _OVERHEAD
            while self._bytes > self._budget and self._rows:
                _, dropped = self._rows.popitem(last=False)
                self._bytes -= (dropped.tokens.nbytes if dropped.tokens is not None else 0) + _OVERHEAD
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)
