"""Credential tokens glued after ``-`` or ``_`` are redacted, the word before them kept (``safety.glued``)."""

from __future__ import annotations

import pytest
from safety_corpus import (
    ANTHROPIC,
    DO,
    GHP,
    GITHUB_PAT,
    GITLAB,
    GOOGLE,
    HF,
    JWT,
    MAILGUN,
    NPM,
    OPENAI,
    OPENAI_OLD,
    PYPI,
    SENDGRID,
    SHOPIFY,
    SLACK,
    SQUARE,
    STRIPE,
    STRIPE_RK,
    TELEGRAM,
    TWILIO,
)

from memory_core.safety import DETECTORS, REDACTED, find, scrub
from memory_core.safety.glued import GLUED_REACH, generated
from memory_core.safety.ids import holds_credential

TOKENS = (
    ANTHROPIC,
    OPENAI,
    OPENAI_OLD,
    GHP,
    GITHUB_PAT,
    GITLAB,
    "AKIAIOSFODNN7EXAMPLE",
    "ASIAIOSFODNN7EXAMPLE",
    GOOGLE,
    STRIPE,
    STRIPE_RK,
    SLACK,
    NPM,
    SENDGRID,
    JWT,
    HF,
    PYPI,
    SHOPIFY,
    DO,
    MAILGUN,
    TWILIO,
    SQUARE,
    TELEGRAM,
)


@pytest.mark.parametrize("token", TOKENS, ids=lambda t: t[:8])
@pytest.mark.parametrize("word", ["my-", "API_KEY_", "x_", "token-", "a-b_c-"])
def test_a_glued_token_loses_all_of_itself_and_nothing_before_it(token: str, word: str) -> None:
    assert scrub(f"see {word}{token} now") == f"see {word}{REDACTED} now"
    assert scrub(f"{word}{token}") == f"{word}{REDACTED}"


def test_every_credential_shape_that_wants_a_word_start_is_found_glued() -> None:
    hit = {f.detector for token in TOKENS for f in find(f"x-{token}")}
    assert hit == {d.name for d in DETECTORS if d.glued is not None}
    assert "telegram_bot_token" in hit and "mailgun_key" in hit and "twilio_key" in hit  # prefilter-started shapes


def test_personal_identifier_and_marker_detectors_are_never_read_glued() -> None:
    assert not any(
        d.glued is not None for d in DETECTORS if d.pii_class is not None or d.name == "credential_assignment"
    )
    text = "job-20240517-0001 th-240517-1234567 ref_4111111111111111 x-123-45-6789"
    assert scrub(text) == text


def test_a_token_whose_body_holds_another_prefix_is_taken_whole_from_its_first_joint() -> None:
    token = "sk-proj-Ab12-sk-Cd34Ef56Gh78Ij90Kl12Mn34"  # read from the second joint, ``sk-proj-Ab12`` would stay
    assert scrub(f"my-{token} ok") == f"my-{REDACTED} ok"
    assert scrub(f"my-{token}_ghp_x ok") == f"my-{REDACTED} ok"


def test_a_glued_token_longer_than_the_reach_is_redacted_to_the_end_of_its_run() -> None:
    token = "sk-proj-" + "Ab1Cd2Ef3_" * (GLUED_REACH // 8)
    assert scrub(f"my-{token} ok") == f"my-{REDACTED} ok"


def test_many_joints_in_one_run_are_each_read_once_or_skipped() -> None:
    """A run of joints that never match, or of one long non-generated match, is kept as typed (linear work)."""
    for text in ("_AKIA" * 5000, "-sk-a" * 5000, "x-eyJ" * 5000, "-key-0123abcd" * 2000):
        assert scrub(text) == text
    assert scrub("-sk-a" * 300 + f" x-{GHP}") == "-sk-a" * 300 + f" x-{REDACTED}"


def test_a_glued_token_inside_a_key_value_goes_with_the_whole_value() -> None:
    assert scrub(f"password=hunter2-{GHP} ok") == f"password={REDACTED} ok"
    assert scrub(f"api_key: team-{OPENAI}") == f"api_key: {REDACTED}"


def test_joints_typed_with_look_alike_dashes_or_hidden_characters_count() -> None:
    assert scrub(f"my\u2013{OPENAI}") == f"my\u2013{REDACTED}"  # en dash, folded to "-"
    assert scrub(f"my-\u200b{GHP}") == f"my-\u200b{REDACTED}"  # the zero-width space is dropped before detection


@pytest.mark.parametrize(
    "text",
    [
        "task-skeleton and pre_sk_value",  # "sk_" is Stripe only with live_/test_, "sk-" wants 20 more
        "eu-sk-prod-eu-west-1-nodes",  # 20+ characters after "sk-", but words and short numbers, no random run
        "x-sk-learn-pipeline-config-v2",
        "trip-asia-pacific-2024, x_akia_notes",  # AWS ids are upper-case and 20 long
        "my_hf_model, use-npm_modules, team_eyJ_notes",
        "build-key-value, ACME_SK_TOOLS, risk-sk-12",
        "glued-sk-nothing-random-in-here-at-all",  # long enough for the shape, but words: not generated
    ],
)
def test_ordinary_hyphenated_words_and_ids_are_kept(text: str) -> None:
    assert scrub(text) == text
    assert not holds_credential(text)


def test_generated_wants_a_long_run_or_one_mixing_classes() -> None:
    assert generated("sk-proj-Abc123Def456") and generated("sq0atp-AbCdEfGhIjKlMnOpQrStUv")
    assert generated("AKIAIOSFODNNTEXAMPLE")  # an AWS key id without a digit: one run of 20
    assert not generated("sk-prod-eu-west-1-nodes") and not generated("sk-learn-pipeline-config")
    assert not generated("ab12-cd34-ef56-gh78")  # each run under 8
    assert not generated("sk-abcdefghijklmnopqrs")  # 19 lower-case letters


def test_ids_use_the_same_rule() -> None:
    assert holds_credential(f"agent-{OPENAI}") and holds_credential(f"th_{GHP}") and holds_credential(f"a-{TELEGRAM}")
    assert not holds_credential("eu-sk-prod-eu-west-1-nodes")
