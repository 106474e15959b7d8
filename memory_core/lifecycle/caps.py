"""What memory keeps of a turn: user text capped at 4,000 characters, assistant text at 8,000 (seed 004).

The host's transcript, not memory, holds a turn's full text (seed 004: "Never substitute the long-term store for
transcript history"), so ``AgentMemory`` logs at most the first ``cap`` characters, cut back to the last whole
whitespace-delimited run, followed by an explicit marker saying how many were left out, never truncating
silently, and ranks ``pre_turn``'s pack for the capped text. A turn's cost on the live path is then bounded by the
caps whatever its size (issue 11 rule 6). The caps are settings: ``MEMORY_CORE_USER_TEXT_CAP`` and
``MEMORY_CORE_ASSISTANT_TEXT_CAP`` (``docs/limits.md``).
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
    """``text`` when it has at most ``cap`` characters; else a prefix of at most ``cap`` and ``TRUNCATION_MARKER``.

    The prefix never ends inside a whitespace-delimited run: when the cut at ``cap`` splits a run (the characters
    either side of it are both non-whitespace), the prefix ends before that run, and trailing whitespace is dropped;
    a text whose first ``cap`` characters are one run is logged as the marker alone. A partial token is never
    kept, so a credential cut in half cannot slip past the scrubber's patterns (``memory_core.safety``), which
    need the whole token. Pure and deterministic, so a retried turn logs the same text (and so the same item id).

    Args:
        text: The turn's text.
        cap: Characters to keep at most (> 0).

    Returns:
        At most ``cap`` characters plus the marker (under 80 characters); the marker counts the characters left
        out of ``text``.
    """
    if len(text) <= cap:
        return text
    kept = text[:cap]
    if not text[cap].isspace() and not kept[-1].isspace():  # the cut splits a run: drop all of it
        head = kept.rsplit(None, 1)  # [before the last run, the last run], or [the run] when it is all there is
        kept = head[0] if len(head) == 2 else ""
    kept = kept.rstrip()
    marker = TRUNCATION_MARKER.format(dropped=len(text) - len(kept), total=len(text))
    return kept + marker if kept else marker.lstrip()


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
