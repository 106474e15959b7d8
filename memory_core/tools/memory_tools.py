"""``MemoryTools``: the seven model-facing tools over any engine, confined to a ``ToolScope`` (reference §4.7).

A model's call never chooses where memory is read or written: a ``namespace`` or ``reach`` key anywhere in its
arguments is refused, reads use the scope's reach, writes land at the scope's place, and ``memory_forget``
forgets only ids it can read back under the reach. Writes are scrubbed (``safety.ScrubbingEngine``) unless the
tools are built with ``scrub=False``.

```python
tools = MemoryTools(engine).placed_at("agent:writer")
tools.specs()                                   # JSON schemas for the model
tools.call("memory_store", {"learning": {"text": "Prefers tea"}})
tools.call("memory_recall", {"question": "What does the user drink?"})
```
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from memory_core.engine import AnyItem, MemoryEngine, check_engine
from memory_core.errors import InvalidRequest, Unsupported
from memory_core.explore import ExploreRequest, Facet
from memory_core.facts.model import check_text
from memory_core.facts.store import FactStore, fact_item
from memory_core.items import Conversation, Document, DocumentBody, Learning, LearningKind, Role, Turn
from memory_core.meta import MemoryMeta, MetaFilter, SourceKind, SourceRef
from memory_core.namespace import ROOT, Namespace, Reach
from memory_core.query import FetchMode, FetchRequest, ForgetTarget, GetRequest, ListRequest, RecallRequest
from memory_core.safety.engine import ScrubbingEngine
from memory_core.safety.host import scrubbing_enabled
from memory_core.tools.jsonschema import check
from memory_core.tools.render import render_citation, render_hit
from memory_core.tools.schemas import DEFAULT_LIMIT, FILTER_FIELDS, READ_TOOLS, WRITE_TOOLS, ToolSpec, tool_schemas

__all__ = ["FORBIDDEN_KEYS", "MemoryTools", "ToolScope", "tool_meta"]

FORBIDDEN_KEYS = frozenset({"namespace", "reach"})
"""Argument keys refused at any depth: where memory is read and written is the host's to fix."""

Result = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolScope:
    """``{place, reach, writes, agent_id}``: where the tools write, what they read, whether they may write, for whom.

    Attributes:
        place: The namespace every ``memory_store`` writes at.
        reach: What every read (and forget) admits; None: no reach (everything outside ``service:`` sandboxes).
        writes: Offer and accept ``memory_store`` and ``memory_forget``.
        agent_id: The agent the tools serve: stored items carry it as ``meta.agent_id`` (reference §6.4: ``learn``
            stamps the agent id and source ``agent``); None: the host serves no one agent.
    """

    place: Namespace = ROOT
    reach: Reach | None = None
    writes: bool = True
    agent_id: str | None = None

    @classmethod
    def at(cls, place: Namespace | str) -> ToolScope:
        """``{place, Reach.of(place), writes}``: an agent's usual scope."""
        ns = place if isinstance(place, Namespace) else Namespace.parse(place)
        return cls(ns, Reach.of(ns), True)

    def admits(self, reach: Reach) -> bool:
        """True when ``reach`` is no wider than this scope's reach (everything is within no reach)."""
        return self.reach is None or reach.within(self.reach)


def tool_meta(scope: ToolScope, tags: list[str] | tuple[str, ...], observed_at: datetime) -> MemoryMeta:
    """The metadata a tool write builds itself (reference §4.7 ``memory_store``; §6.4 ``learn``); pure.

    ``namespace`` = the scope's place, ``source`` = ``agent``, the model's ``tags``, ``observed_at``, and
    ``agent_id`` = the scope's agent when it serves one.

    Raises:
        InvalidRequest: ``field="tags"``: a tag the metadata refuses.
    """
    fields: dict[str, Any] = {
        "namespace": str(scope.place),
        "source": SourceRef(kind=SourceKind.AGENT).to_dict(),
        "tags": list(tags),
        "observed_at": observed_at,
    }
    if scope.agent_id is not None:
        fields["agent_id"] = scope.agent_id
    return MemoryMeta.coerce(fields, "tags")


def _walk(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            yield str(key), here
            yield from _walk(item, here)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}.{i}" if path else str(i))


def _drop_nulls(value: Any) -> Any:
    """An explicit null field means absent, at any depth."""
    if isinstance(value, Mapping):
        return {key: _drop_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list | tuple):
        return [_drop_nulls(item) for item in value]
    return value


def _meta_filter(raw: Mapping[str, Any] | None, reach: Reach | None, field: str = "filter") -> MetaFilter:
    data = {name: raw[name] for name in FILTER_FIELDS if raw is not None and name in raw}
    try:
        return MetaFilter.coerce({**data, "reach": None if reach is None else reach.to_dict()}, field)
    except InvalidRequest as exc:
        named = exc.field if exc.field is not None and exc.field.startswith(field) else f"{field}.{exc.field or ''}"
        raise InvalidRequest(exc.reason, field=named.rstrip(".")) from None


class MemoryTools:
    """The seven tools over ``engine``, confined to ``scope``.

    Args:
        engine: Any ``MemoryEngine``.
        scope: Where the tools write and what they read; default ``ToolScope()`` (the root, no reach, writes).
        scrub: Wrap ``engine`` in a ``ScrubbingEngine`` (unless it already is one), so what a model stores is
            scrubbed whatever engine the host passed; None: the ``MEMORY_CORE_SCRUB`` setting (on by default).
        clock: The ``observed_at`` of stored items (default: now, UTC).

    Raises:
        InvalidRequest: ``engine`` is not a ``MemoryEngine``.
    """

    def __init__(
        self,
        engine: MemoryEngine,
        scope: ToolScope | None = None,
        *,
        scrub: bool | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        check_engine(engine)
        wrap = scrubbing_enabled() if scrub is None else scrub
        self.engine: MemoryEngine = (
            ScrubbingEngine(engine) if wrap and not isinstance(engine, ScrubbingEngine) else engine
        )
        self.scope = scope or ToolScope()
        self._clock = clock or (lambda: datetime.now(UTC))

    # builders ------------------------------------------------------------------------------------------
    def with_scope(self, scope: ToolScope) -> MemoryTools:
        """The same tools under ``scope``."""
        return MemoryTools(self.engine, scope, scrub=False, clock=self._clock)

    def placed_at(self, place: Namespace | str) -> MemoryTools:
        """Write at ``place`` and read ``Reach.of(place)`` (keeps ``writes`` and ``agent_id``)."""
        return self.with_scope(replace(ToolScope.at(place), writes=self.scope.writes, agent_id=self.scope.agent_id))

    def reach(self, reach: Reach | Mapping[str, Any]) -> MemoryTools:
        """Read under ``reach`` (the host's choice, e.g. a holistic reach; call it after ``placed_at``)."""
        return self.with_scope(replace(self.scope, reach=Reach.coerce(reach, "reach")))

    def confined(self, reach: Reach | Mapping[str, Any]) -> MemoryTools:
        """Read under ``reach``, which must be no wider than the current scope's (a caller narrowing its view).

        Raises:
            InvalidRequest: ``field="reach"``: ``reach`` admits a namespace the scope's reach does not.
        """
        narrowed = Reach.coerce(reach, "reach")
        if not self.scope.admits(narrowed):
            raise InvalidRequest("a reach wider than the tools' scope is refused", field="reach")
        return self.with_scope(replace(self.scope, reach=narrowed))

    def as_agent(self, agent_id: str | None) -> MemoryTools:
        """The same tools serving ``agent_id``: what they store records it as ``meta.agent_id`` (None: no agent).

        Raises:
            InvalidRequest: ``field="agent_id"``: not a string or blank.
        """
        if agent_id is not None and (not isinstance(agent_id, str) or not agent_id.strip()):
            raise InvalidRequest("must be a non-blank string", field="agent_id")
        return self.with_scope(replace(self.scope, agent_id=agent_id))

    def read_only(self) -> MemoryTools:
        """The same tools without ``memory_store`` and ``memory_forget``."""
        return self.with_scope(replace(self.scope, writes=False))

    # the model-facing surface --------------------------------------------------------------------------
    def specs(self) -> list[ToolSpec]:
        """The tools a model may call: read tools first, then the write tools when the scope writes."""
        return tool_schemas(self.engine.descriptor().fetch_modes, self.scope.writes)

    def call(self, name: str, args: Mapping[str, Any] | None = None) -> Result:
        """Run one tool call; a JSON-ready result.

        Args:
            name: The tool's name (``memory_recall`` …).
            args: The call's arguments, a JSON object; None means ``{}``, a null field means absent.

        Raises:
            InvalidRequest: an unknown tool; arguments that are not an object; a ``namespace`` or ``reach`` key at
                any depth; an unknown key; a value its schema refuses (each names the field).
            Unsupported: a write tool when the tools are read-only (before the arguments are read).
            MemoryCoreError: what the engine raises.
        """
        if not isinstance(name, str) or name not in READ_TOOLS + WRITE_TOOLS:
            raise InvalidRequest(f"unknown tool {name!r} (tools: {', '.join(READ_TOOLS + WRITE_TOOLS)})", field="name")
        if name in WRITE_TOOLS and not self.scope.writes:
            raise Unsupported(f"{name}: these memory tools are read-only")
        if name == "memory_fetch" and not self.engine.descriptor().fetch_modes:
            raise Unsupported(f"memory_fetch: engine `{self.engine.descriptor().id}` offers no fetch mode")
        args = {} if args is None else args
        if not isinstance(args, Mapping):
            raise InvalidRequest(f"arguments must be a JSON object, got {type(args).__name__}", field="arguments")
        for key, path in _walk(args, ""):
            if key in FORBIDDEN_KEYS:
                raise InvalidRequest(
                    f"`{key}` is set by the host, not by a tool call: memory is read and written where the host "
                    "placed these tools",
                    field=path,
                )
        clean: dict[str, Any] = _drop_nulls(args)
        spec = next(s for s in self.specs() if s.name == name)
        check(clean, spec.parameters)
        handler: Callable[[dict[str, Any]], Result] = getattr(self, "_" + name)
        return handler(clean)

    # tools ---------------------------------------------------------------------------------------------
    def _filter(self, args: Mapping[str, Any]) -> MetaFilter:
        return _meta_filter(args.get("filter"), self.scope.reach)

    def _memory_recall(self, args: dict[str, Any]) -> Result:
        answer = self.engine.recall(
            RecallRequest(
                question=args["question"],
                filter=self._filter(args),
                limit=args.get("limit", DEFAULT_LIMIT),
                instructions=args.get("instructions"),
            )
        )
        return {"answer": answer.answer, "citations": [render_citation(c) for c in answer.citations]}

    def _memory_fetch(self, args: dict[str, Any]) -> Result:
        modes = self.engine.descriptor().fetch_modes
        mode = (
            FetchMode(args["mode"]) if "mode" in args else (FetchMode.HYBRID if FetchMode.HYBRID in modes else modes[0])
        )
        page = self.engine.fetch(
            FetchRequest(
                query=args["query"],
                mode=mode,
                filter=self._filter(args),
                limit=args.get("limit", DEFAULT_LIMIT),
                cursor=args.get("cursor"),
            )
        )
        out: Result = {"hits": [render_hit(h) for h in page.hits]}
        if page.next_cursor is not None:
            out["next_cursor"] = page.next_cursor
        return out

    def _memory_list(self, args: dict[str, Any]) -> Result:
        page = self.engine.list(
            ListRequest(filter=self._filter(args), limit=args.get("limit", DEFAULT_LIMIT), cursor=args.get("cursor"))
        )
        out: Result = {"items": [render_hit(h) for h in page.items]}
        if page.next_cursor is not None:
            out["next_cursor"] = page.next_cursor
        return out

    def _readable(self, ids: list[str]) -> tuple[list[str], list[Any]]:
        wanted = list(dict.fromkeys(ids))
        hits = self.engine.get(GetRequest(ids=tuple(wanted), reach=self.scope.reach))
        return wanted, hits

    def _memory_get(self, args: dict[str, Any]) -> Result:
        wanted, hits = self._readable(args["ids"])
        found = {h.id for h in hits}
        return {"items": [render_hit(h) for h in hits], "missing": [i for i in wanted if i not in found]}

    def _memory_explore(self, args: dict[str, Any]) -> Result:
        page = self.engine.explore(
            ExploreRequest(
                facet=Facet(args["facet"]), filter=self._filter(args), limit=args.get("limit", DEFAULT_LIMIT)
            )
        )
        return page.to_dict()

    def _meta(self, tags: list[str]) -> MemoryMeta:
        return tool_meta(self.scope, tags, self._clock())

    def _item(self, args: dict[str, Any]) -> AnyItem:
        meta = self._meta(list(args.get("tags", ())))
        if "learning" in args:
            raw = args["learning"]
            for name in ("key", "importance"):
                if name in raw:
                    raise InvalidRequest(
                        "only a fact (learning_kind fact) takes a key or importance", f"learning.{name}"
                    )
            check_text(raw["text"], "learning.text")
            return Learning(
                text=raw["text"],
                kind=LearningKind(raw.get("learning_kind", LearningKind.FACT.value)),
                confidence=float(raw.get("confidence", 0.8)),
                evidence=raw.get("evidence"),
                meta=meta,
            )
        if "document" in args:
            raw = args["document"]
            return Document(title=raw.get("title"), body=DocumentBody(text=raw["text"]), meta=meta)
        turns = tuple(Turn(role=Role(t["role"]), text=t["text"]) for t in args["conversation"]["turns"])
        return Conversation(turns=turns, meta=meta)

    def _memory_store(self, args: dict[str, Any]) -> Result:
        raw = args.get("learning")
        if raw is not None and raw.get("learning_kind", LearningKind.FACT.value) == LearningKind.FACT.value:
            return self._store_fact(raw, list(args.get("tags", ())))
        receipt = self.engine.store(self._item(args))
        return {"id": receipt.id, "replayed": receipt.replayed}

    def _store_fact(self, raw: dict[str, Any], tags: list[str]) -> Result:
        """A fact: upserted by ``key``, else deduplicated by content (``facts.store``; seed 004)."""
        item = fact_item(
            raw["text"],
            self.scope.place,
            key=raw.get("key"),
            importance=raw.get("importance"),
            at=self._clock(),
            confidence=float(raw.get("confidence", 0.8)),
            tags=tags,
            evidence=raw.get("evidence"),
            field="learning.",
            agent_id=self.scope.agent_id,
        )
        receipt = FactStore(self.engine, self.scope.place).apply(item)
        return {"id": receipt.id, "replayed": receipt.replayed}

    def _memory_forget(self, args: dict[str, Any]) -> Result:
        if "ids" in args:
            wanted, hits = self._readable(args["ids"])
            found = list(dict.fromkeys(h.id for h in hits))
            if not found:
                return {"forgotten": 0, "skipped": len(wanted)}
            if self.scope.reach is not None:
                report = self.engine.forget_within(found, self.scope.reach)
            else:
                report = self.engine.forget(ForgetTarget(ids=tuple(found)))
            return {"forgotten": report.forgotten, "skipped": len(wanted) - len(found)}
        flt = self._filter(args)
        if flt.model_copy(update={"reach": None}).is_empty():
            raise InvalidRequest(
                "a forget filter must set a field (it would forget everything in reach)", field="filter"
            )
        report = self.engine.forget(ForgetTarget(filter=flt))
        return {"forgotten": report.forgotten, "skipped": 0}
