"""The scope gate as one state machine declared as data (``RULES``), run by ``step`` (pure) and by Redis's Lua.

The marks, the events and the table's little language: docs/jobs.md ("The scope gate").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LUA_INTERPRETER",
    "MARKS",
    "RULES",
    "RULES_LUA",
    "Mark",
    "abort_event",
    "check_rules",
    "enter_event",
    "extend_event",
    "later_ms",
    "leave_event",
    "split_record",
    "step",
]

MARKS = ("lock", "dirty", "built", "later")  # the order the stores pass their keys in
Expr = list[Any]
Event = tuple[str, dict[str, str]]  # (name, arguments as strings)
_TOKEN, _TASK, _STARTED = ["field", "lock", 0], ["field", "lock", 1], ["field", "lock", 2]
_NOW, _GAP = ["now"], ["arg", "gap_us"]
_MARK = ["min", ["arg", "stamp"], _NOW]  # the trigger's stamp, never later than now (a future stamp would loop)
_RAISE_DIRTY = ["raise", "dirty", _MARK, ["arg", "keep_ms"]]
_ZERO = ["int", 0]

RULES: dict[str, list[dict[str, Any]]] = {
    "enter": [
        {  # another delivery of this job holds the lock and may still run: come back when its lease is gone
            "when": [["has", ["get", "lock"]], ["eq", _TASK, ["arg", "task"]]],
            "then": [],
            "answer": ["busy", ["mul", ["max", ["int", 1], ["ttl", "lock"]], ["int", 1000]]],
        },
        {  # the running pass started after the trigger: it reads what the trigger was about
            "when": [["has", ["get", "lock"]], ["lt", ["arg", "stamp"], _STARTED]],
            "then": [],
            "answer": ["covered", _ZERO],
        },
        {  # a pass is running: it goes once more when it leaves
            "when": [["has", ["get", "lock"]]],
            "then": [_RAISE_DIRTY],
            "answer": ["coalesced", _ZERO],
        },
        {  # another job holds the follow-up slot: fold into it
            "when": [["has", ["get", "later"]], ["ne", ["get", "later"], ["arg", "task"]]],
            "then": [_RAISE_DIRTY],
            "answer": ["coalesced", _ZERO],
        },
        {  # a completed pass started after the trigger, and no trigger waits
            "when": [["no", ["get", "later"]], ["no", ["get", "dirty"]], ["lt", ["arg", "stamp"], ["get", "built"]]],
            "then": [],
            "answer": ["covered", _ZERO],
        },
        {  # too soon after the last pass started: take the follow-up slot, come back when the interval ends
            "when": [["pos", _GAP], ["lt", _NOW, ["add", ["get", "built"], _GAP]]],
            "then": [["set", "later", ["arg", "task"], ["arg", "later_ms"]], _RAISE_DIRTY],
            "answer": ["deferred", ["sub", ["add", ["get", "built"], _GAP], _NOW]],
        },
        {  # build now (freeing the follow-up slot this job held, if any); the dirty mark stays until a pass leaves
            "when": [],
            "then": [
                ["del", "later"],
                ["set", "lock", ["join", ["arg", "token"], ["arg", "task"], _NOW], ["arg", "ttl_ms"]],
            ],
            "answer": ["acquired", _ZERO],
        },
    ],
    "leave": [
        {"when": [["no", ["get", "lock"]]], "then": [], "answer": ["lost", _ZERO]},
        {"when": [["ne", _TOKEN, ["arg", "token"]]], "then": [], "answer": ["lost", _ZERO]},
        {  # a trigger came in, but the follow-up would start too soon: release, hold the slot, come back
            "when": [["ge", ["get", "dirty"], _STARTED], ["pos", _GAP], ["lt", _NOW, ["add", _STARTED, _GAP]]],
            "then": [
                ["raise", "built", _STARTED, ["arg", "keep_ms"]],
                ["set", "later", _TASK, ["arg", "later_ms"]],
                ["del", "lock"],
            ],
            "answer": ["deferred", ["sub", ["add", _STARTED, _GAP], _NOW]],
        },
        {  # a trigger came in during the pass: keep the lock, build once more (the dirty mark stays)
            "when": [["ge", ["get", "dirty"], _STARTED]],
            "then": [
                ["raise", "built", _STARTED, ["arg", "keep_ms"]],
                ["set", "lock", ["join", ["arg", "token"], _TASK, _NOW], ["arg", "ttl_ms"]],
            ],
            "answer": ["again", _ZERO],
        },
        {
            "when": [],
            "then": [["raise", "built", _STARTED, ["arg", "keep_ms"]], ["del", "dirty"], ["del", "lock"]],
            "answer": ["released", _ZERO],
        },
    ],
    "abort": [
        {  # the failed pass covered nothing: the next trigger builds whatever it was for
            "when": [["has", ["get", "lock"]], ["eq", _TOKEN, ["arg", "token"]]],
            "then": [["raise", "dirty", _STARTED, ["arg", "keep_ms"]], ["del", "lock"]],
            "answer": ["aborted", _ZERO],
        },
        {"when": [], "then": [], "answer": ["ignored", _ZERO]},
    ],
    "extend": [
        {
            "when": [["has", ["get", "lock"]], ["eq", _TOKEN, ["arg", "token"]]],
            "then": [["set", "lock", ["get", "lock"], ["arg", "ttl_ms"]]],
            "answer": ["extended", _ZERO],
        },
        {"when": [], "then": [], "answer": ["lost", _ZERO]},
    ],
}
"""Per event, the first rule whose guards hold wins. Source: reference ``celery-reliability.md`` §2.4 (N triggers
give at most one extra run) and issue 5's review (a dirty mark is cleared only by a later pass that completed)."""

_STRING_OPS = frozenset({"arg", "now", "get", "field", "min", "join"})
_NUMBER_OPS = frozenset({"ttl", "int", "add", "sub", "mul", "max"})
_GUARDS = frozenset({"has", "no", "eq", "ne", "lt", "ge", "pos"})


def check_rules(rules: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """Check the table: known operators and marks, string values written, a last rule that always holds.

    Raises:
        ValueError: naming the event, rule and what is wrong.
    """

    def operand(x: Any, where: str) -> None:
        if not isinstance(x, list) or not x or x[0] not in _STRING_OPS | _NUMBER_OPS:
            raise ValueError(f"{where}: unknown operand {x!r}")
        if x[0] in {"get", "field", "ttl"} and x[1] not in MARKS:
            raise ValueError(f"{where}: unknown mark {x[1]!r}")
        for sub in x[1:]:
            if isinstance(sub, list):
                operand(sub, where)

    for event, rows in rules.items():
        if not rows or rows[-1]["when"]:
            raise ValueError(f"{event}: the last rule must always hold")
        for i, row in enumerate(rows):
            where = f"{event}[{i}]"
            for guard in row["when"]:
                if guard[0] not in _GUARDS:
                    raise ValueError(f"{where}: unknown guard {guard!r}")
                for x in guard[1:]:
                    operand(x, where)
            for effect in row["then"]:
                if effect[0] not in {"set", "raise", "del"} or effect[1] not in MARKS:
                    raise ValueError(f"{where}: unknown effect {effect!r}")
                if effect[0] != "del":
                    if effect[2][0] not in _STRING_OPS:
                        raise ValueError(f"{where}: a mark's value must be a string operand, not {effect[2]!r}")
                    operand(effect[2], where)
                    operand(effect[3], where)
            operand(row["answer"][1], where)


check_rules(RULES)


RULES_LUA = "cjson.decode([==[" + json.dumps(RULES, separators=(",", ":")) + "]==])"
"""``RULES`` as a Lua expression (a long-bracket string, which JSON never closes: nothing is escaped)."""


@dataclass(frozen=True)
class Mark:
    """One mark's value and remaining lifetime (milliseconds; None: no expiry)."""

    value: str
    ttl_ms: int | None = None


@dataclass(frozen=True)
class Write:
    """One change to a mark: ``value`` None deletes it; else set with ``ttl_ms``."""

    mark: str
    value: str | None
    ttl_ms: int = 0


@dataclass(frozen=True)
class Step:
    """What one event did: the answer, the wait (µs), the writes, and the marks after them."""

    answer: str
    wait_us: int
    writes: tuple[Write, ...]
    state: dict[str, Mark]


def split_record(value: str) -> tuple[str, str, str]:
    """``head|middle|tail`` → its three parts; the middle may itself hold ``|`` (a job id)."""
    head, rest = value.split("|", 1)
    middle, tail = rest.rsplit("|", 1)
    return head, middle, tail


class _Eval:
    def __init__(self, state: Mapping[str, Mark], args: Mapping[str, str], now_us: int) -> None:
        self.state, self.args, self.now = state, args, str(now_us)

    def value(self, x: Expr) -> Any:
        op = x[0]
        if op == "arg":
            return self.args.get(x[1])
        if op == "now":
            return self.now
        if op == "get":
            mark = self.state.get(x[1])
            return None if mark is None else mark.value
        if op == "field":
            got = self.state.get(x[1])
            return None if got is None else split_record(got.value)[x[2]]
        if op == "ttl":
            held = self.state.get(x[1])
            return None if held is None or held.ttl_ms is None else held.ttl_ms
        if op == "int":
            return int(x[1])
        if op == "join":
            parts = [self.value(p) for p in x[1:]]
            return None if any(p is None for p in parts) else "|".join(parts)
        a, b = self.value(x[1]), self.value(x[2])
        if op == "min":
            if a is None or b is None:
                return b if a is None else a
            return b if int(b) < int(a) else a
        if a is None or b is None:
            return None
        a, b = int(a), int(b)
        return {"add": a + b, "sub": a - b, "mul": a * b, "max": max(a, b)}[op]

    def holds(self, guard: Expr) -> bool:
        op = guard[0]
        a = self.value(guard[1])
        if op == "has":
            return a is not None
        if op == "no":
            return a is None
        if op == "pos":
            return a is not None and int(a) > 0
        b = self.value(guard[2])
        if op in ("eq", "ne"):
            same = a is not None and b is not None and str(a) == str(b)
            return same if op == "eq" else not same
        if a is None or b is None:
            return False
        return int(a) < int(b) if op == "lt" else int(a) >= int(b)


def step(
    state: Mapping[str, Mark], event: Event, now_us: int, rules: Mapping[str, Sequence[Mapping[str, Any]]] = RULES
) -> Step:
    """Run one event on a gate's marks (those present) at ``now_us``; deleting an absent mark writes nothing."""
    name, args = event
    ev = _Eval(state, args, now_us)
    rule = next(r for r in rules[name] if all(ev.holds(g) for g in r["when"]))
    after = dict(state)
    writes: list[Write] = []
    for effect in rule["then"]:
        op, mark = effect[0], effect[1]
        if op == "del":
            if mark in after:
                writes.append(Write(mark, None))
                del after[mark]
            continue
        value, ttl = ev.value(effect[2]), int(ev.value(effect[3]))
        current = state.get(mark)
        if op == "set" or current is None or int(current.value) < int(value):
            writes.append(Write(mark, value, ttl))
            after[mark] = Mark(value, ttl)
    answer, wait = rule["answer"][0], ev.value(rule["answer"][1])
    return Step(answer, int(wait or 0), tuple(writes), after)


def later_ms(gap_us: int, ttl_s: int) -> int:
    """How long a follow-up slot lives, ms: the interval plus one lease (a lost holder frees it so)."""
    return gap_us // 1000 + ttl_s * 1000


def enter_event(task_id: str, token: str, stamp_us: int | None, ttl_s: int, keep_s: int, gap_us: int) -> Event:
    """A trigger of job ``task_id`` (delivery ``token``) stamped ``stamp_us`` (None: always new) asks to build."""
    args = {"task": task_id, **leave_event(token, ttl_s, keep_s, gap_us)[1]}
    if stamp_us is not None:
        args["stamp"] = str(int(stamp_us))
    return "enter", args


def leave_event(token: str, ttl_s: int, keep_s: int, gap_us: int) -> Event:
    """Delivery ``token`` completed a pass."""
    ttl_ms, keep_ms, gap, later = str(ttl_s * 1000), str(keep_s * 1000), str(int(gap_us)), later_ms(gap_us, ttl_s)
    return "leave", {"token": token, "ttl_ms": ttl_ms, "keep_ms": keep_ms, "gap_us": gap, "later_ms": str(later)}


def abort_event(token: str, keep_s: int) -> Event:
    """Delivery ``token``'s pass failed."""
    return "abort", {"token": token, "keep_ms": str(keep_s * 1000)}


def extend_event(token: str, ttl_s: int) -> Event:
    """Delivery ``token`` still builds: renew its lease."""
    return "extend", {"token": token, "ttl_ms": str(ttl_s * 1000)}


_LUA = r"""
local T = @RULES@
local M = {'lock', 'dirty', 'built', 'later'}
local rules, A = T[ARGV[1]], cjson.decode(ARGV[2])
local t = redis.call('TIME')
local NOW = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
local K, V, TTL = {}, {}, {}
for i, m in ipairs(M) do
  K[m] = KEYS[i]
  local v = redis.call('GET', KEYS[i])
  if v then
    V[m] = v
    local p = redis.call('PTTL', KEYS[i])
    if p >= 0 then TTL[m] = p end
  end
end
local val
val = function(x)
  local op = x[1]
  if op == 'arg' then return A[x[2]] end
  if op == 'now' then return NOW end
  if op == 'get' then return V[x[2]] end
  if op == 'field' then
    local v = V[x[2]]
    if not v then return nil end
    local a, b, c = string.match(v, '^([^|]*)|(.*)|([^|]*)$')
    return ({a, b, c})[x[3] + 1]
  end
  if op == 'ttl' then return TTL[x[2]] end
  if op == 'int' then return x[2] end
  if op == 'join' then
    local parts = {}
    for i = 2, #x do
      local p = val(x[i])
      if p == nil then return nil end
      parts[#parts + 1] = p
    end
    return table.concat(parts, '|')
  end
  local a, b = val(x[2]), val(x[3])
  if op == 'min' then
    if a == nil then return b end
    if b == nil then return a end
    if tonumber(b) < tonumber(a) then return b end
    return a
  end
  if a == nil or b == nil then return nil end
  a, b = tonumber(a), tonumber(b)
  if op == 'add' then return a + b end
  if op == 'sub' then return a - b end
  if op == 'mul' then return a * b end
  if op == 'max' then return math.max(a, b) end
  error('gate: unknown operand ' .. tostring(op))
end
local function holds(g)
  local op, a = g[1], val(g[2])
  if op == 'has' then return a ~= nil end
  if op == 'no' then return a == nil end
  if op == 'pos' then return a ~= nil and tonumber(a) > 0 end
  local b = val(g[3])
  if op == 'eq' or op == 'ne' then
    local same = a ~= nil and b ~= nil and tostring(a) == tostring(b)
    if op == 'eq' then return same end
    return not same
  end
  if a == nil or b == nil then return false end
  if op == 'lt' then return tonumber(a) < tonumber(b) end
  if op == 'ge' then return tonumber(a) >= tonumber(b) end
  error('gate: unknown guard ' .. tostring(op))
end
for _, rule in ipairs(rules) do
  local ok = true
  for _, g in ipairs(rule['when']) do
    if not holds(g) then ok = false break end
  end
  if ok then
    for _, e in ipairs(rule['then']) do
      local op, m = e[1], e[2]
      if op == 'del' then
        redis.call('DEL', K[m])
      else
        local v, ttl = val(e[3]), val(e[4])
        if op == 'set' or V[m] == nil or tonumber(V[m]) < tonumber(v) then
          redis.call('SET', K[m], v, 'PX', ttl)
        end
      end
    end
    return {rule['answer'][1], val(rule['answer'][2]) or 0, NOW}
  end
end
error('gate: no rule for ' .. tostring(ARGV[1]))
"""
LUA_INTERPRETER = _LUA.replace("@RULES@", RULES_LUA)
"""Redis's interpreter of the embedded ``RULES_LUA``: ``KEYS`` the marks, ``ARGV`` the event's name and arguments
(JSON); returns ``{answer, wait_us, now_us}``."""
