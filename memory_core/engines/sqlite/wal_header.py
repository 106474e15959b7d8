"""The write-ahead log's header: which incarnation of the log a commit wrote into.

When a checkpoint has copied every frame of the log into the database, the next write transaction *restarts* the
log: it writes the log's 32-byte header again with new salt values and syncs it before its first frame
(sqlite.org/fileformat.html §4.1; the sync since SQLite's ticket ff5be73dee, at any ``synchronous`` but ``OFF``),
and then cuts the file back to ``journal_size_limit`` (sqlite.org/pragma.html#pragma_journal_size_limit). The salts
are bytes 16-23 of the header, so a commit restarted the log exactly when they differ before and after it.

Only the ``-wal`` file is read here: SQLite's locks live on the database file and on ``-shm``, and a process's
POSIX advisory locks on a file are dropped when it closes *any* descriptor of that file, so opening and closing
either of those beside SQLite's own connections could corrupt the database (sqlite.org/howtocorrupt.html §2.2).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["SALT", "salt"]

SALT = slice(16, 24)
"""Where the two 32-bit salts sit in the log's header (sqlite.org/fileformat.html §4.1)."""


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
