"""The checks of memory as a log (seed 002): log, retract, as_of, tombstone, tiers.

They run for engines whose descriptor declares ``log`` (``tiers`` also needs ``tiers``). For an engine that
does not, each is reported as skipped; its log calls must then be ``Unsupported``, which the ``log`` check
confirms before skipping. The rules checked are those of ``docs/log-model.md``. ``retract`` and ``tombstone``
roll back to an LSN taken inside the check, so they assume no other writer uses the engine during the run: run
them against a test instance, never a shared production store. What is "served" is read with the engine's
preferred fetch mode (by listing when it declares none).
"""

from __future__ import annotations

from memory_core.conformance.context import CheckContext
from memory_core.conformance.report import CheckSkipped
from memory_core.engine import MemoryEngine
from memory_core.errors import Unsupported
from memory_core.items import Learning, LearningKind
from memory_core.memory_log import MemoryStatus, RecordOp, Tier
from memory_core.query import FetchRequest, ForgetTarget, GetRequest, ListRequest

__all__ = ["as_of", "log", "retract", "tiers", "tombstone"]


def _require_log(c: CheckContext) -> None:
    if not c.engine.descriptor().log:
        try:
            c.engine.current_lsn()
        except Unsupported:
            raise CheckSkipped("the engine does not declare log") from None
        c.fail("the engine does not declare log, yet current_lsn answered instead of raising Unsupported")


def _statuses(c: CheckContext, *ids: str) -> list[MemoryStatus | None]:
    hits = {hit.id: hit.status for hit in c.call(c.engine.get, GetRequest(ids=ids))}
    return [hits.get(i) for i in ids]


def _served(c: CheckContext, engine: MemoryEngine | None = None) -> set[str]:
    """The run's memories ``engine`` (the engine under test by default) serves."""
    reader = c.engine if engine is None else engine
    mode = reader.descriptor().preferred_mode()
    if mode is None:
        return {hit.id for hit in c.call(reader.list, ListRequest(filter=c.run.filter(), limit=200)).items}
    request = FetchRequest(query=c.run.marker, mode=mode, filter=c.run.filter(), limit=100)
    return {hit.id for hit in c.call(reader.fetch, request).hits}


def log(c: CheckContext) -> str:
    """A store writes one ``put`` record past ``current_lsn``; LSNs rise; a replay writes none; ``history`` shows it."""
    _require_log(c)
    before = c.call(c.engine.current_lsn)
    item_id = c.call(c.engine.store, c.run.document("log put")).id
    after = c.call(c.engine.current_lsn)
    c.ensure(after > before, f"current_lsn did not advance after a store: {before} then {after}")
    records = c.call(c.engine.log, before, 1000).records
    lsns = [r.lsn for r in records]
    c.ensure(all(lsn > before for lsn in lsns), f"log(since={before}) returned LSNs at or before it: {lsns}")
    c.ensure(lsns == sorted(set(lsns)), f"log records are not in strictly increasing LSN order: {lsns}")
    puts = [r for r in records if r.id == item_id and r.op is RecordOp.PUT]
    c.ensure(len(puts) == 1, f"a store wrote {len(puts)} put records for {item_id}")
    c.ensure(puts[0].status is MemoryStatus.LIVE, f"a put left the memory {puts[0].status}, not live")
    c.ensure(c.call(c.engine.store, c.run.document("log put")).replayed, "storing the same document did not replay")
    c.ensure(c.call(c.engine.current_lsn) == after, "a replayed store wrote log records")
    history = c.call(c.engine.history, item_id)
    c.ensure([r.lsn for r in history] == [puts[0].lsn], f"history shows {[r.op.value for r in history]}, not one put")
    return f"put at LSN {puts[0].lsn}"


def retract(c: CheckContext) -> str:
    """Retract a document: it is ``retracted``, a learning built on it ``stale``, neither served; rollback undoes it.

    The retraction is one transaction; rolling the rollback back retracts both again.
    """
    _require_log(c)
    source = c.call(c.engine.store, c.run.document("retract source")).id
    built = Learning(
        text=f"{c.run.marker} retract derived fact", kind=LearningKind.FACT, evidence=source, meta=c.run.meta()
    )
    derived = c.call(c.engine.store, built).id
    before = c.call(c.engine.current_lsn)
    change = c.call(c.engine.retract, [source], "conformance: the source was wrong")
    c.ensure(change.ids(RecordOp.RETRACT) == [source], f"retract wrote {change.ids(RecordOp.RETRACT)} retractions")
    c.ensure(derived in change.ids(RecordOp.STALE), "retracting a source did not make what was built on it stale")
    c.ensure({r.txn for r in change.records} == {change.txn}, "a retraction spans more than one transaction")
    shown = _statuses(c, source, derived)
    c.ensure(shown == [MemoryStatus.RETRACTED, MemoryStatus.STALE], f"get shows the statuses {shown}")
    leaked = _served(c) & {source, derived}
    c.ensure(not leaked, f"fetch serves memories that are not live: {sorted(leaked)}")
    retracted = c.call(c.engine.current_lsn)
    c.call(c.engine.rollback, before, "conformance: undo the retraction")
    shown = _statuses(c, source, derived)
    c.ensure(shown == [MemoryStatus.LIVE, MemoryStatus.LIVE], f"after a rollback get shows {shown}, not live")
    c.ensure({source, derived} <= _served(c), "a rolled-back retraction is not served again")
    c.call(c.engine.rollback, retracted, "conformance: undo the rollback")
    shown = _statuses(c, source, derived)
    c.ensure(shown == [MemoryStatus.RETRACTED, MemoryStatus.STALE], f"rolling a rollback back shows {shown}")
    return "retracted, stale, restored, retracted again"


def as_of(c: CheckContext) -> str:
    """``as_of`` reads the state at its LSN: a later store is absent, an earlier one present; the view is read-only."""
    _require_log(c)
    first = c.call(c.engine.store, c.run.document("as of first")).id
    mark = c.call(c.engine.current_lsn)
    second = c.call(c.engine.store, c.run.document("as of second")).id
    view = c.call(c.engine.as_of, mark)
    past = _served(c, view)
    c.ensure(first in past, "as_of(lsn) does not serve a memory stored before lsn")
    c.ensure(second not in past, "as_of(lsn) serves a memory stored after lsn")
    listed = {h.id for h in c.call(view.list, {"filter": c.run.filter().to_dict(), "limit": 200}).items}
    c.ensure(second not in listed and first in listed, "as_of(lsn) lists the state of another LSN")
    got = [h.id for h in c.call(view.get, GetRequest(ids=(first, second)))]
    c.ensure(got == [first], f"as_of(lsn).get answers {got}, not only the earlier memory")
    try:
        view.store(c.run.document("as of write"))
    except Unsupported:
        return f"state at LSN {mark}"
    except Exception as exc:
        c.fail(f"a write into an as_of view must raise Unsupported, but raised {type(exc).__name__}")
    c.fail("an as_of view accepted a write")


def tombstone(c: CheckContext) -> str:
    """A forget leaves a tombstone without text that neither ``as_of`` nor a rollback brings back.

    A rollback past the forget names the memory as unrecoverable and says so in its note.
    """
    _require_log(c)
    label = "tombstone secret"
    item_id = c.call(c.engine.store, c.run.document(label)).id
    mark = c.call(c.engine.current_lsn)
    c.ensure(c.call(c.engine.forget, ForgetTarget(ids=(item_id,))).forgotten == 1, "the forget removed nothing")
    history = c.call(c.engine.history, item_id)
    c.ensure(bool(history) and history[-1].op is RecordOp.TOMBSTONE, "a forget left no tombstone record")
    text = c.call(c.engine.log, 0 if mark < 1000 else mark - 1000, 1000).to_json()
    c.ensure(label not in text, "the log still holds the forgotten text")
    got = c.call(c.call(c.engine.as_of, mark).get, GetRequest(ids=(item_id,)))
    c.ensure(not got, "as_of before a forget reads the forgotten memory back")
    change = c.call(c.engine.rollback, mark, "conformance: undo the forget")
    c.ensure(item_id in change.unrecoverable, "a rollback past a forget does not name the memory it cannot restore")
    c.ensure(bool(change.note), "a rollback past a forget does not say that it could not restore everything")
    c.ensure(not c.call(c.engine.get, GetRequest(ids=(item_id,))), "a rollback brought forgotten content back")
    return "tombstone kept, content gone"


def tiers(c: CheckContext) -> str:
    """A document moved to ``archive`` leaves the standard fetch and is served only when ``tiers`` names archive.

    It still lists, and ``get`` shows its tier (``short`` before the move).
    """
    _require_log(c)
    if not c.engine.descriptor().tiers:
        raise CheckSkipped("the engine does not declare tiers")
    item_id = c.call(c.engine.store, c.run.document("tiers archived")).id
    tier = next((h.tier for h in c.call(c.engine.get, GetRequest(ids=(item_id,)))), None)
    c.ensure(tier is Tier.SHORT, f"a new document sits in tier {tier}, not short")
    moved = c.call(c.engine.move, [item_id], Tier.ARCHIVE, "conformance: archive")
    c.ensure(moved.ids(RecordOp.MOVE) == [item_id], f"move wrote {moved.ids(RecordOp.MOVE)} move records")
    mode = c.engine.descriptor().preferred_mode()
    if mode is not None:
        standard = FetchRequest(query=c.run.marker, mode=mode, filter=c.run.filter(), limit=100)
        c.ensure(item_id not in _served(c), "the standard fetch serves an archived memory")
        archive = standard.model_copy(update={"tiers": (Tier.ARCHIVE,)})
        c.ensure(item_id in {h.id for h in c.call(c.engine.fetch, archive).hits}, "a fetch naming archive misses it")
    c.ensure(item_id in c.ids(c.run.filter()), "an archived memory no longer lists")
    tier = next((h.tier for h in c.call(c.engine.get, GetRequest(ids=(item_id,)))), None)
    c.ensure(tier is Tier.ARCHIVE, f"get shows an archived memory in tier {tier}")
    return "short, then archive on request only"
