"""The ``memory.compact_log`` maintenance task (issue 19 item 7): old log records into a checkpoint."""

from __future__ import annotations

from pathlib import Path

from memory_core import Document, GetRequest, ListRequest, MemoryMeta
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.memory_log import Tier
from memory_core.settings import Settings
from workers.coordination import SqliteCoordination
from workers.dead_letters import SqliteDeadLetters
from workers.execution import Delivery, Runtime, Verdict, execute
from workers.kinds import JOB_KINDS


def _runtime(tmp_path: Path, engine: object, **overrides: object) -> Runtime:
    return Runtime(
        Settings(_env_file=None, **overrides),  # type: ignore[arg-type]
        engine=engine,  # type: ignore[arg-type]
        coordination=SqliteCoordination(tmp_path / "c.db", "t", 60, 60),
        letters=SqliteDeadLetters(tmp_path / "c.db", 100),
    )


def test_the_task_is_one_maintenance_row() -> None:
    row = JOB_KINDS.maintenance_task("memory.compact_log")
    assert row is not None and row.kwargs == frozenset({"keep"})


def test_it_compacts_all_but_the_newest_records_and_as_of_answers_after_it_stay(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db") as engine:
        docs = [engine.store(Document.of(f"note number {n}", MemoryMeta())).id for n in range(8)]
        engine.retract(docs[:2], "wrong")
        engine.move([docs[2]], Tier.ARCHIVE, "old")
        engine.forget({"ids": [docs[3]]})
        engine.rollback(9, "undo the retraction")
        engine.retract([docs[4]], "wrong too")

        def answers(lsn: int) -> tuple[object, ...]:
            view = engine.as_of(lsn)
            got = tuple((h.id, h.status, h.tier) for h in view.get(GetRequest(ids=tuple(docs))))
            return got, tuple(h.id for h in view.list(ListRequest(limit=50)).items)

        last = engine.current_lsn()
        rt = _runtime(tmp_path, engine, log_keep_records=6)
        kept_from = last - 6
        before = {lsn: answers(lsn) for lsn in range(last + 1)}
        out = execute(rt, Delivery("memory.compact_log", "c1"))
        assert out.verdict is Verdict.DONE and out.result is not None
        assert out.result["upto"] == kept_from and out.result["compacted"] > 0
        first = engine.log(0, 1000).records[0].lsn
        assert 1 < first <= kept_from + 1  # at most the newest ``keep`` records, to a transaction's end, remain
        assert {lsn: answers(lsn) for lsn in range(first - 1, last + 1)} == {
            lsn: before[lsn] for lsn in range(first - 1, last + 1)
        }
        again = execute(rt, Delivery("memory.compact_log", "c2"))
        assert again.result == {"upto": kept_from, "compacted": 0}
        young = execute(rt, Delivery("memory.compact_log", "c3", (), {"keep": last + 5}))
        assert young.result == {"upto": -5, "compacted": 0}


def test_an_engine_without_checkpoints_is_skipped_with_its_reason(tmp_path: Path) -> None:
    engine = ReferenceEngine()
    engine.store(Document.of("a note", MemoryMeta()))
    out = execute(_runtime(tmp_path, engine), Delivery("memory.compact_log", "c1"))
    assert out.verdict is Verdict.DONE
    assert out.result == {"skipped": "the engine reference has no log checkpoints"}
    assert len(engine.log(0, 10).records) == 1


def test_a_bad_keep_is_dead_lettered_naming_the_field(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db") as engine:
        engine.store(Document.of("a note", MemoryMeta()))
        out = execute(_runtime(tmp_path, engine), Delivery("memory.compact_log", "c1", (), {"keep": 0}))
        assert out.verdict is not Verdict.DONE and out.letter is not None
        assert "keep" in str(out.letter.to_dict())
        assert engine.current_lsn() == 1 and len(engine.log(0, 10).records) == 1
