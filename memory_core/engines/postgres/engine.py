"""``PostgresEngine``: one store that many hosts and workers on many machines share.

URL: ``postgresql://user:password@host:port/database`` (options: ``options.parse_url``). Opening it takes the
process's pool for the URL (``driver``), refuses a schema newer than the code, and migrates an older one under
an advisory lock (``schema``).

* Items are keyed by content id: storing a held id is a replay. ``store_with(accepted)`` and ``visible`` are
  one ``INSERT … ON CONFLICT DO NOTHING`` statement (``writes.insert``): the generated ``tsvector`` and the
  embedding are written with the row, so an item ranks once its transaction commits. ``store_many`` is one
  transaction (one statement).
* ``list``/``export`` page in write order with a keyset cursor on ``seq``; ``fetch`` pages a ranking frozen at
  the first page's newest ``seq`` (cursor: offset and snapshot).
* Ranking: candidates and their signals from one SQL statement (``search``) over stemmed, windowed terms,
  scored by ``fusion.fuse``; a hybrid fetch adds the items nearest the query's pooled vector (``pooled``, a
  host copy kept current by the read's first statement) and reorders the best ``RERANK_POOL`` with them by late
  interaction over the stored token vectors (``rerank``, one more statement that also brings the page's
  bodies). The model never runs on a write: ``embed_backlog`` encodes what waits, on the workers (``vectors``).
* Reads run in autocommit (``driver``): a ranked read is at most three round trips (``_fetch``), a ``pre_turn``
  one write transaction and those per section (``tests/postgres/test_postgres_round_trips.py`` counts them).
* ``consolidate`` builds beliefs per scope incrementally (``beliefs``): one transaction and one advisory lock per
  scope, a watermark on transaction ids. Forget and erase retract the beliefs in the deleting transaction.
* Every read compiles its reach into SQL (``filters``).
* Memory as a log (seed 002): every change is a record in the changing statement, LSN order is commit order
  (``log``); reads serve live memories of the tiers asked (``log_view``); ``retract``, ``rollback``, ``move``,
  ``history`` and ``as_of`` views (``log_engine``, ``log_ops``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from memory_core.consolidation import (
    BeliefsRequest,
    BuildScope,
    ConsolidateReceipt,
    ConsolidateRequest,
    ConsolidateStatus,
    Consolidation,
    WriteOptions,
)
from memory_core.descriptor import EngineDescriptor, EngineHealth, HealthState
from memory_core.engine import AnyItem, MemoryEngine, Receipts
from memory_core.engines.reference import choose_scopes
from memory_core.engines.sqlite.rows import now_us, ns_key, ns_of_key
from memory_core.engines.sqlite.scopes import ScopeRow, build_scopes, decode_cursor, encode_cursor
from memory_core.engines.sqlite.search import query_words
from memory_core.errors import MemoryCoreError
from memory_core.items import parse_item
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
from memory_core.retrieval.embedder import Embedder
from memory_core.retrieval.terms import query_terms
from memory_core.settings import get_settings

from . import beliefs, log_view, vectors
from .driver import Conn, Driver, pipelined
from .filters import Where, admits_beliefs, compile_filter, reach_sql
from .fusion import fuse
from .log_engine import LogHooks
from .model import Model
from .options import PgOptions, parse_url
from .pooled import PooledCache
from .rerank import DENSE_POOL, RERANK_POOL, dense_nominations, reorder
from .schema import MIGRATION_LOCK, SCHEMA, SCHEMA_VERSION, check_newer, ensure_vectors, migrate
from .search import Extra, Features, Frequencies, statement
from .writes import delete_where, insert, prepare

__all__ = ["PostgresEngine"]

_T = TypeVar("_T")


def _one(predicate: tuple[str, list[Any]]) -> tuple[Any, ...]:
    """``(sql, params)`` as ``Where.add``'s arguments."""
    return (predicate[0], *predicate[1])


class PostgresEngine(LogHooks, MemoryEngine):
    """The PostgreSQL engine; see the module docstring.

    Args:
        url: ``postgresql://user:password@host:port/database[?option=value…]``.

    Raises:
        ConfigError: a malformed URL, no database, an unknown option, rejected credentials, a missing database
            or role, or a server that is not PostgreSQL (each naming the setting, the password masked).
        EngineUnavailable: the server does not answer.
        Conflict: the database's schema is newer than this code's.
    """

    def __init__(self, url: str, *, embedder: Embedder | None = None) -> None:
        self.options: PgOptions = parse_url(url)
        self.model = Model(embedder)
        self._driver = Driver.shared(self.options)
        try:
            self._driver.run(partial(check_newer, where=self.options.masked))
            self._driver.run(partial(migrate, where=self.options.masked))
            vectors = self._driver.run(ensure_vectors)
            trigram = self._driver.run(_trigram)
        except BaseException:
            self._driver.release()
            raise
        self.features = Features(trigram=trigram, vectors=vectors)
        self._frequencies = Frequencies()
        self._pooled = PooledCache()
        self._closed = False

    @classmethod
    def from_url(cls, url: str) -> PostgresEngine:
        """Open ``postgresql://…`` (or ``postgres://…``); raises as the constructor."""
        return cls(url)

    def close(self) -> None:
        """Release this engine's share of the process's pool. Idempotent."""
        if not self._closed:
            self._closed = True
            self._driver.release()

    def __repr__(self) -> str:
        return f"PostgresEngine({self.options.masked!r})"

    # identity --------------------------------------------------------------------------------------------
    def descriptor(self) -> EngineDescriptor:
        """``postgresql``: all three fetch modes, on-demand consolidation."""
        return EngineDescriptor(
            id="postgresql",
            label="PostgreSQL",
            description="One database shared by hosts and workers on many machines: tsvector keyword, "
            "stored-vector and hybrid fetch, incremental belief builds under advisory locks.",
            fetch_modes=FetchMode.all(),
            consolidation=Consolidation.ON_DEMAND,
            log=True,
            tiers=True,
        )

    def health(self) -> EngineHealth:
        """``ok`` naming what ranking uses (full text, ``pg_trgm``, the vector index), else ``down`` and why."""
        try:
            self._driver.run(lambda conn: conn.execute(f"SELECT count(*) FROM {SCHEMA}.meta").fetchone(), read=True)
        except MemoryCoreError as exc:
            return EngineHealth.down(str(exc))
        parts = [
            f"schema v{SCHEMA_VERSION}",
            "tsvector+GIN",
            "pg_trgm" if self.features.trigram else "no pg_trgm",
            {"pgvector": "pgvector HNSW", "cube": "cube GiST (no pgvector)"}.get(self.features.vectors, "vector scan"),
            "stemmed windowed terms",
            f"late interaction ({self.model.label}, vectors by the workers)",
            "dense candidates (pooled vectors, host copy)",
        ]
        return EngineHealth(state=HealthState.OK, reason=", ".join(parts))

    def _run(self, fn: Callable[[Conn], _T]) -> _T:
        return self._driver.run(fn)

    def _read(self, fn: Callable[[Conn], _T]) -> _T:
        """Run a read: its statements in autocommit, no ``BEGIN``/``COMMIT`` round trips (``driver``)."""
        return self._driver.run(fn, read=True)

    # writes ----------------------------------------------------------------------------------------------
    def _write(self, items: Sequence[AnyItem]) -> Receipts:
        rows = [prepare(item) for item in items]
        created = self._run(lambda conn: insert(conn, rows, now_us()))
        return [StoreReceipt(id=row.id, replayed=not new) for row, new in zip(rows, created, strict=True)]

    def _store(self, item: AnyItem) -> StoreReceipt:
        return self._write([item])[0]

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        return self._write([item])[0]

    def _store_many(self, items: Sequence[AnyItem]) -> Receipts:
        return self._write(items)

    def _store_many_with(self, items: Sequence[AnyItem], options: WriteOptions) -> Receipts:
        return self._write(items)

    def embed_backlog(self, limit: int | None = None, batch: int | None = None) -> int:
        """Encode stored items that have no vectors of the current model, ``batch`` at a time; how many were.

        The model runs outside any transaction; each batch's vectors are written in one statement
        (``vectors.write``). This is the workers' work (every build job runs it after its builds): never
        called on a write.

        Args:
            limit: Most items to encode (None: until none waits).
            batch: Items per batch (None: the ``EMBED_BATCH`` setting).
        """
        model = self.model.embedder
        size = batch or get_settings().embed_batch
        done = 0
        while limit is None or done < limit:
            take = size if limit is None else min(size, limit - done)
            rows = self._read(partial(vectors.unembedded, model=model.name, limit=take))
            if not rows:
                break
            encoded = model.encode([parse_item(body).render_text() for _, body in rows])
            seqs = [seq for seq, _ in rows]
            self._run(partial(vectors.write, model=model.name, seqs=seqs, encoded=encoded))
            done += len(rows)
            if len(rows) < take:
                break
        return done

    # deletes ---------------------------------------------------------------------------------------------
    def _forget(self, target: ForgetTarget) -> ForgetReport:
        if target.ids is not None:
            ids = list(dict.fromkeys(target.ids))
            deleted = self._run(lambda conn: delete_where(conn, "i.id = ANY(%s::text[])", [ids]))
        else:
            where = compile_filter(target.filter or MetaFilter(), "i")
            deleted = self._run(lambda conn: delete_where(conn, where.sql, where.params))
        return ForgetReport(forgotten=len(deleted))

    def _erase(self, request: EraseRequest) -> EraseReport:
        reach = Reach(at=request.reach.at, inherit=False, descendants=request.reach.descendants)
        where = compile_filter(MetaFilter(reach=reach, kinds=request.admitted_kinds()), "i")
        deleted = self._run(lambda conn: delete_where(conn, where.sql, where.params, "erase"))
        scopes = sorted({(str(ns_of_key(ns)), kind) for _, ns, kind in deleted})
        return EraseReport(erased_scopes=len(scopes), receipts=tuple(f"{ns}#{kind}" for ns, kind in scopes))

    # reads -----------------------------------------------------------------------------------------------
    def _items(self, conn: Conn, seqs: Sequence[int]) -> dict[int, tuple[str, AnyItem, str, str]]:
        """``seq → (id, item, log status, tier)`` of the rows ``seqs`` names that are held."""
        out: dict[int, tuple[str, AnyItem, str, str]] = {}
        if not seqs:
            return out
        for seq, item_id, body, status, tier in conn.execute(
            f"SELECT seq, id, item, status, tier FROM {SCHEMA}.items WHERE seq = ANY(%s::bigint[])", (list(seqs),)
        ):
            item = parse_item(body)
            item.__dict__["id"] = str(item_id)  # the stored id is the fingerprint; skip recomputing it
            out[int(seq)] = (str(item_id), item, str(status), str(tier))
        return out

    def _hits(
        self,
        conn: Conn,
        ranked: Sequence[tuple[int, float]],
        bodies: dict[int, tuple[str, str, str, str]] | None = None,
    ) -> list[Hit]:
        """Hits of ``ranked``, each with its log status and tier (``log_view.annotate``) from the same rows.

        ``bodies`` (``vectors.load``'s) spare the read of the rows they hold.
        """
        held = bodies or {}
        parsed = self._items(conn, [seq for seq, _ in ranked if seq not in held])
        for seq, _ in ranked:
            if seq in held:
                item_id, body, status, tier = held[seq]
                item = parse_item(body)
                item.__dict__["id"] = item_id  # the stored id is the fingerprint; skip recomputing it
                parsed[seq] = (item_id, item, status, tier)
        hits = [Hit.of(parsed[seq][1], s, parsed[seq][0]) for seq, s in ranked if seq in parsed]
        state = {row[0]: (row[2], row[3]) for row in parsed.values()}
        return log_view.annotate(hits, state, self._past)

    def _scopes_extra(self, request: FetchRequest, where: Where) -> Extra:
        """The namespaces the filter's rows lie in, each with its newest write: columns of the first statement."""
        kinds = [k.value for k in request.filter.kinds or ItemKind.all()]
        return Extra(
            "scope_rows.*",
            f"(SELECT array_agg(g.ns ORDER BY g.ns), array_agg(g.at ORDER BY g.ns) FROM (SELECT s.ns, "
            f"max(s.last_write) AS at FROM {SCHEMA}.scopes s WHERE s.kind = ANY(%s::text[]) AND EXISTS (SELECT 1 "
            f"FROM {SCHEMA}.items i WHERE i.ns = s.ns AND {where.sql}) GROUP BY s.ns) g) AS scope_rows",
            [kinds, *where.params],
            2,
        )

    @staticmethod
    def _scoped(request: FetchRequest, where: Where, found: Sequence[Any], max_scopes: int) -> list[str] | None:
        """Narrow ``where`` to the at most ``max_scopes`` namespaces ``choose_scopes`` keeps (reference §1.3).

        Args:
            request: The fetch.
            where: Its compiled filter (narrowed here).
            found: ``_scopes_extra``'s columns: the namespace keys and their newest writes.
            max_scopes: The request's bound.

        Returns:
            The namespace keys kept, or None when every scope the filter admits is kept.
        """
        names, times = found[0] or [], found[1] or []
        if len(names) <= max_scopes:
            return None
        last: dict[Namespace, int] = {ns_of_key(str(ns)): int(at or 0) for ns, at in zip(names, times, strict=True)}
        kept = [ns_key(ns) for ns in choose_scopes(request.query, last, request.filter.effective_reach(), max_scopes)]
        where.add("i.ns = ANY(%s::text[])", kept)
        return kept

    def _fetch(self, request: FetchRequest) -> FetchPage:
        """A ranked page in three round trips at most (``tests/postgres/test_postgres_round_trips.py``).

        1. One statement: the row counts, the document frequencies the cache lacks (items and beliefs), the
           pooled vectors written since this process last looked (hybrid, ``pooled``) and the scopes a bounded
           read chooses among.
        2. One pipeline (``driver.pipelined``): the items' candidates (with the pooled vector's nominations) and
           the beliefs' candidates with their hit columns.
        3. The page's bodies: for a hybrid read with the head's token vectors (``vectors.load``).
        """
        state = decode_cursor("f", request.cursor, ("o", "s"))
        # hybrid: the lexical stage's best RERANK_POOL and the pooled vector's nominations are reordered by late
        # interaction (``rerank``); a time hint orders its own groups, so the lexical order is kept then, as on
        # SQLite. The query is encoded on the encoder thread while the first statement runs.
        late = request.mode is FetchMode.HYBRID and request.refers_to is None
        encoding = self.model.start(request.query) if late else None  # runs while the first statement does
        model, dims = (self.model.embedder.name, self.model.embedder.dims) if late else ("", 0)

        def read(conn: Conn) -> FetchPage:
            offset = state["o"] if state else 0
            terms = query_terms(request.query)
            ranks_beliefs = bool(request.beliefs) and state is None and admits_beliefs(request.filter)
            where = compile_filter(request.filter, "i")
            if request.exclude_agent_id is not None:  # before the scopes are chosen (``FetchRequest``)
                where.add("i.agent_id IS DISTINCT FROM %s", request.exclude_agent_id)
            where.add(*_one(log_view.served(request.tiers, self._past)))  # live, in the tiers read (``log_view``)
            # one statement reads the row counts and the document frequencies the cache lacks, for the items
            # and the beliefs (the items' count, their newest seq, is the first page's snapshot), with the
            # pooled vectors this process lacks and the scopes a bounded read chooses among
            wants = [(f"{SCHEMA}.items", "seq", terms)]
            if ranks_beliefs:
                wants.append((f"{SCHEMA}.beliefs", "bid", query_words(request.query)))
            refresh = self._pooled.refresh(model, dims) if encoding is not None else None
            more = [refresh.extra] if refresh is not None else []
            if request.max_scopes is not None:
                more.append(self._scopes_extra(request, where))
            stats, extras = self._frequencies.read_with(conn, wants, more)
            if refresh is not None:
                self._pooled.absorb(refresh, extras[0])
            kept = None
            if request.max_scopes is not None:
                kept = self._scoped(request, where, extras[-1], request.max_scopes)
            snapshot = state["s"] if state else int(stats[0][1])
            want = offset + request.limit + 1
            depth = max(want, RERANK_POOL) if late else want
            tokens, pooled = encoding.result() if encoding is not None else (None, None)
            nominated: list[int] = []
            if pooled is not None and tokens is not None and len(tokens):  # the dense source (``pooled``)
                nominated = self._pooled.nearest(
                    request.filter, kept, pooled, PooledCache.overfetch(RERANK_POOL + DENSE_POOL)
                )
            plan = statement(
                conn,
                table=f"{SCHEMA}.items",
                key="seq",
                where=where,
                query=request.query,
                mode=request.mode,
                want=depth,
                features=self.features,
                frequencies=self._frequencies,
                refers_to=request.refers_to,
                extra="i.seq <= %s" if state else "",  # the first page reads everything up to its snapshot
                extra_params=[snapshot] if state else [],
                terms=terms,
                stats=stats[0],
                nominated=nominated,
            )
            ranking = (
                beliefs.ranking(
                    conn,
                    request.filter,
                    request.query,
                    request.mode,
                    request.beliefs,
                    self.features,
                    self._frequencies,
                    log_view.served_beliefs(self._past),
                    stats[1],
                )
                if ranks_beliefs
                else None
            )
            batch = [p for p in (plan, ranking.plan if ranking is not None else None) if p is not None]
            answers = pipelined(conn, [(p.sql, p.params) for p in batch])
            rows = answers[0] if plan is not None else []
            signals = plan.signals(rows) if plan is not None else []
            now = now_us()
            ranked = fuse(signals, request.mode, now, depth)
            bodies: dict[int, tuple[str, str, str, str]] | None = None
            if tokens is not None and len(tokens) and len(ranked) > 1:
                head = [seq for seq, _ in ranked[:RERANK_POOL]]
                dense = dense_nominations(nominated, signals, head)
                loaded = vectors.load(conn, head + dense, model, tokens.shape[1])
                ranked = reorder(ranked, loaded.stored, request.query, tokens, now, dense)
                bodies = loaded.bodies
            ranked = ranked[:want]
            page = ranked[offset : offset + request.limit]
            more_hits = len(ranked) > offset + request.limit
            found: list[Hit] = []
            if ranking is not None and ranking.plan is not None:
                found = ranking.hits(answers[-1])
            return FetchPage(
                hits=tuple(self._hits(conn, page, bodies)),
                next_cursor=encode_cursor("f", {"o": offset + len(page), "s": snapshot}) if more_hits else None,
                beliefs=tuple(found),
            )

        return self._read(read)

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
        return RecallAnswer(answer=answer, citations=citations, model="postgresql")

    def _listing(
        self, request: ListRequest, build: Callable[[Conn, list[int]], list[_T]], every_status: bool = False
    ) -> tuple[list[_T], str | None]:
        state = decode_cursor("l", request.cursor, ("a",))
        after = state["a"] if state else 0

        def read(conn: Conn) -> tuple[list[_T], str | None]:
            where = compile_filter(request.filter, "i")
            where.add(*_one(log_view.listed(self._past, every_status=every_status)))
            rows = conn.execute(
                f"SELECT i.seq FROM {SCHEMA}.items i WHERE {where.sql} AND i.seq > %s ORDER BY i.seq LIMIT %s",
                [*where.params, after, request.limit + 1],
            ).fetchall()
            seqs = [int(r[0]) for r in rows[: request.limit]]
            more = len(rows) > request.limit
            return build(conn, seqs), (encode_cursor("l", {"a": seqs[-1]}) if more and seqs else None)

        return self._read(read)

    def _list(self, request: ListRequest) -> ListPage:
        items, cursor = self._listing(request, lambda conn, seqs: self._hits(conn, [(s, 0.0) for s in seqs]))
        return ListPage(items=tuple(items), next_cursor=cursor)

    def _export(self, request: ListRequest) -> ExportPage:
        def build(conn: Conn, seqs: list[int]) -> list[Exported]:
            parsed = self._items(conn, seqs)
            return [Exported(id=parsed[s][0], item=parsed[s][1]) for s in seqs if s in parsed]

        items, cursor = self._listing(request, build, every_status=True)
        return ExportPage(items=tuple(items), next_cursor=cursor)

    def _get(self, request: GetRequest) -> list[Hit]:
        ids = log_view.shown_ids(list(dict.fromkeys(request.ids)), self._past)
        if not ids:
            return []

        def read(conn: Conn) -> list[Hit]:
            where = compile_filter(MetaFilter(reach=request.reach), "i")
            found = {
                str(item_id): int(seq)
                for seq, item_id in conn.execute(
                    f"SELECT i.seq, i.id FROM {SCHEMA}.items i WHERE i.id = ANY(%s::text[]) AND {where.sql}",
                    [ids, *where.params],
                )
            }
            by_id = {h.id: h for h in self._hits(conn, [(s, 0.0) for s in found.values()])}
            return [by_id[i] for i in ids if i in by_id]

        return self._read(read)

    # beliefs ---------------------------------------------------------------------------------------------
    def build_scope(self, ns: Namespace, kind: ItemKind) -> set[str]:
        """Build beliefs for one scope (``beliefs.build_scope``, one transaction); ids of beliefs changed."""
        return self._run(lambda conn: beliefs.build_scope(conn, ns_key(ns), kind.value))

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        """Build every admitted scope with rows past its watermark; the others cost one read, no lock."""
        kinds = [k.value for k in request.admitted_kinds()]
        scopes = self._run(partial(beliefs.scopes_to_build, reach=request.reach, kinds=kinds))
        changed: set[str] = set()
        for ns, kind, due in scopes:
            if due:
                changed |= self._run(partial(beliefs.build_scope, ns=ns, kind=kind))
        return ConsolidateReceipt(status=ConsolidateStatus.COMPLETED, scopes=len(scopes), built=len(changed))

    def _beliefs(self, request: BeliefsRequest) -> list[Hit]:
        flt = MetaFilter(reach=request.reach)
        return self._read(
            lambda conn: beliefs.rank(
                conn,
                flt,
                request.query,
                FetchMode.HYBRID,
                request.limit,
                self.features,
                self._frequencies,
                log_view.served_beliefs(self._past),
            )
        )

    def _scopes(self, request: ConsolidateRequest) -> list[BuildScope]:
        kinds = [k.value for k in request.admitted_kinds()]
        sql, params = reach_sql(request.reach, "s.ns")

        def read(conn: Conn) -> list[ScopeRow]:  # live items per scope: the rule of ``sqlite.scopes.scope_rows``
            rows = conn.execute(
                f"WITH gone AS (SELECT ns, kind, count(*) AS n FROM {SCHEMA}.items "
                "WHERE (status <> 'live' OR tier = 'archive') AND status <> 'live' GROUP BY ns, kind) "
                f"SELECT s.ns, s.kind, s.last_write, s.last_build, "
                f"(SELECT count(*) FROM {SCHEMA}.items i WHERE i.ns = s.ns AND i.kind = s.kind) - coalesce(g.n, 0) "
                f"FROM {SCHEMA}.scopes s LEFT JOIN gone g ON g.ns = s.ns AND g.kind = s.kind "
                f"WHERE s.kind = ANY(%s::text[]) AND ({sql}) ORDER BY s.ns, s.kind",
                [kinds, *params],
            ).fetchall()
            return [(str(r[0]), str(r[1]), int(r[2]), None if r[3] is None else int(r[3]), int(r[4])) for r in rows]

        return build_scopes(self._read(read))

    def belief_evidence(self, belief_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """``belief id → ids of the items it was derived from`` for the beliefs named (unknown ids left out)."""
        return self._read(partial(beliefs.evidence_of, belief_ids=belief_ids))

    def stats(self) -> dict[str, Any]:
        """Row counts, for tests and the CLI: the keys and meanings of ``SQLiteEngine.stats``.

        ``items``, ``pending`` (always 0: no write is deferred), ``beliefs`` (active), ``superseded``, and
        ``embedding_wait``: items the current model has not encoded yet (``vectors.backlog``, without loading the
        model), which ``workers.handlers.waiting`` reads to submit the ``embed_items`` job and ``status`` shows.
        """
        model = self.model.name

        def read(conn: Conn) -> dict[str, Any]:
            row = conn.execute(
                f"SELECT (SELECT count(*) FROM {SCHEMA}.items), "
                f"(SELECT count(*) FROM {SCHEMA}.beliefs WHERE status = 'active'), "
                f"(SELECT count(*) FROM {SCHEMA}.beliefs WHERE status = 'superseded')"
            ).fetchone()
            assert row is not None
            out = {"items": int(row[0]), "pending": 0, "beliefs": int(row[1]), "superseded": int(row[2])}
            return {**out, "embedding_wait": vectors.backlog(conn, model)}

        return self._read(read)


def _trigram(conn: Conn) -> bool:
    """Whether ``pg_trgm`` is installed, creating it when the role may (a savepoint keeps a refusal harmless)."""
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").fetchone() is not None:
        return True
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))  # one process creates it
    try:
        with conn.transaction():
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        return True
    except Exception:  # not available or no privilege: rank without it
        return False
