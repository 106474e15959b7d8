"""Dead-letter stores (Redis and SQLite), the poison envelope check, and the outbox."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core.errors import InvalidRequest, NotFound
from memory_core.lifecycle.caps import TRUNCATION_MARKER
from workers.coordination import redis_client
from workers.dead_letters import MAX_PAYLOAD_CHARS, DeadLetter, DeadLetterStore, RedisDeadLetters, SqliteDeadLetters
from workers.queue import Outbox, OutboxEntry
from workers.transport import envelope_problem


@pytest.fixture(params=["sqlite", "redis"])
def letters(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DeadLetterStore]:
    if request.param == "sqlite":
        yield SqliteDeadLetters(tmp_path / "c.db", max_kept=3)
        return
    prefix = f"mc-unit-{uuid.uuid4().hex[:8]}"
    client = redis_client(request.getfixturevalue("workers_redis"), 5.0, 25)
    yield RedisDeadLetters(client, prefix, max_kept=3)
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)


def letter(job_id: str, payload: Any = None) -> DeadLetter:
    time.sleep(0.002)  # distinct times, so "newest first" is well defined
    return DeadLetter.of(job_id, InvalidRequest("must not be empty", field="documents"), payload=payload, attempts=1)


def test_dead_letters_keep_payload_error_attempts_and_time(letters: DeadLetterStore) -> None:
    job = {"job": "ingest_brain", "documents": []}
    letters.put(letter("a", job))
    got = letters.get("a")
    assert got.payload == job and got.error == "InvalidRequest" and got.attempts == 1
    assert "documents" in got.message and got.at.tzinfo is not None
    with pytest.raises(NotFound):
        letters.get("missing")


def test_dead_letters_list_newest_first_drop_the_oldest_past_the_cap_and_purge(letters: DeadLetterStore) -> None:
    for name in ("a", "b", "c", "d"):
        letters.put(letter(name))
    assert [x.id for x in letters.list()] == ["d", "c", "b"]
    assert letters.count() == 3
    assert letters.delete("c") and not letters.delete("c")
    assert letters.purge() == 2 and letters.count() == 0


SECRET = "sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ1234567890abcd"
_MARKER_MAX = len(TRUNCATION_MARKER.format(dropped=10**7, total=10**7))


def test_a_huge_raw_payload_is_cut_and_marked() -> None:
    cut = DeadLetter.of("x", "MalformedMessage", payload="z" * (MAX_PAYLOAD_CHARS + 10))
    assert cut.truncated and cut.payload == TRUNCATION_MARKER.format(dropped=10**6 + 10, total=10**6 + 10).lstrip()
    words = DeadLetter.of("w", "MalformedMessage", payload="word " * (MAX_PAYLOAD_CHARS // 5 + 2))
    assert words.truncated and words.payload.startswith("word word ") and "characters left out]" in words.payload
    assert len(words.payload) <= MAX_PAYLOAD_CHARS + _MARKER_MAX
    raw = DeadLetter.of("y", "MalformedMessage", payload=b"\xff\xfebytes")
    assert isinstance(raw.payload, str) and not raw.truncated


@pytest.mark.parametrize("inside", [1, 3, 20, len(SECRET) - 1])
@pytest.mark.parametrize("as_json", [False, True], ids=["raw", "json"])
def test_a_payload_cut_at_the_cap_never_keeps_part_of_a_secret(inside: int, as_json: bool) -> None:
    # the cap falls after ``inside`` characters of the secret: the whole whitespace-delimited run goes (cap_text)
    head = '{"text": "' if as_json else ""  # json.dumps(payload) opens with it
    filler = ("U " * MAX_PAYLOAD_CHARS)[-(MAX_PAYLOAD_CHARS - inside - len(head)) :]  # ends with a space
    payload: Any = {"text": filler + SECRET + " tail"} if as_json else filler + SECRET + " tail"
    payload_text = payload if isinstance(payload, str) else json.dumps(payload)
    assert payload_text.index(SECRET) == MAX_PAYLOAD_CHARS - inside  # the cut splits the secret
    cut = DeadLetter.of("s", "MalformedMessage", payload=payload)
    assert cut.truncated and isinstance(cut.payload, str)
    assert SECRET[:3] not in cut.payload  # not even "sk-"
    assert cut.payload.endswith(" characters left out]") and len(cut.payload) <= MAX_PAYLOAD_CHARS + _MARKER_MAX


def test_an_error_message_cut_never_keeps_part_of_a_secret() -> None:
    message = "U" * 1990 + " " + SECRET
    cut = DeadLetter.of("m", "InvalidRequest", message=message)
    assert SECRET[:3] not in cut.message and cut.message.startswith("U" * 1990) and "left out]" in cut.message


GOOD = {
    "body": base64.b64encode(b"[[{}], {}, {}]").decode(),
    "content-type": "application/json",
    "content-encoding": "utf-8",
    "headers": {"task": "memory.build_beliefs", "id": "abc"},
    "properties": {"delivery_tag": "t1", "body_encoding": "base64", "delivery_info": {"routing_key": "q"}},
}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda m: [1, 2], "JSON list"),
        (lambda m: {**m, "properties": {}}, "delivery_tag"),
        (lambda m: {**m, "headers": "x"}, "headers"),
        (lambda m: {**m, "content-type": 3}, "content-type"),
        (lambda m: {**m, "body": 12}, "body is not a string"),
        (lambda m: {**m, "body": "abc"}, "base64"),
        (lambda m: {**m, "headers": {"task": "memory.build_beliefs"}}, "headers.id"),
        (lambda m: {**m, "properties": {**m["properties"], "delivery_info": 5}}, "delivery_info"),
        (lambda m: {**m, "properties": {**m["properties"], "body_encoding": "rot13"}}, "body_encoding"),
        (lambda m: {**m, "properties": {**m["properties"], "body_encoding": "BASE64"}}, "body_encoding"),
    ],
)
def test_envelopes_kombu_would_crash_on_are_named(change: Any, problem: str) -> None:
    assert envelope_problem(GOOD) is None
    found = envelope_problem(change(GOOD))
    assert found is not None and problem in found


def test_a_plain_text_body_encoding_is_a_valid_envelope() -> None:
    plain = {**GOOD, "body": "[[{}], {}, {}]", "properties": {**GOOD["properties"], "body_encoding": "UTF-8"}}
    assert envelope_problem(plain) is None


def test_a_letter_is_found_by_its_id_or_a_prefix_only_it_has(letters: DeadLetterStore) -> None:
    letters.put(letter("901cdb17-aaaa"))
    letters.put(letter("901cdb17-bbbb"))
    letters.put(letter("77f0"))
    assert letters.resolve("77f0") == "77f0"
    assert letters.resolve("901cdb17-b") == "901cdb17-bbbb"
    with pytest.raises(InvalidRequest, match="starts 2 dead letters"):
        letters.resolve("901cdb17")
    with pytest.raises(NotFound, match="no dead letter 'zz'"):
        letters.resolve("zz")


def test_a_letter_keeps_the_engine_its_job_was_submitted_for(letters: DeadLetterStore) -> None:
    letters.put(DeadLetter.of("e1", "WrongEngine", payload={"job": "x"}, engine="0123456789abcdef"))
    assert letters.get("e1").engine == "0123456789abcdef"


def test_letters_for_messages_without_an_id_never_replace_each_other() -> None:
    from workers.transport import letter_id

    made = {letter_id(None, "raw"), letter_id(None, "raw"), letter_id(5, "raw"), letter_id("  ", "raw")}
    assert len(made) == 4 and all(i.startswith("raw-") for i in made)
    assert letter_id("job-7", "raw") == "job-7"


def test_a_letter_id_follows_the_job_id_rule_so_the_letter_can_be_requeued() -> None:
    from workers.kinds import MAX_JOB_ID_CHARS, check_job_id
    from workers.transport import letter_id

    for bad in ("job\x07bell", "tab\tid", "del\x7f", "x" * (MAX_JOB_ID_CHARS + 1)):
        made = letter_id(bad, "raw")
        assert made.startswith("raw-") and check_job_id(made) == made
    assert letter_id("x" * MAX_JOB_ID_CHARS, "raw") == "x" * MAX_JOB_ID_CHARS


def entry(job_id: str, created: float | None = None) -> OutboxEntry:
    return OutboxEntry(id=job_id, task="memory.ingest_brain", payload="{}", created=created or time.time())


def test_outbox_rows_are_claimed_oldest_first_and_marked_once(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox.db")
    box.put(entry("b", 2.0))
    box.put(entry("a", 1.0))
    box.put(entry("a", 1.0))  # the same id twice is kept once
    assert box.waiting() == 2
    claimed = box.claim("me")
    assert [e.id for e in claimed] == ["a", "b"]
    assert box.claim("other") == []  # a live claim is not handed out twice
    assert box.delivered("a", "me") and not box.delivered("a", "me")
    assert not box.delivered("b", "other")  # not its claim
    box.release("b", "me", "broker down")
    assert [e.tries for e in box.claim("other")] == [1]
    assert box.waiting() == 1


def test_an_abandoned_claim_is_taken_over_after_its_ttl(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox.db", claim_ttl_s=0.2)
    box.put(entry("a"))
    assert [e.id for e in box.claim("crashed")] == ["a"]
    time.sleep(0.3)
    assert [e.id for e in box.claim("rescuer")] == ["a"]
    assert not box.delivered("a", "crashed")  # the crashed drainer can no longer mark it


def test_concurrent_drainers_never_claim_the_same_row(tmp_path: Path) -> None:
    path = tmp_path / "outbox.db"
    box = Outbox(path)
    for i in range(200):
        box.put(entry(f"j{i:03d}", float(i)))
    got: dict[str, list[str]] = {}

    def drain(name: str) -> None:
        mine = Outbox(path)
        got[name] = []
        while batch := mine.claim(name, limit=7):
            for e in batch:
                assert mine.delivered(e.id, name)
                got[name].append(e.id)

    threads = [threading.Thread(target=drain, args=(f"d{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ids = [i for batch in got.values() for i in batch]
    assert sorted(ids) == [f"j{i:03d}" for i in range(200)]
    assert box.waiting() == 0 and box.prune(older_than_s=0) == 200


def test_a_per_process_value_is_opened_once_per_process_and_again_in_a_forked_child() -> None:
    import os

    from workers.execution import PerProcess

    opened: list[object] = []

    def open_one() -> object:
        opened.append(object())
        return opened[-1]

    holder = PerProcess(open_one)
    assert holder.get() is holder.get() and len(opened) == 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own value, not the parent's copy
        ok = holder.get() is not opened[0] and holder.get() is holder.get() and len(opened) == 2
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.close(write)
    closed: list[object] = []
    holder.reset(closed.append)
    assert closed == [opened[0]] and holder.get() is not opened[0] and len(opened) == 2


def test_an_outbox_written_before_faults_were_counted_keeps_its_rows(tmp_path: Path) -> None:
    import sqlite3

    old = sqlite3.connect(tmp_path / "outbox.db")
    old.executescript(
        "CREATE TABLE outbox (id TEXT PRIMARY KEY, task TEXT NOT NULL, payload TEXT NOT NULL, created REAL NOT NULL,"
        " tries INTEGER NOT NULL DEFAULT 0, last_error TEXT, claimed_by TEXT, claimed_at REAL, delivered_at REAL);"
        "INSERT INTO outbox (id, task, payload, created, tries) VALUES ('kept', 'memory.ingest_brain', '{}', 1.0, 2);"
    )
    old.close()
    box = Outbox(tmp_path / "outbox.db")
    (row,) = box.claim("me")
    assert (row.id, row.tries, row.faults) == ("kept", 2, 0)
    box.release("kept", "me", "bad payload", fault=True)
    assert [(e.tries, e.faults) for e in Outbox(tmp_path / "outbox.db").claim("again")] == [(3, 1)]


@pytest.mark.redis
def test_the_session_cleanup_deletes_its_own_job_results_and_no_one_elses(workers_redis: str) -> None:
    import json

    import redis
    from flowkit import cleanup

    client = redis.Redis.from_url(workers_redis, decode_responses=True)
    mine, theirs = uuid.uuid4().hex[:8], uuid.uuid4().hex[:8]
    keys = {f"celery-task-meta-{uuid.uuid4()}": tag for tag in (mine, mine, theirs)}
    for key, tag in keys.items():
        client.set(key, json.dumps({"status": "SUCCESS", "queue": f"{tag}-beliefs", "worker": "w@h"}), ex=60)
    by_worker = f"celery-task-meta-{uuid.uuid4()}"
    client.set(by_worker, json.dumps({"status": "SUCCESS", "queue": None, "worker": f"main-{mine}@h"}), ex=60)
    cleanup(workers_redis, mine)
    left = {key for key in [*keys, by_worker] if client.exists(key)}
    assert left == {key for key, tag in keys.items() if tag == theirs}
    client.delete(*left)
    client.close()
