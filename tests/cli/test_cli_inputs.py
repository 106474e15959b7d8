"""CLI input checks from a newcomer's run: engine plugins in every command, blank options, agent ids, --output
paths and an interrupted replay. Usage errors exit 2 with one line naming the option and no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memory_core.engines as engines
from memory_core.engines import open_engine
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import ConfigError, InvalidRequest
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout, agent_segment_id
from memory_core.replay.driver import Replayer
from memory_core.settings import get_settings
from tests._cli import invoke, one_line_error

PLUGIN = """
from memory_core.engines.reference import ReferenceEngine


def make(url):
    return ReferenceEngine()
"""


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plugins a test registers are forgotten after it."""
    monkeypatch.setattr(engines, "_REGISTRY", dict(engines._REGISTRY))


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable plugin module ``mc_test_plugin`` whose ``make`` opens a ReferenceEngine; its module name."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "mc_test_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(folder))
    return "mc_test_plugin"


@pytest.fixture
def chat(tmp_path: Path) -> Path:
    path = tmp_path / "chat.jsonl"
    rows = [
        {"thread": "t1", "role": "user", "content": "I moved to Lisbon in March."},
        {"thread": "t1", "role": "assistant", "content": "Lisbon is lovely in spring."},
        {"thread": "t1", "role": "user", "content": "My favourite food is grilled sardines."},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


# 2. engine plugins are loaded where engines are opened ----------------------------------------------------------
def test_open_engine_honours_the_plugin_setting(
    env: dict[str, str], plugin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_CORE_ENGINE_PLUGINS", f"mine={plugin}:make")
    get_settings.cache_clear()
    try:
        opened = engines.open_engine("mine://x")
    finally:
        get_settings.cache_clear()
    assert isinstance(opened, ReferenceEngine)
    assert "mine" in engines.known_schemes()


def test_open_engine_takes_plugins_explicitly(plugin: str) -> None:
    assert isinstance(engines.open_engine("mine://x", plugins=f"mine={plugin}:make"), ReferenceEngine)


@pytest.mark.parametrize("spec", ["=garbage", "mine", "mine=nocolon", "mine=:make", "mine=mod:", "my plug=a:b"])
def test_a_malformed_plugin_setting_is_a_config_error_naming_it(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="MEMORY_CORE_ENGINE_PLUGINS"):
        engines.open_engine("reference://", plugins=spec)
    monkeypatch.setenv("MEMORY_CORE_ENGINE_PLUGINS", spec)
    get_settings.cache_clear()
    try:
        with pytest.raises(ConfigError, match="MEMORY_CORE_ENGINE_PLUGINS"):
            engines.open_engine("reference://")
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize(
    "command",
    [["recall", "hello"], ["context"], ["conformance"], ["status", "--json"], ["replay", "CHAT", "--inline"]],
    ids=lambda c: c[0],
)
def test_every_command_opens_a_plugin_scheme(env: dict[str, str], plugin: str, chat: Path, command: list[str]) -> None:
    args = [str(chat) if a == "CHAT" else a for a in command]
    result = invoke({**env, "MEMORY_CORE_ENGINE_PLUGINS": f"mine={plugin}:make"}, *args, "--engine", "mine://x")
    assert "unknown engine scheme" not in result.output, result.output
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "command", [["recall", "hello"], ["context"], ["conformance"], ["replay", "CHAT", "--inline"]], ids=lambda c: c[0]
)
def test_every_command_refuses_a_malformed_plugin_setting(env: dict[str, str], chat: Path, command: list[str]) -> None:
    args = [str(chat) if a == "CHAT" else a for a in command]
    result = invoke({**env, "MEMORY_CORE_ENGINE_PLUGINS": "=garbage"}, *args, "--engine", "reference://")
    assert result.exit_code == 2, result.output
    assert "MEMORY_CORE_ENGINE_PLUGINS" in result.output and "=garbage" in result.output


# 3. blank options and agent ids --------------------------------------------------------------------------------
_BLANKABLE = [
    ["recall", "hello"],
    ["context"],
    ["conformance"],
    ["status"],
    ["replay", "CHAT", "--inline"],
    ["ingest", "CHAT"],
]


@pytest.mark.parametrize(
    ("command", "option"),
    [(c, o) for o in ("--engine", "--root") for c in _BLANKABLE if (c[0], o) != ("conformance", "--root")],
    ids=lambda v: v[0] if isinstance(v, list) else v,
)
def test_a_blank_engine_or_root_exits_2_naming_the_option(
    env: dict[str, str], chat: Path, command: list[str], option: str
) -> None:
    """Every command taking the option; conformance takes no ``--root``."""
    args = [str(chat) if a == "CHAT" else a for a in command]
    for blank in ("", "  "):
        result = invoke(env, *args, option, blank)
        assert result.exit_code == 2, result.output
        assert one_line_error(result).startswith(f"{option} is blank")


_TAKING_BROKER = [
    ["ingest", "CHAT"],
    ["replay", "CHAT"],
    ["status"],
    ["worker"],
    ["beat"],
    ["flower"],
    ["dead-letters", "list"],
    ["dead-letters", "show", "some-id"],
    ["dead-letters", "requeue", "some-id"],
    ["dead-letters", "purge", "--yes"],
    ["demo"],
]


@pytest.mark.parametrize("command", _TAKING_BROKER, ids=lambda c: "-".join(c[:2]).replace("-CHAT", ""))
def test_a_blank_broker_exits_2_naming_the_option(
    env: dict[str, str], chat: Path, command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ingest a.md --broker ""`` queued its jobs on the server-less queue, which a Redis worker never reads
    (newcomer run): every command taking ``--broker`` refuses a blank one, as ``--engine`` and ``--root``."""
    import memory_core.cli.beat
    import memory_core.cli.flower
    import memory_core.cli.worker

    started: list[list[str]] = []
    for module in (memory_core.cli.worker, memory_core.cli.beat, memory_core.cli.flower):
        monkeypatch.setattr(module, "run_celery", lambda argv: started.append(argv) or 0)
    args = [str(chat) if a == "CHAT" else a for a in command]
    for blank in ("", "  "):
        result = invoke(env, *args, "--broker", blank)
        assert result.exit_code == 2, result.output
        assert one_line_error(result).startswith("--broker is blank")
    assert started == []
    assert not Path(env["MEMORY_CORE_VAR_DIR"]).exists()  # no server-less queue, outbox or dead letter touched


@pytest.mark.parametrize("user", ["", "   "])
def test_a_blank_user_exits_2(env: dict[str, str], chat: Path, user: str) -> None:
    result = invoke(env, "replay", str(chat), "--inline", "--user", user)
    assert result.exit_code == 2, result.output
    assert one_line_error(result).startswith("--user is blank")
    assert invoke(env, "replay", str(chat), "--inline", "--user", "Ana").exit_code == 0


@pytest.mark.parametrize("fmt", [None, "jsonl"])
def test_sample_for_a_chat_file_exits_2_naming_the_option_and_the_format(
    env: dict[str, str], chat: Path, fmt: str | None
) -> None:
    """``replay ok.jsonl --sample x`` replayed the whole file, ignoring ``--sample`` (newcomer run)."""
    given = [] if fmt is None else ["--format", fmt]
    result = invoke(env, "replay", str(chat), *given, "--sample", "x", "--inline")
    assert result.exit_code == 2, result.output
    how = "detected" if fmt is None else "as asked"
    assert one_line_error(result) == (
        f"--sample: chat.jsonl is read as jsonl ({how}), which has no samples; only a LoCoMo file has sample ids"
    )
    assert not Path(env["MEMORY_CORE_ENGINE"].removeprefix("sqlite:///")).exists()  # nothing replayed


@pytest.mark.parametrize("given", [["--agent", "Bob"], ["--user", "Bob"], ["--agent", "Bob", "--user", "Ann"]])
def test_agent_or_user_for_a_locomo_file_exits_2_naming_them(
    env: dict[str, str], tiny_data_dir: Path, given: list[str]
) -> None:
    """A LoCoMo file's agents and users are its speakers: ``--agent``/``--user`` were silently ignored there."""
    locomo = tiny_data_dir / "locomo" / "locomo_dev.json"
    result = invoke(env, "replay", str(locomo), *given, "--inline")
    assert result.exit_code == 2, result.output
    named = " and ".join(o for o in ("--agent", "--user") if o in given)
    assert one_line_error(result).startswith(f"{named}: a LoCoMo file's agents and users are its speakers")
    assert not Path(env["MEMORY_CORE_ENGINE"].removeprefix("sqlite:///")).exists()  # nothing replayed


@pytest.mark.parametrize("name", ["Bob\nSmith", "Bob\x1b[31mRED", "tab\there"])
def test_a_user_name_with_control_characters_exits_2(env: dict[str, str], chat: Path, name: str) -> None:
    """The name goes into beliefs ("Bob Smith\x1b[31mRED adopted a dog…", newcomer run)."""
    result = invoke(env, "replay", str(chat), "--inline", "--user", name)
    assert result.exit_code == 2, result.output
    assert "holds control characters" in one_line_error(result)


@pytest.mark.parametrize("root", ["agent:bob", "team:acme/agent:x"])
def test_a_layout_root_naming_an_agent_is_refused(env: dict[str, str], chat: Path, root: str) -> None:
    """Brain documents under it would carry the agent's id, and the agent's node would be ``agent:x/agent:x``."""
    with pytest.raises(InvalidRequest) as info:
        MemoryLayout(root)
    assert info.value.field == "root"
    result = invoke(env, "ingest", str(chat), "--root", root)
    assert result.exit_code == 2, result.output
    assert "names an agent" in result.output


@pytest.mark.parametrize("command", [["recall", "hello"], ["replay", "CHAT", "--inline"]], ids=lambda c: c[0])
@pytest.mark.parametrize("agent", ["", "   "])
def test_a_blank_agent_id_exits_2(env: dict[str, str], chat: Path, command: list[str], agent: str) -> None:
    args = [str(chat) if a == "CHAT" else a for a in command]
    result = invoke(env, *args, "--agent", agent)
    assert result.exit_code == 2, result.output
    assert one_line_error(result).startswith("--agent is blank")


@pytest.mark.parametrize("agent", ["Alice Smith", "bad agent/with slash", "x" * 129, "émile", "writer\n"])
def test_the_cli_reads_the_agent_node_the_library_wrote_for_any_id(env: dict[str, str], agent: str) -> None:
    """The library maps an agent id to its node (``agent_segment_id``); the CLI maps ``--agent`` the same way,
    so ``recall --agent "Alice Smith"`` finds what ``AgentMemory(..., "Alice Smith")`` stored (newcomer run)."""
    engine = open_engine(env["MEMORY_CORE_ENGINE"])
    AgentMemory(engine, MemoryLayout(), agent).post_turn(
        {"thread_id": "t1", "turn_index": 0, "assistant_text": "Zebras sleep standing up."}
    )
    engine.close()
    result = invoke(env, "recall", "zebras", "--agent", agent, "--json")
    assert result.exit_code == 0, result.output
    assert "Zebras sleep standing up." in result.stdout
    node = agent_segment_id(agent)
    assert (f"is the node agent:{node}" in result.stderr) == (node != agent)


def test_an_agent_id_naming_the_reserved_space_exits_2(env: dict[str, str]) -> None:
    """``--`` leads the nodes of ids that are not segment ids (issue 11 rule 7): no id may name one."""
    result = invoke(env, "recall", "zebras", "--agent=--Alice-Smith-x")
    assert result.exit_code == 2, result.output
    assert one_line_error(result).startswith("--agent: agent id '--Alice-Smith-x' starts with '--'")


def test_a_valid_agent_id_is_accepted(env: dict[str, str], chat: Path) -> None:
    assert invoke(env, "replay", str(chat), "--inline", "--agent", "helper-2_x").exit_code == 0
    assert invoke(env, "recall", "Lisbon", "--agent", "helper-2_x").exit_code == 0


# 4. context --output ------------------------------------------------------------------------------------------
@pytest.fixture
def stored(env: dict[str, str], chat: Path) -> dict[str, str]:
    assert invoke(env, "replay", str(chat), "--inline").exit_code == 0
    return env


def test_context_output_naming_a_folder_exits_2(stored: dict[str, str], tmp_path: Path) -> None:
    result = invoke(stored, "context", "-o", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert one_line_error(result).startswith(f"--output: {tmp_path} is a folder")


def test_context_output_in_a_missing_folder_exits_2_and_creates_nothing(stored: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "nonexistent" / "dir" / "x.md"
    result = invoke(stored, "context", "-o", str(target))
    assert result.exit_code == 2, result.output
    assert "does not exist" in one_line_error(result) and str(target.parent) in result.stderr
    assert not (tmp_path / "nonexistent").exists()


def test_context_output_under_a_file_exits_2(stored: dict[str, str], chat: Path) -> None:
    result = invoke(stored, "context", "-o", str(chat / "x.md"))
    assert result.exit_code == 2, result.output
    assert one_line_error(result) == f"--output: {chat} is not a folder"


def test_context_output_that_cannot_be_written_exits_1(stored: dict[str, str]) -> None:
    result = invoke(stored, "context", "-o", "/proc/version")
    assert result.exit_code == 1, result.output
    assert one_line_error(result).startswith("context: cannot write --output /proc/version: ")


def test_context_output_to_a_file_still_writes_it(stored: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "context.md"
    result = invoke(stored, "context", "-o", str(target))
    assert result.exit_code == 0, result.output
    assert "Lisbon" in target.read_text()


# 6. an interrupted replay says how far it got -----------------------------------------------------------------
def test_an_interrupted_replay_says_how_far_it_got_and_exits_130(
    env: dict[str, str], chat: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Replayer._pre_turn
    calls = []

    def interrupted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:  # the third turn (the second user turn)
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Replayer, "_pre_turn", interrupted)
    result = invoke(env, "replay", str(chat), "--inline")
    assert result.exit_code == 130, result.output
    assert "interrupted after 2 of 3 turns" in result.stderr
    assert "Traceback" not in result.output
