"""The agent memory lifecycle: layout, brain documents, background jobs (seed 000)."""

from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import (
    BackgroundJob,
    BuildBeliefs,
    IngestBrain,
    JobOutcome,
    JobReport,
    OutcomeKind,
    parse_job,
)
from memory_core.lifecycle.layout import BrainSource, MemoryLayout

__all__ = [
    "BackgroundJob",
    "BrainDocument",
    "BrainSource",
    "BuildBeliefs",
    "IngestBrain",
    "JobOutcome",
    "JobReport",
    "MemoryLayout",
    "OutcomeKind",
    "parse_job",
]
