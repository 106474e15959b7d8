"""``QueryEncodings``: each distinct query text encoded once per process, off the reading thread.

A pack reads its sections on several threads at once, all with the pack's query (``recall.gather``). Looking the
encoding up in a cache and encoding on a miss let every section miss together and run the model once each, one
after another (the model runs under a lock): 3.5 encodes per ``pre_turn`` on the demo's data, each ~8 ms. Here
the first read of a query *starts* its encoding on the process's encoder thread and gets a future; every other
read of the same text gets the same future. A hybrid fetch starts the encoding at its entry (before it folds
pending rows and runs its lexical stage) and waits for it only at the rerank, so the model runs while the reads
do their SQL (onnxruntime and SQLite both release the GIL).

``encodes`` counts the model runs (tests assert one per distinct query). A failed encoding is not kept: the
next read of that text tries again.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final

from memory_core.retrieval.embedder import F32, Embedder

__all__ = ["QUERY_CACHE", "QueryEncodings", "QueryVectors"]

QueryVectors = tuple[F32, F32]
"""A query's ``(content-token vectors, pooled vector)``: the rerank's and the dense candidates' (``pooled``)."""

QUERY_CACHE: Final = 256
"""Query encodings kept per engine (least recently used dropped first)."""

_encoder: ThreadPoolExecutor | None = None
_encoder_lock = threading.Lock()


def _encoder_thread() -> ThreadPoolExecutor:
    """The process's one encoder thread (the model runs one text at a time anyway: ``MiniLMEmbedder``)."""
    global _encoder
    with _encoder_lock:
        if _encoder is None:
            _encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-core-encode")
        return _encoder


def _forget_after_fork() -> None:
    global _encoder, _encoder_lock
    _encoder = None
    _encoder_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


class QueryEncodings:
    """Token and pooled vectors of query texts (``QueryVectors``), encoded once each (see the module docstring).

    Args:
        model: Gives the embedder (called on the encoder thread, so a lazily loaded model loads there).
        size: Encodings kept.
    """

    def __init__(self, model: Callable[[], Embedder], size: int = QUERY_CACHE) -> None:
        self._model = model
        self._size = size
        self._held: OrderedDict[str, Future[QueryVectors]] = OrderedDict()
        self._lock = threading.Lock()
        self.encodes = 0
        """Model runs so far (one per distinct query text still cached, plus retries after failures)."""

    def start(self, query: str) -> Future[QueryVectors]:
        """The future of ``query``'s vectors, starting the encoding if no read has."""
        with self._lock:
            held = self._held.get(query)
            if held is not None:
                self._held.move_to_end(query)
                return held
            future: Future[QueryVectors] = Future()
            self._held[query] = future
            if len(self._held) > self._size:
                self._held.popitem(last=False)
            self.encodes += 1
        try:
            _encoder_thread().submit(self._encode, query, future)
        except RuntimeError:  # interpreter shutting down: encode here
            self._encode(query, future)
        return future

    def get(self, query: str) -> F32:
        """``query``'s token vectors, waiting for the encoding (started now if no read has).

        Raises:
            Exception: what the model raised (the failed encoding is dropped, so a later read retries).
        """
        return self.start(query).result()[0]

    def _encode(self, query: str, future: Future[QueryVectors]) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            encoded = self._model().encode([query])
            vectors = (encoded.tokens[0], encoded.pooled[0])
        except BaseException as exc:
            with self._lock:
                if self._held.get(query) is future:
                    del self._held[query]
            future.set_exception(exc)
        else:
            future.set_result(vectors)
