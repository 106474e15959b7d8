"""Facet counts over the items a filter admits (contract reference §1.8)."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pydantic import Field

from memory_core._model import ContractModel, StrictBool, StrictInt
from memory_core.errors import InvalidRequest
from memory_core.limits import DEFAULT_SCAN_LIMIT, MAX_BUCKETS, MAX_SCAN_LIMIT
from memory_core.meta import ItemKind, MetaFilter, SourceKind
from memory_core.namespace import Namespace, Reach
from memory_core.query import Hit

__all__ = ["Bucket", "ExplorePage", "ExploreRequest", "Facet", "facet_values", "tally"]


class Facet(StrEnum):
    """What ``explore`` counts by."""

    KIND = "kind"
    SOURCE = "source"
    SOURCE_ID = "source_id"
    WORKSPACE = "workspace"
    FOLDER = "folder"
    FILE_PATH = "file_path"
    LANGUAGE = "language"
    REPO = "repo"
    URL = "url"
    THREAD = "thread"
    AGENT = "agent"
    TOOL_CALL = "tool_call"
    TAG = "tag"
    NAMESPACE = "namespace"

    def narrow(self, filter: MetaFilter, value: str) -> MetaFilter:
        """Turn a chosen bucket back into a filter (``namespace`` sets ``Reach.exact``, overwriting any reach).

        Raises:
            InvalidRequest: a blank value, or an unknown kind or source.
        """
        if not value.strip():
            raise InvalidRequest("facet value is blank", field="value")
        simple = {
            Facet.SOURCE_ID: "source_id",
            Facet.WORKSPACE: "workspace",
            Facet.FOLDER: "folder",
            Facet.FILE_PATH: "file_path",
            Facet.LANGUAGE: "language",
            Facet.REPO: "repo",
            Facet.URL: "url",
            Facet.THREAD: "thread_id",
            Facet.AGENT: "agent_id",
            Facet.TOOL_CALL: "tool_call",
        }
        if self in simple:
            return filter.narrowed(**{simple[self]: value})
        if self is Facet.KIND:
            try:
                return filter.narrowed(kinds=(ItemKind(value),))
            except ValueError:
                raise InvalidRequest(f"unknown kind {value!r}", field="value") from None
        if self is Facet.SOURCE:
            try:
                return filter.narrowed(sources=(SourceKind(value),))
            except ValueError:
                raise InvalidRequest(f"unknown source {value!r}", field="value") from None
        if self is Facet.TAG:
            return filter.narrowed(tags_any=(value,))
        return filter.narrowed(reach=Reach.exact(Namespace.parse(value)))


class ExploreRequest(ContractModel):
    """``{facet, filter, limit 1..=500, scan_limit 1..=50_000}``."""

    facet: Facet
    filter: MetaFilter = Field(default_factory=MetaFilter)
    limit: StrictInt = Field(default=50, gt=0, le=MAX_BUCKETS)
    scan_limit: StrictInt = Field(default=DEFAULT_SCAN_LIMIT, gt=0, le=MAX_SCAN_LIMIT)


class Bucket(ContractModel):
    """``{value, count}``."""

    value: str
    count: StrictInt


class ExplorePage(ContractModel):
    """``{facet, buckets, total, missing, more_buckets, truncated}``; buckets by count desc, then value asc."""

    facet: Facet
    buckets: tuple[Bucket, ...] = ()
    total: StrictInt = 0
    missing: StrictInt = 0
    more_buckets: StrictInt = 0
    truncated: StrictBool = False


def facet_values(facet: Facet, hit: Hit) -> list[str]:
    """The values ``hit`` has for ``facet`` (several for ``tag``, none when missing)."""
    m = hit.meta
    if facet is Facet.KIND:
        return [hit.kind.value]
    if facet is Facet.SOURCE:
        return [m.source.kind.value]
    if facet is Facet.TAG:
        return list(m.tags)
    if facet is Facet.NAMESPACE:
        return [str(m.namespace)]
    if facet is Facet.TOOL_CALL:
        return [m.tool_call.name] if m.tool_call else []
    attr = {
        Facet.SOURCE_ID: m.source.id,
        Facet.WORKSPACE: m.workspace,
        Facet.FOLDER: m.folder,
        Facet.FILE_PATH: m.file_path,
        Facet.LANGUAGE: m.language,
        Facet.REPO: m.repo,
        Facet.URL: m.url,
        Facet.THREAD: m.thread_id,
        Facet.AGENT: m.agent_id,
    }[facet]
    return [attr] if attr is not None else []


def tally(facet: Facet, hits: Iterable[Hit], limit: int, truncated: bool) -> ExplorePage:
    """Count ``hits`` by ``facet`` into an ``ExplorePage`` (pure)."""
    counts: dict[str, int] = {}
    total = missing = 0
    for hit in hits:
        total += 1
        values = facet_values(facet, hit)
        if not values:
            missing += 1
        for v in values:
            counts[v] = counts.get(v, 0) + 1
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ExplorePage(
        facet=facet,
        buckets=tuple(Bucket(value=v, count=c) for v, c in ordered[:limit]),
        total=total,
        missing=missing,
        more_buckets=max(0, len(ordered) - limit),
        truncated=truncated,
    )
