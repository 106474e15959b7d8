"""Two different agent ids never share a node (issue 11 rule 7).

Main mapped an id that is not a segment id (``"Helper Bot"``) to the contract's sanitised id
``Helper-Bot-<fnv1a32>``, itself a valid id: an agent given that id wrote to and read the first one's history.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.engine import MemoryEngine
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite.engine import SQLiteEngine
from memory_core.errors import InvalidRequest
from memory_core.items import Conversation, Role, Turn
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.agent_ids import move_sanitised_history
from memory_core.lifecycle.layout import UNSEGMENTED_PREFIX, MemoryLayout, agent_segment_id
from memory_core.lifecycle.policy import HISTORY_HEADING
from memory_core.meta import ItemKind, MemoryMeta, MetaFilter
from memory_core.namespace import Namespace, Reach, SegmentKind, is_segment_id, sanitize_segment_id
from memory_core.query import ListRequest

LAYOUT = MemoryLayout("team:acme")
_SEGMENT_IDS = st.from_regex(r"[A-Za-z0-9_-]{1,128}", fullmatch=True).filter(lambda s: not s.startswith("--"))
_ANY_IDS = st.text(min_size=1, max_size=300).filter(lambda s: bool(s.strip()))


def _accepted(raw: str) -> bool:
    stripped = raw.strip()
    return bool(stripped) and not (stripped.startswith(UNSEGMENTED_PREFIX) and is_segment_id(stripped))


@settings(max_examples=300, deadline=None)
@given(agent=_SEGMENT_IDS)
def test_a_segment_id_keeps_the_contracts_node(agent: str) -> None:
    assert LAYOUT.conversations(agent) == LAYOUT.root.child(SegmentKind.AGENT, sanitize_segment_id(agent))
    assert LAYOUT.conversations(agent) == LAYOUT.contract_conversations(agent)


@settings(max_examples=300, deadline=None)
@given(a=_ANY_IDS | _SEGMENT_IDS, b=_ANY_IDS | _SEGMENT_IDS)
def test_two_different_ids_never_share_a_node(a: str, b: str) -> None:
    if not (_accepted(a) and _accepted(b)) or a.strip() == b.strip():
        return
    assert LAYOUT.conversations(a) != LAYOUT.conversations(b)


@settings(max_examples=300, deadline=None)
@given(agent=_ANY_IDS)
def test_the_contracts_sanitised_id_names_a_node_of_its_own(agent: str) -> None:
    """The attack: give a second agent the id the first one's node used to have."""
    if not _accepted(agent) or is_segment_id(agent.strip()):
        return
    impostor = sanitize_segment_id(agent.strip())
    if _accepted(impostor):
        assert LAYOUT.conversations(impostor) != LAYOUT.conversations(agent)
    else:  # e.g. "##x" was "---x-<hash>": a valid id in the reserved space, refused
        with pytest.raises(InvalidRequest):
            LAYOUT.conversations(impostor)
    node_id = agent_segment_id(agent)
    assert node_id.startswith(UNSEGMENTED_PREFIX) and is_segment_id(node_id)
    with pytest.raises(InvalidRequest) as err:  # no valid id can name it
        LAYOUT.conversations(node_id)
    assert err.value.field == "agent_id"


def test_ids_colliding_under_the_contracts_32_bit_hash_get_their_own_nodes() -> None:
    # found by a birthday search: the same illegal-character positions and the same FNV-1a 32-bit hash, so the
    # contract's sanitised ids are equal (a 32-bit hash is no identity)
    a, b = "bot \u00b7\u00f5\u010f\u0108\u00de", "bot \u00ae\u00f5\u011f\u013a\u00e9"
    assert sanitize_segment_id(a) == sanitize_segment_id(b)
    assert LAYOUT.conversations(a) != LAYOUT.conversations(b)


def _engine(kind: str, tmp_path: Path) -> MemoryEngine:
    return ReferenceEngine() if kind == "reference" else SQLiteEngine(tmp_path / "memory.db")


def _turn(node: Namespace, agent_id: str, text: str) -> Conversation:
    meta = MemoryMeta(namespace=node, agent_id=agent_id, thread_id="t")
    return Conversation(turns=(Turn(role=Role.USER, text=text),), meta=meta)


def _history(agent: AgentMemory, query: str | None) -> list[str]:
    pack = agent.recall(query)
    return [hit.text for section in pack.sections if section.heading == HISTORY_HEADING for hit in section.hits]


@pytest.mark.parametrize("kind", ["reference", "sqlite"])
def test_stored_history_moves_to_the_new_node_and_the_impostor_keeps_only_its_own(kind: str, tmp_path: Path) -> None:
    with _engine(kind, tmp_path) as engine:
        old = LAYOUT.contract_conversations("Helper Bot")
        impostor_id = old.last[1] if old.last else ""
        # what main stored: "Helper Bot"'s turns at the sanitised node, and the impostor's at the same node
        engine.store(_turn(old, "Helper Bot", "my account number is 4242"))
        engine.store(_turn(old, impostor_id, "the impostor likes tea"))

        helper = AgentMemory(engine, LAYOUT, "Helper Bot")
        assert helper.node != old
        assert _history(helper, None) == ["user: my account number is 4242"]
        impostor = AgentMemory(engine, LAYOUT, impostor_id)
        assert impostor.node == old
        assert _history(impostor, None) == ["user: the impostor likes tea"]
        at_old = engine.list(ListRequest(filter=MetaFilter(reach=Reach.exact(old), kinds=(ItemKind.CONVERSATION,))))
        assert [h.meta.agent_id for h in at_old.items] == [impostor_id]
        assert move_sanitised_history(engine, LAYOUT, "Helper Bot") == 0  # a rerun moves nothing


@pytest.mark.parametrize("kind", ["reference", "sqlite"])
def test_new_turns_of_an_unsegmented_id_stay_out_of_the_impostors_history(kind: str, tmp_path: Path) -> None:
    with _engine(kind, tmp_path) as engine:
        helper = AgentMemory(engine, LAYOUT, "Helper Bot")
        helper.post_turn({"thread_id": "t", "turn_index": 0, "assistant_text": "the vault code is 9931"})
        impostor = AgentMemory(engine, LAYOUT, sanitize_segment_id("Helper Bot"))
        assert _history(impostor, None) == []
        assert _history(helper, None) == ["assistant: the vault code is 9931"]


def test_a_segment_id_with_the_reserved_prefix_is_refused() -> None:
    with pytest.raises(InvalidRequest) as err:
        AgentMemory(ReferenceEngine(), LAYOUT, "--x")
    assert err.value.field == "agent_id"


def test_an_engine_that_cannot_export_still_opens_the_agent_and_says_why_nothing_moved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from memory_core.conformance.faults import Fault, FaultyEngine  # forwards the core contract only: no export

    engine = FaultyEngine(ReferenceEngine(), Fault.DOWN)
    with caplog.at_level("WARNING", logger="memory_core.lifecycle.agent_ids"):
        helper = AgentMemory(engine, LAYOUT, "Helper Bot")
    assert helper.node == LAYOUT.conversations("Helper Bot")
    assert any("was not moved" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="memory_core.lifecycle.agent_ids"):
        AgentMemory(engine, LAYOUT, "helper")  # a segment id never tries
    assert not caplog.records
