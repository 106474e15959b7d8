"""The agent memory lifecycle: layout, brain documents, background jobs (seed 000)."""

from memory_core.lifecycle.agent import (
    AgentMemory,
    Compaction,
    PostTurn,
    PostTurnReport,
    PreTurn,
    StartSession,
    TurnContext,
)
from memory_core.lifecycle.brain import Brain, BrainBatch, Ingested
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
from memory_core.lifecycle.policy import (
    BRAIN_HEADING,
    BRAIN_SCOPES_PER_TURN,
    CONVERSATION_SCOPES_PER_TURN,
    HISTORY_HEADING,
    LEARNINGS_HEADING,
    SUMMARY_HEADING,
    TEAM_HEADING,
    THREAD_HEADING,
    CoreScope,
    RecallPolicy,
    standard_sections,
)
from memory_core.lifecycle.runner import BackgroundRunner

__all__ = [
    "BRAIN_HEADING",
    "BRAIN_SCOPES_PER_TURN",
    "CONVERSATION_SCOPES_PER_TURN",
    "HISTORY_HEADING",
    "LEARNINGS_HEADING",
    "SUMMARY_HEADING",
    "TEAM_HEADING",
    "THREAD_HEADING",
    "AgentMemory",
    "BackgroundJob",
    "BackgroundRunner",
    "Brain",
    "BrainBatch",
    "BrainDocument",
    "BrainSource",
    "BuildBeliefs",
    "Compaction",
    "CoreScope",
    "IngestBrain",
    "Ingested",
    "JobOutcome",
    "JobReport",
    "MemoryLayout",
    "OutcomeKind",
    "PostTurn",
    "PostTurnReport",
    "PreTurn",
    "RecallPolicy",
    "StartSession",
    "TurnContext",
    "parse_job",
    "standard_sections",
]
