"""What memory keeps of a turn: user text capped at 4,000 characters, assistant text at 8,000 (seed 004).

The host's transcript, not memory, holds a turn's full text (seed 004: "Never substitute the long-term store for
transcript history"), so ``AgentMemory`` logs the first ``cap`` characters followed by an explicit marker saying
how many were left out, never truncating silently, and ranks ``pre_turn``'s pack for the capped text. A turn's
cost on the live path is then bounded by the caps whatever its size (issue 11 rule 6). The caps are settings:
``MEMORY_CORE_USER_TEXT_CAP`` and ``MEMORY_CORE_ASSISTANT_TEXT_CAP`` (``docs/limits.md``).
"""

from __future__ import annotations

from typing import Final

from pydantic import Field

from memory_core._model import ContractModel, StrictInt
from memory_core.limits import ASSISTANT_TEXT_CAP, MAX_TEXT_CHARS, USER_TEXT_CAP
from memory_core.settings import Settings, get_settings

__all__ = ["TRUNCATION_MARKER", "TurnCaps", "cap_text"]

TRUNCATION_MARKER: Final = " [… truncated by memory: {dropped} of {total} characters left out]"
"""Follows the kept characters of a capped text; ``dropped`` and ``total`` are character counts."""


def cap_text(text: str, cap: int) -> str:
    """``text`` when it has at most ``cap`` characters; else its first ``cap`` and ``TRUNCATION_MARKER``.

    Pure and deterministic, so a retried turn logs the same text (and so the same item id).

    Args:
        text: The turn's text.
        cap: Characters to keep (> 0).

    Returns:
        At most ``cap`` characters plus the marker (under 80 characters).
    """
    if len(text) <= cap:
        return text
    return text[:cap] + TRUNCATION_MARKER.format(dropped=len(text) - cap, total=len(text))


class TurnCaps(ContractModel):
    """``{user_text, assistant_text}``: characters of each role's text memory keeps (4,000 and 8,000, seed 004)."""

    user_text: StrictInt = Field(default=USER_TEXT_CAP, gt=0, le=MAX_TEXT_CHARS)
    assistant_text: StrictInt = Field(default=ASSISTANT_TEXT_CAP, gt=0, le=MAX_TEXT_CHARS)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> TurnCaps:
        """``MEMORY_CORE_USER_TEXT_CAP`` and ``MEMORY_CORE_ASSISTANT_TEXT_CAP``."""
        s = settings or get_settings()
        return cls(user_text=s.user_text_cap, assistant_text=s.assistant_text_cap)

    def user(self, text: str) -> str:
        """``text`` capped as a user turn."""
        return cap_text(text, self.user_text)

    def assistant(self, text: str) -> str:
        """``text`` capped as an assistant turn."""
        return cap_text(text, self.assistant_text)
