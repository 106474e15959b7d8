"""Golden ids: the canonical JSON each item kind hashes, byte for byte, and its 40-hex id (reference §1.4).

Each canonical string below was written by hand from the rules of reference §1.4 (tag first, declared field
order, ``None``/empty ``tool_calls``/empty ``tags``/root namespace left out, chrono's RFC 3339 with fractional
seconds only when non-zero, non-ASCII raw; ``observed_at``, ``observed_actor`` and the tool-call id cleared), and
each id was computed from that string alone with ``hashlib.sha256(canonical.encode()).hexdigest()[:40]``. So
a change of hash (MD5, a different cut), of field order or of an omission rule fails here, while the property
tests (id stable under key order, …) would all still pass.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from memory_core import (
    Conversation,
    Document,
    Learning,
    LearningKind,
    MemoryMeta,
    Namespace,
    ObservedActor,
    Role,
    SourceKind,
    SourceRef,
    ToolCallMeta,
    ToolCallRef,
    Turn,
    TurnRange,
)
from memory_core.items import canonical_json

OBSERVED = datetime(2024, 3, 1, 9, 31, tzinfo=UTC)

DOCUMENT = Document.of(
    "Ship on Friday.",
    MemoryMeta(
        namespace=Namespace.parse("team:acme/agent:writer"),
        workspace="w",
        tags=("plan",),
        observed_at=OBSERVED,  # left out of the id
    ),
    title="Plan",
    mime="text/markdown",
)
DOCUMENT_JSON = (
    '{"type":"document","title":"Plan","body":{"text":"Ship on Friday."},"mime":"text/markdown",'
    '"meta":{"namespace":"team:acme/agent:writer","workspace":"w","source":{"kind":"agent"},"tags":["plan"]}}'
)
DOCUMENT_ID = "ca674d88a6025697815287cff2d68529c34be54c"

CONVERSATION = Conversation(
    turns=(
        Turn(role=Role.USER, text="When do we ship?", at=datetime(2024, 3, 1, 9, 30, 0, 250_000, tzinfo=UTC)),
        Turn(
            role=Role.ASSISTANT,
            text="Friday.",
            at=datetime(2024, 3, 1, 9, 30, 5, 123_456, tzinfo=UTC),
            tool_calls=(ToolCallRef(name="calendar", id="c1"),),  # a turn's tool-call id stays in the id
        ),
    ),
    meta=MemoryMeta(
        namespace=Namespace.parse("agent:writer"),
        thread_id="t1",
        turns=TurnRange(first=0, last=1),
        tool_call=ToolCallMeta(name="calendar", id="call-9"),  # this id is minted per retry: left out
        source=SourceRef(kind=SourceKind.CONVERSATION, id="chat-1"),
        observed_at=OBSERVED,
    ),
)
CONVERSATION_JSON = (
    '{"type":"conversation","turns":[{"role":"user","text":"When do we ship?","at":"2024-03-01T09:30:00.250Z"},'
    '{"role":"assistant","text":"Friday.","at":"2024-03-01T09:30:05.123456Z","tool_calls":[{"name":"calendar",'
    '"id":"c1"}]}],"meta":{"namespace":"agent:writer","thread_id":"t1","turns":{"first":0,"last":1},'
    '"tool_call":{"name":"calendar"},"source":{"kind":"conversation","id":"chat-1"}}}'
)
CONVERSATION_ID = "919d4b0ffe100d9176d173a0405a536c2b5f78b9"

LEARNING = Learning(
    text="Prefers tea — not coffee",
    kind=LearningKind.PREFERENCE,
    confidence=0.75,
    evidence="said so",
    meta=MemoryMeta(
        namespace=Namespace.parse("user:priya"),
        derive=False,
        observed_actor=ObservedActor(id="user:priya@acme.com", name="Priya"),  # left out of the id
    ),
)
LEARNING_JSON = (
    '{"type":"learning","text":"Prefers tea — not coffee","kind":"preference","confidence":0.75,'
    '"evidence":"said so","meta":{"namespace":"user:priya","source":{"kind":"agent"},"derive":false}}'
)
LEARNING_ID = "cdb111537714aa19907e1171bdeaaed1f9cf4101"

GOLDEN = [
    ("document", DOCUMENT, DOCUMENT_JSON, DOCUMENT_ID),
    ("conversation", CONVERSATION, CONVERSATION_JSON, CONVERSATION_ID),
    ("learning", LEARNING, LEARNING_JSON, LEARNING_ID),
]


@pytest.mark.parametrize(("kind", "item", "canonical", "item_id"), GOLDEN, ids=[row[0] for row in GOLDEN])
def test_the_canonical_json_is_the_reference_bytes(
    kind: str, item: Document | Conversation | Learning, canonical: str, item_id: str
) -> None:
    assert canonical_json(item).encode("utf-8") == canonical.encode("utf-8")


@pytest.mark.parametrize(("kind", "item", "canonical", "item_id"), GOLDEN, ids=[row[0] for row in GOLDEN])
def test_the_id_is_the_first_40_hex_of_sha256_over_those_bytes(
    kind: str, item: Document | Conversation | Learning, canonical: str, item_id: str
) -> None:
    assert hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:40] == item_id  # the literal's derivation
    assert item.fingerprint() == item.id == item_id


def test_a_root_namespace_is_left_out_so_old_ids_stay_stable() -> None:
    item = Document.of("x")
    assert canonical_json(item) == '{"type":"document","body":{"text":"x"},"meta":{"source":{"kind":"agent"}}}'
    assert item.id == hashlib.sha256(canonical_json(item).encode()).hexdigest()[:40]
