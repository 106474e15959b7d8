"""Job handles: the job ids the HTTP API hands out, each bound to the layout root it was issued to.

A handle is ``<celery task id>.<tag>``, where ``tag`` is the first 128 bits (32 hex digits) of
``HMAC-SHA256(key, "memory-core job" NUL root NUL task id)`` (RFC 2104; the MAC truncation of RFC 2104 §5
and NIST SP 800-107 §5.3.4, well above its 80-bit floor). ``GET /v1/jobs/{job_id}`` recomputes the tag for the
asking token's root and compares it in constant time (``hmac.compare_digest``) *before* anything is read:

* a job issued to another root, an id never issued, a bare Celery id and a forged tag all fail the same check at
  the same cost and get the same answer (``NotFound``, 404, naming nothing), so the endpoint
  is no oracle of which jobs exist, started or not;
* a handle that verifies was issued to this root by this API, so its Celery state is read; the follow-up jobs a
  finished ingest names were made by the worker for that same root and are handed out as handles of it.

Why a MAC and not a record (a Redis key per job id naming its root, with the result expiry): the handle carries
its own proof, so checking it reads nothing, and issuing it writes nothing. A job parked in the outbox while
Redis is down (``JobQueue.send`` answers ``parked`` and publishes it later under the same id) is therefore still
queryable afterwards, the server-less transport (no Redis at all) works the same, and replicas need only share
the key. The cost is the key: ``MEMORY_CORE_HTTP_JOB_KEY`` (at least ``MIN_KEY_BYTES`` bytes), else a random
key for the server process's life, after which earlier handles answer 404 like any unknown id.

The Celery task id stays the handle's prefix (``handle.rpartition(".")[0]``), so an operator can find the job
in Flower or the dead letters.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from memory_core.errors import ConfigError, NotFound
from memory_core.namespace import Namespace

__all__ = ["MIN_KEY_BYTES", "TAG_HEX", "JobHandles"]

MIN_KEY_BYTES = 32
"""The shortest job key accepted (RFC 2104 §3: a key shorter than the hash's output, 32 bytes for SHA-256, is
discouraged)."""
TAG_HEX = 32
"""Hex digits of a handle's tag (128 bits)."""
_CONTEXT = b"memory-core job\x00"


class JobHandles:
    """Mint and check job handles under one key.

    Args:
        key: The HMAC key (``MEMORY_CORE_HTTP_JOB_KEY``, UTF-8); None: a random key for this object's life.

    Raises:
        ConfigError: a key shorter than ``MIN_KEY_BYTES`` bytes (its value is never shown).
    """

    def __init__(self, key: str | bytes | None = None) -> None:
        if key is None:
            raw = secrets.token_bytes(MIN_KEY_BYTES)
        else:
            raw = key.encode("utf-8") if isinstance(key, str) else bytes(key)
            if len(raw) < MIN_KEY_BYTES:
                raise ConfigError(f"MEMORY_CORE_HTTP_JOB_KEY: at least {MIN_KEY_BYTES} bytes (a random string)")
        self._key = raw

    def __repr__(self) -> str:
        return "JobHandles(<key>)"

    def _tag(self, root: Namespace, task_id: str) -> str:
        message = _CONTEXT + str(root).encode("utf-8") + b"\x00" + task_id.encode("utf-8")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()[:TAG_HEX]

    def issue(self, root: Namespace, task_id: str) -> str:
        """The handle of Celery task ``task_id`` for ``root``: ``<task_id>.<tag>``; pure."""
        return f"{task_id}.{self._tag(root, task_id)}"

    def task_id(self, root: Namespace, handle: str) -> str:
        """The Celery task id inside ``handle``, when ``handle`` was issued to ``root``.

        Raises:
            NotFound: anything else: another root's handle, a forged or malformed one, a bare task id. One
                answer for all of them, whose message names nothing.
        """
        task_id, dot, tag = handle.rpartition(".")
        expected = self._tag(root, task_id)  # computed whatever the handle's shape: one cost for every refusal
        ok = hmac.compare_digest(tag.encode("utf-8", "surrogatepass"), expected.encode("ascii"))
        if not (ok and dot and task_id):
            raise NotFound("no job with that id for this token's root")
        return task_id
