"""Dead letters: jobs that will not run, kept with their payload, error, attempts and time.

A job is dead-lettered when its payload is malformed (at once, never retried), when a transient error
(``EngineUnavailable``, broker errors) outlasts the retry limit, when it was started more times than allowed
(a poison loop through ``task_reject_on_worker_lost``), on any other error, and when a message never reaches a
task (not JSON, a foreign content type, an unknown task name). Redis has no dead-letter exchange (reference
``celery-reliability.md`` §1.16), so the store is ours: Redis (``P:dead`` sorted by time + ``P:dead:<id>``)
when the broker is Redis, else a table in ``var_dir/coordination.db``. At most ``Settings.dead_letter_max``
are kept; the oldest go first.

``memory-core dead-letters list|show ID|requeue ID|purge`` is the operator's view.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import redis

from memory_core._model import ContractModel, Timestamp
from memory_core.errors import EngineUnavailable, InvalidRequest, NotFound
from workers.coordination import LocalDb

__all__ = [
    "MAX_ECHOED_ID_CHARS",
    "MAX_PAYLOAD_CHARS",
    "DeadLetter",
    "DeadLetterStore",
    "RedisDeadLetters",
    "SqliteDeadLetters",
    "keep",
    "payload_of",
    "quote_id",
]

log = logging.getLogger(__name__)

MAX_PAYLOAD_CHARS = 1_000_000
"""Payload text kept per dead letter, characters; a longer raw payload is cut (and cannot be requeued)."""
MAX_ECHOED_ID_CHARS = 80
"""Characters of a given id or prefix an error message repeats (``quote_id``); a 100 KB argument is not echoed."""


def quote_id(ref: str) -> str:
    """``ref`` quoted for a message (``'901cdb17'``), cut at ``MAX_ECHOED_ID_CHARS`` with ``…`` and its length; pure."""
    if len(ref) <= MAX_ECHOED_ID_CHARS:
        return repr(ref)
    return f"{ref[:MAX_ECHOED_ID_CHARS]!r}… ({len(ref)} characters)"


class DeadLetter(ContractModel):
    """``{id, task?, queue?, payload, error, message, attempts, at, truncated?, engine?}``.

    Attributes:
        id: The job id (the Celery task id); requeue reuses it.
        task: The task name, when the message named one.
        queue: The queue it came from, when known.
        payload: The job JSON object, or the raw text when it was not a JSON object.
        error: The error class (``InvalidRequest``, ``EngineUnavailable``, ``ContentDisallowed``, …).
        message: The error message.
        attempts: How many times the job was started (the coordination store's count; 0 when it never started).
        at: When it was dead-lettered (UTC).
        truncated: True when the raw payload was cut at ``MAX_PAYLOAD_CHARS``.
        engine: The engine key the job was submitted for (its ``engine`` keyword argument), when it had one;
            ``requeue`` submits it for that engine again.
    """

    id: str
    task: str | None = None
    queue: str | None = None
    payload: Any = None
    error: str
    message: str
    attempts: int = 0
    at: Timestamp
    truncated: bool = False
    engine: str | None = None

    @classmethod
    def of(
        cls,
        job_id: str,
        error: BaseException | str,
        *,
        payload: Any = None,
        task: str | None = None,
        queue: str | None = None,
        attempts: int = 0,
        message: str | None = None,
        engine: str | None = None,
    ) -> DeadLetter:
        """A dead letter for ``job_id`` now; ``error`` is an exception or an error name."""
        name = error if isinstance(error, str) else type(error).__name__
        text = message if message is not None else (str(error) if not isinstance(error, str) else error)
        kept, truncated = payload_of(payload)
        return cls(
            id=job_id,
            task=task,
            queue=queue,
            payload=kept,
            error=name,
            message=text[:2000],
            attempts=attempts,
            at=datetime.now(UTC),
            truncated=truncated,
            engine=engine,
        )

    @classmethod
    def of_call(
        cls,
        job_id: str,
        error: BaseException | str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        task: str | None = None,
        queue: str | None = None,
        attempts: int = 0,
        message: str | None = None,
    ) -> DeadLetter:
        """A dead letter for a task call (the flow's own, or one Celery failed outside it).

        Its payload is the job's JSON when the call had one argument (a job task's), else ``{"args", "kwargs"}``;
        its engine is the ``engine`` keyword argument, when a string.
        """
        payload: Any = args[0] if len(args) == 1 else {"args": list(args), "kwargs": dict(kwargs)}
        engine = kwargs.get("engine")
        return cls.of(
            job_id,
            error,
            payload=payload,
            task=task,
            queue=queue,
            attempts=attempts,
            message=message,
            engine=engine if isinstance(engine, str) else None,
        )


def keep(store: Callable[[], DeadLetterStore], letter: DeadLetter, level: int = logging.WARNING) -> bool:
    """Keep a dead letter and log it as one line at ``level``: ``dead letter <id> (<task>): <error>: <message>``.

    The worker side's one way to keep a letter. No traceback (the letter keeps the payload); a store that cannot
    be opened or written gets the letter logged whole at CRITICAL, so it is not lost silently.

    Args:
        store: Gives the store (opening it may fail too, and is then handled like a failed write).
        letter: The letter.
        level: The log level of the line (``ERROR`` for a job the flow gave up on).

    Returns:
        True when the store kept it.
    """
    try:
        store().put(letter)
    except Exception as exc:
        log.critical("dead-letter store unreachable (%s); letter: %s", exc, letter.to_json())
        return False
    log.log(level, "dead letter %s (%s): %s: %s", letter.id, letter.task or "no task", letter.error, letter.message)
    return True


Letters = list[DeadLetter]
"""A list of dead letters (an alias: ``DeadLetterStore.list`` shadows the builtin inside the class)."""
Ids = list[str]
"""A list of letter ids (an alias, for the same reason)."""


def payload_of(payload: Any) -> tuple[Any, bool]:
    """A payload as stored: JSON values as they are, bytes decoded, anything over the cap cut to text."""
    if isinstance(payload, bytes | bytearray):
        payload = bytes(payload).decode("utf-8", errors="replace")
    try:
        text = payload if isinstance(payload, str) else json.dumps(payload)
    except (TypeError, ValueError):
        payload = text = repr(payload)
    if len(text) > MAX_PAYLOAD_CHARS:
        return text[:MAX_PAYLOAD_CHARS], True
    return payload, False


class DeadLetterStore:
    """The dead-letter store's operations; ``RedisDeadLetters`` and ``SqliteDeadLetters`` implement them."""

    def put(self, letter: DeadLetter) -> None:
        """Keep ``letter`` (replacing one with the same id), then drop the oldest past the cap."""
        raise NotImplementedError

    def list(self, limit: int = 50, offset: int = 0) -> Letters:
        """Newest first."""
        raise NotImplementedError

    def get(self, letter_id: str) -> DeadLetter:
        """One letter.

        Raises:
            NotFound: no dead letter has that id.
        """
        raise NotImplementedError

    def ids(self) -> Ids:
        """Every kept letter's id (at most ``dead_letter_max``), newest first."""
        raise NotImplementedError

    def resolve(self, ref: str) -> str:
        """The id of the letter ``ref`` names: its whole id, or a prefix only one kept id starts with.

        ``dead-letters list`` shows ids in full, but an operator types the first 8 characters (as with git).

        Raises:
            NotFound: no letter has that id or prefix.
            InvalidRequest: the prefix is blank, or several letters start with it (naming a few of them).
        """
        if not ref.strip():
            raise InvalidRequest("must not be blank", field="id")
        ids = self.ids()
        if ref in ids:
            return ref
        matches = [i for i in ids if i.startswith(ref)]
        if not matches:
            raise NotFound(f"no dead letter {quote_id(ref)}")
        if len(matches) > 1:
            shown = ", ".join(matches[:3]) + (", …" if len(matches) > 3 else "")
            raise InvalidRequest(
                f"{quote_id(ref)} starts {len(matches)} dead letters ({shown}); give more of it", field="id"
            )
        return matches[0]

    def delete(self, letter_id: str) -> bool:
        """Drop one letter; False when there was none."""
        raise NotImplementedError

    def purge(self) -> int:
        """Drop every letter; returns how many there were."""
        raise NotImplementedError

    def count(self) -> int:
        """How many letters are kept."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the store's connection (a store used after ``close`` opens a new one)."""


class RedisDeadLetters(DeadLetterStore):
    """Dead letters in Redis: ``P:dead`` (id → time, sorted) and ``P:dead:<id>`` (the letter's JSON).

    Args:
        client: A decoding ``redis.Redis``.
        prefix: ``Settings.redis_prefix``.
        max_kept: ``Settings.dead_letter_max``.
    """

    def __init__(self, client: redis.Redis[str], prefix: str, max_kept: int) -> None:
        self.client = client
        self.index = f"{prefix}:dead"
        self.max_kept = max_kept

    def _item(self, letter_id: str) -> str:
        return f"{self.index}:{letter_id}"

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except redis.RedisError as exc:
            raise EngineUnavailable(f"dead-letter store (redis): {exc}") from None

    def put(self, letter: DeadLetter) -> None:
        """See ``DeadLetterStore.put``."""

        def write() -> None:
            pipe = self.client.pipeline(transaction=True)
            pipe.set(self._item(letter.id), letter.to_json())
            pipe.zadd(self.index, {letter.id: letter.at.timestamp()})
            pipe.execute()
            extra = self.client.zcard(self.index) - self.max_kept
            if extra > 0:
                for member, _ in self.client.zpopmin(self.index, extra):
                    self.client.delete(self._item(member))

        self._call(write)

    def list(self, limit: int = 50, offset: int = 0) -> Letters:
        """See ``DeadLetterStore.list``."""
        ids = cast(list[str], self._call(self.client.zrevrange, self.index, offset, offset + limit - 1))
        if not ids:
            return []
        raw = cast(list[str | None], self._call(self.client.mget, [self._item(i) for i in ids]))
        return [DeadLetter.model_validate_json(r) for r in raw if r is not None]

    def ids(self) -> Ids:
        """See ``DeadLetterStore.ids``."""
        return [str(i) for i in cast(Ids, self._call(self.client.zrevrange, self.index, 0, -1))]

    def get(self, letter_id: str) -> DeadLetter:
        """See ``DeadLetterStore.get``."""
        raw = cast(str | None, self._call(self.client.get, self._item(letter_id)))
        if raw is None:
            raise NotFound(f"no dead letter {quote_id(letter_id)}")
        return DeadLetter.model_validate_json(raw)

    def delete(self, letter_id: str) -> bool:
        """See ``DeadLetterStore.delete``."""

        def drop() -> bool:
            pipe = self.client.pipeline(transaction=True)
            pipe.zrem(self.index, letter_id)
            pipe.delete(self._item(letter_id))
            removed, _ = pipe.execute()
            return bool(removed)

        return bool(self._call(drop))

    def purge(self) -> int:
        """See ``DeadLetterStore.purge``."""

        def drop_all() -> int:
            ids = self.client.zrange(self.index, 0, -1)
            pipe = self.client.pipeline(transaction=True)
            for i in ids:
                pipe.delete(self._item(i))
            pipe.delete(self.index)
            pipe.execute()
            return len(ids)

        return int(self._call(drop_all))

    def count(self) -> int:
        """See ``DeadLetterStore.count``."""
        return int(self._call(self.client.zcard, self.index))

    def close(self) -> None:
        """See ``DeadLetterStore.close``."""
        self.client.close()


class SqliteDeadLetters(DeadLetterStore):
    """Dead letters in a SQLite table (server-less setup).

    Args:
        path: The database file (``var_dir/coordination.db``).
        max_kept: ``Settings.dead_letter_max``.
    """

    def __init__(self, path: Path, max_kept: int) -> None:
        self.path = path
        self.max_kept = max_kept
        self._store = LocalDb(path, "dead-letter store")
        self._run("CREATE TABLE IF NOT EXISTS dead_letters (id TEXT PRIMARY KEY, at REAL NOT NULL, letter TEXT)")

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        return self._store.execute(sql, params)

    def put(self, letter: DeadLetter) -> None:
        """See ``DeadLetterStore.put``."""
        self._run(
            "INSERT OR REPLACE INTO dead_letters (id, at, letter) VALUES (?, ?, ?)",
            (letter.id, letter.at.timestamp(), letter.to_json()),
        )
        self._run(
            "DELETE FROM dead_letters WHERE id NOT IN (SELECT id FROM dead_letters ORDER BY at DESC LIMIT ?)",
            (self.max_kept,),
        )

    def list(self, limit: int = 50, offset: int = 0) -> Letters:
        """See ``DeadLetterStore.list``."""
        rows = self._run("SELECT letter FROM dead_letters ORDER BY at DESC LIMIT ? OFFSET ?", (limit, offset))
        return [DeadLetter.model_validate_json(r[0]) for r in rows.fetchall()]

    def ids(self) -> Ids:
        """See ``DeadLetterStore.ids``."""
        return [str(r[0]) for r in self._run("SELECT id FROM dead_letters ORDER BY at DESC").fetchall()]

    def get(self, letter_id: str) -> DeadLetter:
        """See ``DeadLetterStore.get``."""
        row = self._run("SELECT letter FROM dead_letters WHERE id = ?", (letter_id,)).fetchone()
        if row is None:
            raise NotFound(f"no dead letter {quote_id(letter_id)}")
        return DeadLetter.model_validate_json(row[0])

    def delete(self, letter_id: str) -> bool:
        """See ``DeadLetterStore.delete``."""
        return self._run("DELETE FROM dead_letters WHERE id = ?", (letter_id,)).rowcount > 0

    def purge(self) -> int:
        """See ``DeadLetterStore.purge``."""
        return self._run("DELETE FROM dead_letters").rowcount

    def count(self) -> int:
        """See ``DeadLetterStore.count``."""
        return int(self._run("SELECT COUNT(*) FROM dead_letters").fetchone()[0])

    def close(self) -> None:
        """See ``DeadLetterStore.close``."""
        self._store.close()
