"""ScrubbingEngine: every write method scrubs every item kind; reads, forgets and extras pass through; on by
default where hosts, workers and commands open engines; the conformance suite passes through the wrapper."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memory_core import Conversation, Document, Learning, ListRequest, MemoryMeta
from memory_core.conformance.testing import conformance_test
from memory_core.engines import open_engine, open_host_engine
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineUnavailable
from memory_core.items import Role, Turn
from memory_core.meta import ObservedActor
from memory_core.safety.engine import ScrubbingEngine, unwrap
from memory_core.safety.items import scrub_item, scrub_url
from memory_core.settings import get_settings

AWS = "AKIAIOSFODNN7EXAMPLE"
CARD = "4111 1111 1111 1111"
META = MemoryMeta(
    file_path="/srv/token=abc123456789/notes.md",
    tags=("password=hunter2",),
    thread_id="t-0042",
    observed_actor=ObservedActor(id="user:bob", name=f"Bob {AWS}"),
    url="https://app.example.com/cb/path?access_token=ya29abcdef123456&page=2#id_token=zzz999yyy888",
)


def _items() -> list[Document | Conversation | Learning]:
    return [
        Document.of(f"deploy with {AWS}", META, title=f"keys {AWS}"),
        Conversation(
            turns=(Turn(role=Role.USER, text=f"my card is {CARD}"), Turn(role=Role.ASSISTANT, text="noted")),
            meta=META,
        ),
        Learning(text=f"the AWS key is {AWS}", evidence=f"user said card {CARD}", meta=META),
    ]


def _stored_text(engine: ReferenceEngine) -> str:
    page = engine.list(ListRequest(limit=50))
    return "\n".join(h.text + h.meta.to_json() for h in page.items)


def _assert_scrubbed(engine: ReferenceEngine) -> None:
    stored = _stored_text(engine)
    assert AWS + " " not in stored and f"key is {AWS}" not in stored and CARD not in stored
    assert "[REDACTED]" in stored and "[REDACTED_PII_CARD]" in stored
    assert "ya29abcdef123456" not in stored and "zzz999yyy888" not in stored
    hits = engine.list(ListRequest(limit=50)).items
    for hit in hits:  # a path or tag loses only its secret (segment by segment); ids are left alone
        assert hit.meta.file_path == "/srv/token=[REDACTED]/notes.md" and hit.meta.tags == ("password=[REDACTED]",)
        assert hit.meta.thread_id == META.thread_id
        assert hit.meta.observed_actor == ObservedActor(id="user:bob", name="Bob [REDACTED]")
        assert hit.meta.url == "https://app.example.com/cb/path?access_token=[REDACTED]&page=2#id_token=[REDACTED]"


@pytest.mark.parametrize("method", ["store", "store_with", "store_many", "store_many_with"])
def test_every_write_method_scrubs_every_item_kind(method: str) -> None:
    inner = ReferenceEngine()
    engine = ScrubbingEngine(inner)
    items = _items()
    if method in {"store", "store_with"}:
        receipts = [getattr(engine, method)(item) for item in items]
    else:
        receipts = getattr(engine, method)(items)
    assert len(receipts) == 3 and len(inner.list(ListRequest(limit=50)).items) == 3
    _assert_scrubbed(inner)
    # reads pass through: the wrapper reads what the engine holds
    assert sorted(h.id for h in engine.list(ListRequest(limit=50)).items) == sorted(r.id for r in receipts)


def test_a_learning_keeps_its_kind_and_confidence_and_a_document_its_title() -> None:
    learning = scrub_item(Learning(text=f"key {AWS}", confidence=0.4, evidence=None))
    assert isinstance(learning, Learning) and learning.confidence == 0.4 and learning.evidence is None
    assert learning.text == "key [REDACTED]"
    doc = scrub_item(Document.of("fine", title=f"AWS {AWS}"))
    assert isinstance(doc, Document) and doc.title == "AWS [REDACTED]" and doc.text == "fine"


def test_an_item_with_nothing_to_scrub_is_the_same_object_and_a_replay() -> None:
    item = Document.of("nothing secret here, order 4111111111111112", MemoryMeta(url="https://e.com/a?page=2"))
    assert scrub_item(item) is item
    engine = ScrubbingEngine(ReferenceEngine())
    first, again = engine.store(item), engine.store(item)
    assert first.id == item.id == again.id and again.replayed


def test_a_secret_stored_twice_is_one_scrubbed_item() -> None:
    engine = ScrubbingEngine(ReferenceEngine())
    first = engine.store(Learning(text=f"key {AWS}"))
    again = engine.store(Learning(text=f"key {AWS}"))
    assert again.id == first.id and again.replayed


def test_scrub_url_keeps_the_path_and_redacts_user_info_passwords() -> None:
    assert scrub_url("postgres://ada:s3cr3tPa55@db/app/secret/path") == "postgres://ada:[REDACTED]@db/app/secret/path"
    assert scrub_url("https://e.com/x?q=1") == "https://e.com/x?q=1"


def test_forget_and_extras_pass_through(tmp_path: Path) -> None:
    with ScrubbingEngine(open_engine(f"sqlite:///{tmp_path}/m.db")) as engine:
        receipt = engine.store(Learning(text=f"key {AWS}"))
        assert engine.forget({"ids": [receipt.id]}).forgotten == 1
        assert engine.descriptor().id == unwrap(engine).descriptor().id
        assert isinstance(engine.stats(), dict)  # the SQLite engine's own extra, reached through the wrapper


def test_a_wrapper_is_never_wrapped_twice() -> None:
    inner = ReferenceEngine()
    twice = ScrubbingEngine(ScrubbingEngine(inner))
    assert twice.inner is inner and unwrap(twice) is inner


def test_open_host_engine_scrubs_by_default() -> None:
    engine = open_host_engine("reference://")
    assert isinstance(engine, ScrubbingEngine)
    engine.store(Learning(text=f"key {AWS}"))
    assert [h.text for h in engine.list().items] == ["key [REDACTED]"]


def test_scrub_off_opens_the_bare_engine_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MEMORY_CORE_SCRUB", "off")
    get_settings.cache_clear()
    with caplog.at_level(logging.WARNING, logger="memory_core.safety"):
        engine = open_host_engine("reference://")
    assert isinstance(engine, ReferenceEngine)
    assert "scrubbing is OFF" in caplog.text and "stored verbatim" in caplog.text


def test_the_worker_engine_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.execution import open_worker_engine

    monkeypatch.setenv("MEMORY_CORE_ENGINE", f"sqlite:///{tmp_path}/m.db")
    get_settings.cache_clear()
    with open_worker_engine(get_settings()) as engine:
        assert isinstance(engine, ScrubbingEngine)


@pytest.mark.parametrize("scrub", [None, "off"])
def test_status_shows_whether_scrubbing_is_on(tmp_path: Path, scrub: str | None) -> None:
    from memory_core.cli import load_commands

    app = load_commands()
    env = {
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_ENGINE": f"sqlite:///{tmp_path / 'memory.db'}",
        "MEMORY_CORE_BROKER_URL": "",
        **({"MEMORY_CORE_SCRUB": scrub} if scrub else {}),
    }
    open_engine(env["MEMORY_CORE_ENGINE"]).close()
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["status", "--scopes", "0"], env=env)
    get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert ("scrub   on" in result.output) == (scrub is None)
    assert ("scrub   OFF (MEMORY_CORE_SCRUB=off)" in result.output) == (scrub == "off")


test_conformance_through_the_wrapper_on_sqlite = conformance_test(
    lambda tmp_path: ScrubbingEngine(open_engine(f"sqlite:///{tmp_path}/memory.db"))
)
test_conformance_through_the_wrapper_on_reference = conformance_test(lambda: ScrubbingEngine(ReferenceEngine()))


class Down(ReferenceEngine):
    def _store(self, item: Any) -> Any:
        raise EngineUnavailable("connection refused")


def test_each_write_logs_one_timing_line_without_content(caplog: pytest.LogCaptureFixture) -> None:
    engine = ScrubbingEngine(ReferenceEngine())
    with caplog.at_level(logging.DEBUG, logger="memory_core.safety"):
        engine.store(Learning(text=f"key {AWS}"))
        engine.store_many(_items())
        with pytest.raises(EngineUnavailable):
            ScrubbingEngine(Down()).store_with(Learning(text=f"key {AWS}"))
    lines = [r.getMessage() for r in caplog.records if "[memory:timing]" in r.getMessage()]
    assert [line.split()[1] for line in lines] == ["op=store", "op=store_many", "op=store_with"]
    assert "outcome=ok count=3" in lines[1] and "outcome=EngineUnavailable count=1" in lines[2]
    assert all(AWS not in line and "key" not in line for line in lines)


def test_a_pack_leaves_out_the_turn_being_logged_under_its_scrubbed_id() -> None:
    from memory_core.lifecycle.agent import AgentMemory
    from memory_core.lifecycle.layout import MemoryLayout
    from memory_core.safety.engine import stored_ids

    engine = ScrubbingEngine(ReferenceEngine())
    mem = AgentMemory(engine, MemoryLayout(), "alice")
    turn = {"thread_id": "t1", "turn_index": 0, "in_prompt_from": 5, "user_text": f"my lisbon flat key is {AWS}"}
    mem.pre_turn(turn)
    assert "lisbon flat" not in mem.pre_turn(turn).pack.markdown  # a retry: the logged turn is read back
    plain = Learning(text="nothing secret")
    assert stored_ids(engine, plain) == (plain.id,) == stored_ids(ReferenceEngine(), plain)
    assert len(stored_ids(engine, Learning(text=f"key {AWS}"))) == 2


def test_paths_and_tags_without_a_secret_are_kept_exactly_so_filters_still_match() -> None:
    inner = ReferenceEngine()
    engine = ScrubbingEngine(inner)
    meta = MemoryMeta(file_path="/srv/app/notes.md", folder="/srv/app", tags=("ops", "deploy-2024"))
    item = Learning(text="Deploys run on Tuesdays", meta=meta)
    assert scrub_item(item) is item
    engine.store(item)
    hits = engine.list(ListRequest(limit=5, filter={"file_path": "/srv/app/notes.md", "tags_any": ["ops"]})).items
    assert [h.meta.tags for h in hits] == [("ops", "deploy-2024")]
    leaky = Learning(
        text="Deploys run on Tuesdays",
        meta=MemoryMeta(folder=f"C:\\keys\\{AWS}", tags=("ops", AWS), file_path=f"/keys/{AWS}.csv"),
    )
    scrubbed = scrub_item(leaky)
    assert scrubbed.meta.folder == "C:\\keys\\[REDACTED]" and scrubbed.meta.file_path == "/keys/[REDACTED].csv"
    assert scrubbed.meta.tags == ("ops", "[REDACTED]") and AWS not in scrubbed.to_json()
