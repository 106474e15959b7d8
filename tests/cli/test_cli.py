"""The memory-core command line, end to end on a temporary SQLite file and the server-less transport."""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from memory_core import BeliefsRequest, Document, Learning, ListRequest, MemoryMeta, Reach
from memory_core.engines import open_engine
from tests._cli import LOCOMO_MINI, invoke


@pytest.fixture
def chat(tmp_path: Path) -> Path:
    path = tmp_path / "chat.jsonl"
    rows = [
        {"thread": "t1", "role": "user", "content": "I moved to Lisbon in March.", "at": "2024-03-02T10:00:00Z"},
        {"thread": "t1", "role": "assistant", "content": "Lisbon is lovely in spring."},
        {"thread": "t1", "role": "user", "content": "My favourite food is grilled sardines."},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def test_replay_inline_then_recall_finds_the_turns(env: dict[str, str], chat: Path) -> None:
    result = invoke(env, "replay", str(chat), "--inline", "--agent", "helper")
    assert result.exit_code == 0, result.output
    assert "3 turns replayed for helper; 1 build_beliefs job run" in result.output
    result = invoke(env, "recall", "Where do I live now?", "--agent", "helper")
    assert result.exit_code == 0, result.output
    assert "Lisbon" in result.output and "# Memory" in result.output
    result = invoke(env, "recall", "sardines", "--agent", "helper", "--json")
    pack = json.loads(result.output)
    assert pack["refs"] and pack["engine"] == "sqlite"


def test_context_writes_context_md(env: dict[str, str], chat: Path, tmp_path: Path) -> None:
    assert invoke(env, "replay", str(chat), "--inline").exit_code == 0
    out = tmp_path / "context.md"
    result = invoke(env, "context", "--output", str(out))
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("---\ngenerated_at: ") and "# Context" in text


def test_ingest_queues_jobs_and_status_shows_them_waiting(env: dict[str, str], data_dir: Path) -> None:
    peps = data_dir / "docs" / "peps"
    result = invoke(env, "ingest", str(peps / "pep-0008.rst"), str(peps / "pep-0020.rst"), "--collection", "peps")
    assert result.exit_code == 0, result.output
    match = re.search(r"2 documents split into \d+ passages; (\d+) ingest_brain jobs? queued", result.output)
    assert match, result.output
    result = invoke(env, "status", "--json")  # no worker has stored anything: no database yet, and none is made
    assert result.exit_code == 2, result.output
    status = json.loads(result.stdout)
    assert status["engine"] is None and status["error"].startswith(f"no database at {env['MEMORY_CORE_ENGINE'][10:]}")
    assert status["jobs"]["queues"]["ingest"] == int(match.group(1))
    assert status["jobs"]["workers"] is None
    assert not Path(env["MEMORY_CORE_ENGINE"][10:]).exists()


def test_ingest_reports_a_bad_file_and_exits_1(env: dict[str, str], tmp_path: Path) -> None:
    good, bad = tmp_path / "ok.md", tmp_path / "bad.txt"
    good.write_text("# Notes\n\nRefunds take five days.")
    bad.write_bytes(b"\x00\x01binary")
    result = invoke(env, "ingest", str(good), str(bad))
    assert result.exit_code == 1
    assert "failed" in result.output and "bad.txt" in result.output
    assert re.search(r"1 document split into 1 passage; 1 ingest_brain job queued", result.output), result.output


def test_ingest_of_nothing_usable_exits_1(env: dict[str, str], tmp_path: Path) -> None:
    result = invoke(env, "ingest", str(tmp_path / "missing.md"))
    assert result.exit_code == 1


def test_replay_refuses_a_malformed_file(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"thread": "t", "role": "robot", "content": "x"}\n')
    result = invoke(env, "replay", str(path), "--inline")
    assert result.exit_code == 2
    assert "role" in result.output


def test_an_unknown_engine_scheme_exits_2_listing_the_known_ones(env: dict[str, str]) -> None:
    result = invoke({**env, "MEMORY_CORE_ENGINE": "nosuch://x"}, "recall", "hello")
    assert result.exit_code == 2
    assert "reference" in result.output and "sqlite" in result.output


def test_eval_locomo_prints_the_table_and_writes_json(env: dict[str, str], tmp_path: Path) -> None:
    sample = LOCOMO_MINI
    data, out = tmp_path / "mini.json", tmp_path / "eval.json"
    data.write_text(json.dumps([sample]))
    result = invoke(env, "eval", "locomo", str(data), "--json", str(out), "--k", "1")
    assert result.exit_code == 0, result.output
    assert "evidence recall" in result.output and "bm25@1" in result.output
    written = json.loads(out.read_text())
    assert written["methods"][0]["method"] == "pack" and written["methods"][0]["n"] == 1
    brain = tmp_path / "brain"
    brain.mkdir()
    (brain / "pets.md").write_text("# Pets\n\nLuna is a cat.\n", encoding="utf-8")
    result = invoke(env, "eval", "locomo", str(data), "--json", str(out), "--k", "1", "--brain", str(brain))
    assert result.exit_code == 0, result.output
    assert "Brain bullets per pack" in result.output and json.loads(out.read_text())["brain_items"] == 1


def test_a_malformed_setting_exits_2_naming_the_variable(env: dict[str, str]) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "memory_core", "recall", "hello"],
        env={**env, "MEMORY_CORE_BUDGET_TOKENS": "lots", "PATH": ""},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "MEMORY_CORE_BUDGET_TOKENS" in result.stderr
    assert "Traceback" not in result.stderr


def test_conformance_on_a_corrupt_file_exits_2_and_leaves_it_untouched(env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "corrupt.db"
    bad.write_bytes(b"not a database at all")
    result = invoke(env, "conformance", "--engine", f"sqlite:///{bad}")
    assert result.exit_code == 2
    assert "corrupt.db" in result.output
    assert bad.read_bytes() == b"not a database at all"


def _chatgpt_export(path: Path) -> Path:
    def node(node_id: str, parent: str | None, role: str, text: str, t: float) -> dict[str, object]:
        message = {"id": f"m-{node_id}", "author": {"role": role}, "create_time": t, "content": {"parts": [text]}}
        return {"id": node_id, "parent": parent, "children": [], "message": message}

    mapping = {
        "u1": node("u1", None, "user", "I am planning a trip to Kyoto in April.", 1_709_373_600),
        "a1": node("a1", "u1", "assistant", "Kyoto is lovely in spring.", 1_709_373_660),
    }
    path.write_text(json.dumps([{"conversation_id": "c-1", "mapping": mapping, "current_node": "a1"}]))
    return path


def test_a_replayed_chatgpt_export_is_the_users_words_to_the_assistant(env: dict[str, str], tmp_path: Path) -> None:
    export = _chatgpt_export(tmp_path / "conversations.json")
    result = invoke(env, "replay", str(export), "--inline")
    assert result.exit_code == 0, result.output
    assert "2 turns replayed for assistant; 1 build_beliefs job run" in result.output
    engine = open_engine(env["MEMORY_CORE_ENGINE"])
    try:
        listed = engine.list(ListRequest(limit=10)).items
        built = [h.text for h in engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=20))]
    finally:
        engine.close()
    actors = {h.text.split(":")[0]: h.meta.observed_actor for h in listed}
    assert actors["assistant"] is None  # the agent's own words
    assert actors["user"] is not None and (actors["user"].id, actors["user"].name) == ("user:the-user", "the user")
    assert any("The user is planning a trip to Kyoto in April" in text for text in built), built
    assert not any(text.startswith("Assistant is") for text in built), built
    result = invoke(env, "recall", "trip", "--json")
    pack = json.loads(result.output)
    assert "Assistant is" not in pack["markdown"]
    assert "[2024-03-02 10:00] user: I am planning a trip" in pack["markdown"]  # create_time became the turn's at
    assert invoke(env, "replay", str(export), "--inline", "--user", "Priya").exit_code == 0


def test_a_replayed_locomo_file_gives_one_agent_per_speaker(env: dict[str, str], tiny_data_dir: Path) -> None:
    locomo = tiny_data_dir / "locomo" / "locomo_dev.json"
    result = invoke(env, "replay", str(locomo), "--inline")
    assert result.exit_code == 0, result.output
    assert "8 turns replayed for ann, bo; 2 build_beliefs jobs run" in result.output
    result = invoke(env, "recall", "What is the name of my cat?", "--agent", "ann")
    assert "Luna" in result.output


def test_queued_replay_says_how_many_builds_folded_into_one_job(env: dict[str, str], tiny_data_dir: Path) -> None:
    locomo = tiny_data_dir / "locomo" / "locomo_dev.json"
    result = invoke({**env, "MEMORY_CORE_BUILD_BELIEFS_EVERY": "1"}, "replay", str(locomo))
    assert result.exit_code == 0, result.output
    # each agent hears 4 replies (a build after each) and gets a final build: 10 triggers for 2 scopes
    assert "10 build_beliefs jobs submitted, 2 queued (a build identical to one still waiting shares its job)" in (
        result.output
    )
    status = json.loads(invoke(env, "status", "--json").output)
    assert status["jobs"]["queues"]["beliefs"] == 2


def test_ingest_says_when_its_jobs_were_parked_because_the_broker_is_down(env: dict[str, str], tmp_path: Path) -> None:
    doc = tmp_path / "notes.md"
    doc.write_text("# Notes\n\nRefunds take five days.")
    down = {**env, "MEMORY_CORE_BROKER_URL": "redis://127.0.0.1:1/0", "MEMORY_CORE_PUBLISH_TIMEOUT_S": "0.5"}
    result = invoke(down, "ingest", str(doc))
    assert result.exit_code == 0, result.output
    assert "1 ingest_brain job submitted, 0 queued, 1 parked in the outbox (the broker did not answer" in result.output
    assert "1 ingest_brain job queued" not in result.output


def test_status_with_the_broker_down_gives_a_reason_for_every_unknown_and_the_outbox(
    env: dict[str, str], tmp_path: Path
) -> None:
    doc = tmp_path / "notes.md"
    doc.write_text("# Notes\n\nRefunds take five days.")
    down = {**env, "MEMORY_CORE_BROKER_URL": "redis://u:s3cret@127.0.0.1:1/0", "MEMORY_CORE_PUBLISH_TIMEOUT_S": "0.5"}
    assert invoke(down, "ingest", str(doc)).exit_code == 0  # parked
    open_engine(env["MEMORY_CORE_ENGINE"]).close()  # a database exists: only the broker is missing
    result = invoke(down, "status", "--json")
    assert result.exit_code == 0, result.output
    jobs = json.loads(result.output)["jobs"]
    assert jobs["broker"]["answering"] is False and "ConnectionError" in jobs["broker"]["reason"]
    assert jobs["broker"]["url"] == "redis://u:***@127.0.0.1:1/0"
    assert jobs["outbox"] == 1
    assert set(jobs["unknown"]) == {"queues", "running", "dead_letters"}
    assert all("the broker is not answering (ConnectionError" in why for why in jobs["unknown"].values())
    text = invoke(down, "status").output
    assert "broker  redis://u:***@127.0.0.1:1/0 is not answering: ConnectionError" in text
    assert "running ? (broker not answering); dead letters ? (broker not answering)" in text
    assert "outbox  1 job waiting to be published" in text
    assert "s3cret" not in text


def test_recall_refuses_a_budget_below_one(env: dict[str, str]) -> None:
    result = invoke(env, "recall", "hello", "--budget", "0")
    assert result.exit_code == 2
    assert "--budget" in result.output


def test_replay_of_a_file_with_no_turns_exits_2(env: dict[str, str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    result = invoke(env, "replay", str(empty), "--inline")
    assert result.exit_code == 2
    assert "empty.jsonl holds no turn to replay" in result.output
    assert "0 turns replayed" not in result.output


def test_eval_of_a_broken_file_is_one_error_without_a_progress_bar(env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"sample_id": "x", "conversation": {"session_1": [5]}}]))
    result = invoke(env, "eval", "locomo", str(bad))
    assert result.exit_code == 2
    assert result.output.strip() == "invalid request: bad.json: samples.0.session_1.0: a turn is a JSON object, got int"


def test_eval_counts_the_questions_it_skipped_by_reason(env: dict[str, str], tmp_path: Path) -> None:
    sample = json.loads((Path(__file__).parents[1] / "fixtures/tiny_data/locomo/locomo_dev.json").read_text())[0]
    sample["qa"] += [{"evidence": ["D1:1"], "category": 1}, {"question": "Text category?", "category": "1"}]
    data, out = tmp_path / "odd.json", tmp_path / "eval.json"
    data.write_text(json.dumps([sample]))
    result = invoke(env, "eval", "locomo", str(data), "--json", str(out), "--k", "1")
    assert result.exit_code == 0, result.output
    assert "4 questions scored; skipped 2 (1 category is not an integer, 1 question missing or blank); " in (
        result.output
    )
    assert "1 of category 5 left out" in result.output
    written = json.loads(out.read_text())
    assert written["skip_reasons"] == {"category is not an integer": 1, "question missing or blank": 1}


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ([], ["--help  Show this message and exit."]),
        (["demo"], ["--sample ID", "--timeout SECONDS", "--keep / --no-keep", "-b, --broker URL"]),
        (["replay"], ["--sample ID", "-a, --agent ID", "--user NAME", "-e, --engine URL", "--root NAMESPACE"]),
        (["ingest"], ["--source SOURCE", "--collection NAME", "-e, --engine URL"]),
        (["recall"], ["--budget TOKENS", "-a, --agent ID", "--json "]),
        (["status"], ["--scopes N", "--json "]),
        (["eval", "locomo"], ["--budget TOKENS", "--k K", "--json FILE", "--brain DIR", "-e, --engine URL"]),
    ],
)
def test_help_names_what_each_option_takes_and_no_type_beside_a_flag(
    env: dict[str, str], command: list[str], shown: list[str]
) -> None:
    result = invoke(env, *command, "--help")
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    for text in shown:
        assert text in result.output, (text, result.output)


def _break_tables(path: Path, *tables: str) -> bytes:
    """Overwrite the root page of each table (as a bit-flipped copy of a real file can): the file still opens,
    its schema intact, and every read of those tables fails "database disk image is malformed"; the bytes."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        roots = [
            int(conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (t,)).fetchone()[0]) for t in tables
        ]
    finally:
        conn.close()
    data = bytearray(path.read_bytes())
    for root in roots:
        data[(root - 1) * size : root * size] = b"\xab" * size
    path.write_bytes(bytes(data))
    return bytes(data)


def test_recall_and_context_exit_1_with_the_reasons_when_no_section_can_be_read(
    env: dict[str, str], chat: Path
) -> None:
    assert invoke(env, "replay", str(chat), "--inline").exit_code == 0
    path = Path(env["MEMORY_CORE_ENGINE"].removeprefix("sqlite:///"))
    broken = _break_tables(path, "items", "beliefs")
    said = {  # recall: every section failed; context: the learnings index still answers "none" for its section
        "recall": "recall failed: no section could be read (engine errors, not an empty memory):\n  Learnings, ",
        "context": "context failed: nothing to show: 4 of 5 sections could not be read (engine errors; the rest",
    }
    for args in (["recall", "Where do I live now?"], ["context"]):
        result = invoke(env, *args)
        assert result.exit_code == 1, result.output
        assert said[args[0]] in result.output
        assert "database disk image is malformed" in result.output
        assert "(empty" not in result.output
    result = invoke(env, "recall", "Lisbon", "--json")
    assert result.exit_code == 1
    pack = json.loads(result.stdout)  # the pack is still printed: a host's pre_turn would get it
    assert pack["skipped"] and all("malformed" in s["reason"] for s in pack["skipped"])
    assert path.read_bytes() == broken


def test_recall_of_a_healthy_memory_with_nothing_matching_still_exits_0(env: dict[str, str]) -> None:
    open_engine(env["MEMORY_CORE_ENGINE"]).close()
    result = invoke(env, "recall", "anything")
    assert result.exit_code == 0, result.output
    assert "(empty pack: nothing stored matches, or nothing fits in 1200 tokens)" in result.output
    ctx = invoke(env, "context")
    assert ctx.exit_code == 0, ctx.output


def test_an_empty_context_names_the_budget_it_may_not_fit(env: dict[str, str]) -> None:
    """A memory holding items but a budget too small for one line is not "nothing stored" (newcomer run)."""
    memory = open_engine(env["MEMORY_CORE_ENGINE"])
    memory.store(Learning(text="Ann likes tea, green tea in the morning and black tea at night, every day."))
    memory.close()
    result = invoke(env, "context", "--budget", "1")
    assert result.exit_code == 0, result.output
    assert "(empty: nothing stored, or nothing fits in --budget 1 tokens)" in result.output


@pytest.mark.parametrize("command", [["status"], ["recall", "hello"], ["context"]], ids=lambda c: c[0])
def test_read_only_commands_refuse_a_sqlite_path_with_no_database_and_create_nothing(
    env: dict[str, str], tmp_path: Path, command: list[str]
) -> None:
    typo = tmp_path / "nonexistent" / "dir" / "m.db"
    result = invoke(env, *command, "--engine", f"sqlite:///{typo}")
    assert result.exit_code == 2, result.output
    assert f"no database at {typo}; nothing has been stored there yet" in result.output
    assert "run ingest/replay first" in result.output
    assert not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("broker", ["", "redis://127.0.0.1:1/0"], ids=["server-less", "broker-down"])
def test_status_against_a_fresh_var_dir_creates_no_outbox_or_coordination_file(
    env: dict[str, str], tmp_path: Path, broker: str
) -> None:
    open_engine(env["MEMORY_CORE_ENGINE"]).close()  # a database exists; the var dir is fresh
    result = invoke({**env, "MEMORY_CORE_BROKER_URL": broker}, "status", "--json")
    assert result.exit_code == 0, result.output
    jobs = json.loads(result.output)["jobs"]
    assert jobs["outbox"] == 0 and "outbox" not in jobs["unknown"]
    var = Path(env["MEMORY_CORE_VAR_DIR"])
    assert not list(var.glob("outbox.db*")), sorted(p.name for p in var.iterdir())
    assert not list(var.glob("coordination.db*")), sorted(p.name for p in var.iterdir())
    if not broker:
        assert jobs["dead_letters"] == 0
        assert jobs["broker"]["answering"] and jobs["queues"] == dict.fromkeys(jobs["queues"], 0)
    # read-only: not even var/ (nor the server-less var/broker/, var/results/) is created
    assert not var.exists(), sorted(str(p.relative_to(var)) for p in var.rglob("*"))


def test_replay_of_json_nested_past_the_decoders_limit_exits_2_naming_the_file(
    env: dict[str, str], tmp_path: Path
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    result = invoke(env, "replay", str(deep), "--inline")
    assert result.exit_code == 2, result.output
    assert "deep.json is not readable JSON: arrays or objects nested deeper" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_replay_without_assistant_turns_says_no_post_turn_calls(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "users.jsonl"
    path.write_text(json.dumps({"thread": "t", "role": "user", "content": "I keep bees."}) + "\n")
    result = invoke(env, "replay", str(path), "--inline")
    assert result.exit_code == 0, result.output
    assert "pre_turn p50 " in result.output and "; no post_turn calls; log errors 0" in result.output
    assert "nan" not in result.output


@pytest.mark.parametrize("given", ["--port", "MEMORY_CORE_FLOWER_PORT"])
def test_flower_on_a_port_in_use_exits_2_naming_the_port_and_where_it_came_from(
    env: dict[str, str], given: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        extra = ["--port", str(port)] if given == "--port" else []
        run_env = {**os.environ, **env, "MEMORY_CORE_FLOWER_PORT": str(port if extra == [] else 5555)}
        result = subprocess.run(
            [sys.executable, "-m", "memory_core", "flower", *extra],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 2, result.stderr
    assert f"flower cannot listen on 127.0.0.1:{port} ({given}): Address already in use" in result.stderr
    assert "--port or MEMORY_CORE_FLOWER_PORT" in result.stderr
    assert "Traceback" not in result.stderr


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``memory-core ARGS`` in a child process: its entry point maps an error no command handled to an exit code."""
    return subprocess.run(
        [sys.executable, "-m", "memory_core", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


PASSWORD_IN_QUERY = "redis://127.0.0.1:6379/9?password=hunter2"


@pytest.mark.parametrize(
    ("url", "args", "says"),
    [
        (PASSWORD_IN_QUERY, ("ingest", "--broker"), "'password' is not taken by the broker's clients"),
        (PASSWORD_IN_QUERY, ("worker", "--broker"), "'password' is not taken by the broker's clients"),
        (PASSWORD_IN_QUERY, ("beat", "--broker"), "'password' is not taken by the broker's clients"),
        (PASSWORD_IN_QUERY, ("status", "--broker"), "'password' is not taken by the broker's clients"),
        ("redis://127.0.0.1:6379/9?ssl_cert_reqs=bogus", ("ingest",), "'ssl_cert_reqs' is a TLS option"),
        ("rediss://127.0.0.1:6379/9?ssl_cert_reqs=bogus", ("ingest",), "ssl_cert_reqs='bogus' is not valid"),
    ],
)
def test_a_broker_url_with_a_query_option_no_client_takes_stops_every_command_before_a_job_is_queued(
    env: dict[str, str], tmp_path: Path, url: str, args: tuple[str, ...], says: str
) -> None:
    doc = tmp_path / "notes.md"
    doc.write_text("# Notes\n\nRefunds take five days.")
    command, *flag = args
    argv = [command, *([str(doc)] if command == "ingest" else []), *flag, *([url] if flag else [])]
    result = cli({**env, "MEMORY_CORE_BROKER_URL": "" if flag else url}, *argv)
    out = result.stdout + result.stderr
    assert result.returncode == 2, out  # a configuration error, not kombu's TypeError/KeyError (exit 1)
    assert f"MEMORY_CORE_BROKER_URL: the query option {says}" in " ".join(out.split())
    assert "hunter2" not in out and "Traceback" not in out and "Error:" not in out.replace("ConfigError:", "")
    outbox = Path(env["MEMORY_CORE_VAR_DIR"]) / "outbox.db"
    assert not outbox.exists() or sqlite3.connect(outbox).execute("SELECT count(*) FROM outbox").fetchone() == (0,)


def _host_store(url: str) -> tuple[str, int]:
    """A store a host already uses: one live document; its id and the log's LSN."""
    with open_engine(url) as engine:
        receipt = engine.store(Document.of("the host's note: Lisbon since March", MemoryMeta(workspace="host")))
        return receipt.id, engine.current_lsn()


@pytest.mark.parametrize("extra", [[], ["--faults"], ["--json"]], ids=["suite", "faults", "json"])
def test_conformance_refuses_a_store_holding_data_and_leaves_it_untouched(
    env: dict[str, str], extra: list[str]
) -> None:
    url = env["MEMORY_CORE_ENGINE"]  # no --engine: the user's own store
    host_id, lsn = _host_store(url)
    result = invoke(env, "conformance", *extra)
    assert result.exit_code == 2, result.output
    error = " ".join(result.stderr.split())
    assert f"is not empty: its log is at LSN {lsn}" in error
    assert "rolls the log back store-wide" in error and "fresh `sqlite:///…` file or `reference://`" in error
    assert "--allow-existing" in error and "passed" not in result.stdout
    with open_engine(url) as engine:
        assert engine.current_lsn() == lsn  # nothing written, forgotten or rolled back
        assert [h.id for h in engine.list(ListRequest(limit=10)).items] == [host_id]


def test_conformance_on_a_fresh_file_passes_once_then_refuses_its_own_leftovers(
    env: dict[str, str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    first = invoke(env, "conformance", "--engine", url, "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["passed"] is True
    second = invoke(env, "conformance", "--engine", url)
    assert second.exit_code == 2 and "is not empty: its log is at LSN" in " ".join(second.stderr.split())


def test_conformance_allow_existing_runs_on_a_store_holding_data(env: dict[str, str]) -> None:
    url = env["MEMORY_CORE_ENGINE"]
    host_id, lsn = _host_store(url)
    result = invoke(env, "conformance", "--allow-existing", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["passed"] is True
    with open_engine(url) as engine:
        assert engine.current_lsn() > lsn  # the run wrote: the flag accepts exactly that
        assert [h.id for h in engine.list(ListRequest(limit=10)).items] == [host_id]  # a quiet store: the host's stays
