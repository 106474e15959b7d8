"""The SQLite engine: the embedded default, one file shared by a host process and its workers.

Open it with ``open_engine("sqlite:///./var/memory.db")`` or ``SQLiteEngine(path)``. Modules: ``connection``
(per-thread connections, WAL, busy timeout, bounded retry, error mapping), ``schema`` (version and forward
migrations), ``filters`` (``MetaFilter`` → SQL), ``search`` (FTS5 BM25, stored vectors, hybrid ranking),
``writes`` (insert, pending queue, delete), ``beliefs_store`` (incremental belief build, provenance) and
``engine`` (the ``MemoryEngine`` hooks).
"""

from memory_core.engines.sqlite.engine import SQLiteEngine

__all__ = ["SQLiteEngine"]
