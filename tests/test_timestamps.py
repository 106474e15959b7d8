"""Every timestamp accepted on a write path reads back, on every engine (issue 11 rule 1).

The accepted range is every time whose UTC form lies in ``0001-01-01T00:00:00Z..9999-12-31T23:59:59.999999Z``;
anything else (``9999-12-31T23:00:00-05:00`` is in year 10000 in UTC) is ``InvalidRequest`` naming the field at
the boundary. Main used to store year 999 as ``999-01-01T…`` (unreadable for good) and to raise a bare
``OverflowError`` for the edge-of-calendar times.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core import Conversation, Document, DocumentBody, MetaFilter
from memory_core._model import EARLIEST, LATEST, format_timestamp
from memory_core.engine import MemoryEngine
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite.engine import SQLiteEngine
from memory_core.errors import InvalidRequest
from memory_core.items import Role, Turn
from memory_core.lifecycle.agent import AgentMemory, PostTurn, PreTurn
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.meta import MemoryMeta
from memory_core.query import GetRequest, ListRequest

_OFFSETS = st.timedeltas(min_value=-timedelta(hours=23, minutes=59), max_value=timedelta(hours=23, minutes=59)).map(
    lambda d: timezone(timedelta(minutes=round(d.total_seconds() / 60)))
)
_ANY_TIME = st.datetimes(min_value=datetime.min, max_value=datetime.max, timezones=st.none() | _OFFSETS)
"""Every datetime Python can hold, naive or with any whole-minute offset (RFC 3339 offsets are minutes)."""

_EDGES = st.sampled_from(
    [
        datetime.min,
        datetime.max,
        datetime(999, 1, 1),
        datetime(1969, 12, 31, 23, 59, 59, 999_999),
        datetime(9999, 12, 31, 23, 0),
        datetime(1, 1, 1, 1, 0),
    ]
).flatmap(
    lambda d: st.sampled_from([None, UTC, timezone(-timedelta(hours=5)), timezone(timedelta(hours=5))]).map(
        lambda tz: d.replace(tzinfo=tz)
    )
)
_TIMES = _EDGES | _ANY_TIME
_COUNTER = itertools.count()


def _expected(value: datetime) -> datetime | None:
    """The stored UTC time, or None when ``value`` cannot be held (the oracle, written apart from the code)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    offset = value.utcoffset()
    assert offset is not None
    naive = value.replace(tzinfo=None)
    if offset > timedelta(0) and naive - datetime.min < offset:
        return None
    if offset < timedelta(0) and datetime.max - naive < -offset:
        return None
    return value.astimezone(UTC)


def _rfc3339(value: datetime) -> str:
    """``value`` as RFC 3339 text, its offset kept (``Z`` for naive, read as UTC)."""
    base = f"{value.year:04d}-{value:%m-%dT%H:%M:%S}.{value.microsecond:06d}"
    offset = value.utcoffset()
    if offset is None:
        return base + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{base}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[MemoryEngine]]:
    path: Path = tmp_path_factory.mktemp("timestamps") / "memory.db"
    opened: list[MemoryEngine] = [ReferenceEngine(), SQLiteEngine(path, synchronous="off")]
    yield opened
    for engine in opened:
        engine.close()


# the boundary -------------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(value=_TIMES, wire=st.booleans())
def test_a_meta_time_is_refused_naming_the_field_or_round_trips_through_json(value: datetime, wire: bool) -> None:
    want = _expected(value)
    raw: object = _rfc3339(value) if wire else value
    if want is None:
        with pytest.raises(InvalidRequest) as err:
            MemoryMeta.model_validate({"observed_at": raw})
        assert err.value.field == "observed_at"
        with pytest.raises(InvalidRequest) as err:
            Turn.model_validate({"role": "user", "text": "x", "at": raw})
        assert err.value.field == "at"
        with pytest.raises(InvalidRequest) as err:
            MetaFilter.model_validate({"observed_after": raw})
        assert err.value.field == "observed_after"
        return
    meta = MemoryMeta.model_validate({"observed_at": raw})
    assert meta.observed_at == want
    assert MemoryMeta.model_validate_json(meta.to_json()) == meta
    turn = Turn.model_validate({"role": "user", "text": "x", "at": raw})
    assert Turn.model_validate_json(turn.to_json()) == turn
    assert MetaFilter.model_validate({"observed_before": raw}).observed_before == want


@settings(max_examples=200, deadline=None)
@given(value=_TIMES)
def test_a_turn_time_is_refused_naming_at_or_round_trips(value: datetime) -> None:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    want = _expected(aware)
    for model, extra in ((PreTurn, {"user_text": "hi"}), (PostTurn, {"assistant_text": "hello"})):
        raw = {"thread_id": "t", "turn_index": 0, "at": _rfc3339(aware), **extra}
        if want is None:
            with pytest.raises(InvalidRequest) as err:
                model.model_validate(raw)
            assert err.value.field == "at"
        else:
            req = model.model_validate(raw)
            assert req.at == want
            assert model.model_validate_json(req.to_json()) == req


def test_years_before_1000_are_written_with_four_digits_and_old_short_years_still_read() -> None:
    meta = MemoryMeta(observed_at=datetime(999, 1, 1, tzinfo=UTC))
    assert '"observed_at":"0999-01-01T00:00:00Z"' in meta.to_json()
    assert format_timestamp(EARLIEST) == "0001-01-01T00:00:00Z"
    assert format_timestamp(LATEST) == "9999-12-31T23:59:59.999999Z"
    # what main wrote for year 999 stays readable
    assert MemoryMeta.model_validate_json('{"observed_at":"999-01-01T00:00:00Z"}') == meta


def test_edge_of_calendar_offsets_are_invalid_request_not_overflow_error() -> None:
    for raw in ("9999-12-31T23:00:00-05:00", "0001-01-01T00:30:00+01:00"):
        with pytest.raises(InvalidRequest) as err:
            PreTurn.model_validate({"thread_id": "t", "turn_index": 0, "user_text": "hi", "at": raw})
        assert err.value.field == "at"
        with pytest.raises(InvalidRequest) as err:
            Document.model_validate({"body": {"text": "x"}, "meta": {"observed_at": raw}})
        assert err.value.field == "meta.observed_at"


# every engine --------------------------------------------------------------------------------------------
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_TIMES)
def test_every_accepted_time_reads_back_on_every_engine(engines: list[MemoryEngine], value: datetime) -> None:
    want = _expected(value)
    if want is None:
        return  # refused at the boundary (above)
    n = next(_COUNTER)
    meta = MemoryMeta(workspace=f"ts{n}", observed_at=value)
    doc = Document(body=DocumentBody(text=f"document {n}"), meta=meta)
    chat = Conversation(turns=(Turn(role=Role.USER, text=f"turn {n}", at=value),), meta=meta)
    for engine in engines:
        for item in (doc, chat):
            receipt = engine.store(item)
            hits = engine.get(GetRequest(ids=(receipt.id,)))
            assert [h.meta.observed_at for h in hits] == [want], engine.descriptor().id
            listed = engine.list(ListRequest(filter=MetaFilter(workspace=f"ts{n}", observed_after=want)))
            assert receipt.id in [h.id for h in listed.items], engine.descriptor().id
        try:
            exported = engine.export(ListRequest(filter=MetaFilter(workspace=f"ts{n}")))
        except Exception:  # an engine that does not export
            continue
        assert sorted(e.item.to_json() for e in exported.items) == sorted((doc.to_json(), chat.to_json()))


@pytest.mark.parametrize("kind", ["reference", "sqlite"])
def test_a_turn_in_year_999_leaves_every_section_readable(kind: str, tmp_path: Path) -> None:
    engine: MemoryEngine = ReferenceEngine() if kind == "reference" else SQLiteEngine(tmp_path / "m.db")
    with engine:
        layout = MemoryLayout("team:acme")
        helper = AgentMemory(engine, layout, "helper")
        other = AgentMemory(engine, layout, "other")
        ctx = helper.pre_turn(
            {"thread_id": "t", "turn_index": 0, "user_text": "hello there", "at": "0999-01-01T00:00:00Z"}
        )
        assert ctx.log_error is None
        for agent in (helper, other):
            pack = agent.recall("hello")
            errors = [s.reason for s in pack.skipped if s.reason != "empty"]
            assert errors == [], errors
            assert "[0999-01-01 00:00] user: hello there" in pack.markdown


@settings(max_examples=200, deadline=None)
@given(value=st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=True, allow_infinity=True))
def test_a_number_given_as_a_time_is_refused_naming_the_field_or_round_trips(value: float) -> None:
    """Pydantic reads a JSON number as Unix time; whatever it accepts must read back too."""
    try:
        meta = MemoryMeta.model_validate({"observed_at": value})
    except InvalidRequest as err:
        assert err.field == "observed_at"
        return
    assert meta.observed_at is not None and EARLIEST <= meta.observed_at <= LATEST
    assert MemoryMeta.model_validate_json(meta.to_json()) == meta
