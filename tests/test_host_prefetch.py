"""The prefetch cache (reference §6.3): states and counts driven by a manual executor and a controllable clock."""

from __future__ import annotations

from typing import Any

import pytest
from _executors import ManualExecutor

from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineUnavailable
from memory_core.host import PrefetchLimits, PrefetchMemory, refilter
from memory_core.host.prefetch import NOTICE
from memory_core.items import Learning
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.meta import MemoryMeta, SourceKind, SourceRef, TurnRange
from memory_core.query import GetRequest, Hit
from memory_core.recall.types import ContextPack, SectionHits, ThreadWindow

LAYOUT = MemoryLayout("team:a")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.step = 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def learning(text: str) -> Learning:
    return Learning(text=text, meta=MemoryMeta(namespace=LAYOUT.learnings(), source=SourceRef(kind=SourceKind.AGENT)))


def turn(i: int, text: str = "Where does Mara live these days?", in_prompt_from: int = 0) -> dict[str, Any]:
    return {"thread_id": "t1", "turn_index": i, "user_text": text, "in_prompt_from": in_prompt_from}


@pytest.fixture
def setup() -> tuple[ReferenceEngine, PrefetchMemory, ManualExecutor, Clock]:
    engine = ReferenceEngine()
    engine.store(learning("Mara moved to Porto in March."))
    pool, clock = ManualExecutor(), Clock()
    return engine, PrefetchMemory(engine, LAYOUT, clock=clock, executor=pool), pool, clock


def test_a_cold_cache_logs_the_turn_now_and_returns_an_empty_pack(setup) -> None:  # type: ignore[no-untyped-def]
    engine, cache, pool, _ = setup
    first = cache.pre_turn("assistant", turn(0))
    assert first.pack == ContextPack()
    assert not first.earlier_lookup and first.age_s is None
    assert first.logged is not None and first.log_error is None
    assert [h.id for h in engine.get(GetRequest(ids=[first.logged.id]))] == [first.logged.id]  # stored, synchronously
    assert len(pool.queue) == 1 and cache.pending("assistant", "t1") == 1
    stats = cache.stats
    assert (stats.cold, stats.hits, stats.queued, stats.refreshed) == (1, 0, 1, 0)


def test_the_next_turn_gets_the_completed_pack_marked_as_an_earlier_lookup(setup) -> None:  # type: ignore[no-untyped-def]
    _, cache, pool, clock = setup
    cache.pre_turn("assistant", turn(0))
    assert pool.run_all() == 1
    clock.now += 5
    second = cache.pre_turn("assistant", turn(2, "And her sister?"))
    assert second.earlier_lookup and second.age_s == 5
    assert second.pack.markdown.startswith(NOTICE)
    assert "Porto" in second.pack.markdown
    assert cache.stats.hits == 1 and cache.stats.refreshed == 1
    other_thread = cache.pre_turn("assistant", {**turn(0), "thread_id": "t2"})
    assert not other_thread.earlier_lookup  # the key is (agent, thread)
    other_agent = cache.pre_turn("bot", turn(0))
    assert not other_agent.earlier_lookup


def test_a_pack_older_than_the_ttl_is_not_served(setup) -> None:  # type: ignore[no-untyped-def]
    _, cache, pool, clock = setup
    cache.pre_turn("assistant", turn(0))
    pool.run_all()
    clock.now += 60
    assert cache.pre_turn("assistant", turn(2)).earlier_lookup  # 60 s: still fresh
    pool.run_all()
    clock.now += 60.5
    late = cache.pre_turn("assistant", turn(4))
    assert not late.earlier_lookup and late.pack == ContextPack()
    assert cache.stats.expired == 1


def test_a_served_pack_never_holds_the_logged_turn_or_turns_still_in_the_prompt(setup) -> None:  # type: ignore[no-untyped-def]
    _, cache, pool, _ = setup
    for i in range(4):
        cache.pre_turn("assistant", turn(2 * i, f"Mara bakes sourdough bread on day {i}."))
    pool.run_all()
    # turns 0-6 out of the prompt: the refresh's pack may show them
    cache.pre_turn("assistant", turn(8, "What does Mara bake?", in_prompt_from=8))
    pool.run_all()
    wide = cache.pre_turn("assistant", turn(10, "What does Mara bake?", in_prompt_from=10))
    shown = [h for s in wide.pack.sections for h in s.hits if h.meta.thread_id == "t1"]
    assert {h.meta.turns.first for h in shown if h.meta.turns} >= {4, 6}  # the thread's turns are in the cache
    pool.run_all()
    # now turns 4 and later are back in the prompt, and turn 6 is this call's own (a retried turn): neither shows
    narrow = cache.pre_turn("assistant", turn(6, "Mara bakes sourdough bread on day 3.", in_prompt_from=4))
    assert narrow.earlier_lookup
    left = [h for s in narrow.pack.sections for h in s.hits if h.meta.thread_id == "t1"]
    assert all(h.meta.turns is not None and h.meta.turns.last < 4 for h in left)
    assert narrow.logged is not None and narrow.logged.id not in narrow.pack.refs
    assert "day 3" not in narrow.pack.markdown


def _hit(hid: str, thread: str | None, first: int | None) -> Hit:
    meta = MemoryMeta(
        namespace=LAYOUT.conversations("assistant"),
        thread_id=thread,
        turns=None if first is None else TurnRange(first=first, last=first),
    )
    return Hit(id=hid, kind="conversation", text=f"user: text of {hid}", meta=meta, score=0.5)


def test_refilter_drops_excluded_ids_and_the_window_and_re_renders() -> None:
    hits = (_hit("keep", "t1", 1), _hit("logged", "t2", 0), _hit("inprompt", "t1", 5), _hit("other", "t9", 7))
    pack = ContextPack(
        markdown="# Memory\n…",
        tokens=10,
        refs=tuple(h.id for h in hits),
        sections=(SectionHits(heading="History", hits=hits),),
        engine="reference",
    )
    out = refilter(pack, ["logged"], ThreadWindow(thread_id="t1", from_turn=5), budget_tokens=1200)
    assert out.refs == ("keep", "other")
    assert [h.id for h in out.sections[0].hits] == ["keep", "other"]
    assert out.markdown.startswith(NOTICE + "\n\n# Memory")
    assert "text of logged" not in out.markdown and "text of inprompt" not in out.markdown
    assert refilter(pack, ["keep", "logged", "inprompt", "other"], None, 1200).markdown == ""


def test_saturation_skips_the_refresh_and_the_turn_never_waits(setup) -> None:  # type: ignore[no-untyped-def]
    _, cache, pool, _ = setup
    for i in range(17):
        result = cache.pre_turn("assistant", turn(2 * i))  # nothing runs: the pool is saturated
        assert result.logged is not None
    assert cache.pending("assistant", "t1") == 16
    assert cache.stats.skipped_busy == 1 and cache.stats.queued == 16
    assert pool.run_all() == 16
    stats = cache.stats
    assert (stats.superseded, stats.refreshed) == (15, 1)  # only the newest queued refresh reads
    assert cache.pending("assistant", "t1") == 0


def test_entries_are_bounded_evicting_the_least_recently_touched_idle_one() -> None:
    engine, pool, clock = ReferenceEngine(), ManualExecutor(), Clock()
    cache = PrefetchMemory(engine, LAYOUT, clock=clock, executor=pool, limits=PrefetchLimits(entries=2))
    cache.pre_turn("assistant", {**turn(0), "thread_id": "a"})
    clock.now += 1
    cache.pre_turn("assistant", {**turn(0), "thread_id": "b"})
    cache.pre_turn("assistant", {**turn(0), "thread_id": "c"})  # both busy: nothing evicted, refresh skipped
    assert cache.entries() == 2 and cache.stats.skipped_full == 1 and cache.stats.evicted == 0
    pool.run_all()
    cache.pre_turn("assistant", {**turn(0), "thread_id": "c"})
    assert cache.entries() == 2 and cache.stats.evicted == 1
    assert cache.pending("assistant", "a") == 0 and cache.pending("assistant", "c") == 1  # "a" was the oldest


def test_a_pack_over_the_size_limit_is_dropped() -> None:
    engine, pool = ReferenceEngine(), ManualExecutor()
    engine.store(learning("Mara moved to Porto in March."))
    cache = PrefetchMemory(engine, LAYOUT, clock=Clock(), executor=pool, limits=PrefetchLimits(pack_bytes=100))
    cache.pre_turn("assistant", turn(0))
    pool.run_all()
    assert cache.stats.oversize == 1
    assert not cache.pre_turn("assistant", turn(2)).earlier_lookup


def test_a_refresh_past_the_work_timeout_is_dropped(setup) -> None:  # type: ignore[no-untyped-def]
    _, cache, pool, clock = setup
    cache.pre_turn("assistant", turn(0))
    clock.step = 121  # each clock read inside the refresh is 121 s later
    pool.run_all()
    clock.step = 0
    assert cache.stats.timed_out == 1 and cache.stats.refreshed == 0


def test_a_content_write_clears_packs_and_drops_refreshes_started_before_it(setup) -> None:  # type: ignore[no-untyped-def]
    engine, cache, pool, _ = setup
    cache.pre_turn("assistant", turn(0))
    pool.run_all()
    cache.store(learning("Mara's sister Ines lives in Braga."))
    after = cache.pre_turn("assistant", turn(2))
    assert not after.earlier_lookup  # cleared
    cache.forget({"ids": [engine.list({"limit": 10}).items[0].id]})  # a write while that refresh is queued
    pool.run_all()
    assert cache.stats.stale == 1
    assert not cache.pre_turn("assistant", turn(4)).earlier_lookup


def test_post_turn_logs_the_reply_and_keeps_the_packs(setup) -> None:  # type: ignore[no-untyped-def]
    _, cache, pool, _ = setup
    cache.pre_turn("assistant", turn(0))
    pool.run_all()
    report = cache.post_turn("assistant", {"thread_id": "t1", "turn_index": 1, "assistant_text": "Porto."})
    assert not report.receipt.replayed
    assert cache.pre_turn("assistant", turn(2)).earlier_lookup


class FailingLog(ReferenceEngine):
    def store_with(self, *args: Any, **kwargs: Any) -> Any:
        raise EngineUnavailable("engine server stopped answering")


def test_a_failed_log_is_reported_never_raised() -> None:
    pool = ManualExecutor()
    cache = PrefetchMemory(FailingLog(), LAYOUT, clock=Clock(), executor=pool)
    result = cache.pre_turn("assistant", turn(0))
    assert result.logged is None
    assert result.log_error == "unavailable: engine server stopped answering"
    assert cache.stats.queued == 1


def test_the_wrapper_owns_and_closes_its_pool() -> None:
    engine = ReferenceEngine()
    with PrefetchMemory(engine, LAYOUT) as cache:
        cache.pre_turn("assistant", turn(0))
    # closed: the pool is shut down; a turn is still logged, and no refresh is queued
    queued = cache.stats.queued
    later = cache.pre_turn("assistant", turn(2))
    assert later.logged is not None and cache.stats.queued == queued
    assert cache._pool._shutdown  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", ["Where does Mara live these days?", "Mara " * 2000])
def test_the_logged_turn_is_the_one_agent_memory_logs(setup, text: str) -> None:  # type: ignore[no-untyped-def]
    engine, cache, _, _ = setup
    request = {**turn(0), "user_text": text, "at": "2024-05-01T09:30:00Z"}
    mine = cache.pre_turn("assistant", request)
    theirs = AgentMemory(ReferenceEngine(), LAYOUT, "assistant").pre_turn(request)
    assert mine.logged is not None and theirs.logged is not None
    assert mine.logged.id == theirs.logged.id  # the same item: capped text, node, thread, turn
    [stored] = engine.get(GetRequest(ids=[mine.logged.id]))
    assert ("truncated by memory" in stored.text) == (len(text) > 4000)  # capped as lifecycle.caps says


def test_compaction_uses_completed_context_only_cached_apart_from_turn_packs(setup) -> None:  # type: ignore[no-untyped-def]
    _, cache, pool, clock = setup
    cache.pre_turn("assistant", turn(0))
    pool.run_all()  # the thread's turn pack is ready; its compaction pack is not
    dropped = {"thread_id": "t1", "dropped": [{"role": "user", "text": "Where does Mara live these days?"}]}
    cold = cache.recall_for_compaction("assistant", dropped)
    assert not cold.earlier_lookup and cold.pack == ContextPack()
    assert cache.pending("assistant", "t1", compaction=True) == 1 and cache.pending("assistant", "t1") == 0
    pool.run_all()
    clock.now += 2
    warm = cache.recall_for_compaction("assistant", dropped)
    assert warm.earlier_lookup and warm.age_s == 2
    assert warm.pack.markdown.startswith(NOTICE + "\n\n# Memory\n\n## Earlier in this conversation")
    assert "Where does Mara live these days?" in warm.pack.markdown  # the folded span, summarised
