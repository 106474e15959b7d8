"""``ContractModel.trusted`` and ``query.stored_meta``: the pack path's cheaper constructions build the values the
pydantic calls they replace build (issue 12, per-pack CPU)."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_core.items import Conversation, Learning, Role, Turn
from memory_core.memory_log import MemoryStatus, Tier
from memory_core.meta import ItemKind, MemoryMeta, TurnRange
from memory_core.namespace import Namespace
from memory_core.query import Hit, TimeHint, stored_meta

META = MemoryMeta(
    namespace=Namespace.agent("melanie"),
    thread_id="s1",
    turns=TurnRange(first=2, last=3),
    observed_at=datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
)


def _same(a: Hit, b: Hit) -> None:
    assert a == b and hash(a) == hash(b)
    assert a.__dict__ == b.__dict__
    assert a.model_fields_set == b.model_fields_set
    assert a.to_json() == b.to_json() and a.to_dict() == b.to_dict()


def test_a_trusted_hit_is_the_hit_model_construct_builds() -> None:
    given = {"id": "h1", "kind": ItemKind.CONVERSATION, "text": "user: hi", "meta": META, "score": 0.5}
    _same(Hit.trusted(**dict(given)), Hit.model_construct(**dict(given)))
    full = {**given, "confidence": 0.7, "derived_from": ("a", "b"), "status": MemoryStatus.LIVE, "tier": Tier.SHORT}
    _same(Hit.trusted(**dict(full)), Hit.model_construct(**dict(full)))
    assert Hit.trusted(**dict(given)).derived_from == () and Hit.trusted(**dict(given)).status is None


def test_hits_of_items_and_beliefs_are_built_as_before() -> None:
    turn = Conversation(turns=(Turn(role=Role.USER, text="I painted a sunrise"),), meta=META)
    hit = Hit.of(turn, 0.25, state=(MemoryStatus.LIVE, Tier.SHORT))
    _same(hit, Hit.model_construct(id=turn.id, kind=ItemKind.CONVERSATION, text=turn.render_text(), meta=META,
                                   score=0.25, confidence=None, status=MemoryStatus.LIVE, tier=Tier.SHORT))  # fmt: skip
    learning = Learning(text="Melanie paints", meta=META)
    assert Hit.of(learning).confidence == learning.confidence_value()
    belief = Hit.of_belief("b1", "Melanie paints sunrises", META.to_json(), 0.9, ["x", "y"], score=0.3)
    _same(belief, Hit.model_construct(id="b1", kind=ItemKind.LEARNING, text="Melanie paints sunrises", meta=META,
                                      score=0.3, confidence=0.9, derived_from=("x", "y")))  # fmt: skip


def test_a_model_with_aliases_goes_through_model_construct() -> None:
    hint = TimeHint.trusted(**{"from": datetime(2023, 5, 1).date(), "to": datetime(2023, 5, 2).date()})
    assert hint.from_ == datetime(2023, 5, 1).date() and hint.zone is None


def test_stored_meta_parses_once_per_text() -> None:
    stored_meta.cache_clear()
    text = META.to_json()
    first, second = stored_meta(text), stored_meta(text)
    assert first == MemoryMeta.model_validate_json(text) and first is second
    assert stored_meta.cache_info().misses == 1
