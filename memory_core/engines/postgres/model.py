"""The ranking model of a PostgreSQL engine: the ``EMBEDDER`` setting's embedder and a query-token LRU.

The model runs in the process (host or worker), never in the database: a host encodes each distinct query once
(``QueryTokens``: an LRU, so the sections of one pack share one encoding), a worker encodes stored items in
batches (``PostgresEngine.embed_backlog``). Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

from memory_core.retrieval.embedder import F32, Embedder, embedder_for
from memory_core.settings import get_settings

__all__ = ["QUERY_CACHE", "Model"]

QUERY_CACHE: Final = 256
"""Distinct queries whose token vectors a process keeps."""


class Model:
    """The embedder (made on first use) and the LRU of query-token vectors.

    Args:
        embedder: A given embedder (tests); None: the ``EMBEDDER`` setting's, made on first use.
    """

    def __init__(self, embedder: Embedder | None = None) -> None:
        self._embedder = embedder
        self._lock = threading.Lock()
        self._queries: OrderedDict[str, tuple[F32, F32]] = OrderedDict()

    @property
    def embedder(self) -> Embedder:
        """The ranking model (the ``EMBEDDER`` setting's unless one was given)."""
        with self._lock:
            if self._embedder is None:
                settings = get_settings()
                self._embedder = embedder_for(settings.embedder, settings.embedder_model)
            return self._embedder

    @property
    def label(self) -> str:
        """The embedder's name if made, else the setting's (without loading a model)."""
        with self._lock:
            return self._embedder.name if self._embedder is not None else get_settings().embedder

    def query_tokens(self, query: str) -> F32:
        """The query's content-token vectors ``(m, dims)``, encoded once per distinct query."""
        return self.query_vectors(query)[0]

    def query_vectors(self, query: str) -> tuple[F32, F32]:
        """The query's ``(content-token vectors (m, dims), pooled vector (dims,))``, encoded once per distinct query."""
        with self._lock:
            held = self._queries.get(query)
            if held is not None:
                self._queries.move_to_end(query)
                return held
        encoded = self.embedder.encode([query])
        pair = (encoded.tokens[0], encoded.pooled[0])
        with self._lock:
            self._queries[query] = pair
            if len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return pair
