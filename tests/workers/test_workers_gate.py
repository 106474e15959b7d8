"""The gate's one definition (``workers.gate``): the pure ``step`` against an independent oracle over every
(state, event) pair, and both stores (SQLite and the Lua interpreter on a real Redis) giving the same outcome."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.coordination import Coordination, RedisCoordination, SqliteCoordination, redis_client
from workers.gate import (
    RULES,
    Event,
    Mark,
    abort_event,
    check_rules,
    enter_event,
    extend_event,
    later_ms,
    leave_event,
    step,
)

S = 1_000_000  # one second in microseconds
TTL_S, KEEP_S, GAP_US = 15, 60, 10 * S
NOW = 1_800_000_000 * S  # a fixed clock for the pure tests


# the states and events, relative to "now" -------------------------------------------------------------------
def states(now: int) -> Iterator[dict[str, Mark]]:
    """Every combination of the four marks that matters to a rule (72 states)."""
    started = now - 5 * S
    locks = [None, Mark(f"tokA|job|A|{started}", 40_000)]  # a job id with a bar in it
    dirties = [None, started - S, started, started + S]
    builts = [None, now - 3 * S, now - 30 * S]  # inside and outside the 10 s interval
    laters = [None, "job|A", "jobB"]
    for lock, dirty, built, later in itertools.product(locks, dirties, builts, laters):
        state: dict[str, Mark] = {}
        if lock is not None:
            state["lock"] = lock
        if dirty is not None:
            state["dirty"] = Mark(str(dirty), 90_000)
        if built is not None:
            state["built"] = Mark(str(built), 90_000)
        if later is not None:
            state["later"] = Mark(later, 120_000)
        yield state


def events(now: int) -> Iterator[Event]:
    """Every event shape: enter by the lock's job or another, stamps before/after the pass, in the future (24)."""
    started = now - 5 * S
    for task, stamp, gap in itertools.product(
        ["job|A", "jobB"], [None, started - S, started + S, now + 100 * S], [0, GAP_US]
    ):
        yield enter_event(task, "tokC", stamp, TTL_S, KEEP_S, gap)
    for token, gap in itertools.product(["tokA", "tokC"], [0, GAP_US]):
        yield leave_event(token, TTL_S, KEEP_S, gap)
    for token in ["tokA", "tokC"]:
        yield abort_event(token, KEEP_S)
        yield extend_event(token, TTL_S)


# an independent oracle: the gate as it was written by hand before the table ------------------------------------
def oracle(state: dict[str, Mark], event: Event, now: int) -> tuple[str, int, dict[str, str]]:
    """The old imperative gate (``SqliteCoordination`` before issue 13), on plain values: answer, wait, marks."""
    name, a = event
    v = {k: m.value for k, m in state.items()}
    lock = v.get("lock")
    parts = None
    if lock is not None:
        token, rest = lock.split("|", 1)
        task, started_s = rest.rsplit("|", 1)
        parts = (token, task, int(started_s))

    def raise_mark(key: str, stamp: int) -> None:
        if key not in v or int(v[key]) < stamp:
            v[key] = str(stamp)

    if name == "enter":
        stamp = int(a["stamp"]) if "stamp" in a else None
        gap = int(a["gap_us"])
        mark = now if stamp is None else min(stamp, now)
        if parts is not None:
            if parts[1] == a["task"]:
                return "busy", max(1, state["lock"].ttl_ms or 0) * 1000, v
            if stamp is not None and stamp < parts[2]:
                return "covered", 0, v
            raise_mark("dirty", mark)
            return "coalesced", 0, v
        slot = v.get("later")
        if slot is not None and slot != a["task"]:
            raise_mark("dirty", mark)
            return "coalesced", 0, v
        last = int(v["built"]) if "built" in v else None
        if slot is None and "dirty" not in v and stamp is not None and last is not None and stamp < last:
            return "covered", 0, v
        if gap > 0 and last is not None and now < last + gap:
            v["later"] = a["task"]
            raise_mark("dirty", mark)
            return "deferred", last + gap - now, v
        v.pop("later", None)
        v["lock"] = f"{a['token']}|{a['task']}|{now}"
        return "acquired", 0, v
    if name == "leave":
        if parts is None or parts[0] != a["token"]:
            return "lost", 0, v
        raise_mark("built", parts[2])
        gap = int(a["gap_us"])
        if "dirty" in v and int(v["dirty"]) >= parts[2]:
            if gap > 0 and now < parts[2] + gap:
                v["later"] = parts[1]
                del v["lock"]
                return "deferred", parts[2] + gap - now, v
            v["lock"] = f"{a['token']}|{parts[1]}|{now}"
            return "again", 0, v
        v.pop("dirty", None)
        del v["lock"]
        return "released", 0, v
    if name == "abort":
        if parts is not None and parts[0] == a["token"]:
            raise_mark("dirty", parts[2])
            del v["lock"]
            return "aborted", 0, v
        return "ignored", 0, v
    if parts is not None and parts[0] == a["token"]:
        return "extended", 0, v
    return "lost", 0, v


def test_the_table_is_well_formed_and_a_broken_one_is_refused() -> None:
    check_rules(RULES)
    with pytest.raises(ValueError, match="last rule"):
        check_rules({"enter": [{"when": [["has", ["get", "lock"]]], "then": [], "answer": ["x", ["int", 0]]}]})
    with pytest.raises(ValueError, match="string operand"):
        check_rules(
            {"enter": [{"when": [], "then": [["set", "lock", ["int", 1], ["int", 5]]], "answer": ["x", ["int", 0]]}]}
        )
    with pytest.raises(ValueError, match="unknown mark"):
        check_rules(
            {
                "enter": [
                    {"when": [["has", ["get", "nope"]]], "then": [], "answer": ["x", ["int", 0]]},
                    {"when": [], "then": [], "answer": ["x", ["int", 0]]},
                ]
            }
        )


def test_step_agrees_with_the_hand_written_oracle_for_every_state_and_event() -> None:
    pairs = 0
    for state, event in itertools.product(list(states(NOW)), list(events(NOW))):
        done = step(state, event, NOW)
        answer, wait, values = oracle(state, event, NOW)
        assert (done.answer, done.wait_us) == (answer, wait), (state, event)
        assert {k: m.value for k, m in done.state.items()} == values, (state, event)
        pairs += 1
    assert pairs == 72 * 24


def test_step_is_pure_and_writes_only_what_changed() -> None:
    for state, event in itertools.product(list(states(NOW)), list(events(NOW))):
        before = dict(state)
        done = step(state, event, NOW)
        assert state == before  # the input is not touched
        assert done == step(state, event, NOW)  # same input, same output
        replayed = dict(state)
        for write in done.writes:
            if write.value is None:
                assert write.mark in replayed  # no delete of an absent mark
                del replayed[write.mark]
            else:
                replayed[write.mark] = Mark(write.value, write.ttl_ms)
        assert replayed == done.state


def test_the_rules_never_let_two_holders_build_at_once() -> None:
    for state, event in itertools.product(list(states(NOW)), list(events(NOW))):
        done = step(state, event, NOW)
        if "lock" in state and done.answer == "acquired":
            pytest.fail(f"acquired a held lock: {state} {event}")
        if done.answer in ("covered", "busy", "ignored", "lost"):
            assert not done.writes or event[0] == "extend", (state, event)


def test_lifetimes_come_from_the_event() -> None:
    held = Mark(f"tokA|jobA|{NOW - 5 * S}", 1000)
    done = step({"lock": held, "dirty": Mark(str(NOW), 5)}, leave_event("tokA", TTL_S, KEEP_S, GAP_US), NOW)
    assert done.answer == "deferred"
    assert done.state["later"] == Mark("jobA", later_ms(GAP_US, TTL_S))
    assert done.state["built"] == Mark(str(NOW - 5 * S), KEEP_S * 1000)
    assert step({"lock": held}, extend_event("tokA", 99), NOW).state["lock"] == Mark(held.value, 99_000)


# both stores run the same table ----------------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Coordination]:
    prefix = f"mc-gate-{uuid.uuid4().hex[:8]}"
    if request.param == "sqlite":
        coordination: Coordination = SqliteCoordination(tmp_path / "c.db", prefix, job_ttl_s=60, keep_s=KEEP_S)
        yield coordination
        coordination.close()
        return
    url = request.getfixturevalue("workers_redis")
    client = redis_client(url, 5.0, 25)
    yield RedisCoordination(client, prefix, job_ttl_s=60, keep_s=KEEP_S)
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


def _put(store: Coordination, scope: str, state: dict[str, Mark]) -> None:
    """Write a state's marks into the store (through the store's own write path for each mark)."""
    if isinstance(store, RedisCoordination):
        keys = store._gate_keys(scope)
        pipe = store.client.pipeline(transaction=True)
        pipe.delete(*keys)
        for key, mark in zip(keys, ("lock", "dirty", "built", "later"), strict=True):
            if mark in state:
                pipe.set(key, state[mark].value, px=state[mark].ttl_ms)
        pipe.execute()
        return
    assert isinstance(store, SqliteCoordination)
    with store._tx() as db:
        for mark in ("lock", "dirty", "built", "later"):
            key = store.key("gate", scope, mark)
            store._del(db, key)
            if mark in state:
                store._set(db, key, state[mark].value, (state[mark].ttl_ms or 0) / 1000)


SLACK_MS = 3000
"""Lifetimes read back are compared within this many ms (the machine may be loaded); the table's lifetimes
(15 s, 25 s, 40 s, 60 s, 90 s, 120 s) are further apart than that."""


def test_both_stores_give_the_pure_steps_outcome_for_every_state_and_event(store: Coordination) -> None:
    base = store.now_us()
    all_events = list(events(base))
    pairs = 0
    for n, state in enumerate(states(base)):
        for m, event in enumerate(all_events):
            scope = f"s{n}-{m}"
            _put(store, scope, state)
            answer, wait, now = store.run_gate(scope, event)
            expected = step(state, event, now)
            assert answer == expected.answer, (state, event)
            if answer == "busy":  # the lease left is read a moment later by the store
                assert abs(wait - expected.wait_us) <= SLACK_MS * 1000
            else:
                assert wait == expected.wait_us, (state, event)
            got = store.gate_state(scope)
            assert {k: m.value for k, m in got.items()} == {k: m.value for k, m in expected.state.items()}
            for mark, held in got.items():
                assert abs((held.ttl_ms or 0) - (expected.state[mark].ttl_ms or 0)) <= SLACK_MS, (mark, state, event)
            pairs += 1
    assert pairs == 72 * 24


def test_the_table_reaches_lua_as_the_json_of_the_python_table() -> None:
    import json

    from workers.gate import LUA_INTERPRETER, RULES_LUA

    assert RULES_LUA.startswith("cjson.decode([==[") and RULES_LUA.endswith("]==])") and RULES_LUA in LUA_INTERPRETER
    assert json.loads(RULES_LUA.removeprefix("cjson.decode([==[").removesuffix("]==])")) == RULES
