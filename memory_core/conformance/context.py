"""A run's identity (``Run``) and the helpers every check uses (``CheckContext``).

A run writes only under its own workspace, ``memory-core-conformance/<nonce>``, and every text it stores
carries the marker word ``tmconf<nonce>``; filter probes live in ``<workspace>/probes``. So no check reads or
forgets another item, and cleanup removes exactly the items it wrote (contract reference §2, "How a run works").
The log checks' rollbacks are store-wide all the same (seed 002), so the command runs only against an engine
holding nothing yet (``conformance.fresh``).

Every listing pages with ``limit=2`` so that cursors are exercised, and fails on a non-zero score, a repeated
cursor, or a listing that does not end within 10,000 pages (reference §2).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, NoReturn, ParamSpec, Protocol, TypeVar

from memory_core._model import ContractModel
from memory_core.conformance.report import CheckFailed, EngineFailed
from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest, MemoryCoreError, Unsupported
from memory_core.items import Document
from memory_core.meta import MemoryMeta, MetaFilter
from memory_core.namespace import Namespace
from memory_core.query import Exported, ExportPage, Hit, ListRequest

__all__ = ["LIST_PAGE_SIZE", "MAX_PAGES", "WORKSPACE_PREFIX", "CheckContext", "Run", "new_nonce", "show_ids"]

_T = TypeVar("_T")
_P = ParamSpec("_P")


class _Paged(Protocol):
    @property
    def next_cursor(self) -> str | None: ...


_PageT = TypeVar("_PageT", bound=_Paged)

WORKSPACE_PREFIX: Final = "memory-core-conformance"
"""Prefix of every run's workspace (the reference's ``tinymemory-conformance``, renamed for this project)."""
MAX_PAGES: Final = 10_000
"""Most pages one listing may take before the suite calls the cursor endless (reference §2)."""
LIST_PAGE_SIZE: Final = 2
"""Page size of every listing the suite makes, so paging is exercised on every read (reference §2)."""
_NONCE = re.compile(r"^[a-z0-9]{1,40}$")


def new_nonce() -> str:
    """A fresh run nonce: lowercase hex of the clock in ns plus 16 random bits (one word to a tokenizer)."""
    return f"{time.time_ns():x}{secrets.token_hex(2)}"


@dataclass(frozen=True)
class Run:
    """One run's identity: the workspace it writes under and the word every text carries.

    Attributes:
        nonce: Lowercase letters and digits only, so ``marker`` is a single token for every tokenizer.
        workspace: ``memory-core-conformance/<nonce>``; every item of the run (probes aside) carries it.
        probe_workspace: ``<workspace>/probes``, the filter probes' own workspace, so no other item of the run
            can satisfy a probe's filter.
        marker: ``tmconf<nonce>``, in every text the run stores, so any fetch mode finds the run's items.
    """

    nonce: str
    workspace: str
    probe_workspace: str
    marker: str

    @classmethod
    def fresh(cls, nonce: str | None = None) -> Run:
        """A run with ``nonce`` (a fresh one by default).

        Raises:
            InvalidRequest: the nonce is not 1..=40 lowercase letters and digits.
        """
        nonce = new_nonce() if nonce is None else nonce
        if not _NONCE.match(nonce):
            raise InvalidRequest("a nonce is 1..=40 lowercase letters and digits", field="nonce")
        workspace = f"{WORKSPACE_PREFIX}/{nonce}"
        return cls(nonce=nonce, workspace=workspace, probe_workspace=f"{workspace}/probes", marker=f"tmconf{nonce}")

    def meta(self, **changes: object) -> MemoryMeta:
        """Metadata naming the run's workspace, plus ``changes``."""
        return MemoryMeta.model_validate({"workspace": self.workspace, **changes})

    def probe_meta(self, **changes: object) -> MemoryMeta:
        """Metadata naming the probes' workspace, plus ``changes``."""
        return MemoryMeta.model_validate({"workspace": self.probe_workspace, **changes})

    def filter(self, **changes: object) -> MetaFilter:
        """A filter on the run's workspace, plus ``changes``."""
        return MetaFilter.model_validate({"workspace": self.workspace, **changes})

    def probe_filter(self, **changes: object) -> MetaFilter:
        """A filter on the probes' workspace, plus ``changes``."""
        return MetaFilter.model_validate({"workspace": self.probe_workspace, **changes})

    def document(self, label: str, meta: MemoryMeta | None = None) -> Document:
        """A plain document ``"<marker> <label> note"`` in the run's workspace (or with ``meta``)."""
        return Document.of(f"{self.marker} {label} note", meta if meta is not None else self.meta())

    def node(self, suffix: str) -> Namespace:
        """``agent:<marker>-<suffix>``, a node no other run uses (``suffix`` may add ``/kind:id`` segments)."""
        return Namespace.parse(f"agent:{self.marker}-{suffix}")


class CheckContext:
    """What a check body uses: the engine, the run, and assertions that name the check.

    Args:
        engine: The engine under test.
        run: The run's identity.
        check: The name of the check this context reports for.
    """

    def __init__(self, engine: MemoryEngine, run: Run, check: str) -> None:
        self.engine = engine
        self.run = run
        self.check = check

    # outcomes ------------------------------------------------------------------------------------------
    def fail(self, detail: str) -> NoReturn:
        """Fail the check: the engine answered wrongly.

        Raises:
            CheckFailed: always.
        """
        raise CheckFailed(self.check, detail)

    def ensure(self, holds: bool, detail: str) -> None:
        """Fail the check with ``detail`` unless ``holds``.

        Raises:
            CheckFailed: ``holds`` is false.
        """
        if not holds:
            self.fail(detail)

    def call(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Make one engine call the engine must serve: ``c.call(c.engine.store, item)``.

        Raises:
            EngineFailed: the call raised (any exception, so a crashing engine is reported, not propagated).
        """
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise EngineFailed(self.check, exc) from exc

    def refuses(
        self,
        what: str,
        fn: Callable[[Any], object],
        request: Any,
        errors: tuple[type[MemoryCoreError], ...] = (InvalidRequest,),
    ) -> None:
        """Expect ``fn(request)`` to be refused with one of ``errors``.

        Malformed requests are sent as raw JSON objects (contract models refuse them on construction), so the
        engine's own validation is what is tested: ``c.refuses("an empty forget", c.engine.forget, {"ids": []})``.

        Raises:
            CheckFailed: the call succeeded, or failed with another error.
        """
        names = " or ".join(e.__name__ for e in errors)
        try:
            answer = fn(request)
        except errors:
            return
        except Exception as exc:
            self.fail(f"{what} must be refused with {names}, but raised {type(exc).__name__}: {exc}")
        self.fail(f"{what} must be refused with {names}, but answered {_brief(answer)}")

    # reads ---------------------------------------------------------------------------------------------
    def list_all(self, flt: MetaFilter) -> list[Hit]:
        """Every hit ``flt`` admits, listed two at a time.

        Raises:
            CheckFailed: a non-zero score, a repeated cursor, or no end within 10,000 pages.
            EngineFailed: a ``list`` call failed.
        """
        hits: list[Hit] = []
        for page in self._pages(lambda cursor: self.call(self.engine.list, self._page(flt, cursor)), "listing"):
            scored = [(hit.id, hit.score) for hit in page.items if hit.score != 0.0]
            self.ensure(not scored, f"a listing returned non-zero scores: {scored}")
            hits.extend(page.items)
        return hits

    def ids(self, flt: MetaFilter) -> list[str]:
        """The ids of ``list_all(flt)``, in listing order."""
        return [hit.id for hit in self.list_all(flt)]

    def export_all(self, flt: MetaFilter) -> list[Exported] | None:
        """Every item ``flt`` admits, exported two at a time; None when the first page is ``Unsupported``.

        Raises:
            CheckFailed: a page names ``incomplete`` items, a cursor repeats, or no end within 10,000 pages.
            EngineFailed: an ``export`` call failed (after the first page, ``Unsupported`` included).
        """
        exported: list[Exported] = []

        def fetch(cursor: str | None) -> ExportPage:
            try:
                return self.engine.export(self._page(flt, cursor))
            except Unsupported:
                if cursor is None:
                    raise _ExportRefused from None
                raise EngineFailed(self.check, Unsupported("export refused after its first page")) from None
            except Exception as exc:
                raise EngineFailed(self.check, exc) from exc

        try:
            for page in self._pages(fetch, "export"):
                self.ensure(not page.incomplete, f"whole items were exported as incomplete: {list(page.incomplete)}")
                exported.extend(page.items)
        except _ExportRefused:
            return None
        return exported

    @staticmethod
    def _page(flt: MetaFilter, cursor: str | None) -> ListRequest:
        return ListRequest(filter=flt, limit=LIST_PAGE_SIZE, cursor=cursor)

    def _pages(self, fetch: Callable[[str | None], _PageT], what: str) -> Iterator[_PageT]:
        """Every page ``fetch(cursor)`` returns, failing on a repeated cursor or after ``MAX_PAGES`` pages."""
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            page = fetch(cursor)
            yield page
            if page.next_cursor is None:
                return
            self.ensure(page.next_cursor not in seen, f"the {what} cursor {page.next_cursor!r} repeated")
            seen.add(page.next_cursor)
            cursor = page.next_cursor
        self.fail(f"a {what} did not end within {MAX_PAGES} pages")


class _ExportRefused(Exception):
    """The engine refused the first export page: it does not export (the check is skipped)."""


def show_ids(ids: Iterable[str], limit: int = 6) -> str:
    """Ids for a failure detail: each cut to 12 characters, at most ``limit`` shown (``[0093621a2b95…, …] +3``)."""
    shown = [i if len(i) <= 13 else f"{i[:12]}…" for i in ids]
    more = f" +{len(shown) - limit} more" if len(shown) > limit else ""
    return f"[{', '.join(shown[:limit])}]{more}"


def _brief(value: object, limit: int = 140) -> str:
    text = value.to_json() if isinstance(value, ContractModel) else repr(value)
    text = f"{type(value).__name__} {text}"
    return text if len(text) <= limit else text[: limit - 1] + "…"
