"""The CLI with hostile input (issue 17 follow-up): stored text printed inert on one line, a NUL in a replay file
stores nothing, an LSN past 2**63 - 1 and an unbounded retention age are refused naming the field (exit 2)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memory_core.engines.sqlite.engine import SQLiteEngine
from memory_core.facts.store import FactStore
from memory_core.namespace import Namespace
from memory_core.query import ListRequest
from tests._cli import invoke

HOSTILE = "a\x1b]0;pwned\x07\nFORGED LINE\x1b[31m\u202e\x9b"
_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def facts_env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "MEMORY_CORE_EMBEDDER": "hash", "MEMORY_CORE_LAYOUT_ROOT": "team:acme"}


def _db(env: dict[str, str]) -> Path:
    return Path(env["MEMORY_CORE_ENGINE"].removeprefix("sqlite:///"))


def _inert(output: str) -> None:
    assert _RAW.search(output) is None, repr(output)
    assert not any(line.startswith("FORGED") for line in output.splitlines()), output


def test_fact_texts_and_reasons_are_printed_inert_on_one_line(facts_env: dict[str, str]) -> None:
    with SQLiteEngine(_db(facts_env)) as engine:
        held = FactStore(engine, Namespace.parse("team:acme")).learn(HOSTILE, key="ui.theme")
    listed = invoke(facts_env, "facts", "list")
    assert listed.exit_code == 0 and "a␛]0;pwned␇␤FORGED LINE␛[31m" in listed.stdout
    _inert(listed.stdout)
    retracted = invoke(facts_env, "retract", held.id, "--why", HOSTILE)
    assert retracted.exit_code == 0, retracted.output
    _inert(retracted.stdout)
    for args in (("log",), ("history", held.id), ("rollback", "1", "--why", HOSTILE)):
        result = invoke(facts_env, *args)
        assert result.exit_code == 0 and "␤FORGED LINE" in result.stdout, (args, result.output)
        _inert(result.stdout)


def test_a_replay_file_with_nul_on_line_7_stores_nothing(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "mid.jsonl"
    rows = [{"thread": "t1", "role": "user", "content": f"turn {i}"} for i in range(6)]
    rows.append({"thread": "t1", "role": "user", "content": "bad \x00 turn"})
    path.write_text("\n".join(json.dumps(r) for r in rows))
    result = invoke(env, "replay", str(path), "--inline")
    assert result.exit_code == 2 and "line 7.content" in result.output
    if _db(env).exists():
        with SQLiteEngine(_db(env)) as engine:
            assert engine.list(ListRequest(limit=10)).items == ()


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("log", "--since", "99999999999999999999"), "since"),
        (("log", "--since", str(2**63)), "since"),
        (("rollback", "99999999999999999999", "--why", "x"), "lsn"),  # the argument LSN (the library: to_lsn)
    ],
)
def test_an_lsn_past_2_63_is_refused_naming_the_field(
    facts_env: dict[str, str], args: tuple[str, ...], field: str
) -> None:
    assert invoke(facts_env, "facts", "set", "Likes tea").exit_code == 0
    result = invoke(facts_env, *args)
    assert result.exit_code == 2 and f"invalid request: {field}: must be an LSN" in result.output, result.output


@pytest.mark.parametrize("days", ["1000000", "1e9", "inf", "nan", "0"])
def test_an_unbounded_retention_age_is_a_configuration_error(facts_env: dict[str, str], days: str) -> None:
    assert invoke(facts_env, "facts", "set", "Likes tea").exit_code == 0
    result = invoke({**facts_env, "MEMORY_CORE_RETENTION_MAX_AGE_DAYS": days}, "retention", "--dry-run")
    assert result.exit_code == 2 and "MEMORY_CORE_RETENTION_MAX_AGE_DAYS" in result.output, result.output


def test_the_longest_retention_age_runs(facts_env: dict[str, str]) -> None:
    assert invoke(facts_env, "facts", "set", "Likes tea").exit_code == 0
    result = invoke({**facts_env, "MEMORY_CORE_RETENTION_MAX_AGE_DAYS": "36500"}, "retention", "--dry-run")
    assert result.exit_code == 0, result.output
