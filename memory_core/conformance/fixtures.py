"""The items the suite stores: one of each kind with every optional field set, and the filter probes.

Every item carries the run's workspace (probes: the probe workspace) and the marker word, so the run isolates
its own items on an engine that already holds data and finds them in any fetch mode (contract reference §2,
checks 2 and 9).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from memory_core.conformance.context import Run
from memory_core.engine import AnyItem
from memory_core.items import Conversation, Document, DocumentBody, Learning, LearningKind, Role, ToolCallRef, Turn
from memory_core.meta import ItemKind, MemoryMeta, MetaFilter, SourceKind, SourceRef, ToolCallMeta, TurnRange

__all__ = ["EDGE_TIMES", "Probe", "edge_time_items", "probes", "round_trip_items"]

_TURN_AT = datetime(2025, 5, 6, 7, 8, 9, tzinfo=UTC)
_OBSERVED = datetime(2001, 1, 1, tzinfo=UTC)

EDGE_TIMES: tuple[datetime, ...] = (
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(2038, 1, 19, 3, 14, 8, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
)
"""Times every engine must hold to the microsecond: the calendar's first and last instants (RFC 3339's four-digit
years; the contract's ``DateTime<Utc>``, reference §1.4), a year before 1000, the microsecond before the Unix
epoch and the first second past 32-bit Unix time (issue 11 rule 1: every value accepted reads back)."""


def round_trip_items(run: Run) -> list[AnyItem]:
    """One item of each kind, each with every optional field of its variant set (reference §2, round_trip).

    * a Document with a title, ``text/markdown`` mime and a tag;
    * a two-turn Conversation with ``at`` times, a tool call and a conversation source;
    * a Learning of kind preference, confidence 0.75, with evidence.
    """
    m = run.marker
    return [
        Document(
            title="Round trip",
            body=DocumentBody(text=f"{m} document body"),
            mime="text/markdown",
            meta=run.meta(tags=("roundtrip",)),
        ),
        Conversation(
            turns=(
                Turn(role=Role.USER, text=f"{m} what is in the plan", at=_TURN_AT),
                Turn(
                    role=Role.ASSISTANT,
                    text="the plan has three steps",
                    at=_TURN_AT,
                    tool_calls=(ToolCallRef(name="read_plan", id="call-1"),),
                ),
            ),
            meta=run.meta(source=SourceRef(kind=SourceKind.CONVERSATION, id=f"{m}-thread")),
        ),
        Learning(
            text=f"{m} the user prefers short answers",
            kind=LearningKind.PREFERENCE,
            confidence=0.75,
            evidence="said so twice",
            meta=run.meta(),
        ),
    ]


def edge_time_items(run: Run) -> list[AnyItem]:
    """One conversation per ``EDGE_TIMES`` entry, with that time as its ``observed_at`` and its turn's ``at``."""
    return [
        Conversation(
            turns=(Turn(role=Role.USER, text=f"{run.marker} edge time {i}", at=at),),
            meta=run.meta(observed_at=at, thread_id=f"{run.marker}-edge-{i}"),
        )
        for i, at in enumerate(EDGE_TIMES)
    ]


@dataclass(frozen=True)
class Probe:
    """An item distinguished from the other probes by one metadata field, and the filter on that field.

    Attributes:
        field: The metadata field the probe isolates (``"folder"``, ``"observed_at"``).
        item: The probe item, in the probe workspace.
        filter: The filter that must select exactly ``item`` among the probes.
    """

    field: str
    item: AnyItem
    filter: MetaFilter


def _conversation(run: Run, label: str, meta: MemoryMeta) -> Conversation:
    return Conversation(
        turns=(
            Turn(role=Role.USER, text=f"{run.marker} {label} question"),
            Turn(role=Role.ASSISTANT, text=f"{label} answer"),
        ),
        meta=meta,
    )


def probes(run: Run) -> list[Probe]:
    """One probe per filterable metadata field (reference §2, fetch_filters).

    Folder and file path are matched by a path prefix, ``tool_call`` by the tool's name, ``tags_any`` with one
    tag that matches nothing and one that matches, and the observed window 2000..2002 contains 2001-01-01.
    Every probe's source kind is the default (``agent``) except the ``sources`` probe's (``file``).
    """
    m = run.marker
    root = f"/{m}"
    doc = run.document
    meta = run.probe_meta
    flt = run.probe_filter
    return [
        Probe("folder", doc("folder", meta(folder=f"{root}/src/app")), flt(folder=f"{root}/src")),
        Probe("file_path", doc("file", meta(file_path=f"{root}/docs/guide.md")), flt(file_path=f"{root}/docs")),
        Probe("language", doc("language", meta(language=f"{m}-lang")), flt(language=f"{m}-lang")),
        Probe("repo", doc("repo", meta(repo=f"owner/{m}")), flt(repo=f"owner/{m}")),
        Probe("commit", doc("commit", meta(commit=f"{m}c0ffee")), flt(commit=f"{m}c0ffee")),
        Probe("url", doc("url", meta(url=f"https://{m}.test/a")), flt(url=f"https://{m}.test/a")),
        Probe("thread_id", _conversation(run, "thread", meta(thread_id=f"{m}-t1")), flt(thread_id=f"{m}-t1")),
        Probe(
            "turns",
            _conversation(run, "turns", meta(turns=TurnRange(first=4, last=5))),
            flt(turns=TurnRange(first=4, last=5)),
        ),
        Probe("agent_id", doc("agent", meta(agent_id=f"{m}-agent")), flt(agent_id=f"{m}-agent")),
        Probe("tool_call", doc("tool", meta(tool_call=ToolCallMeta(name=f"{m}_tool"))), flt(tool_call=f"{m}_tool")),
        Probe("source_id", doc("source", meta(source=SourceRef(id=f"{m}-src"))), flt(source_id=f"{m}-src")),
        Probe("sources", doc("feed", meta(source=SourceRef(kind=SourceKind.FILE))), flt(sources=(SourceKind.FILE,))),
        Probe("tags_any", doc("tagged", meta(tags=(f"{m}-tag",))), flt(tags_any=(f"{m}-none", f"{m}-tag"))),
        Probe(
            "kinds",
            Learning(text=f"{m} kinds learning", kind=LearningKind.FACT, confidence=0.5, meta=meta()),
            flt(kinds=(ItemKind.LEARNING,)),
        ),
        Probe(
            "observed_at",
            doc("observed", meta(observed_at=_OBSERVED)),
            flt(observed_after=datetime(2000, 1, 1, tzinfo=UTC), observed_before=datetime(2002, 1, 1, tzinfo=UTC)),
        ),
    ]
