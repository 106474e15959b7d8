"""Doubles for the embedding job's tests on every engine: a counting embedder and a recording queue."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory_core.retrieval.embedder import Encoded, HashEmbedder
from workers.kinds import JOB_KINDS

REPLY = "Noted, stored."
"""The assistant reply the tests store: the texts a ``Counting`` embedder records hold it."""


class Counting(HashEmbedder):
    """The hash embedder, recording the stored replies it encoded (a pack's query is encoded too: not counted)."""

    def __init__(self, name: str = "hash") -> None:
        self.name = name
        self.texts: list[str] = []

    def encode(self, texts: Sequence[str]) -> Encoded:
        self.texts.extend(t for t in texts if REPLY in t)
        return super().encode(texts)


@dataclass
class Submitted:
    """Stands in for ``JobQueue`` inside a worker: parses and records what a handler submits."""

    jobs: list[Any] = field(default_factory=list)

    def submit(self, job: Any, *, job_id: str | None = None) -> str:
        self.jobs.append(JOB_KINDS.parse(job))
        return f"follow-{len(self.jobs)}"
