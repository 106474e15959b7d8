"""The write-ahead log's header and frames: which incarnation of the log a commit wrote into, and how far it goes.

When a checkpoint has copied every frame of the log into the database, the next write transaction *restarts* the
log: it writes the log's 32-byte header again with new salt values and syncs it before its first frame
(sqlite.org/fileformat.html §4.1; the sync since SQLite's ticket ff5be73dee, at any ``synchronous`` but ``OFF``),
then writes its frames from the top of the file over the old ones. The salts are bytes 16-23 of the header, so a
commit restarted the log exactly when they differ before and after it.

The file keeps its size when the log restarts (unless ``journal_size_limit`` cuts it back, which SQLite does in
the restarting commit, under the write lock), so its size does not say how much log there is. Its frames do:
every frame's header repeats the salts of the log it belongs to (bytes 8-15 of its 24-byte header, §4.1), a log
writes its frames one after the other from the top, and each restart changes the first salt (SQLite adds one to
it), so the frames of the current log are exactly the leading frames whose salts match the header's. ``end``
finds the last of them by bisection: a few 8-byte reads.

Only the ``-wal`` file is read here: SQLite's locks live on the database file and on ``-shm``, and a process's
POSIX advisory locks on a file are dropped when it closes *any* descriptor of that file, so opening and closing
either of those beside SQLite's own connections could corrupt the database (sqlite.org/howtocorrupt.html §2.2).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["FRAME_HEADER", "FRAME_SALT", "HEADER", "PAGE_SIZE", "SALT", "end", "salt"]

HEADER = 32
"""Bytes of the log's header (sqlite.org/fileformat.html §4.1)."""
FRAME_HEADER = 24
"""Bytes of each frame's header, before its page (§4.1)."""
SALT = slice(16, 24)
"""Where the two 32-bit salts sit in the log's header (sqlite.org/fileformat.html §4.1)."""
PAGE_SIZE = slice(8, 12)
"""Where the database page size sits in the log's header (big-endian; §4.1)."""
FRAME_SALT = slice(8, 16)
"""Where a frame's header repeats the salts of its log (§4.1)."""


def salt(wal: Path) -> bytes | None:
    """The salts of the log ``wal`` (``<file>-wal``) as its header holds them; None when there is no header yet."""
    try:
        fd = os.open(wal, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = os.pread(fd, SALT.stop, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return head[SALT] if len(head) == SALT.stop else None


def end(wal: Path) -> int:
    """Bytes of the log ``wal`` in use: its header and the frames of its current incarnation (0 without a log).

    The frames written since the log last restarted, counted by their salts (module docstring): the file may be
    longer, holding frames of earlier incarnations that the current one has not yet written over. Read while
    other processes write, it may miss the frames of a commit in progress (an estimate for ``Database``'s
    checkpoint trigger, never for recovery).
    """
    try:
        fd = os.open(wal, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        head = os.pread(fd, HEADER, 0)
        if len(head) < HEADER:
            return 0
        page = int.from_bytes(head[PAGE_SIZE], "big")
        frame = FRAME_HEADER + (65536 if page == 1 else page)
        if page < 512:
            return 0  # not a log's header (a page is at least 512 bytes, §1.3.2)
        salts = head[SALT]
        lo, hi = 0, (os.fstat(fd).st_size - HEADER) // frame  # frames 1..lo match; frame hi+1 does not exist
        while lo < hi:  # the matching frames are a prefix: find its last one
            mid = (lo + hi + 1) // 2
            if os.pread(fd, FRAME_SALT.stop, HEADER + (mid - 1) * frame)[FRAME_SALT] == salts:
                lo = mid
            else:
                hi = mid - 1
        return HEADER + lo * frame
    except OSError:
        return 0
    finally:
        os.close(fd)
