"""The SQLite engine: the embedded default, one file shared by a host process and its workers.

Open it with ``open_engine("sqlite:///./var/memory.db")`` or ``SQLiteEngine(path)``. Modules: ``connection``
(per-thread connections, WAL, busy timeout, bounded retry, error mapping), ``schema`` (version and forward
migrations), ``filters`` (``MetaFilter`` → SQL), ``search`` (the scoring: BM25, stored vectors, hybrid, recency,
confidence), ``index`` (the per-process copy of what ranking reads), ``fts`` (FTS5 reads: word classes, BM25
over rowid ranges), ``ranking`` (the exact top of a ranking without scoring what cannot reach it), ``writes``
(insert, pending queue, delete), ``beliefs_store`` (incremental belief build, provenance) and ``engine`` (the
``MemoryEngine`` hooks).
"""

from memory_core.engines.sqlite.engine import SQLiteEngine

__all__ = ["SQLiteEngine"]
