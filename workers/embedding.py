"""The embedding job (``embed_items``): the model encodes stored items on a worker, in bounded batches.

Storing an item never runs the model (issue 14 §3); when and how the jobs run: docs/jobs.md ("Job kinds") and
docs/retrieval.md. An engine without ``embed_backlog`` embeds nothing.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from memory_core._model import ContractModel

__all__ = ["EMBED_PER_JOB", "EmbedItems", "waiting"]

EMBED_PER_JOB: Final = 4096
"""Most items one job encodes (~7 minutes for MiniLM int8 at 10 items/s on a loaded core: inside the time limit)."""


class EmbedItems(ContractModel):
    """Encode up to ``limit`` stored items that have no vectors of the current model, oldest first."""

    job: Literal["embed_items"] = "embed_items"
    limit: int = Field(default=EMBED_PER_JOB, gt=0, le=EMBED_PER_JOB)

    def name(self) -> str:
        """``embed_items``."""
        return self.job

    def describe(self) -> str:
        """Flower's summary: ``embed_items up to 4096``."""
        return f"embed_items up to {self.limit}"


def waiting(engine: object) -> int:
    """Items the engine's current model has not encoded (0 for an engine that embeds nothing in the background)."""
    stats = getattr(engine, "stats", None)
    if not callable(getattr(engine, "embed_backlog", None)) or not callable(stats):
        return 0
    return int(stats().get("embedding_wait", 0))
