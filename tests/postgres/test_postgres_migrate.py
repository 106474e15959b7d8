"""``memory-core migrate``: a SQLite store moves to PostgreSQL whole (items, beliefs, build state), resumably and
idempotently, with progress; bad arguments exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_postgres_beliefs import BUILD, TURNS, beliefs_of, said
from typer.testing import CliRunner

from memory_core import Document, ExportPage, ListRequest, MemoryMeta
from memory_core.cli import load_commands
from memory_core.engines.postgres import PostgresEngine, migrate
from memory_core.engines.postgres.migrate import copy_sqlite
from memory_core.engines.sqlite import SQLiteEngine

pytestmark = pytest.mark.postgres
runner = CliRunner()
app = load_commands()


def _exported(engine: SQLiteEngine | PostgresEngine) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    cursor = None
    while True:
        page: ExportPage = engine.export(ListRequest(limit=50, cursor=cursor))
        out.extend((e.id, e.item.model_dump_json()) for e in page.items)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def _source(tmp_path: Path) -> tuple[Path, list[tuple[str, str]], dict[str, tuple[str, float, tuple[str, ...]]]]:
    path = tmp_path / "memory.db"
    with SQLiteEngine(path) as lite:
        lite.store_many(TURNS)
        lite.store_many([Document.of(f"passage {n} about kayaks", MemoryMeta(workspace="w")) for n in range(30)])
        lite.consolidate(BUILD)
        lite.store(said("I signed up for a pottery class.", day=20))  # written after the build: still due
        return path, _exported(lite), beliefs_of(lite)


def test_migrate_copies_items_beliefs_and_build_state(tmp_path: Path, pg_url: str) -> None:
    path, items, beliefs = _source(tmp_path)
    with PostgresEngine(pg_url) as engine:
        report = copy_sqlite(path, engine)
        assert (report.items, report.copied) == (len(items), len(items))
        held = engine.stats()
        assert report.beliefs == held["beliefs"] + held["superseded"] and held["beliefs"] == len(beliefs)
        assert _exported(engine) == items  # same items, same write order
        assert beliefs_of(engine) == beliefs
        due = {(str(s.namespace), s.due) for s in engine.scopes(BUILD)}
        assert ("agent:ann", True) in due and all(not d for ns, d in due if ns != "agent:ann")
        engine.consolidate(BUILD)  # builds only the pottery turn SQLite had not built
        covered = {i for _, _, ev in beliefs_of(engine).values() for i in ev}
        assert said("I signed up for a pottery class.", day=20).id in covered
        fresh = engine.store(Document.of("after the move", MemoryMeta(workspace="w")))
        assert not fresh.replayed and _exported(engine)[-1][0] == fresh.id  # write order continues after the copy
        again = copy_sqlite(path, engine)
        assert again.copied == 0 and again.beliefs == 0


def test_an_interrupted_migration_resumes_after_its_last_batch(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, items, beliefs = _source(tmp_path)
    monkeypatch.setattr(migrate, "BATCH", 10)
    seen: list[tuple[str, int, int]] = []

    def crash_after_two(stage: str, done: int, total: int) -> None:
        seen.append((stage, done, total))
        if len(seen) == 2:
            raise KeyboardInterrupt

    with PostgresEngine(pg_url) as engine:
        with pytest.raises(KeyboardInterrupt):
            copy_sqlite(path, engine, crash_after_two)
        assert seen == [("items", 10, len(items)), ("items", 20, len(items))]
        report = copy_sqlite(path, engine)
        assert report.resumed_after > 0 and report.copied == len(items) - 20
        assert _exported(engine) == items and beliefs_of(engine) == beliefs


def test_the_cli_migrates_with_progress_and_refuses_bad_arguments(tmp_path: Path, pg_url: str) -> None:
    path, items, _ = _source(tmp_path)
    result = runner.invoke(app, ["migrate", "--from", f"sqlite:///{path}", "--to", pg_url])
    assert result.exit_code == 0, result.output
    assert f"items    {len(items)}/{len(items)}" in result.output and f"{len(items)} of {len(items)}" in result.output
    result = runner.invoke(app, ["migrate", "--from", f"sqlite:///{path}", "--to", pg_url])
    assert result.exit_code == 0 and f"0 of {len(items)} items copied" in result.output
    for args in (
        ["--from", f"sqlite:///{tmp_path}/missing.db", "--to", pg_url],
        ["--from", "reference://", "--to", pg_url],
        ["--from", f"sqlite:///{path}", "--to", "postgresql://bob:pw123@127.0.0.1:5432"],
    ):
        result = runner.invoke(app, ["migrate", *args])
        assert result.exit_code == 2, result.output
        assert "pw123" not in result.output


def test_a_target_with_other_items_is_refused(tmp_path: Path, pg_url: str) -> None:
    path, _, _ = _source(tmp_path)
    with PostgresEngine(pg_url) as engine:
        engine.store(Document.of("someone else's", MemoryMeta(workspace="x")))
    result = runner.invoke(app, ["migrate", "--from", f"sqlite:///{path}", "--to", pg_url])
    assert result.exit_code == 2 and "empty database" in result.output
