"""A turn cut at its cap never keeps part of a credential (issue: a cut inside ``sk-…`` kept ``sk-ABCDEFGHIJKL``,
which no scrubber pattern matches, so it was stored verbatim with scrubbing on).

Each secret is cut at every offset inside it, glued to the text before it and after a space, and logged through
``AgentMemory`` on the scrubbing host engine; the stored text must hold no part of the secret, and stay within the
cap plus the marker.
"""

from __future__ import annotations

import pytest

from memory_core import ListRequest
from memory_core.engines import open_host_engine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.caps import TRUNCATION_MARKER
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.limits import USER_TEXT_CAP

SECRETS = (
    "sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ1234567890abcd",
    "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "AKIAIOSFODNN7EXAMPLE",
)
_MARKER_MAX = len(TRUNCATION_MARKER.format(dropped=10**7, total=10**7))


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("glue", ["", " "])
def test_a_secret_cut_at_any_offset_is_never_stored_partially(secret: str, glue: str) -> None:
    engine = open_host_engine("reference://", scrub=True)
    agent = AgentMemory(engine, MemoryLayout("team:acme"), "helper")
    offsets = range(1, len(secret))
    for turn, inside in enumerate(offsets):  # the cap falls after ``inside`` characters of the secret
        text = "U" * (USER_TEXT_CAP - inside - len(glue)) + glue + secret + " and more after it"
        ctx = agent.pre_turn({"thread_id": "t", "turn_index": turn, "user_text": text})
        assert ctx.log_error is None and ctx.logged is not None
    stored = [hit.text for hit in engine.list(ListRequest(limit=200)).items]
    assert len(stored) == len(offsets)
    for text in stored:
        assert "truncated by memory" in text and len(text) <= USER_TEXT_CAP + _MARKER_MAX
        assert secret[:3] not in text, text[-120:]  # not even "sk-", "ghp", "AKI"
        shown = text.removeprefix("user: ")  # a conversation's text shows each turn as "role: text"
        assert shown.startswith("U" if glue else "[… truncated")  # a glued secret takes the whole run with it


def test_a_whole_secret_before_the_cut_is_still_scrubbed() -> None:
    engine = open_host_engine("reference://", scrub=True)
    agent = AgentMemory(engine, MemoryLayout("team:acme"), "helper")
    for turn, secret in enumerate(SECRETS):
        text = "U " * 100 + secret + " " + "V" * USER_TEXT_CAP
        agent.pre_turn({"thread_id": "t", "turn_index": turn, "user_text": text})
    stored = "\n".join(hit.text for hit in engine.list(ListRequest(limit=10)).items)
    assert stored.count("truncated by memory") == len(SECRETS)
    for secret in SECRETS:
        assert secret[:3] not in stored
