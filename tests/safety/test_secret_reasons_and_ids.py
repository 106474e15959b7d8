"""Nothing secret is kept outside item text either (docs/safety.md): the reason a retract, rollback or move writes
into the log is scrubbed, an actor's name is scrubbed, and an id holding a credential is refused (never stored),
through the library wrapper and the command line alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safety_leaks import leaks

from memory_core import ConsolidateRequest, Learning, ListRequest, MemoryMeta, Reach
from memory_core.cli import load_commands
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.errors import InvalidRequest
from memory_core.lifecycle.jobs import BuildBeliefs
from memory_core.memory_log import RecordOp, Tier
from memory_core.meta import MetaFilter, ObservedActor, SourceKind, SourceRef, ToolCallMeta
from memory_core.namespace import Namespace
from memory_core.safety.engine import ScrubbingEngine
from memory_core.safety.ids import holds_credential
from memory_core.safety.jobs import scrub_job
from tests._cli import cli_env, invoke

KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"  # an OpenAI project key's shape, split so no scanner flags it
GHP = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"

app = load_commands()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The command line's settings for one test (``tests._cli.cli_env``), scrubbing on."""
    return {**cli_env(tmp_path, "safety-test"), "MEMORY_CORE_SCRUB": "on"}


# reasons --------------------------------------------------------------------------------------------------------
def test_retract_rollback_and_move_reasons_are_scrubbed_before_the_log_keeps_them(tmp_path: Path) -> None:
    with ScrubbingEngine(SQLiteEngine(tmp_path / "m.db")) as engine:
        kept = engine.store(Learning(text="Ana lives in Porto."))
        first = engine.current_lsn()
        engine.retract([kept.id], f"leaked {KEY}")
        engine.rollback(first, f"because {KEY}")
        engine.move([kept.id], Tier.ARCHIVE, f"archived, token {GHP}")
        records = engine.log(0, 100).records
    reasons = {r.op: r.reason for r in records if r.reason is not None}
    assert reasons == {
        RecordOp.RETRACT: "leaked [REDACTED]",
        RecordOp.RESTORE: f"rollback to LSN {first}: because [REDACTED]",
        RecordOp.MOVE: "archived, token [REDACTED]",
    }
    assert leaks(tmp_path, [KEY, GHP]) == {}  # not in the log table, nor anywhere in the file


def test_the_command_line_never_prints_or_stores_a_secret_reason(env: dict[str, str], tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "memory.db") as engine:
        kept = engine.store(Learning(text="Ana lives in Porto."))
    retracted = invoke(env, "retract", kept.id, "--why", f"leaked {KEY}")
    rolled = invoke(env, "rollback", "1", "--why", f"because {KEY}")
    shown = invoke(env, "log")
    as_json = invoke(env, "log", "--json")
    assert [r.exit_code for r in (retracted, rolled, shown, as_json)] == [0, 0, 0, 0], retracted.output + rolled.output
    for result in (retracted, rolled, shown, as_json):
        assert KEY not in result.output
    assert "leaked [REDACTED]" in shown.output and "because [REDACTED]" in shown.output
    assert leaks(tmp_path, [KEY]) == {}


def test_a_blank_reason_is_still_refused_through_the_wrapper() -> None:
    engine = ScrubbingEngine(ReferenceEngine())
    with pytest.raises(InvalidRequest) as raised:
        engine.retract(["x"], "  ")
    assert raised.value.field == "reason"


# actor names ----------------------------------------------------------------------------------------------------
def test_an_actor_name_is_scrubbed_and_its_id_kept(tmp_path: Path) -> None:
    meta = MemoryMeta(observed_actor=ObservedActor(id="user:bob", name=f"Bob, key {KEY}"))
    with ScrubbingEngine(SQLiteEngine(tmp_path / "m.db")) as engine:
        engine.store(Learning(text="Bob likes tea.", meta=meta))
        (hit,) = engine.list(ListRequest(limit=5)).items
    assert hit.meta.observed_actor == ObservedActor(id="user:bob", name="Bob, key [REDACTED]")
    assert leaks(tmp_path, [KEY]) == {}


# ids ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("meta.thread_id", {"thread_id": f"th-{KEY}"}),
        ("meta.agent_id", {"agent_id": f"agent-{KEY}"}),
        ("meta.namespace", {"namespace": Namespace.agent(f"agent-{KEY}")}),
        ("meta.namespace", {"namespace": Namespace.parse(f"team:acme/project:x_{GHP}")}),
        ("meta.workspace", {"workspace": f"ws_{GHP}"}),
        ("meta.repo", {"repo": f"https://bob:{GHP}@github.com/acme/app"}),
        ("meta.source.id", {"source": SourceRef(kind=SourceKind.FILE, id=f"drive:{AWS}")}),
        ("meta.tool_call.id", {"tool_call": ToolCallMeta(name="search", id=f"call-{KEY}")}),
        ("meta.observed_actor.id", {"observed_actor": ObservedActor(id=f"user:bob-{KEY.lower()}", name="Bob")}),
    ],
)
def test_an_id_holding_a_credential_is_refused_naming_its_field(field: str, changes: dict[str, object]) -> None:
    inner = ReferenceEngine()
    engine = ScrubbingEngine(inner)
    with pytest.raises(InvalidRequest) as raised:
        engine.store(Learning(text="fine", meta=MemoryMeta(**changes)))  # type: ignore[arg-type]
    assert raised.value.field == field
    with pytest.raises(InvalidRequest):
        engine.store_many([Learning(text="also fine"), Learning(text="fine", meta=MemoryMeta(**changes))])  # type: ignore[arg-type]
    assert inner.list(ListRequest(filter=MetaFilter(reach=Reach.subtree()), limit=10)).items == ()


@pytest.mark.parametrize(
    "value",
    [
        "f886d7a8-3fc6-4ca5-838c-7478cad3f7c3",
        "3084aacf7ae8178465f9ea6e3c19e96413ac809b",
        "job-20240517-0001",  # reads as an Aadhaar number: personal-identifier classes are not run over ids
        "th-240517-1234567",  # and as a Korean RRN
        "whatsapp:+14155552671",
        "user:bob@example.com",
        "t-token-limit",
        "sk-1",
        "conv_abc123def456",
    ],
)
def test_ids_without_a_credential_are_kept_as_given(value: str) -> None:
    assert not holds_credential(value)
    inner = ReferenceEngine()
    ScrubbingEngine(inner).store(Learning(text="fine", meta=MemoryMeta(thread_id=value, workspace=value)))
    (hit,) = inner.list(ListRequest(limit=5)).items
    assert (hit.meta.thread_id, hit.meta.workspace) == (value, value)


def test_a_token_glued_into_an_id_is_found_at_any_joint() -> None:
    assert holds_credential(f"agent-{KEY}") and holds_credential(f"th_{GHP}") and holds_credential(f"x-y-{AWS}")
    assert holds_credential(f"db_password={'hunter2x9'}")


def test_a_build_job_for_a_namespace_holding_a_credential_is_refused() -> None:
    job = BuildBeliefs(request=ConsolidateRequest(reach=Reach.of(Namespace.agent(f"agent-{KEY}"))))
    with pytest.raises(InvalidRequest) as raised:
        scrub_job(job)
    assert raised.value.field == "request.reach.at"
    fine = BuildBeliefs(request=ConsolidateRequest(reach=Reach.of(Namespace.agent("agent-7"))))
    assert scrub_job(fine) is fine


@pytest.mark.parametrize(
    ("thread", "options", "field"),
    [
        ("t1", ("--agent", f"agent-{KEY}"), "meta.agent_id"),
        (f"th-{KEY}", (), "meta.thread_id"),
        ("t1", ("--user", f"Bob {KEY}"), "meta.observed_actor.id"),  # the actor id is made from the name
    ],
)
def test_replay_refuses_an_id_holding_a_credential_and_keeps_nothing(
    env: dict[str, str], tmp_path: Path, thread: str, options: tuple[str, ...], field: str
) -> None:
    chat = tmp_path / "chat.jsonl"
    rows = [{"thread": thread, "role": "user", "content": "I moved to Lisbon.", "at": "2024-03-02T10:00:00Z"}]
    chat.write_text("\n".join(json.dumps(r) for r in rows))
    result = invoke(env, "replay", str(chat), "--inline", *options)
    assert result.exit_code == 2, result.output
    assert field in result.output and KEY not in result.output.replace(str(chat), "")
    chat.unlink()
    assert leaks(tmp_path, [KEY, KEY.lower()]) == {}
