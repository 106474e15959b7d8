"""Malformed messages never stop a worker: guarded kombu transports and consumer, and their dead letters.

kombu decodes each queue entry inside the worker's event loop, where an entry that is not JSON (or nested too
deep), or not a message envelope, stops the whole worker (kombu 5.7). The guarded transports check each entry
(``envelope_problem``) and dead-letter bad ones; ``Consumer`` refuses envelopes that cannot become a task request;
``workers.signals`` letters what Celery rejects. Limits of the server-less transport: docs/jobs.md.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import uuid
from collections.abc import Callable
from queue import Empty
from time import monotonic
from typing import Any, cast

import redis
from celery.backends.filesystem import FilesystemBackend
from celery.worker.consumer import Consumer as CeleryConsumer
from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.transport import redis as kombu_redis
from kombu.utils import json as kombu_json

from memory_core.errors import InvalidRequest
from workers.dead_letters import DeadLetter, keep
from workers.execution import runtime
from workers.kinds import check_job_id
from workers.queue import current_ride, take_ride

__all__ = [
    "BODY_ENCODINGS",
    "AtomicFilesystemBackend",
    "Consumer",
    "SafeFilesystemTransport",
    "SafeRedisTransport",
    "attempts_of",
    "dead_letter",
    "dead_letter_raw",
    "envelope_problem",
    "header_problem",
    "letter_id",
    "message_payload",
    "refuse",
]

log = logging.getLogger(__name__)

BODY_ENCODINGS = frozenset({"base64"})
"""The ``body_encoding`` kombu's virtual channel decodes besides plain text (blank or ``utf-8``, any case)."""


def letter_id(candidate: Any, kind: str) -> str:
    """``candidate`` when it can name a job (``check_job_id``), else a unique ``<kind>-<32 hex digits>``.

    A letter under an id ``check_job_id`` refuses could never be requeued; one under a fixed id would replace another.
    """
    try:
        return check_job_id(candidate)
    except InvalidRequest:
        return f"{kind}-{uuid.uuid4().hex}"


def attempts_of(job_id: str) -> int:
    """How many times the flow started ``job_id`` (the coordination store's count); 0 if unknown or unreadable."""
    try:
        return runtime().coordination.attempts(job_id)
    except Exception as exc:  # a letter is still written; the count is only unknown
        log.warning("attempts of %s unknown: %s", job_id, exc)
        return 0


def dead_letter(letter: DeadLetter) -> None:
    """Keep a dead letter in this process's ``Runtime`` store, logged as one warning line (``dead_letters.keep``)."""
    keep(lambda: runtime().letters, letter)


_UNREAD = object()


def _decoded(message: Any) -> tuple[Any, Any]:
    """A message's body (bytes as text) and its JSON value (``_UNREAD`` unless JSON that decodes)."""
    body = getattr(message, "body", None)
    if isinstance(body, bytes | bytearray):
        body = bytes(body).decode("utf-8", errors="replace")
    if getattr(message, "content_type", None) == "application/json" and isinstance(body, str):
        try:
            return body, json.loads(body)
        except (ValueError, RecursionError):
            pass
    return body, _UNREAD


def message_payload(message: Any) -> Any:
    """A message's payload for its dead letter: the job JSON when the body is ``[[job], {…}, {…}]``."""
    body, decoded = _decoded(message)
    if decoded is _UNREAD:
        return body
    if isinstance(decoded, list) and decoded and isinstance(decoded[0], list) and len(decoded[0]) == 1:
        return decoded[0][0]
    return decoded


def refuse(
    message: Any,
    exc: BaseException | str,
    *,
    message_text: str | None = None,
    kind: str = "refused",
    job_id: Any = None,
    task: str | None = None,
) -> DeadLetter:
    """Dead-letter a kombu message that reached the worker but cannot become (or run as) a task request.

    The letter's id is ``job_id`` or the ``id`` header (``letter_id``, ``kind`` its fallback prefix), its task
    ``task`` or the ``task`` header, its message ``message_text`` (default ``not a task message: <exc>``).

    Returns:
        The letter written (or logged, when no store answers).
    """
    headers = getattr(message, "headers", None)
    headers = headers if isinstance(headers, dict) else {}
    info = getattr(message, "delivery_info", None)
    queue = info.get("routing_key") if isinstance(info, dict) else None
    jid = letter_id(job_id if isinstance(job_id, str) else headers.get("id"), kind)
    if task is None and isinstance(headers.get("task"), str):
        task = headers["task"]
    decoded = _decoded(message)[1]  # a task message body: [args, {"engine": …}, embed]
    kwargs = decoded[1] if isinstance(decoded, list) and len(decoded) > 1 and isinstance(decoded[1], dict) else {}
    letter = DeadLetter.of_call(
        jid,
        exc,
        [message_payload(message)],
        {"engine": kwargs.get("engine")},
        task=task,
        queue=queue if isinstance(queue, str) else None,
        attempts=attempts_of(jid),
        message=message_text if message_text is not None else f"not a task message: {exc}",
    )
    dead_letter(letter)
    return letter


def envelope_problem(message: Any) -> str | None:
    """Why a decoded queue entry is not a kombu message envelope (what kombu and Celery read unguarded), or None."""
    if not isinstance(message, dict):
        return f"the entry is a JSON {type(message).__name__}, not a message object"
    props = message.get("properties")
    if not isinstance(props, dict) or "delivery_tag" not in props:
        return "no properties.delivery_tag"
    if props.get("delivery_info") is not None and not isinstance(props.get("delivery_info"), dict):
        return "properties.delivery_info is not an object"
    headers = message.get("headers")
    if headers is not None and not isinstance(headers, dict):
        return "headers is not an object"
    for field in ("content-type", "content-encoding"):
        if message.get(field) is not None and not isinstance(message.get(field), str):
            return f"{field} is not a string"
    encoding = props.get("body_encoding")
    if encoding and not (isinstance(encoding, str) and (encoding in BODY_ENCODINGS or encoding.lower() == "utf-8")):
        return f"properties.body_encoding {encoding!r} is neither base64 nor utf-8"
    body = message.get("body")
    if body is not None and not isinstance(body, str):
        return "body is not a string"
    if body and encoding == "base64":
        try:
            base64.b64decode(body)
        except (binascii.Error, ValueError):
            return "body is not valid base64"
    if isinstance(headers, dict) and "task" in headers and not isinstance(headers.get("id"), str):
        return "a task message without a string headers.id"
    return None


def header_problem(headers: Any) -> str | None:
    """Why a task message's headers would break the worker after Celery accepted them, or None.

    Celery 5.7 copies ``timelimit`` unchecked and billiard converts it in the event loop, unguarded: ``"xx"`` stops
    the worker (issue 5 audit). It must be absent, or ``[hard, soft]`` of non-negative numbers or nulls.
    """
    if not isinstance(headers, dict):
        return None
    limits = headers.get("timelimit")
    if not limits:
        return None
    if not isinstance(limits, list | tuple) or len(limits) != 2:
        return f"headers.timelimit {limits!r} is not [hard, soft]"
    for value in limits:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            return f"headers.timelimit {limits!r} is not [hard, soft] in seconds"
    return None


def dead_letter_raw(raw: Any, queue: str | None, reason: str) -> None:
    """Dead-letter a queue entry that never reached Celery (kept as text when it is not JSON)."""
    headers = raw.get("headers") if isinstance(raw, dict) else None
    job_id = headers.get("id") if isinstance(headers, dict) else None
    task = headers.get("task") if isinstance(headers, dict) and isinstance(headers.get("task"), str) else None
    jid = letter_id(job_id, "raw")
    letter = DeadLetter.of(
        jid,
        "MalformedMessage",
        payload=raw,
        task=task,
        queue=queue,
        attempts=attempts_of(jid) if jid == job_id else 0,
        message=f"not a message: {reason}",
    )
    dead_letter(letter)


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Celery's consumer (``worker_consumer``); a message that cannot become a task request is dead-lettered and acked.

    Celery 5.7's ``on_task_received`` catches only three errors, so anything else raised while a request is built (a
    body of JSON ``null``, a ``timelimit`` of ``"xx"``) stops the worker, and every worker after it as the message is
    restored (issue 5 audit); ``on_decode_error`` acks an undecodable body with no signal to hook. Broker connection
    errors propagate: Celery reconnects and the message stays unacked for redelivery.
    """

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        """Celery's ``on_task_received``, guarded (see the class docstring)."""
        handle: Callable[[Any], Any] = super().create_task_handler(*args, **kwargs)
        connection_errors: tuple[type[BaseException], ...] = tuple(self.connection_errors or ())

        def on_task_received(message: Any) -> Any:
            try:
                problem = header_problem(getattr(message, "headers", None))
                if problem is not None:  # would fail later, in the pool, beyond this guard
                    refuse(message, "MalformedMessage", message_text=f"not a task message: {problem}")
                    message.ack_log_error(log, connection_errors)
                    return None
                return handle(message)
            except connection_errors:
                raise
            except Exception as exc:
                log.debug("message refused, not a task request", exc_info=True)  # the letter logs the reason
                refuse(message, exc)
                if not getattr(message, "acknowledged", False):
                    message.ack_log_error(log, connection_errors)
                return None

        return on_task_received

    def on_decode_error(self, message: Any, exc: BaseException) -> None:
        """Dead-letter an undecodable message, then log and ack it as Celery does."""
        refuse(message, exc)
        super().on_decode_error(message, exc)


# transports ----------------------------------------------------------------------------------------------------
_DECODE_ERRORS = (ValueError, RecursionError)
"""What kombu's ``json.loads`` of a bad entry raises (``RecursionError``: nested deeper than the decoder's limit)."""


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


class _Pushes(list[tuple[Any, ...]]):
    """The Redis commands of one push, as kombu's ``_put`` hands them to a publish batch (``add``), unsent."""

    def add(self, name: str, *args: Any) -> None:
        self.append((name.upper(), *args))  # ``lpush``, ``pexpire``: redis-py method names, command names too


def _packed(commands: list[tuple[Any, ...]]) -> bytes:
    """``commands`` in the Redis protocol: each an array of bulk strings (bytes as given, else ``str``'s UTF-8).

    What redis-py's ``pack_commands`` makes of one-word command names, in under half its time (a hot path: every
    submit). Source: https://redis.io/docs/latest/develop/reference/protocol-spec/ (RESP arrays, bulk strings).
    """
    parts: list[bytes] = []
    for command in commands:
        parts.append(b"*%d\r\n" % len(command))
        for arg in command:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            parts += (b"$", str(len(data)).encode(), b"\r\n", data, b"\r\n")
    return b"".join(parts)


def _sent(pool: Any, commands: list[tuple[Any, ...]]) -> Callable[[], list[Any]]:
    """Send ``commands`` in one write on one of ``pool``'s connections; the call returned reads their raw replies.

    The connection is held until they are read. A command Redis refuses gives its ``ResponseError`` as its reply;
    a connection error drops the connection and raises (nothing is retried, as for kombu's own push under
    ``host_config``).
    """
    conn = pool.get_connection()
    try:
        conn.send_packed_command([_packed(commands)])
    except BaseException:
        conn.disconnect()
        pool.release(conn)
        raise

    def read() -> list[Any]:
        try:
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
            return replies
        except BaseException:
            conn.disconnect()
            raise
        finally:
            pool.release(conn)

    return read


class _SafeRedisChannel(_GuardedGet, kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        # Celery 5.7 drops the client (connection.collect()) and then restores unacked messages through it on
        # close: an AttributeError killed the worker when Redis stopped. A connection error lets Celery reconnect;
        # the message stays in Redis's unacked hash for the visibility sweep.
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

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        """Kombu's push, carrying the ``workers.queue.Ride`` waiting in this thread in the push's write.

        kombu 5.7 hands a batched push's commands (``LPUSH``, a ``PEXPIRE`` per priority when the queue expires) to
        ``_publish_batch.add``; the ride packs them with its own (``Ride.pack``) into one write on the channel's
        pool, one round trip, whose replies it reads later (``Ride.settle``). A push into a publish batch, or under
        kombu's ``global_keyprefix``, carries no ride.
        """
        parent: Any = super()
        ride = take_ride("_publish_batch" not in kwargs and not self.global_keyprefix)
        if ride is None:
            parent._put(queue, message, **kwargs)
            return
        pushes = _Pushes()
        parent._put(queue, message, _publish_batch=pushes, **kwargs)
        ride.answer = _sent(self.pool, ride.pack(pushes))

    def _put_fanout(self, exchange: str, message: Any, routing_key: str, **kwargs: Any) -> None:
        """Kombu's fanout publish (Celery's events); within a ``JobQueue`` publish, sent once its ride is read.

        The event is serialised first, then the ride's replies read (``Ride.settle``: Redis answered meanwhile), then
        the event written on the channel's pool as kombu's ``PUBLISH`` per topic (no client made for it). A push that
        did not happen (refused, failed, an identical job queued) gets no task-sent event: ``JobQueue`` raises its
        error once the publish returns (Celery's event dispatcher would only buffer it).
        """
        ride, parent = current_ride(), cast(Any, super())
        if ride is None or "_publish_batch" in kwargs or self.global_keyprefix:
            parent._put_fanout(exchange, message, routing_key, **kwargs)
            return
        payload = _dumps(message)
        commands = [("PUBLISH", topic, payload) for topic in parent._get_publish_topics(exchange, routing_key)]
        if ride.settle() is not None:
            return
        for reply in _sent(self.pool, commands)():
            if isinstance(reply, Exception):
                raise reply


class SafeRedisTransport(_GuardedDelivery, kombu_redis.Transport):
    """kombu's Redis transport; malformed entries are dead-lettered, never raised in the event loop."""

    Channel = _SafeRedisChannel


_dumps: Callable[[Any], str] = kombu_json.dumps  # kombu's JSON (its types), as its own _put writes
_loads: Callable[[str], Any] = kombu_json.loads


class _AtomicFiles:
    """Filesystem channel mixin: a queue entry appears whole, and exactly one consumer takes it.

    kombu 5.7 writes an entry in place and takes any entry unlocked, so a consumer could take a partial one (a lost
    job). Here an entry is written under a hidden name and renamed into place, and taken by renaming it into
    ``processed_folder`` (same filesystem): of two consumers racing for one file, one rename wins (POSIX ``rename(2)``).
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
    """Celery's ``file://`` result backend, each result file replaced whole (``os.replace`` of a temporary file).

    Celery 5 truncates then writes: a reader in between saw a partial result, and two writers of one task's result
    interleaved into a file that never decoded again (``JSONDecodeError: Extra data`` during ``make demo``).
    """

    def set(self, key: Any, value: Any) -> None:  # noqa: D102 (Celery's KeyValueStoreBackend.set)
        final = os.fsencode(self._filename(key))  # Celery keeps the folder as bytes
        partial = final + f".{os.getpid()}.{uuid.uuid4().hex}.part".encode()
        with self.open(partial, "wb") as outfile:
            outfile.write(value if isinstance(value, bytes) else str(value).encode())
        os.replace(partial, final)
