"""``memory-core log``, ``history``, ``retract``, ``rollback`` and ``recall --as-of`` (issue 19), on SQLite."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_core import ConsolidateRequest, Conversation, MemoryMeta, Reach
from memory_core.cli import load_commands
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.items import Role, Turn
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.namespace import Namespace
from memory_core.settings import get_settings

runner = CliRunner()
app = load_commands()


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, str, str]:
    """A file holding one user turn and the belief built on it: ``(url, turn id, belief id)``."""
    path = tmp_path / "memory.db"
    meta = MemoryMeta(namespace=Namespace.agent("assistant"), thread_id="t1", agent_id="assistant")
    with SQLiteEngine(path) as engine:
        turn = engine.store(
            Conversation(turns=(Turn(role=Role.USER, text="My sister Ana lives in Porto."),), meta=meta)
        )
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        belief = next(r.id for r in engine.log(0, 10).records if r.id != turn.id)
    return f"sqlite:///{path}", turn.id, belief


def invoke(url: str, *args: str):  # type: ignore[no-untyped-def]
    get_settings.cache_clear()
    result = runner.invoke(app, [args[0], "--engine", url, *args[1:]])
    get_settings.cache_clear()
    return result


def _refs(url: str, *extra: str) -> list[str]:
    return _refs_for(url, "Where does Ana live?", *extra)


def _refs_for(url: str, query: str, *extra: str) -> list[str]:
    result = invoke(url, "recall", query, "--json", *extra)
    assert result.exit_code == 0, result.output
    return [r["id"] if isinstance(r, dict) else r for r in json.loads(result.stdout)["refs"]]


def _lsn(url: str) -> int:
    with SQLiteEngine(url.removeprefix("sqlite:///")) as engine:
        return engine.current_lsn()


def test_the_scenario_through_the_cli(store: tuple[str, str, str]) -> None:
    url, turn, belief = store
    shown = invoke(url, "log")
    assert shown.exit_code == 0 and turn in shown.stdout and "built" in shown.stdout
    assert turn in _refs(url)
    before = _lsn(url)
    when = datetime.now(UTC).isoformat()

    retracted = invoke(url, "retract", turn, "--why", "the user misspoke")
    assert retracted.exit_code == 0, retracted.output
    assert "retract" in retracted.stdout and f"stale     {belief}" in retracted.stdout
    assert turn not in _refs(url)
    assert turn in _refs(url, "--as-of", str(before))
    assert turn in _refs(url, "--as-of", when)  # a time names the LSN written by then

    rolled = invoke(url, "rollback", str(before), "--why", "it was right after all")
    assert rolled.exit_code == 0 and rolled.stdout.count("restore") == 2
    assert turn in _refs(url)
    history = invoke(url, "history", belief)
    assert history.exit_code == 0
    assert [line.split()[3] for line in history.stdout.splitlines()[:3]] == ["put", "stale", "restore"]
    assert history.stdout.splitlines()[-1] == "now: live/long"
    page = json.loads(invoke(url, "log", "--since", "1", "--limit", "2", "--json").stdout)
    assert [r["lsn"] for r in page["records"]] == [2, 3] and page["next_since"] == 3


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("rollback", "--why", "x", "--", "-1"), "lsn"),
        (("rollback", "-1", "--why", "x"), "lsn"),  # a negative LSN reaches the check: not "No such option: -1"
        (("rollback", "--why", "x", "-1"), "lsn"),
        (("rollback", "-1e3", "--why", "x"), "LSN"),  # no integer: Click's own refusal names the argument
        (("rollback", "999", "--why", "x"), "lsn"),
        (("rollback", str(2**70), "--why", "x"), "lsn"),
        (("retract", "0" * 40, "--why", " "), "reason"),  # a well-formed id: "abc" is refused first, naming id
        (("retract", "abc", "--why", "x"), "id"),
        (("recall", "Ana", "--as-of", "last tuesday"), "as_of"),
        (("recall", "Ana", "--as-of", "-1"), "as_of"),
        (("recall", "Ana", "--as-of", "999"), "as_of"),  # the option given, not as_of's parameter lsn
        (("recall", "Ana", "--as-of", str(10**30)), "as_of"),
        (("recall", "Ana", "--as-of", "2099-01-01T00:00:00Z"), "as_of"),
        (("log", "--limit", "0"), "limit"),
        (("log", "--limit", "-5"), "limit"),
        (("log", "--since", "-1"), "since"),
    ],
)
def test_bad_input_exits_2_naming_the_field_and_writes_nothing(
    store: tuple[str, str, str], args: tuple[str, ...], field: str
) -> None:
    url, _, _ = store
    before = _lsn(url)
    result = invoke(url, *args)
    assert result.exit_code == 2, result.output
    assert f"invalid request: {field}:" in result.stderr or f"'{field}'" in result.stderr, result.stderr
    assert "No such option" not in result.stderr and "Traceback" not in result.stderr
    assert _lsn(url) == before


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_history_of_a_prefix_or_a_malformed_id_exits_2_naming_id(store: tuple[str, str, str], as_json: bool) -> None:
    url, turn, _ = store
    flags = ("--json",) if as_json else ()
    for given in (turn[:8], turn.upper(), turn + "0", "zz!bad", "x" * 500):
        result = invoke(url, "history", given, *flags)
        assert result.exit_code == 2, (given, result.output)
        assert result.stdout == "" and "Traceback" not in result.stderr
        assert "invalid request: id: " in result.stderr and "is not a memory id" in result.stderr
        assert "a prefix is not resolved" in result.stderr and len(result.stderr) < 400  # a long id is cut
    whole = invoke(url, "history", turn, *flags)  # the whole id still reads its records
    assert whole.exit_code == 0 and turn in whole.stdout
    unknown = invoke(url, "history", "0" * 40, *flags)  # a whole id with no records is an answer, not an error
    assert unknown.exit_code == 0 and unknown.stdout.strip() in ("[]", f"no records about {'0' * 40}")


@pytest.mark.parametrize("blank", ["", "   "])
def test_recall_of_a_blank_query_is_the_latest_of_everything_as_the_library_reads_it(
    store: tuple[str, str, str], blank: str
) -> None:
    # not an error: AgentMemory.recall, POST /v1/recall ({query?}) and a pack's sections read a blank query as
    # newest first (recall/gather.py "Fetch"), and the command prints that pack
    url, turn, _ = store
    assert turn in _refs_for(url, blank)
    with SQLiteEngine(url.removeprefix("sqlite:///")) as engine:
        library = AgentMemory(engine, MemoryLayout(get_settings().layout_root), "assistant").recall(None)
    assert _refs_for(url, blank) == list(library.refs)


def test_retract_names_unknown_ids_and_exits_1_when_none_is_stored(store: tuple[str, str, str]) -> None:
    # whole ids no memory has: malformed ones ("no-such-id") exit 2 since the ids check (test below)
    url, turn, belief = store
    no_such, nor_this = "0" * 40, "1" * 40
    before = _lsn(url)
    none = invoke(url, "retract", no_such, nor_this, "--why", "x")
    assert none.exit_code == 1, none.output
    assert f"{no_such}, {nor_this}" in none.stderr and "nothing to retract" in none.stderr
    assert _lsn(url) == before
    some = invoke(url, "retract", turn, no_such, "--why", "the user misspoke")
    assert some.exit_code == 0, some.output
    assert f"retract   {turn}" in some.stdout and no_such not in some.stdout
    assert f"no memory has the id {no_such} (left out)" in some.stderr
    again = invoke(url, "retract", turn, "--why", "twice")  # stored, already retracted: nothing changed, no hint
    assert again.exit_code == 0 and "nothing changed" in again.stdout and again.stderr == ""


@pytest.mark.parametrize(
    "ids", [("zz",), ("TURN", "zz"), ("zz", "TURN"), ("TURN8",)], ids=["alone", "after", "before", "prefix"]
)
def test_retract_of_a_malformed_id_exits_2_naming_id_and_retracts_nothing(
    store: tuple[str, str, str], ids: tuple[str, ...]
) -> None:
    # history's rule: text no memory's id could be is bad input (exit 2), not "no memory has the id" (exit 1)
    url, turn, _ = store
    given = [turn if i == "TURN" else turn[:8] if i == "TURN8" else i for i in ids]
    before = _lsn(url)
    result = invoke(url, "retract", *given, "--why", "x")
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert "invalid request: id: " in result.stderr and "is not a memory id" in result.stderr
    assert _lsn(url) == before  # the well-formed id beside it is not retracted either
    assert turn in _refs(url)


def test_log_since_past_the_last_record_is_an_empty_page(store: tuple[str, str, str]) -> None:
    url, _, _ = store
    result = invoke(url, "log", "--since", "99999")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("no records after LSN 99999 (last: ")


def test_an_as_of_time_names_the_last_lsn_by_then_and_refuses_the_future(store: tuple[str, str, str]) -> None:
    from memory_core.cli.log import lsn_for
    from memory_core.errors import InvalidRequest

    url, _, _ = store
    with SQLiteEngine(url.removeprefix("sqlite:///")) as engine:
        now = datetime.now(UTC)
        assert lsn_for(engine, now.isoformat(), now=now) == engine.current_lsn()
        assert lsn_for(engine, "2000-01-01T00:00:00Z", now=now) == 0
        with pytest.raises(InvalidRequest) as err:
            lsn_for(engine, "2026-01-02T00:00:00", now=datetime(2026, 1, 1, tzinfo=UTC))
        assert err.value.field == "as_of"


def test_json_output_escapes_the_control_characters_a_terminal_would_interpret(store: tuple[str, str, str]) -> None:
    url, turn, _ = store
    reason = "csi \x9b31m, rlo \u202eevil\u202c, del \x7f, nel \x85, lri \u2066"
    assert invoke(url, "retract", turn, "--why", reason).exit_code == 0
    for args in (("log", "--json"), ("history", turn, "--json")):
        result = invoke(url, *args)
        assert result.exit_code == 0, result.output
        assert not any(c in result.stdout for c in "\x9b\u202e\u202c\x7f\x85\u2066"), args
        assert "\\u009b31m" in result.stdout and "\\u202e" in result.stdout
        parsed = json.loads(result.stdout)
        records = parsed["records"] if isinstance(parsed, dict) else parsed
        assert reason in [r.get("reason") for r in records]  # the same value, parsed back
