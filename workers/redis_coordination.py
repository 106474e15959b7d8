"""``RedisCoordination``: the coordination store on Redis, one Lua script per compound operation.

Each gate event runs the one generic interpreter of ``workers.gate`` over its rule table, in one ``EVALSHA``:
so "check the lock, then coalesce or acquire" and "check the dirty mark, then release or go again" are atomic
(what the marks mean: ``workers.coordination``): a trigger either sees the lock (and the holder sees its mark
when it leaves) or takes the lock itself; no trigger falls between. The Lua holds no rule of its own. Release
is compare-and-delete on the owner token (https://redis.io/topics/distlock). Times come from Redis
``TIME`` (microseconds), one clock for hosts and workers. Lua numbers are doubles, exact to 2^53, so
microsecond times (~1.8e15) compare exactly; they are built and stored as strings, never formatted as Lua
numbers.

Keys (``P`` = ``Settings.redis_prefix``; ``{h}`` a hash tag so a scope's keys share a cluster slot):
``P:pending:<key>``, ``P:gate:{h}:lock|dirty|built|later``, ``P:job:<id>:attempts|progress|done|payload``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import redis
from redis.commands.core import Script

from memory_core.errors import EngineUnavailable
from workers.coordination import JOB_MARKS, Coordination, Pending, Started
from workers.gate import LUA_INTERPRETER, MARKS, Event, Mark

__all__ = ["RedisCoordination", "redis_client"]

_CLAIM = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local id, stamp = string.match(cur, '^(.*)|(%d+)$')
  return {id, stamp, 0}
end
local t = redis.call('TIME')
local now = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. now, 'PX', ARGV[2])
return {ARGV[1], now, 1}
"""

_CLEAR = """
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, '^(.*)|%d+$') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""

_BIND = """
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return 1
end
if cur == ARGV[1] then return 1 end
return 0
"""

_FORGIVE = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 0 then redis.call('DECR', KEYS[1]) end
return 0
"""


def redis_client(url: str, timeout_s: float, health_check_s: int) -> redis.Redis[str]:
    """A decoding Redis client with connect/read timeouts and health checks (redis-py#775, #1140).

    No command is retried (``from_url`` leaves redis-py's connection retries at 0 without ``retry_on_timeout``),
    so ``timeout_s`` bounds each call. A ``rediss://`` URL verifies the server's certificate unless its query
    says otherwise (redis-py's ``ssl_cert_reqs="required"`` default, the rule ``config.result_backend_url``
    writes into the Celery backend's URL). ``health_check_s`` 0: no extra PING before a command.
    """
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        socket_keepalive=True,
        health_check_interval=health_check_s,
        decode_responses=True,
    )


class RedisCoordination(Coordination):
    """The coordination store on Redis (see the module docstring).

    Args:
        client: A decoding ``redis.Redis`` (``redis_client``).
        prefix, job_ttl_s, keep_s: As ``Coordination``.
    """

    def __init__(self, client: redis.Redis[str], prefix: str, job_ttl_s: int, keep_s: int) -> None:
        super().__init__(prefix, job_ttl_s, keep_s)
        self.client = client
        self._clear: Script = client.register_script(_CLEAR)
        self._gate: Script = client.register_script(LUA_INTERPRETER)
        self._forgive: Script = client.register_script(_FORGIVE)

    @contextmanager
    def _reachable(self) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as exc:
            raise EngineUnavailable(f"coordination store (redis): {exc}") from None

    def _gate_keys(self, scope: str) -> list[str]:
        tag = "{" + scope + "}"
        return [self.key("gate", tag, mark) for mark in MARKS]

    def now_us(self) -> int:
        """Redis ``TIME`` in microseconds."""
        with self._reachable():
            seconds, micros = cast(tuple[int, int], self.client.time())
            return int(seconds) * 1_000_000 + int(micros)

    def clear_pending(self, key: str, job_id: str) -> None:
        """See ``Coordination.clear_pending``."""
        with self._reachable():
            self._clear(keys=[self.key("pending", key)], args=[job_id])

    def claim_job(self, job_id: str, digest: str, pending: str | None, ttl_s: int) -> Pending | None:
        """See ``Coordination.claim_job``: both scripts in one pipeline, one round trip (each key keeps its slot).

        ``EVAL`` with the script's text, not ``EVALSHA``: a pipeline of ``EVALSHA`` would first ask ``SCRIPT
        EXISTS`` (another round trip), and Redis caches a script it has compiled either way.
        """
        bound = self.key("job", job_id, "payload")
        with self._reachable():
            pipe = self.client.pipeline(transaction=False)
            pipe.eval(_BIND, 1, bound, digest, self.job_ttl_s)
            if pending is not None:
                pipe.eval(_CLAIM, 1, self.key("pending", pending), job_id, ttl_s * 1000)
            got: list[Any] = pipe.execute()
        claimed = Pending(job_id, 0, fresh=True) if pending is None else self._pending(got[1])
        if int(got[0]):
            return claimed
        if pending is not None and claimed.fresh:  # marked pending under an id that names another job: undo
            self.clear_pending(pending, job_id)
        return None

    @staticmethod
    def _pending(got: list[Any]) -> Pending:
        return Pending(str(got[0]), int(got[1]), fresh=bool(int(got[2])))

    def run_gate(self, scope: str, event: Event) -> tuple[str, int, int]:
        """See ``Coordination.run_gate``: one ``EVALSHA`` of the generic interpreter (``workers.gate``)."""
        name, args = event
        with self._reachable():
            got = cast(list[Any], self._gate(keys=self._gate_keys(scope), args=[name, json.dumps(args)]))
        return str(got[0]), int(got[1]), int(got[2])

    def gate_state(self, scope: str) -> dict[str, Mark]:
        """See ``Coordination.gate_state`` (one pipeline)."""
        keys = self._gate_keys(scope)
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            for key in keys:
                pipe.get(key)
                pipe.pttl(key)
            got: list[Any] = pipe.execute()
        state: dict[str, Mark] = {}
        for i, mark in enumerate(MARKS):
            value, ttl = got[2 * i], int(got[2 * i + 1])
            if value is not None:
                state[mark] = Mark(str(value), ttl if ttl >= 0 else None)
        return state

    def begin_job(self, job_id: str, pending: str | None) -> Started:
        """See ``Coordination.begin_job``: one pipeline (the job's keys keep their own slots)."""
        done, attempts, progress = (self.key("job", job_id, part) for part in ("done", "attempts", "progress"))
        with self._reachable():
            pipe = self.client.pipeline(transaction=False)
            if pending is not None:
                pipe.eval(_CLEAR, 1, self.key("pending", pending), job_id)
            pipe.exists(done)
            pipe.incr(attempts)
            pipe.expire(attempts, self.job_ttl_s)
            pipe.smembers(progress)
            got: list[Any] = pipe.execute()
        if pending is not None:
            got = got[1:]
        done_, count = bool(got[0]), int(got[1])
        if done_:  # a twin is no attempt: the pipeline cannot branch, so take it back (the twin's path only)
            self.forgive_attempt(job_id)
            count -= 1
        return Started(done_, count, frozenset(str(u) for u in got[3]))

    def attempts(self, job_id: str) -> int:
        """See ``Coordination.attempts``."""
        with self._reachable():
            return int(self.client.get(self.key("job", job_id, "attempts")) or 0)

    def forgive_attempt(self, job_id: str) -> None:
        """See ``Coordination.forgive_attempt``."""
        with self._reachable():
            self._forgive(keys=[self.key("job", job_id, "attempts")])

    def add_progress(self, job_id: str, unit: str) -> None:
        """See ``Coordination.add_progress``."""
        key = self.key("job", job_id, "progress")
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            pipe.sadd(key, unit)
            pipe.expire(key, self.job_ttl_s)
            pipe.execute()

    def progress(self, job_id: str) -> frozenset[str]:
        """See ``Coordination.progress``."""
        with self._reachable():
            return frozenset(str(u) for u in self.client.smembers(self.key("job", job_id, "progress")))

    def mark_done(self, job_id: str) -> None:
        """See ``Coordination.mark_done``."""
        with self._reachable():
            self.client.set(self.key("job", job_id, "done"), "1", ex=self.job_ttl_s)

    def is_done(self, job_id: str) -> bool:
        """See ``Coordination.is_done``."""
        with self._reachable():
            return bool(self.client.exists(self.key("job", job_id, "done")))

    def forget_job(self, job_id: str) -> None:
        """See ``Coordination.forget_job``."""
        with self._reachable():
            self.client.delete(*(self.key("job", job_id, part) for part in JOB_MARKS))

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()
