"""``SQLiteEngine``: the embedded default engine, one file shared by a host process and its workers.

URL: ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (query ``?synchronous=normal`` trades
power-loss durability for speed; ``?busy_timeout_ms=N``). The folder is created when missing.

* Items are keyed by id (the fingerprint): storing a held id is a replay. ``list``/``export`` page in write
  order with an opaque keyset cursor on ``seq`` (stable under concurrent writes); ``fetch`` pages a ranking
  frozen at the first page's last seq.
* ``store_with(accepted)`` commits the row (a live write: ``connection``) and leaves it pending (no
  embedding, no FTS row); ``visible`` (and ``store``) indexes it in the same transaction (``VISIBLE_CHUNK``
  items per background transaction), then indexes older pending rows, embedding them outside the lock, and so
  does every ``consolidate``. Live writes go before background ones (``connection``: the gate). A fetch folds
  pending rows in first only when the write lock is free at that moment (``Database.try_write``): a live-turn
  read never waits for another process's write, and an accepted item (which the contract lets lag) ranks
  from the first read that finds the lock free, a visible write or a build.
  Reads on other threads of the same engine wait for that fold, so all the sections of one pack agree.
* ``consolidate`` (``on_demand``) builds beliefs incrementally per scope (``beliefs_store``); ``beliefs`` and
  ``fetch(beliefs=N)`` serve them as learning hits tagged ``belief`` with ``derived_from`` naming their items.
* Forget and erase remove the beliefs derived only from the removed items, in the same transaction.
* A hybrid ``fetch`` reorders the lexical stage's best by late interaction over the model's stored token
  vectors (``rerank``); the query is encoded once per process for each distinct query text, so the sections of
  one pack share one encoding (``queries``: started at the fetch's entry, on the encoder thread), and the
  candidates' token vectors are kept per process as stored, int8 (``token_cache``). The model never runs on a write:
  ``embed_backlog`` encodes what waits, in batches, on the workers (the ``embed_items`` job,
  ``workers.handlers.run_embed``). A hybrid fetch also takes up to ``retrieval.dense.DENSE_POOL`` candidates nearest the
  query's pooled vector (``pooled``).
* ``fetch(max_scopes=N)`` ranks the items of at most N scopes (namespaces holding admitted items): those the
  query names first, then the most recently written by ``scopes.last_write`` (``reference.choose_scopes``,
  reference §1.3), each scope's conversations over its newest ``scoped.SCOPE_WINDOW`` turns (*memory-core*:
  a section's cost is bounded, ``scoped``). Beliefs are not narrowed by it. ``reads`` counts the rows each
  ranked read ranked.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from memory_core.consolidation import (
    BeliefsRequest,
    BuildScope,
    ConsolidateReceipt,
    ConsolidateRequest,
    ConsolidateStatus,
    Consolidation,
    WaitFor,
    WriteOptions,
)
from memory_core.descriptor import EngineDescriptor, EngineHealth
from memory_core.engine import AnyItem, MemoryEngine, Receipts
from memory_core.engines.reference import choose_scopes
from memory_core.errors import MemoryCoreError
from memory_core.items import parse_item
from memory_core.memory_log import MAX_LOG_PAGE, LogChange, LogPage, LogRecord, Tier
from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Namespace, Reach
from memory_core.query import (
    Citation,
    EraseReport,
    EraseRequest,
    Exported,
    ExportPage,
    FetchMode,
    FetchPage,
    FetchRequest,
    ForgetReport,
    ForgetTarget,
    GetRequest,
    Hit,
    ListPage,
    ListRequest,
    RecallAnswer,
    RecallRequest,
    StoreReceipt,
)
from memory_core.retrieval.embedder import F32, Embedder, Encoded, embedder_for, embedder_name
from memory_core.scoring import embed
from memory_core.settings import get_settings

from . import beliefs_store, log, log_checkpoint, log_ops, log_view, scoped, vectors
from .belief_index import BeliefIndex
from .blas import limit_blas
from .connection import TX_BUDGET_S, Database, SQLiteOptions, held_s, parse_url, tally
from .dated import dated_candidates
from .filters import compile_filter
from .fts_counts import SharedCounts
from .index import Bounded, CandidateRows, ItemIndex
from .pooled import PooledIndex
from .queries import QueryEncodings, QueryVectors
from .ranking import rank_items
from .read_memo import ReadMemo
from .rerank import RERANK_POOL, dense_candidates, rerank
from .rows import chunks, now_us, ns_key, ns_of_key, placeholders, vec_blob
from .schema import check_version, migrate
from .scoped import newest_per_scope, row_scopes, windowed
from .scopes import build_scopes, counts, decode_cursor, encode_cursor, scope_rows
from .search import hint_window
from .token_cache import TokenCache
from .windowed import window_candidates
from .writes import Prepared, delete_seqs, index_within, insert, pending_texts, prepare

__all__ = ["SQLiteEngine"]


def _write_vectors(conn: sqlite3.Connection, model: str, seqs: Sequence[int], encoded: Encoded, start: int) -> int:
    """Write the vectors of ``seqs[start:]`` one item at a time while the lock budget lasts; how many were consumed.

    At most ``VECTORS_CHUNK`` and at least one, as ``writes.index_within`` (items deleted since are skipped by
    ``vectors.write``).
    """
    end = min(len(seqs), start + VECTORS_CHUNK)
    at = start
    while at < end:
        one = Encoded(pooled=encoded.pooled[at : at + 1], tokens=encoded.tokens[at : at + 1])
        vectors.write(conn, model, seqs[at : at + 1], one)
        at += 1
        tally()
        if held_s() >= TX_BUDGET_S:
            break
    return at - start


def _one(predicate: tuple[str, list[Any]]) -> tuple[Any, ...]:
    """``(sql, params)`` as ``Where.add``'s arguments."""
    return (predicate[0], *predicate[1])


_T = TypeVar("_T")
_ITEM_CACHE = 4096
"""Parsed items kept per engine, by seq (items never change once stored)."""
_DRAIN_BATCH = 1000
_RECENT_READS = 64
INDEX_CHUNK = 16
"""Most pending rows indexed per background transaction, their embeddings computed before it; it commits sooner
once it has held the lock ``connection.TX_BUDGET_S`` (memory-core choice: a live write waiting behind one waits
about a millisecond)."""
VISIBLE_CHUNK = 4
"""Items per write transaction of a ``visible`` batch, embedded before it (memory-core choice: about a
millisecond of inserts with their FTS rows; a fixed count, not the clock, so a batch of up to this many is one
transaction whatever the machine's load)."""
VECTORS_CHUNK = 8
"""Most items whose model vectors (~14 KB each) one background transaction of ``embed_backlog`` writes; it
commits sooner once it has held the lock ``connection.TX_BUDGET_S`` (memory-core choice, as ``INDEX_CHUNK``)."""
_FOLD_WAIT_S = 1.0
"""Longest a read waits for another thread of this engine that is indexing pending rows (*memory-core*: the
reads of one pack run on several threads, and without waiting only the one that drained saw a turn just stored
``accepted``; the pack waits for that thread anyway, so waiting adds no latency to it)."""


def _alone(step: Callable[..., _T], *args: Any) -> _T | Exception:
    """``step(*args)``, or the error it raised when that error is one request's own (``fetch_together``).

    Raises:
        sqlite3.Error: the transaction's own failure (retried or mapped by ``Database.run``).
    """
    try:
        return step(*args)
    except sqlite3.Error:
        raise
    except Exception as exc:  # this request's failure only, as ``fetch`` would have raised it
        return exc


@dataclass(frozen=True, slots=True)
class _Ranked:
    """A fetch's page before its hits are built: ``(seq, score)`` best first, the next cursor, the beliefs."""

    page: list[tuple[int, float]]
    next_cursor: str | None
    beliefs: tuple[Hit, ...]

    def finish(self, hits: list[Hit]) -> FetchPage:
        """The page with ``hits`` (the page's items, in its order)."""
        return FetchPage(hits=tuple(hits), next_cursor=self.next_cursor, beliefs=self.beliefs)


@dataclass(frozen=True, slots=True)
class _Lexical:
    """A fetch between its lexical stage and its rerank (``SQLiteEngine._lexical``).

    ``ranked`` is the lexical stage's ``(seq, score)`` best first; ``encoding`` is None when no rerank follows
    (not hybrid, a time hint, fewer than two hits), and then ``ranked`` is already the final order.
    """

    request: FetchRequest
    rows: CandidateRows
    ranked: list[tuple[int, float]]
    want: int
    now: int
    encoding: Future[QueryVectors] | None
    memo: ReadMemo


@dataclass(frozen=True, slots=True)
class _Staged:
    """A first-stage page of ``fetch_together``: its lexical stage, cursor state and beliefs, before the rerank."""

    lexical: _Lexical
    offset: int
    snapshot: int
    beliefs: tuple[Hit, ...]


@dataclass
class ReadStats:
    """How many rows this engine's ranked reads ranked (counts since it was opened; issue 12 "bounded sections").

    Attributes:
        fetches: Ranked item reads.
        rows: Candidate rows they ranked, summed.
        most: The most candidate rows one read ranked.
        recent: ``(filter, rows)`` of the last ``_RECENT_READS`` reads, oldest first.
        reranks: Hybrid reads reordered by late interaction (``rerank``).
        most_reranked: The most lexical candidates one rerank scored (at most ``RERANK_POOL``).
    """

    fetches: int = 0
    rows: int = 0
    most: int = 0
    recent: deque[tuple[MetaFilter, int]] = field(default_factory=lambda: deque(maxlen=_RECENT_READS))
    reranks: int = 0
    most_reranked: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def ranked(self, flt: MetaFilter, rows: int) -> None:
        """Count one ranked read of ``rows`` candidates."""
        with self._lock:
            self.fetches += 1
            self.rows += rows
            self.most = max(self.most, rows)
            self.recent.append((flt, rows))

    def reranked(self, candidates: int) -> None:
        """Count one late-interaction rerank of ``candidates`` lexical candidates."""
        with self._lock:
            self.reranks += 1
            self.most_reranked = max(self.most_reranked, candidates)


class SQLiteEngine(MemoryEngine):
    """The embedded engine over one SQLite file; see the module docstring.

    Args:
        path: The database file (its folder is created when missing).
        synchronous: ``full`` (a commit survives power loss) or ``normal``.
        busy_timeout_ms: SQLite's own wait for a lock per statement, ms.
        embedder: The ranking model; None: the ``EMBEDDER`` setting's, loaded at its first use.

    Raises:
        ConfigError: the folder or file is read-only.
        EngineError: the file is not a SQLite database, or is corrupt (left untouched); not retryable.
        Conflict: the file's schema is newer than this code's, or belongs to another application.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        busy_timeout_ms: int = 2_000,
        embedder: Embedder | None = None,
    ) -> None:
        options = SQLiteOptions(path=Path(path), synchronous=synchronous, busy_timeout_ms=busy_timeout_ms)
        self._db = Database(options, probe=lambda conn: check_version(conn, Path(path)))
        self.path = self._db.path
        self._db.run(lambda conn: migrate(conn, self.path), write=True)
        self._index = ItemIndex()
        self._belief_index = BeliefIndex()
        self._items: OrderedDict[int, AnyItem] = OrderedDict()
        self._items_lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._instance = ""
        self._embedder = embedder
        settings = get_settings()  # read here, not on the encoder thread: the choice is fixed when the file opens
        self._embedder_choice = (settings.embedder, settings.embedder_model)
        self._queries = QueryEncodings(lambda: self.embedder)
        self._tokens = TokenCache()
        self._pooled = PooledIndex()
        self._fts_counts = SharedCounts()  # query words' document counts per index state (``fts_counts``)
        self.reads = ReadStats()
        self._past: log_ops.Past | None = None
        """The state as of an LSN this engine reads (``as_of``'s view), None: now."""
        limit_blas(get_settings().blas_threads)

    @classmethod
    def from_url(cls, url: str) -> SQLiteEngine:
        """Open ``sqlite:///path`` (see ``connection.parse_url`` for the query parameters).

        Raises:
            ConfigError: a malformed URL; and as the constructor.
        """
        opts = parse_url(url)
        return cls(opts.path, synchronous=opts.synchronous, busy_timeout_ms=opts.busy_timeout_ms)

    def close(self) -> None:
        """Close this process's connections. Idempotent."""
        self._db.close()

    def __repr__(self) -> str:
        return f"SQLiteEngine({str(self.path)!r})"

    # identity --------------------------------------------------------------------------------------------
    def descriptor(self) -> EngineDescriptor:
        """``sqlite``: all three fetch modes, on-demand consolidation."""
        return EngineDescriptor(
            id="sqlite",
            label="SQLite (embedded)",
            description="One local file shared by the host and its workers: FTS5 keyword, stored-vector and "
            "hybrid fetch, incremental belief builds.",
            fetch_modes=FetchMode.all(),
            consolidation=Consolidation.ON_DEMAND,
            log=True,
            tiers=True,
        )

    def health(self) -> EngineHealth:
        """``ok`` when the file answers a read and reads clean, else ``down`` with the reason, naming the file.

        Damage is found by SQLite's ``PRAGMA quick_check`` at most once a minute, and at once after any read
        or write met it (``Database.damage``): about 0.13 s per check on a 100k-item file, else one small read.
        """
        try:
            self._db.run(lambda conn: conn.execute("SELECT count(*) FROM scopes").fetchone())
            damage = self._db.damage()
        except MemoryCoreError as exc:
            return EngineHealth.down(str(exc))
        return EngineHealth.ok() if damage is None else EngineHealth.down(damage)

    # writes ----------------------------------------------------------------------------------------------
    def _write(self, rows: Sequence[Prepared], visible: bool) -> Receipts:
        """Insert ``rows``: ``accepted`` as one live transaction, ``visible`` in background chunks.

        An ``accepted`` write is the live turn's: one short transaction, no embedding, committed with
        ``synchronous = NORMAL`` (``connection``: durable once it returns unless the machine loses power).
        A ``visible`` batch (ingestion) was embedded before the lock (``prepare``); it is written
        ``VISIBLE_CHUNK`` items per background transaction, so a live write never waits behind a whole batch
        (the contract lets a failed batch keep its earlier items), and older pending rows are then indexed with
        their embeddings computed outside the lock (``drain_pending``).
        """
        if not visible:

            def tx(conn: sqlite3.Connection) -> Receipts:
                at = now_us()
                return [StoreReceipt(id=row.id, replayed=insert(conn, row, at) is None) for row in rows]

            return self._db.run(tx, write=True, relaxed=True, kind="live")
        receipts: list[StoreReceipt] = []
        for start in range(0, len(rows), VISIBLE_CHUNK):
            part = rows[start : start + VISIBLE_CHUNK]

            def chunk_tx(conn: sqlite3.Connection, part: Sequence[Prepared] = part) -> Receipts:
                at = now_us()
                tally(len(part))
                return [StoreReceipt(id=row.id, replayed=insert(conn, row, at) is None) for row in part]

            receipts.extend(self._db.run(chunk_tx, write=True, background=True, kind="visible"))
        self.drain_pending()
        self._db.sync()  # background work: durable once it returns (``connection``)
        return receipts

    def _store(self, item: AnyItem) -> StoreReceipt:
        return self._write([prepare(item, index=True)], visible=True)[0]

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        visible = options.wait is WaitFor.VISIBLE
        return self._write([prepare(item, index=visible)], visible=visible)[0]

    def _store_many(self, items: Sequence[AnyItem]) -> Receipts:
        return self._write([prepare(item, index=True) for item in items], visible=True)

    def _store_many_with(self, items: Sequence[AnyItem], options: WriteOptions) -> Receipts:
        visible = options.wait is WaitFor.VISIBLE
        return self._write([prepare(item, index=visible) for item in items], visible=visible)

    def drain_pending(self) -> int:
        """Index every item stored ``accepted`` and not yet indexed, waiting for the write lock; how many were.

        Threads of one engine drain one at a time (the others then find the queue empty), rather than racing
        for SQLite's write lock.
        """
        with self._drain_lock:
            done = self._drain(wait=True)
        if done:
            self._db.sync()  # background work: durable once it returns (``connection``)
        return done

    def _fold_pending(self) -> None:
        """Before a read: index pending rows unless another process holds the write lock (never waited for).

        A thread of this engine already indexing is waited for (up to ``_FOLD_WAIT_S``), so every read of one
        pack sees what the one before it stored ``accepted``.
        """
        if self._drain_lock.acquire(timeout=_FOLD_WAIT_S):
            try:
                self._drain(wait=False)
            finally:
                self._drain_lock.release()

    def _drain(self, *, wait: bool) -> int:
        total = 0
        while True:
            rows = self._db.run(lambda conn: pending_texts(conn, _DRAIN_BATCH))
            if not rows:
                return total
            computed = [(seq, text, vec_blob(embed(text))) for seq, text in rows]
            start = 0
            while start < len(computed):
                write = partial(index_within, rows=computed[start:], cap=INDEX_CHUNK)
                step = (
                    self._db.run(write, write=True, background=True, kind="index")
                    if wait
                    else self._db.try_write(write, kind="index")
                )
                if step is None:
                    return total
                start += step[0]
                total += step[1]
            if len(rows) < _DRAIN_BATCH:
                return total

    # the model ---------------------------------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        """The ranking model (the ``EMBEDDER`` setting's when the engine opened, unless one was given)."""
        if self._embedder is None:
            self._embedder = embedder_for(*self._embedder_choice)
        return self._embedder

    def query_tokens(self, query: str) -> F32:
        """The query's content-token vectors, encoded once per distinct query (``queries.QueryEncodings``)."""
        return self._queries.get(query)

    @property
    def query_encodes(self) -> int:
        """How many times this engine ran the model on a query (one per distinct query text it kept)."""
        return self._queries.encodes

    def embed_backlog(self, limit: int | None = None, batch: int | None = None) -> int:
        """Encode stored items that have no vectors of the current model, ``batch`` at a time; how many were.

        The model runs outside any transaction; each batch's vectors are written in background transactions
        (``connection``: a live write goes first) of at most ``VECTORS_CHUNK`` items, each committing once it
        has held the lock ``connection.TX_BUDGET_S``, and the call ends with one fsync of the log, holding no
        lock. This is the workers' work (the ``embed_items`` job, ``workers.handlers.run_embed``): never called on a
        write.

        Args:
            limit: Most items to encode (None: until none waits).
            batch: Items per batch (None: the ``EMBED_BATCH`` setting).
        """
        model = self.embedder
        size = batch or get_settings().embed_batch
        done = 0
        while limit is None or done < limit:
            take = size if limit is None else min(size, limit - done)
            rows = self._read(partial(vectors.unembedded, model=model.name, limit=take))
            if not rows:
                break
            encoded = model.encode([text for _, text in rows])
            seqs = [seq for seq, _ in rows]
            start = 0
            while start < len(seqs):
                body = partial(_write_vectors, model=model.name, seqs=seqs, encoded=encoded, start=start)
                start += self._db.run(body, write=True, background=True, kind="vectors")
            done += len(rows)
            if len(rows) < take:
                break
        if done:
            self._db.sync()  # background work: durable once it returns (``connection``)
        return done

    # deletes ---------------------------------------------------------------------------------------------
    def _forget(self, target: ForgetTarget) -> ForgetReport:
        def tx(conn: sqlite3.Connection) -> int:
            if target.ids is not None:
                ids = list(dict.fromkeys(target.ids))
                seqs: list[int] = []
                for chunk in chunks(ids):
                    marks = placeholders(len(chunk))
                    seqs.extend(int(r[0]) for r in conn.execute(f"SELECT seq FROM items WHERE id IN ({marks})", chunk))
            else:
                where = compile_filter(target.filter or MetaFilter(), "i")
                seqs = [int(r[0]) for r in conn.execute(f"SELECT i.seq FROM items i WHERE {where.sql}", where.params)]
            return delete_seqs(conn, seqs)

        return ForgetReport(forgotten=self._db.run(tx, write=True))

    def _erase(self, request: EraseRequest) -> EraseReport:
        reach = Reach(at=request.reach.at, inherit=False, descendants=request.reach.descendants)
        flt = MetaFilter(reach=reach, kinds=request.admitted_kinds())

        def tx(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            where = compile_filter(flt, "i")
            rows = conn.execute(f"SELECT i.seq, i.ns, i.kind FROM items i WHERE {where.sql}", where.params).fetchall()
            delete_seqs(conn, [int(r[0]) for r in rows], "erase")
            return sorted({(str(ns_of_key(r[1])), str(r[2])) for r in rows})

        scopes = self._db.run(tx, write=True)
        return EraseReport(erased_scopes=len(scopes), receipts=tuple(f"{ns}#{kind}" for ns, kind in scopes))

    # reads -----------------------------------------------------------------------------------------------
    def _read(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        return self._db.run(fn)

    def _parsed(
        self, conn: sqlite3.Connection, seqs: Sequence[int], memo: ReadMemo | None = None
    ) -> dict[int, tuple[str, AnyItem]]:
        """``seq → (id, item)`` for the given seqs (parsed items cached per process)."""
        instance = (memo or ReadMemo()).instance(conn)
        out: dict[int, tuple[str, AnyItem]] = {}
        missing: list[int] = []
        with self._items_lock:
            if instance != self._instance:
                self._items.clear()
                self._instance = instance
            for seq in seqs:
                item = self._items.get(seq)
                if item is None:
                    missing.append(seq)
                else:
                    self._items.move_to_end(seq)
                    out[seq] = (item.id, item)
        for chunk in chunks(missing):
            marks = placeholders(len(chunk))
            for seq, item_id, body in conn.execute(
                f"SELECT i.seq, i.id, b.item FROM items i JOIN bodies b ON b.seq = i.seq WHERE i.seq IN ({marks})",
                chunk,
            ):
                item = parse_item(body)
                item.__dict__["id"] = str(item_id)  # the stored id is the fingerprint; skip recomputing it
                out[int(seq)] = (str(item_id), item)
                with self._items_lock:
                    self._items[int(seq)] = item
                    if len(self._items) > _ITEM_CACHE:
                        self._items.popitem(last=False)
        return out

    def _hits(self, conn: sqlite3.Connection, ranked: Sequence[tuple[int, float]]) -> list[Hit]:
        return self._hits_of(conn, [ranked], ReadMemo())[0]

    def _hits_of(
        self, conn: sqlite3.Connection, pages: Sequence[Sequence[tuple[int, float]]], memo: ReadMemo
    ) -> list[list[Hit]]:
        """The hits of several ranked pages of one read, their items parsed and annotated together.

        Each hit is built with its status and tier (``log_view.states``, one statement), not built and copied.
        """
        parsed = self._parsed(conn, list(dict.fromkeys(seq for page in pages for seq, _ in page)), memo)
        state = log_view.states(conn, list(dict.fromkeys(parsed[seq][0] for seq in parsed)), self._past)
        return [
            [Hit.of(parsed[seq][1], s, parsed[seq][0], state.get(parsed[seq][0])) for seq, s in page if seq in parsed]
            for page in pages
        ]

    def _ranked(
        self,
        conn: sqlite3.Connection,
        request: FetchRequest,
        want: int,
        snapshot: int,
        memo: ReadMemo,
        encoding: Future[QueryVectors] | None = None,
    ) -> list[tuple[int, float]]:
        return self._reranked(conn, self._lexical(conn, request, want, snapshot, memo, encoding))

    def _lexical(
        self,
        conn: sqlite3.Connection,
        request: FetchRequest,
        want: int,
        snapshot: int,
        memo: ReadMemo,
        encoding: Future[QueryVectors] | None = None,
    ) -> _Lexical:
        """A fetch's candidates and lexical stage: everything before it needs the query's encoding."""
        rows = self._index.candidates(
            conn,
            request.filter,
            snapshot,
            request.exclude_agent_id,
            bounded=None
            if request.max_scopes is None
            else Bounded(request.query, request.max_scopes, scoped.SCOPE_WINDOW),  # loads only what it can rank
            served=lambda keys: log_view.served_mask(conn, keys, request.tiers, self._past, memo),  # live, named tiers
            memo=memo,
        )
        if request.max_scopes is not None and len(rows):
            rows = self._within_scopes(conn, rows, request, request.max_scopes)
        self.reads.ranked(request.filter, len(rows))
        hinted = None
        if request.refers_to is not None and len(rows):
            where = compile_filter(request.filter, "i")
            start, end = hint_window(request.refers_to)
            inside = conn.execute(
                f"SELECT i.seq FROM items i WHERE {where.sql} AND i.observed_at >= ? AND i.observed_at < ? "
                "ORDER BY i.seq",
                (*where.params, start, end),
            ).fetchall()
            hinted = np.fromiter((r[0] for r in inside), dtype=np.int64, count=len(inside))
        now = now_us()

        def lexical(n: int) -> list[tuple[int, float]]:
            size = self._index.size()
            counts = memo.counts(conn, "items_fts")
            return rank_items(conn, rows, request.query, request.mode, n, size, now, hinted, doc_counts=counts)

        if request.mode is not FetchMode.HYBRID:
            return _Lexical(request, rows, lexical(want), want, now, None, memo)
        if hinted is not None:  # a time hint orders its own groups
            encoding = None
        elif encoding is None:
            encoding = self._queries.start(request.query)  # runs during the lexical stage
        ranked = lexical(max(want, RERANK_POOL))
        if encoding is None or len(ranked) < 2:  # a time hint orders its own groups; one hit needs no order
            return _Lexical(request, rows, ranked[:want], want, now, None, memo)
        return _Lexical(request, rows, ranked, want, now, encoding, memo)

    def _reranked(self, conn: sqlite3.Connection, stage: _Lexical) -> list[tuple[int, float]]:
        """The lexical stage's candidates reordered by the query's encoding (waited for here), best ``want``."""
        ranked, encoding = stage.ranked, stage.encoding
        if encoding is None:
            return ranked
        request, rows, now = stage.request, stage.rows, stage.now
        self.reads.reranked(min(len(ranked), RERANK_POOL))
        tokens, pooled = encoding.result()
        model = self.embedder.name
        dense = dense_candidates(conn, self._pooled, rows, ranked, request.query, pooled, model)
        taken = {s for s, _ in ranked[:RERANK_POOL]} | set(dense)
        dense += dated_candidates(conn, self._pooled, rows, taken, request.query, pooled, model)
        taken |= set(dense)
        dense += window_candidates(conn, self._pooled, rows, taken, request.query, pooled, model)
        loader = partial(self._tokens.load, memo=stage.memo)  # the cache's snapshot state read once per read
        return rerank(conn, ranked, request.query, tokens, model, now, dense, loader)[: stage.want]

    def _within_scopes(
        self, conn: sqlite3.Connection, rows: CandidateRows, request: FetchRequest, max_scopes: int
    ) -> CandidateRows:
        """The candidates inside the at most ``max_scopes`` scopes ``choose_scopes`` keeps.

        Each kept scope's conversations are cut to its newest ``scoped.SCOPE_WINDOW`` (``scoped``).
        """
        codes, names = row_scopes(rows)
        distinct = np.unique(codes)
        keep = np.ones(len(codes), dtype=bool)
        if len(distinct) > max_scopes:
            kinds = [k.value for k in request.filter.kinds or ItemKind.all()]
            keys = [names[int(c)] for c in distinct]
            last: dict[Namespace, int] = {ns_of_key(key): 0 for key in keys}
            for chunk in chunks(keys):
                for ns, at in conn.execute(
                    f"SELECT ns, max(last_write) FROM scopes WHERE ns IN ({placeholders(len(chunk))}) "
                    f"AND kind IN ({placeholders(len(kinds))}) GROUP BY ns",
                    (*chunk, *kinds),
                ):
                    last[ns_of_key(str(ns))] = int(at or 0)
            chosen = choose_scopes(request.query, last, request.filter.effective_reach(), max_scopes)
            kept = np.array([c for c, key in zip(distinct, keys, strict=True) if ns_of_key(key) in chosen])
            keep = np.isin(codes, kept)
        keep &= newest_per_scope(codes, windowed(rows) & keep, scoped.SCOPE_WINDOW)
        return rows if keep.all() else rows.subset(keep)

    def _fetch(self, request: FetchRequest) -> FetchPage:
        state = decode_cursor("f", request.cursor, ("o", "s"))
        encoding = self._encoding(request)
        self._fold_pending()

        def read(conn: sqlite3.Connection) -> FetchPage:
            return self._page(conn, request, state, ReadMemo(shared=self._fts_counts), encoding)

        return self._read(read)

    def fetch_together(self, requests: Sequence[FetchRequest | Mapping[str, Any]]) -> list[FetchPage | Exception]:
        """Several first-page fetches in one read transaction: what a pack's ranked sections read.

        Each request is ranked exactly as ``fetch`` ranks it; what depends only on the snapshot is read once
        for all of them (``read_memo``: the pending fold, the newest ``seq``, the unserved rows, the query
        words' document counts), so a pack's statements do not grow with its sections
        (issue 12 "bounded sections"). ``recall.gather`` uses it for the fetch sections of a pack.

        Args:
            requests: ``FetchRequest``s (or their JSON objects); a cursor is honoured as ``fetch`` honours it.

        Returns:
            One entry per request, in order: its page, or the error ``fetch`` would have raised for it alone
            (an invalid request, an unsupported mode, an engine error while ranking it).

        Raises:
            MemoryCoreError: a failure of the transaction itself (every request would have failed).
        """
        checked: list[tuple[FetchRequest, dict[str, int] | None] | Exception] = []
        for raw in requests:
            try:
                request = FetchRequest.coerce(raw, "request")
                self.descriptor().ensure_mode(request.mode)
                if request.tiers:
                    self.descriptor().ensure_tiers()
                checked.append((request, decode_cursor("f", request.cursor, ("o", "s"))))
            except MemoryCoreError as exc:
                checked.append(exc)
        if all(isinstance(c, Exception) for c in checked):
            return [c for c in checked if isinstance(c, Exception)]
        encodings = [None if isinstance(c, Exception) else self._encoding(c[0]) for c in checked]
        self._fold_pending()

        def read(conn: sqlite3.Connection) -> list[FetchPage | Exception]:
            memo = ReadMemo(shared=self._fts_counts)
            staged: list[_Staged | Exception] = []
            for entry, encoding in zip(checked, encodings, strict=True):  # every lexical stage while the model runs
                staged.append(
                    entry if isinstance(entry, Exception) else _alone(self._stage_page, conn, *entry, memo, encoding)
                )
            ranked = [s if isinstance(s, Exception) else _alone(self._finish_page, conn, s) for s in staged]
            pages = [r.page for r in ranked if not isinstance(r, Exception)]
            hits = iter(self._hits_of(conn, pages, memo))  # parsed and annotated together: one statement each
            return [r if isinstance(r, Exception) else r.finish(next(hits)) for r in ranked]

        return self._read(read)

    def _encoding(self, request: FetchRequest) -> Future[QueryVectors] | None:
        """The query's encoding, started before the pending fold and the lexical stage; None when no rerank follows.

        The model runs meanwhile, once per distinct query (``QueryEncodings``); a time hint orders its own groups.
        """
        hybrid = request.mode is FetchMode.HYBRID and request.refers_to is None
        return self._queries.start(request.query) if hybrid else None

    def _page(
        self,
        conn: sqlite3.Connection,
        request: FetchRequest,
        state: dict[str, int] | None,
        memo: ReadMemo,
        encoding: Future[QueryVectors] | None = None,
    ) -> FetchPage:
        """One fetch's page inside a read transaction (``encoding``: the query's, started by the caller)."""
        ranked = self._rank_page(conn, request, state, memo, encoding)
        return ranked.finish(self._hits_of(conn, [ranked.page], memo)[0])

    def _rank_page(
        self,
        conn: sqlite3.Connection,
        request: FetchRequest,
        state: dict[str, int] | None,
        memo: ReadMemo,
        encoding: Future[QueryVectors] | None = None,
    ) -> _Ranked:
        """A fetch's ranked page (seqs and scores) and beliefs, inside a read transaction."""
        return self._finish_page(conn, self._stage_page(conn, request, state, memo, encoding))

    def _stage_page(
        self,
        conn: sqlite3.Connection,
        request: FetchRequest,
        state: dict[str, int] | None,
        memo: ReadMemo,
        encoding: Future[QueryVectors] | None = None,
    ) -> _Staged:
        """A fetch's page up to its rerank: the lexical stage and the beliefs (neither waits for the encoding)."""
        offset = state["o"] if state else 0
        snapshot = state["s"] if state else memo.newest_seq(conn)
        lexical = self._lexical(conn, request, offset + request.limit + 1, snapshot, memo, encoding)
        beliefs: list[Hit] = []
        if request.beliefs and state is None and request.filter.admits_kind(ItemKind.LEARNING):
            beliefs = log_view.rank_beliefs(  # a filter admitting no learning is served none: not ranked
                conn, request.filter, request.query, request.mode, request.beliefs, self._belief_index, self._past
            )
        return _Staged(lexical, offset, snapshot, tuple(beliefs))

    def _finish_page(self, conn: sqlite3.Connection, staged: _Staged) -> _Ranked:
        """A staged page reranked (``_reranked``) and cut to the request's limit, with its next cursor."""
        ranked = self._reranked(conn, staged.lexical)
        offset, limit = staged.offset, staged.lexical.request.limit
        page = ranked[offset : offset + limit]
        more = len(ranked) > offset + limit
        following = encode_cursor("f", {"o": offset + len(page), "s": staged.snapshot}) if more else None
        return _Ranked(page, following, staged.beliefs)

    def _recall(self, request: RecallRequest) -> RecallAnswer:
        fetch = FetchRequest(
            query=request.question,
            mode=FetchMode.HYBRID,
            filter=request.filter,
            limit=request.limit,
            refers_to=request.refers_to,
            tiers=request.tiers,
        )
        hits = self._fetch(fetch).hits
        citations = tuple(Citation(id=h.id, kind=h.kind, snippet=h.text, meta=h.meta, score=h.score) for h in hits)
        if not hits:
            answer = "Nothing stored answers this question."
        else:
            answer = f"From {len(hits)} stored items: " + " | ".join(h.text for h in hits)
        return RecallAnswer(answer=answer, citations=citations, model="sqlite")

    def _listing(
        self,
        request: ListRequest,
        build: Callable[[sqlite3.Connection, list[int]], list[_T]],
        every_status: bool = False,
    ) -> tuple[list[_T], str | None]:
        state = decode_cursor("l", request.cursor, ("a",))
        after = state["a"] if state else 0

        def read(conn: sqlite3.Connection) -> tuple[list[_T], str | None]:
            where = compile_filter(request.filter, "i")
            where.add(*_one(log_view.listed_sql(self._past, every_status=every_status)))
            rows = conn.execute(
                f"SELECT i.seq FROM items i WHERE {where.sql} AND i.seq > ? ORDER BY i.seq LIMIT ?",
                (*where.params, after, request.limit + 1),
            ).fetchall()
            seqs = [int(r[0]) for r in rows[: request.limit]]
            more = len(rows) > request.limit
            return build(conn, seqs), (encode_cursor("l", {"a": seqs[-1]}) if more and seqs else None)

        return self._read(read)

    def _list(self, request: ListRequest) -> ListPage:
        items, cursor = self._listing(request, lambda conn, seqs: self._hits(conn, [(s, 0.0) for s in seqs]))
        return ListPage(items=tuple(items), next_cursor=cursor)

    def _export(self, request: ListRequest) -> ExportPage:
        def build(conn: sqlite3.Connection, seqs: list[int]) -> list[Exported]:
            parsed = self._parsed(conn, seqs)
            return [Exported(id=parsed[s][0], item=parsed[s][1]) for s in seqs if s in parsed]

        items, cursor = self._listing(request, build, every_status=True)
        return ExportPage(items=tuple(items), next_cursor=cursor)

    def _get(self, request: GetRequest) -> list[Hit]:
        ids = log_view.shown_ids(list(dict.fromkeys(request.ids)), self._past)
        if not ids:
            return []

        def read(conn: sqlite3.Connection) -> list[Hit]:
            where = compile_filter(MetaFilter(reach=request.reach), "i")
            found: dict[str, int] = {}
            marks = placeholders(len(ids))
            for seq, item_id in conn.execute(
                f"SELECT i.seq, i.id FROM items i WHERE i.id IN ({marks}) AND {where.sql}", (*ids, *where.params)
            ):
                found[str(item_id)] = int(seq)
            by_seq = {h.id: h for h in self._hits(conn, [(s, 0.0) for s in found.values()])}
            return [by_seq[i] for i in ids if i in by_seq]

        return self._read(read)

    # beliefs ---------------------------------------------------------------------------------------------
    def build_scope(self, ns: Namespace, kind: ItemKind) -> set[str]:
        """Build beliefs for one scope up to its newest item (``beliefs_store.build_scope``).

        Returns:
            Ids of the beliefs created or changed (empty when nothing was written since the last build).
        """
        try:
            return beliefs_store.build_scope(self._db, ns_key(ns), kind.value)
        finally:
            self._db.sync()

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        """Build every admitted scope with items past its watermark; the others cost one read, no lock."""
        with self._drain_lock:  # builds run in workers: the place to index what live turns stored accepted
            drained = self._drain(wait=True)
        kinds = [k.value for k in request.admitted_kinds()]
        scopes = self._read(partial(beliefs_store.scopes_to_build, reach=request.reach, kinds=kinds))
        changed: set[str] = set()
        try:
            for ns, kind, due in scopes:
                if due:
                    changed |= beliefs_store.build_scope(self._db, ns, kind)
        finally:
            if drained or any(due for _, _, due in scopes):
                self._db.sync()  # one fsync for the whole unit of work, holding no lock
        return ConsolidateReceipt(status=ConsolidateStatus.COMPLETED, scopes=len(scopes), built=len(changed))

    def _beliefs(self, request: BeliefsRequest) -> list[Hit]:
        flt = MetaFilter(reach=request.reach)
        return self._read(
            lambda conn: log_view.rank_beliefs(
                conn, flt, request.query, FetchMode.HYBRID, request.limit, self._belief_index, self._past
            )
        )

    # the log (seed 002; ``log``, ``log_ops``, ``log_view``) ------------------------------------------------
    def _upto(self) -> int | None:
        return None if self._past is None else self._past.end

    def _current_lsn(self) -> int:
        upto = self._upto()
        return self._read(log.current_lsn) if upto is None else upto

    def _log(self, since: int, limit: int) -> LogPage:
        records, more = self._read(partial(log.page, since=since, limit=min(limit, MAX_LOG_PAGE), upto=self._upto()))
        return LogPage(records=tuple(records), next_since=records[-1].lsn if more and records else None)

    def _history(self, item_id: str) -> tuple[LogRecord, ...]:
        return self._read(partial(log.history, item_id=item_id, upto=self._upto()))

    def _as_of(self, lsn: int) -> SQLiteEngine:
        from .log_view_engine import view_of  # the view subclasses this class

        return view_of(self, self._read(partial(log_ops.past, lsn=lsn)), lsn)

    def _retract(self, ids: tuple[str, ...], reason: str) -> LogChange:
        return self._db.run(partial(log_ops.retract, ids=ids, reason=reason), write=True)

    def _rollback(self, to_lsn: int, reason: str) -> LogChange:
        return self._db.run(partial(log_ops.rollback, to_lsn=to_lsn, reason=reason), write=True)

    def _move(self, ids: tuple[str, ...], tier: Tier, reason: str) -> LogChange:
        return self._db.run(partial(log_ops.move, ids=ids, tier=tier, reason=reason), write=True)

    def compact_log(self, upto: int) -> int:
        """Compact the log's records up to ``upto`` into a checkpoint (``log_checkpoint``); how many went.

        Background work in transactions of at most ``log_checkpoint.COMPACT_STEP`` records (``compact_step``),
        ending with one fsync of the log, holding no lock.
        """
        total = 0
        while step := self._db.run(
            partial(log_checkpoint.compact_step, upto=upto), write=True, background=True, kind="compact"
        ):
            total += step
        if total:
            self._db.sync()
        return total

    def _scopes(self, request: ConsolidateRequest) -> list[BuildScope]:
        return build_scopes(self._read(partial(scope_rows, request=request)))

    def belief_evidence(self, belief_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """``belief id → ids of the items it was derived from`` for the beliefs named (unknown ids left out)."""
        return self._read(partial(beliefs_store.evidence_of, belief_ids=belief_ids))

    def stats(self) -> dict[str, Any]:
        """Row counts, for tests and the CLI.

        ``items``, ``pending``, ``beliefs`` (active), ``superseded``, and ``embedding_wait``: items the current
        model has not encoded yet.
        """
        out = self._read(counts)
        name = self._embedder.name if self._embedder else embedder_name(*self._embedder_choice)
        out["embedding_wait"] = self._read(partial(vectors.backlog, model=name))
        return out
