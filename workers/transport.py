"""Guarded kombu transports, and the server-less setup under ``var_dir``.

``SafeRedisTransport`` and ``SafeFilesystemTransport`` are kombu's Redis and filesystem transports with one
change: a queue entry that is not JSON, or not a message envelope, is dead-lettered and skipped instead of
raising in the worker's event loop (see ``workers.poison``). ``workers.config`` selects them through Celery's
``broker_transport`` for ``redis://``/``rediss://`` and for the server-less default.

Server-less (no ``MEMORY_CORE_BROKER_URL``): kombu's ``filesystem://`` transport with its folders under
``var_dir/broker/`` and Celery's ``file://`` result backend under ``var_dir/results/``. What it cannot do
(reference ``celery-reliability.md`` §4.1): a message file is deleted when a worker fetches it, so a worker
killed mid-job loses that job (no visibility timeout, no redelivery); one machine only (a shared folder);
polling every 0.2 s; no priorities or TTLs. Use Redis for anything that must not lose a job.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from queue import Empty
from time import monotonic
from typing import Any

import redis
from celery.backends.filesystem import FilesystemBackend
from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.transport import redis as kombu_redis
from kombu.utils import json as kombu_json

from workers.poison import dead_letter_raw, envelope_problem

__all__ = ["AtomicFilesystemBackend", "SafeFilesystemTransport", "SafeRedisTransport"]

_DECODE_ERRORS = (ValueError, RecursionError)
"""What kombu's ``json.loads`` of a queue entry raises on a bad entry: ``JSONDecodeError`` and
``UnicodeDecodeError`` (both ``ValueError``s), and ``RecursionError`` for JSON nested deeper than the decoder's
recursion limit (an entry ``[[[…]]]`` 100,000 levels deep, issue 5 audit)."""


def _raw_of(exc: BaseException) -> Any:
    """The entry's text when the error carries it (a ``RecursionError`` does not: the letter says so)."""
    if isinstance(exc, json.JSONDecodeError):
        return exc.doc
    if isinstance(exc, UnicodeDecodeError):
        return exc.object
    return None


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "not JSON: nested deeper than the decoder's recursion limit (RecursionError; the entry was not kept)"
    return f"not JSON ({type(exc).__name__}: {exc})"


class _GuardedDelivery:
    """Transport mixin: check each decoded entry before kombu builds a ``Message`` from it."""

    def _deliver(self, message: Any, queue: str) -> None:
        problem = envelope_problem(message)
        if problem is not None:
            dead_letter_raw(message, queue, problem)
            return
        super()._deliver(message, queue)  # type: ignore[misc]


class _GuardedGet:
    """Channel mixin: an entry that is not JSON (kombu's ``_get`` decodes it) is dead-lettered and skipped."""

    def _get(self, queue: str, timeout: Any = None) -> Any:
        try:
            parent: Any = super()
            return parent._get(queue)
        except _DECODE_ERRORS as exc:
            dead_letter_raw(_raw_of(exc), queue, _why(exc))
            raise Empty() from None


class _SafeRedisChannel(_GuardedGet, kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        # Celery 5.7's consumer, on a lost connection, calls connection.collect() (which drops the transport's
        # client) and then connection.close(), whose channel close restores unacked messages through a new
        # pool built from that client: AttributeError, which is not a connection error, so the worker dies
        # ("Unrecoverable error: 'NoneType' object has no attribute 'hostname'", seen with a late-ack message
        # in flight when Redis stopped). Raising a connection error lets Celery ignore it and reconnect; the
        # message stays in Redis's unacked hash and the visibility sweep brings it back.
        if self.connection.client is None:
            raise redis.ConnectionError("the broker connection is closed")
        parent: Any = super()
        return parent._connparams(asynchronous=asynchronous)

    def _brpop_read(self, **options: Any) -> bool:
        try:
            parent: Any = super()
            return bool(parent._brpop_read(**options))
        except _DECODE_ERRORS as exc:
            dead_letter_raw(_raw_of(exc), None, _why(exc))
            return True


class SafeRedisTransport(_GuardedDelivery, kombu_redis.Transport):
    """kombu's Redis transport; malformed entries are dead-lettered, never raised in the event loop."""

    Channel = _SafeRedisChannel


_dumps: Callable[[Any], str] = kombu_json.dumps  # kombu's JSON (its types), as its own _put writes
_loads: Callable[[str], Any] = kombu_json.loads


class _AtomicFiles:
    """Filesystem channel mixin: a queue entry appears whole, and exactly one consumer takes it.

    kombu 5.7's ``_put`` opens ``<ms>_<uuid>.<queue>.msg`` and then writes it, and its ``_get`` takes any such
    file without a lock: a consumer polling in between takes an empty or partial entry, which fails to decode
    and would be dead-lettered, losing the job. Here an entry is written under a name ``_get`` skips (a leading
    dot) and renamed into place (``rename`` is atomic within a folder, POSIX ``rename(2)``). ``_get`` renames
    the entry into ``processed_folder`` (a sibling on the same filesystem) rather than ``shutil.move`` to the
    system temp folder, which is a copy when that is another filesystem: of two consumers racing for one file,
    one rename wins, the other finds it gone and moves on.
    """

    data_folder_in: str
    data_folder_out: str
    processed_folder: str
    store_processed: bool

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{name}.part")
        try:
            with open(partial, "wb") as f:
                f.write(_dumps(message).encode())
            os.rename(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _get(self, queue: str, timeout: Any = None) -> Any:
        wanted = f"{queue}.msg"
        os.makedirs(self.processed_folder, exist_ok=True)  # else every rename below fails as if taken
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != wanted:  # kombu's rule; skips ".<name>.part" too
                continue
            taken = os.path.join(self.processed_folder, name)
            try:
                os.rename(os.path.join(self.data_folder_in, name), taken)
            except FileNotFoundError:  # another consumer took it
                continue
            try:
                with open(taken, "rb") as f:
                    payload = f.read()
                if not self.store_processed:
                    os.remove(taken)
            except OSError as exc:
                raise ChannelError(f"Cannot read file {taken!r} from queue.") from exc
            return _loads(payload.decode())
        raise Empty()


# kombu's two bases name _put's arguments differently; _AtomicFiles takes both call shapes' positional form
class _SafeFilesystemChannel(_GuardedGet, _AtomicFiles, filesystem.Channel):  # type: ignore[misc]
    pass


class SafeFilesystemTransport(_GuardedDelivery, filesystem.Transport):
    """kombu's filesystem transport (server-less); malformed entries are dead-lettered and skipped."""

    Channel = _SafeFilesystemChannel


class AtomicFilesystemBackend(FilesystemBackend):  # type: ignore[misc]  # Celery ships no types
    """Celery's ``file://`` result backend, each result file replaced whole.

    Celery 5's ``FilesystemBackend.set`` truncates the file and then writes it: a reader polling in between reads
    an empty or partial result, and two writers of one task's result (its ``STARTED`` and ``SUCCESS`` states, or a
    redelivered twin) interleave into a file that never decodes again (seen as ``JSONDecodeError: Extra data``
    while ``make demo`` waited for its jobs). Here a result is written to a sibling temporary file and renamed
    over the old one (``os.replace``, atomic within a folder: POSIX ``rename(2)``), so a reader sees the old
    result or the new one, whole.
    """

    def set(self, key: Any, value: Any) -> None:  # noqa: D102 (Celery's KeyValueStoreBackend.set)
        final = os.fsencode(self._filename(key))  # Celery keeps the folder as bytes
        partial = final + f".{os.getpid()}.{uuid.uuid4().hex}.part".encode()
        with self.open(partial, "wb") as outfile:
            outfile.write(value if isinstance(value, bytes) else str(value).encode())
        os.replace(partial, final)
