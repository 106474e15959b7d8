"""Dead letters: jobs that will not run, kept with their payload, error, attempts and time (docs/jobs.md).

Redis has no dead-letter exchange (reference ``celery-reliability.md`` §1.16): ``RedisDeadLetters`` beside a Redis
broker, else ``SqliteDeadLetters`` in ``var_dir``; the oldest go first past ``Settings.dead_letter_max``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import kombu.exceptions
import redis
from celery.exceptions import SoftTimeLimitExceeded

from memory_core._model import ContractModel, Timestamp
from memory_core.errors import EngineUnavailable, InvalidRequest, NotFound
from memory_core.lifecycle.caps import cap_text
from workers.coordination import LocalDb, RedisCalls

__all__ = [
    "MAX_PAYLOAD_CHARS",
    "TRANSIENT",
    "DeadLetter",
    "DeadLetterStore",
    "RedisDeadLetters",
    "SqliteDeadLetters",
    "keep",
    "quote_id",
]

log = logging.getLogger(__name__)

TRANSIENT: tuple[type[BaseException], ...] = (
    EngineUnavailable,  # an engine, or a coordination store, that is away (both raise it)
    SoftTimeLimitExceeded,  # a build's finished scopes are kept, so the retry resumes
    kombu.exceptions.OperationalError,
    kombu.exceptions.ConnectionError,
    redis.RedisError,
    OSError,  # ConnectionError, TimeoutError, a socket's errors
)
"""The one list of errors that say "try again later"; anything else is the job's own fault (dead-lettered)."""

MAX_PAYLOAD_CHARS = 1_000_000  # payload text kept per letter; a longer one is cut (and cannot be requeued)
MAX_MESSAGE_CHARS = 2000  # of the error's text kept per letter, cut as the payload is
MAX_ECHOED_ID_CHARS = 80  # of an id or prefix an error message repeats


def quote_id(ref: str) -> str:
    """``ref`` quoted for a message (``'901cdb17'``), cut at ``MAX_ECHOED_ID_CHARS`` with its length."""
    if len(ref) <= MAX_ECHOED_ID_CHARS:
        return repr(ref)
    return f"{ref[:MAX_ECHOED_ID_CHARS]!r}… ({len(ref)} characters)"


def _payload(payload: Any) -> tuple[Any, bool]:
    """A payload as stored, and whether it was cut: JSON values as they are, bytes decoded, past the cap cut text.

    A cut follows the one cap rule (``cap_text``, docs/limits.md): at most ``MAX_PAYLOAD_CHARS`` characters, never
    part of a whitespace-delimited run (a credential cut in half would slip past the scrubber), then the marker.
    """
    if isinstance(payload, bytes | bytearray):
        payload = bytes(payload).decode("utf-8", errors="replace")
    try:
        text = payload if isinstance(payload, str) else json.dumps(payload)
    except (TypeError, ValueError):
        payload = text = repr(payload)
    if len(text) > MAX_PAYLOAD_CHARS:
        return cap_text(text, MAX_PAYLOAD_CHARS), True
    return payload, False


class DeadLetter(ContractModel):
    """One dead letter; its fields, and how ``requeue`` uses ``id`` and ``engine``: docs/jobs.md ("Dead letters").

    ``error`` is the error's class name (``InvalidRequest``, ``ContentDisallowed``, …), ``message`` its text.
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
        kept, truncated = _payload(payload)
        text = message if message is not None else str(error)
        return cls(
            id=job_id,
            task=task,
            queue=queue,
            payload=kept,
            error=name,
            message=cap_text(text, MAX_MESSAGE_CHARS),
            attempts=attempts,
            at=datetime.now(UTC),
            truncated=truncated,
            engine=engine,
        )

    @classmethod
    def of_call(
        cls, job_id: str, error: BaseException | str, args: Sequence[Any], kwargs: Mapping[str, Any], **fields: Any
    ) -> DeadLetter:
        """A dead letter for a task call: its one argument (else ``{args, kwargs}``), its ``engine`` keyword."""
        payload: Any = args[0] if len(args) == 1 else {"args": list(args), "kwargs": dict(kwargs)}
        engine = kwargs.get("engine")
        return cls.of(job_id, error, payload=payload, engine=engine if isinstance(engine, str) else None, **fields)


def keep(store: Callable[[], DeadLetterStore], letter: DeadLetter, level: int = logging.WARNING) -> bool:
    """Keep a dead letter and log it on one line (True), or log it whole at CRITICAL when the store fails."""
    try:
        store().put(letter)
    except Exception as exc:
        log.critical("dead-letter store unreachable (%s); letter: %s", exc, letter.to_json())
        return False
    log.log(level, "dead letter %s (%s): %s: %s", letter.id, letter.task or "no task", letter.error, letter.message)
    return True


Letters = list[DeadLetter]  # aliases: ``DeadLetterStore.list`` shadows the builtin inside the class
Ids = list[str]


class _Letters:
    """What both dead-letter stores share: finding a letter by a prefix of its id."""

    def ids(self) -> Ids:
        """Every kept letter's id, newest first."""
        raise NotImplementedError

    def resolve(self, ref: str) -> str:
        """The id of the letter ``ref`` names: its id, or a prefix of only that id (as with git).

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


def _found(raw: str | None, letter_id: str) -> DeadLetter:
    if raw is None:
        raise NotFound(f"no dead letter {quote_id(letter_id)}")
    return DeadLetter.model_validate_json(raw)


class RedisDeadLetters(_Letters, RedisCalls):
    """Dead letters in Redis (``P`` = ``prefix``): ``P:dead`` (id → time, sorted) and ``P:dead:<id>`` (the JSON)."""

    what = "dead-letter store"

    def __init__(self, client: redis.Redis[str], prefix: str, max_kept: int) -> None:
        self.client, self.index, self.max_kept = client, f"{prefix}:dead", max_kept

    def _item(self, letter_id: str) -> str:
        return f"{self.index}:{letter_id}"

    def put(self, letter: DeadLetter) -> None:
        """See ``SqliteDeadLetters.put``."""
        self._pipeline(
            lambda pipe: (
                pipe.set(self._item(letter.id), letter.to_json()),
                pipe.zadd(self.index, {letter.id: letter.at.timestamp()}),
            ),
            transaction=True,
        )
        extra = int(self._call(self.client.zcard, self.index)) - self.max_kept
        if extra > 0:
            for member, _ in self._call(self.client.zpopmin, self.index, extra):
                self._call(self.client.delete, self._item(member))

    def list(self, limit: int = 50, offset: int = 0) -> Letters:
        """See ``SqliteDeadLetters.list``."""
        ids = cast(Ids, self._call(self.client.zrevrange, self.index, offset, offset + limit - 1))
        raw = cast(list[str | None], self._call(self.client.mget, [self._item(i) for i in ids])) if ids else []
        return [DeadLetter.model_validate_json(r) for r in raw if r is not None]

    def ids(self) -> Ids:
        """See ``SqliteDeadLetters.ids``."""
        return [str(i) for i in cast(Ids, self._call(self.client.zrevrange, self.index, 0, -1))]

    def get(self, letter_id: str) -> DeadLetter:
        """See ``SqliteDeadLetters.get``."""
        return _found(self._call(self.client.get, self._item(letter_id)), letter_id)

    def delete(self, letter_id: str) -> bool:
        """See ``SqliteDeadLetters.delete``."""
        got = self._pipeline(lambda pipe: (pipe.zrem(self.index, letter_id), pipe.delete(self._item(letter_id))), True)
        return bool(got[0])

    def purge(self) -> int:
        """See ``SqliteDeadLetters.purge``."""
        ids = cast(Ids, self._call(self.client.zrange, self.index, 0, -1))
        self._pipeline(lambda pipe: [pipe.delete(self._item(i)) for i in ids] + [pipe.delete(self.index)], True)
        return len(ids)

    def count(self) -> int:
        """See ``SqliteDeadLetters.count``."""
        return int(self._call(self.client.zcard, self.index))


class SqliteDeadLetters(_Letters):
    """Dead letters in a SQLite table of ``path`` (``var_dir/coordination.db``), ``max_kept`` at most."""

    def __init__(self, path: Path, max_kept: int) -> None:
        self.path, self.max_kept = path, max_kept
        self._store = LocalDb(path, "dead-letter store")
        self._run = self._store.execute
        self._run("CREATE TABLE IF NOT EXISTS dead_letters (id TEXT PRIMARY KEY, at REAL NOT NULL, letter TEXT)")

    def put(self, letter: DeadLetter) -> None:
        """Keep ``letter`` (replacing one with the same id), then drop the oldest past the cap."""
        self._run(
            "INSERT OR REPLACE INTO dead_letters (id, at, letter) VALUES (?, ?, ?)",
            (letter.id, letter.at.timestamp(), letter.to_json()),
        )
        self._run(
            "DELETE FROM dead_letters WHERE id NOT IN (SELECT id FROM dead_letters ORDER BY at DESC LIMIT ?)",
            (self.max_kept,),
        )

    def list(self, limit: int = 50, offset: int = 0) -> Letters:
        """Newest first."""
        rows = self._run("SELECT letter FROM dead_letters ORDER BY at DESC LIMIT ? OFFSET ?", (limit, offset))
        return [DeadLetter.model_validate_json(r[0]) for r in rows.fetchall()]

    def ids(self) -> Ids:
        """Every kept letter's id, newest first."""
        return [str(r[0]) for r in self._run("SELECT id FROM dead_letters ORDER BY at DESC").fetchall()]

    def get(self, letter_id: str) -> DeadLetter:
        """One letter.

        Raises:
            NotFound: no dead letter has that id.
        """
        row = self._run("SELECT letter FROM dead_letters WHERE id = ?", (letter_id,)).fetchone()
        return _found(None if row is None else row[0], letter_id)

    def delete(self, letter_id: str) -> bool:
        """Drop one letter; False when there was none."""
        return self._run("DELETE FROM dead_letters WHERE id = ?", (letter_id,)).rowcount > 0

    def purge(self) -> int:
        """Drop every letter; returns how many there were."""
        return self._run("DELETE FROM dead_letters").rowcount

    def count(self) -> int:
        """How many letters are kept."""
        return int(self._run("SELECT COUNT(*) FROM dead_letters").fetchone()[0])

    def close(self) -> None:
        """Release the store's connection (a store used after ``close`` opens a new one)."""
        self._store.close()


DeadLetterStore = RedisDeadLetters | SqliteDeadLetters
"""A dead-letter store: Redis's beside a Redis broker, else the server-less SQLite one."""
