"""Properties of the scrub pass over any text: it never fails, it is idempotent, it keeps what it does not
redact, and a known secret dropped anywhere into prose (with hidden characters or not) is gone."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from safety_corpus import POSITIVES

from memory_core.safety import find, scrub
from memory_core.safety.normalize import HIDDEN, normalize

SECRETS = [(case.secrets[0], case.label) for case in POSITIVES if len(case.secrets) == 1]
WORDS = st.sampled_from(["the", "ring", "bearer", "order", "2024-05-17", "v1.2.3", "note:", "\n", "and", "#42"])
PROSE = st.lists(WORDS, max_size=12).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_scrubs_without_error_and_a_second_pass_changes_nothing(text: str) -> None:
    once = scrub(text)
    assert scrub(once) == once


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_findings_lie_inside_the_text_in_order_without_overlap(text: str) -> None:
    end = 0
    for finding in find(text):
        assert end <= finding.start < finding.end <= len(text)
        end = finding.end


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab1２٣ \u200b\u00ad\ufeff-"), max_size=60))
def test_normalized_spans_map_back_inside_the_original(text: str) -> None:
    norm = normalize(text)
    assert len(norm.text) == len(text) - sum(ch in HIDDEN for ch in text)
    for start in range(len(norm.text)):
        for stop in range(start + 1, len(norm.text) + 1):
            lo, hi = norm.span(start, stop)
            assert 0 <= lo < hi <= len(text)


@settings(max_examples=300, deadline=None)
@given(PROSE, st.sampled_from(SECRETS), PROSE)
def test_a_known_secret_anywhere_in_prose_is_redacted(before: str, secret: tuple[str, str], after: str) -> None:
    value, label = secret
    case = next(c for c in POSITIVES if c.secrets == (value,))
    text = f"{before} {case.text} {after}"
    scrubbed = scrub(text)
    assert value not in scrubbed and label in scrubbed


TOKENS = [
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ",
    "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(TOKENS), st.integers(min_value=8), PROSE, st.sampled_from(["", "\u200b", "é"]), PROSE)
def test_a_token_wrapped_across_lines_is_redacted_whole(
    token: str, cut: int, before: str, odd: str, after: str
) -> None:
    at = 8 + cut % (len(token) - 15)  # 8+ characters each side of the break
    text = f"{before}{odd} {token[:at]}\n    {token[at:]} {after}"
    scrubbed = scrub(text)
    assert token[:at] not in scrubbed and token[at:] not in scrubbed and "[REDACTED]" in scrubbed
    assert scrubbed.startswith(f"{before}{odd} ") and scrubbed.endswith(f" {after}")
