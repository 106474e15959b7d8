"""``RedisCoordination``: the coordination store on Redis, one Lua script per compound operation.

Each gate operation is a script, so "check the lock, then coalesce or acquire" and "check the dirty mark,
then release or go again" are atomic (what the marks mean: ``workers.coordination``): a trigger either sees
the lock (and the holder sees its mark when it leaves) or takes the lock itself; no trigger falls between.
Release is compare-and-delete on the owner token (https://redis.io/topics/distlock). Times come from Redis
``TIME`` (microseconds), one clock for hosts and workers. Lua numbers are doubles, exact to 2^53, so
microsecond times (~1.8e15) compare exactly; they are built and stored as strings, never formatted as Lua
numbers.

Keys (``P`` = ``Settings.redis_prefix``; ``{h}`` a hash tag so a scope's keys share a cluster slot):
``P:pending:<key>``, ``P:gate:{h}:lock|dirty|built|later``, ``P:job:<id>:attempts|progress|done|payload``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import redis
from redis.commands.core import Script

from memory_core.errors import EngineUnavailable
from workers.coordination import JOB_MARKS, Coordination, Enter, Entered, Leave, Left, Pending, later_ttl_s

__all__ = ["RedisCoordination", "redis_client"]

_PRELUDE = """
local function now_us()
  local t = redis.call('TIME')
  return t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
end
local function raise_dirty(key, stamp, ttl_ms)
  local cur = redis.call('GET', key)
  if (not cur) or tonumber(cur) < tonumber(stamp) then redis.call('SET', key, stamp, 'PX', ttl_ms) end
end
"""

_CLAIM = (
    _PRELUDE
    + """
local cur = redis.call('GET', KEYS[1])
if cur then
  local id, stamp = string.match(cur, '^(.*)|(%d+)$')
  return {id, stamp, 0}
end
local now = now_us()
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. now, 'PX', ARGV[2])
return {ARGV[1], now, 1}
"""
)

_CLEAR = """
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, '^(.*)|%d+$') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""

_ENTER = (
    _PRELUDE
    + """
local stamp = tonumber(ARGV[3])
local gap = tonumber(ARGV[6])
local now = now_us()
local mark = now
if stamp and stamp < tonumber(now) then mark = ARGV[3] end
local cur = redis.call('GET', KEYS[1])
if cur then
  local tok, tid, started = string.match(cur, '^([^|]*)|(.*)|(%d+)$')
  if tid == ARGV[2] then return {'busy', math.max(1, redis.call('PTTL', KEYS[1])) * 1000} end
  if stamp and stamp < tonumber(started) then return {'covered', 0} end
  raise_dirty(KEYS[2], mark, ARGV[5])
  return {'coalesced', 0}
else
  local slot = redis.call('GET', KEYS[4])
  if slot and slot ~= ARGV[2] then
    raise_dirty(KEYS[2], mark, ARGV[5])
    return {'coalesced', 0}
  end
  local last = redis.call('GET', KEYS[3])
  if (not slot) and (not redis.call('GET', KEYS[2])) then
    if stamp and last and stamp < tonumber(last) then return {'covered', 0} end
  end
  if gap > 0 and last and tonumber(now) < tonumber(last) + gap then
    redis.call('SET', KEYS[4], ARGV[2], 'PX', ARGV[7])
    raise_dirty(KEYS[2], mark, ARGV[5])
    return {'deferred', tonumber(last) + gap - tonumber(now)}
  end
  if slot then redis.call('DEL', KEYS[4]) end
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2] .. '|' .. now, 'PX', ARGV[4])
return {'acquired', 0}
"""
)

_EXTEND = """
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, '^([^|]*)|') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

_LEAVE = (
    _PRELUDE
    + """
local cur = redis.call('GET', KEYS[1])
if not cur then return {'lost', 0} end
local tok, tid, started = string.match(cur, '^([^|]*)|(.*)|(%d+)$')
if tok ~= ARGV[1] then return {'lost', 0} end
local last = redis.call('GET', KEYS[3])
if (not last) or tonumber(last) < tonumber(started) then redis.call('SET', KEYS[3], started, 'PX', ARGV[3]) end
local need = redis.call('GET', KEYS[2])
if need and tonumber(need) >= tonumber(started) then
  local now = now_us()
  local gap = tonumber(ARGV[4])
  if gap > 0 and tonumber(now) < tonumber(started) + gap then
    redis.call('SET', KEYS[4], tid, 'PX', ARGV[5])
    redis.call('DEL', KEYS[1])
    return {'deferred', tonumber(started) + gap - tonumber(now)}
  end
  redis.call('SET', KEYS[1], tok .. '|' .. tid .. '|' .. now, 'PX', ARGV[2])
  return {'again', 0}
end
redis.call('DEL', KEYS[2], KEYS[1])
return {'released', 0}
"""
)

_ABORT = (
    _PRELUDE
    + """
local cur = redis.call('GET', KEYS[1])
if cur then
  local tok, tid, started = string.match(cur, '^([^|]*)|(.*)|(%d+)$')
  if tok == ARGV[1] then
    raise_dirty(KEYS[2], started, ARGV[2])
    redis.call('DEL', KEYS[1])
  end
end
return 0
"""
)


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
        self._enter: Script = client.register_script(_ENTER)
        self._extend: Script = client.register_script(_EXTEND)
        self._leave: Script = client.register_script(_LEAVE)
        self._abort: Script = client.register_script(_ABORT)
        self._forgive: Script = client.register_script(_FORGIVE)

    @contextmanager
    def _reachable(self) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as exc:
            raise EngineUnavailable(f"coordination store (redis): {exc}") from None

    def _gate_keys(self, scope: str) -> list[str]:
        tag = "{" + scope + "}"
        return [self.key("gate", tag, part) for part in ("lock", "dirty", "built", "later")]

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

    def gate_enter(
        self, scope: str, task_id: str, token: str, stamp_us: int | None, ttl_s: int, gap_us: int = 0
    ) -> Entered:
        """See ``Coordination.gate_enter``."""
        stamp = "" if stamp_us is None else str(stamp_us)
        later_ms = int(later_ttl_s(gap_us, ttl_s) * 1000)
        args = [token, task_id, stamp, ttl_s * 1000, self.keep_s * 1000, int(gap_us), later_ms]
        with self._reachable():
            got = cast(list[Any], self._enter(keys=self._gate_keys(scope), args=args))
        return Entered(Enter(str(got[0])), int(got[1]))

    def gate_extend(self, scope: str, token: str, ttl_s: int) -> bool:
        """See ``Coordination.gate_extend``."""
        with self._reachable():
            return bool(int(cast(int, self._extend(keys=self._gate_keys(scope)[:1], args=[token, ttl_s * 1000]))))

    def gate_leave(self, scope: str, token: str, ttl_s: int, gap_us: int = 0) -> Left:
        """See ``Coordination.gate_leave``."""
        later_ms = int(later_ttl_s(gap_us, ttl_s) * 1000)
        args = [token, ttl_s * 1000, self.keep_s * 1000, int(gap_us), later_ms]
        with self._reachable():
            got = cast(list[Any], self._leave(keys=self._gate_keys(scope), args=args))
        return Left(Leave(str(got[0])), int(got[1]))

    def gate_abort(self, scope: str, token: str) -> None:
        """See ``Coordination.gate_abort``."""
        with self._reachable():
            self._abort(keys=self._gate_keys(scope)[:2], args=[token, self.keep_s * 1000])

    def count_attempt(self, job_id: str) -> int:
        """See ``Coordination.count_attempt``."""
        key = self.key("job", job_id, "attempts")
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            pipe.incr(key)
            pipe.expire(key, self.job_ttl_s)
            count, _ = pipe.execute()
        return int(count)

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
