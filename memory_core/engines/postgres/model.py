"""The ranking model of a PostgreSQL engine: the ``EMBEDDER`` setting's embedder and its query encodings.

The model runs in the process (host or worker), never in the database: a host encodes each distinct query once,
on the process's encoder thread (``engines.sqlite.queries.QueryEncodings``, the SQLite engine's: the sections of
one pack share one encoding, and a read starts it before its first statement and waits for it only when the
pooled vector is needed), a worker encodes stored items in batches (``PostgresEngine.embed_backlog``).
Thread-safe.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

from memory_core.engines.sqlite.queries import QUERY_CACHE, QueryEncodings, QueryVectors
from memory_core.retrieval.embedder import F32, Embedder, embedder_for, embedder_name
from memory_core.settings import get_settings

__all__ = ["QUERY_CACHE", "Model"]


class Model:
    """The embedder (made on first use) and the query encodings.

    Args:
        embedder: A given embedder (tests); None: the ``EMBEDDER`` setting's, made on first use.
    """

    def __init__(self, embedder: Embedder | None = None) -> None:
        self._embedder = embedder
        self._lock = threading.Lock()
        self._queries = QueryEncodings(lambda: self.embedder)

    @property
    def embedder(self) -> Embedder:
        """The ranking model (the ``EMBEDDER`` setting's unless one was given)."""
        with self._lock:
            if self._embedder is None:
                settings = get_settings()
                self._embedder = embedder_for(settings.embedder, settings.embedder_model)
            return self._embedder

    @property
    def name(self) -> str:
        """The ``Embedder.name`` the current model's vectors carry, without loading a pinned model.

        The embedder's if made, else the setting's (``embedder_name``, the rule of the SQLite engine's): what
        ``stats``' ``embedding_wait`` counts against, so ``memory-core status`` never loads the model.
        """
        with self._lock:
            if self._embedder is not None:
                return self._embedder.name
        settings = get_settings()
        return embedder_name(settings.embedder, settings.embedder_model)

    @property
    def label(self) -> str:
        """The embedder's name if made, else the setting's (without loading a model)."""
        with self._lock:
            return self._embedder.name if self._embedder is not None else get_settings().embedder

    @property
    def query_encodes(self) -> int:
        """How many times the model ran on a query (one per distinct query text kept)."""
        return self._queries.encodes

    def start(self, query: str) -> Future[QueryVectors]:
        """The future of ``query``'s ``(content-token vectors (m, dims), pooled vector (dims,))``."""
        return self._queries.start(query)

    def query_tokens(self, query: str) -> F32:
        """The query's content-token vectors ``(m, dims)``, encoded once per distinct query."""
        return self._queries.get(query)
