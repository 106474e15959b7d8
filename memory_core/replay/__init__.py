"""Replaying conversation files through ``AgentMemory``: LoCoMo JSON, JSONL and ChatGPT exports."""

from memory_core.replay.formats import (
    ConversationFile,
    ReplayTurn,
    detect_format,
    load_conversations,
    parse_chatgpt_export,
    parse_jsonl,
    parse_locomo,
)

__all__ = [
    "ConversationFile",
    "ReplayTurn",
    "detect_format",
    "load_conversations",
    "parse_chatgpt_export",
    "parse_jsonl",
    "parse_locomo",
]
