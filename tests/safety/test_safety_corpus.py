"""The scrub corpus (tests/safety/safety_corpus.py): 100% precision and recall on the table, exact outputs."""

from __future__ import annotations

import pytest
from safety_corpus import NEGATIVES, POSITIVES, Case

from memory_core.safety import DETECTORS, Policy, Stage, find, scrub


def _score(cases: tuple[Case, ...]) -> tuple[int, int, int]:
    """True positives (secrets fully covered), false positives (findings over no secret), false negatives."""
    tp = fp = fn = 0
    for case in cases:
        findings = [(f.start, f.end) for f in find(case.text) if f.redacted]
        for start, end in case.spans():
            covered = any(fs <= start and end <= fe for fs, fe in findings)
            tp += covered
            fn += not covered
        fp += sum(1 for fs, fe in findings if not any(fs < e and s < fe for s, e in case.spans()))
    return tp, fp, fn


def test_corpus_precision_and_recall_are_both_100_percent() -> None:
    tp, fp, fn = _score(POSITIVES + NEGATIVES)
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    print(
        f"\nscrub corpus: {len(POSITIVES)} positive cases ({tp + fn} secrets), {len(NEGATIVES)} negative cases; "
        f"precision {precision:.1%} ({tp}/{tp + fp}), recall {recall:.1%} ({tp}/{tp + fn})"
    )
    assert (fp, fn) == (0, 0)


@pytest.mark.parametrize("case", POSITIVES, ids=lambda c: c.name)
def test_a_true_positive_becomes_its_label_and_nothing_else_changes(case: Case) -> None:
    assert scrub(case.text) == case.expected()


@pytest.mark.parametrize("case", NEGATIVES, ids=lambda c: c.name)
def test_a_true_negative_survives_untouched(case: Case) -> None:
    assert scrub(case.text) == case.text


def test_every_credential_shape_and_pii_class_has_a_positive_case() -> None:
    hit = {f.detector for case in POSITIVES for f in find(case.text)}
    assert hit == {d.name for d in DETECTORS} - {"pii_email"}


def test_emails_are_found_but_kept_unless_the_policy_redacts_them() -> None:
    text = "mail ada@example.com"
    assert [(f.detector, f.redacted) for f in find(text)] == [("pii_email", False)]
    assert scrub(text) == text
    assert scrub(text, Policy.strict()) == "mail [REDACTED_PII_EMAIL]"


def test_a_bare_luhn_run_without_an_iin_or_keyword_needs_the_strict_policy() -> None:
    text = "ref 7992739871300008"  # Luhn-valid, issuer prefix 79 belongs to no card scheme
    assert scrub(text) == text
    assert scrub(text, Policy.strict()) == "ref [REDACTED_PII_CARD]"


def test_stages_run_in_the_reference_order() -> None:
    stages = [d.stage for d in DETECTORS]
    assert stages == sorted(stages, key=list(Stage).index)


def test_an_earlier_stage_wins_an_overlap() -> None:
    # the key inside the assignment is one finding (the shape), not two
    found = find("api_key=AKIAIOSFODNN7EXAMPLE")
    assert [f.detector for f in found] == ["aws_access_key"]


def test_real_prose_loses_nothing(data_dir) -> None:  # type: ignore[no-untyped-def]
    """Ten PEPs and every LoCoMo turn hold no credential or identifier: nothing in them is redacted."""
    import json

    texts = [p.read_text(encoding="utf-8") for p in sorted((data_dir / "docs" / "peps").glob("*.rst"))]
    for sample in json.loads((data_dir / "locomo" / "locomo_dev.json").read_text()):
        for session in sample["conversation"].values():
            if isinstance(session, list):
                texts += [turn["text"] for turn in session if isinstance(turn, dict) and "text" in turn]
    assert len(texts) > 1000
    redacted = [(t[max(0, f.start - 30) : f.end + 10], f.detector) for t in texts for f in find(t) if f.redacted]
    assert redacted == []
    assert any(f.detector == "pii_email" for t in texts for f in find(t))  # the PEPs' author emails: found, kept
