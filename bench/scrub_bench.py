"""The cost of scrubbing a write: a 1 KB turn and a 100 KB document, scrubbed against unscrubbed, same run.

Run ``python -m bench.scrub_bench`` (full) or ``--quick``. Text is real prose: PEPs from
``<MEMORY_CORE_DATA_DIR>/docs/peps`` cut into 1 KB turns and 100 KB documents, each one distinct (a counter in
front, so no write is a replay).

* ``scrub`` p50/p99 (µs): the scrub pass alone (``safety.scrub``) over the text.
* scrubbed write p50/p99 (µs): ``ScrubbingEngine(SQLiteEngine)`` storing it, beside the same write on a bare
  ``SQLiteEngine``, the two alternating text by text (turns ``store_with(accepted)``, as ``pre_turn`` logs them;
  documents ``store``, visible, as ``Brain.ingest`` does).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.common import Row, machine, percentile, print_table
from memory_core import Conversation, Document, MemoryEngine, MemoryMeta, WriteOptions
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.items import Role, Turn
from memory_core.safety import scrub
from memory_core.safety.engine import ScrubbingEngine
from memory_core.settings import get_settings

__all__ = ["FULL", "QUICK", "Sizes", "run"]


@dataclass(frozen=True)
class Sizes:
    """Calls timed: ``turns`` 1 KB turns and ``documents`` 100 KB documents per engine."""

    turns: int
    documents: int
    turn_bytes: int = 1_000
    document_bytes: int = 100_000


FULL = Sizes(turns=500, documents=40)
QUICK = Sizes(turns=100, documents=8)


def _prose() -> str:
    folder = get_settings().data_dir / "docs" / "peps"
    texts = sorted(folder.glob("*.rst")) if folder.is_dir() else []
    if not texts:
        raise FileNotFoundError(f"no PEPs under {folder} (set MEMORY_CORE_DATA_DIR to the folder holding docs/)")
    return "\n\n".join(p.read_text(encoding="utf-8") for p in texts)


def _cut(prose: str, size: int, n: int) -> list[str]:
    """``n`` distinct texts of about ``size`` characters, cut from ``prose`` (wrapping around)."""
    doubled = prose * (1 + (size * n) // max(1, len(prose)) + 1)
    return [f"{i}. {doubled[(i * size) % len(prose) :][: size - 8]}" for i in range(n)]


def _time_us(fn: Callable[[str], object], texts: list[str]) -> list[float]:
    out: list[float] = []
    for text in texts:
        start = time.perf_counter()
        fn(text)
        out.append((time.perf_counter() - start) * 1e6)
    return out


def _paired(
    bare: Callable[[str], object], wrapped: Callable[[str], object], texts: list[str]
) -> tuple[list[float], list[float]]:
    """Each text written bare then scrubbed, alternately, so both see the same machine (µs each)."""
    bare_us: list[float] = []
    wrapped_us: list[float] = []
    for text in texts:
        bare_us += _time_us(bare, [text])
        wrapped_us += _time_us(wrapped, [text])
    return bare_us, wrapped_us


def _turn(text: str) -> Conversation:
    return Conversation(turns=(Turn(role=Role.USER, text=text),), meta=MemoryMeta(thread_id="bench"))


def _rows(name: str, setup: str, scrub_us: list[float], bare_us: list[float], wrapped_us: list[float]) -> list[Row]:
    rows: list[Row] = []
    for q in (50, 99):
        bare = percentile(bare_us, q)
        rows.append(Row(f"scrub p{q}", setup, percentile(scrub_us, q), "µs", bare, f"unscrubbed {name}"))
        rows.append(Row(f"scrubbed {name} p{q}", setup, percentile(wrapped_us, q), "µs", bare, f"unscrubbed {name}"))
    return rows


def run(quick: bool = False, sizes: Sizes | None = None) -> list[Row]:
    """Every scrub benchmark row (``quick``: ``QUICK``; ``sizes`` overrides both).

    Raises:
        FileNotFoundError: no PEPs under ``MEMORY_CORE_DATA_DIR``.
    """
    size = sizes or (QUICK if quick else FULL)
    prose = _prose()
    tmp = Path(tempfile.mkdtemp(prefix="scrub-bench-"))
    accepted = WriteOptions.accepted()
    try:
        bare: MemoryEngine = SQLiteEngine(tmp / "bare.db")
        wrapped = ScrubbingEngine(SQLiteEngine(tmp / "scrubbed.db"))
        rows: list[Row] = []
        turns = _cut(prose, size.turn_bytes, size.turns)
        scrub_us = _time_us(scrub, turns)
        bare_us, wrapped_us = _paired(
            lambda t: bare.store_with(_turn("a" + t), accepted),
            lambda t: wrapped.store_with(_turn("b" + t), accepted),
            turns,
        )
        rows += _rows(
            "store_with(accepted)",
            f"sqlite, {size.turns} turns of {size.turn_bytes // 1000} KB",
            scrub_us,
            bare_us,
            wrapped_us,
        )
        docs = _cut(prose, size.document_bytes, size.documents)
        scrub_us = _time_us(scrub, docs)
        bare_us, wrapped_us = _paired(
            lambda t: bare.store(Document.of("a" + t)), lambda t: wrapped.store(Document.of("b" + t)), docs
        )
        rows += _rows(
            "store",
            f"sqlite, {size.documents} documents of {size.document_bytes // 1000} KB",
            scrub_us,
            bare_us,
            wrapped_us,
        )
        bare.close()
        wrapped.close()
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, seconds")
    args = parser.parse_args()
    print_table(run(quick=args.quick), title="Scrubbing")
    print(f"\nmachine: {machine()}")
