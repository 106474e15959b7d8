"""Bullet text and pure rendering of packs: structure, refs, budget trimming, frontmatter (reference §4.1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memory_core import Conversation, Document, Learning, MemoryMeta, Role, Turn
from memory_core.query import Hit
from memory_core.recall import bullet, bullet_text, estimate_tokens
from memory_core.recall.render import Frontmatter, Line, Lines, Prose, Section, render, shorten

AT = datetime(2026, 9, 15, 9, 1, 30, tzinfo=UTC)


def conversation_hit(text: str = "hello there", at: datetime | None = AT) -> Hit:
    meta = MemoryMeta(observed_at=at, thread_id="t1")
    return Hit.of(Conversation(turns=(Turn(role=Role.USER, text=text),), meta=meta))


def document_hit(text: str, title: str | None = None) -> Hit:
    return Hit.of(Document.of(text, title=title))


# bullets ----------------------------------------------------------------------------------------------------
def test_dated_conversation_is_led_by_its_utc_minute():
    assert bullet(conversation_hit()) == "[2026-09-15 09:01] user: hello there"


def test_a_non_utc_observed_at_is_shown_in_utc():
    local = AT.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert bullet(conversation_hit(at=local)) == "[2026-09-15 09:01] user: hello there"


def test_undated_conversation_has_no_prefix():
    assert bullet(conversation_hit(at=None)) == "user: hello there"


def test_only_conversations_carry_the_date():
    learning = Hit.of(Learning(text="Prefers tea", meta=MemoryMeta(observed_at=AT)))
    assert bullet(learning) == "Prefers tea"
    doc = Hit.of(Document.of("Body text", meta=MemoryMeta(observed_at=AT)))
    assert bullet(doc) == "Body text"


def test_titled_document_reads_title_colon_body():
    assert bullet_text(document_hit("Refunds take five days.", title="Refunds")) == "Refunds: Refunds take five days."


def test_titled_document_drops_the_bodys_repeated_heading():
    hit = document_hit("# Refunds\n\nRefunds take five days.", title="Refunds")
    assert bullet_text(hit) == "Refunds: Refunds take five days."


def test_a_different_heading_in_the_body_is_kept():
    hit = document_hit("# Refunds policy\n\nFive days.", title="Refunds")
    assert bullet(hit) == "Refunds: # Refunds policy Five days."


def test_untitled_document_and_heading_without_blank_line_are_left_alone():
    assert bullet(document_hit("plain body")) == "plain body"
    assert bullet(document_hit("# Heading\nbody on the next line")) == "# Heading body on the next line"


def test_whitespace_is_collapsed_to_single_spaces():
    hit = document_hit("line one\n\n  line\ttwo  \n", title="T")
    assert bullet(hit) == "T: line one line two"


def test_bullet_of_exactly_600_characters_is_kept_whole():
    text = "x" * 600
    assert bullet(document_hit(text)) == text


def test_long_bullet_is_cut_to_600_characters_and_an_ellipsis():
    text = "y" * 700
    assert bullet(document_hit(text)) == "y" * 600 + "…"


def test_long_bullet_cuts_back_to_a_late_word_boundary():
    text = ("word " * 200).strip()  # 999 characters, a space every 5
    out = bullet(document_hit(text))
    assert out == ("word " * 120).rstrip() + "…"
    assert len(out) <= 601


def test_shorten_cuts_back_only_when_the_space_is_past_half():
    assert shorten("abcdefgh ij", 10) == "abcdefgh…"
    assert shorten("ab cdefghij", 10) == "ab cdefghi…"


# structure --------------------------------------------------------------------------------------------------
def test_estimate_tokens_is_ceil_of_characters_over_four():
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert estimate_tokens("ééé…") == 1  # characters, not bytes


def test_render_structure_is_exact():
    sections = [
        Section("Summary", Prose("  An answer.  ", ("a", "b"))),
        Section("Notes", Lines((Line("c", "first\nline"), Line("d", "second")))),
    ]
    out = render(sections, 1000, "Memory")
    assert out.markdown == ("# Memory\n\n## Summary\n\nAn answer.\n\n## Notes\n\n- first line\n- second\n")
    assert out.tokens == estimate_tokens(out.markdown)
    assert out.refs == ("a", "b", "c", "d")


def test_refs_follow_first_appearance_answer_citations_then_bullets():
    sections = [
        Section("A", Lines((Line("x", "one"),))),
        Section("B", Prose("answer", ("y", "x", "z", "y"))),
        Section("C", Lines((Line("z", "three"), Line("w", "four")))),
    ]
    assert render(sections, 1000, "T").refs == ("x", "y", "z", "w")


def test_no_non_empty_section_renders_nothing():
    out = render([Section("A", Lines(())), Section("B", Prose("   ", ("x",)))], 1000, "T")
    assert (out.markdown, out.tokens, out.refs) == ("", 0, ())
    assert render([], 10, "T").markdown == ""


def test_empty_sections_are_left_out_of_the_markdown():
    out = render([Section("Gone", Lines(())), Section("Kept", Lines((Line("a", "x"),)))], 1000, "T")
    assert out.markdown == "# T\n\n## Kept\n\n- x\n"


# trimming ---------------------------------------------------------------------------------------------------
LINES = [
    Section("A", Lines((Line("a1", "alpha"),))),
    Section("B", Lines((Line("b1", "one"), Line("b2", "two")))),
]
# "# T\n" (4) + "\n## A\n\n- alpha\n" (15) + "\n## B\n\n" (7) + "- one\n" (6) + "- two\n" (6) = 38 chars = 10 tokens


def test_within_budget_nothing_is_trimmed():
    assert render(LINES, 10, "T").markdown == "# T\n\n## A\n\n- alpha\n\n## B\n\n- one\n- two\n"


def test_the_last_bullet_of_the_last_lines_section_goes_first():
    out = render(LINES, 9, "T")
    assert out.markdown == "# T\n\n## A\n\n- alpha\n\n## B\n\n- one\n"
    assert out.tokens == 8
    assert out.refs == ("a1", "b1")


def test_an_emptied_section_is_removed():
    out = render(LINES, 7, "T")
    assert out.markdown == "# T\n\n## A\n\n- alpha\n"
    assert out.tokens == 5


def test_nothing_left_to_trim_gives_the_empty_block():
    out = render(LINES, 4, "T")
    assert (out.markdown, out.tokens, out.refs) == ("", 0, ())


TEXT = " ".join(["abcd"] * 20)  # 99 characters
# "# T\n" (4) + "\n## P\n\n" (7) + TEXT (99) + "\n" (1) = 111 chars = 28 tokens


def test_lines_are_trimmed_before_any_prose_even_when_the_prose_comes_last():
    sections = [Section("L", Lines((Line("l1", "aaa"), Line("l2", "bbb")))), Section("P", Prose(TEXT, ("p",)))]
    out = render(sections, 28, "T")
    assert out.markdown == f"# T\n\n## P\n\n{TEXT}\n"
    assert out.refs == ("p",)


def test_the_last_prose_shortens_by_the_overflow_at_a_word_boundary():
    # overflow 8 tokens -> keep = 99 - (32 + 3) = 64; the cut backs up to the space at 59 (past half of 64)
    out = render([Section("P", Prose(TEXT, ("p",)))], 20, "T")
    assert out.markdown == "# T\n\n## P\n\n" + " ".join(["abcd"] * 12) + "…\n"
    assert out.tokens == 18


def test_prose_that_would_keep_fewer_than_40_characters_is_dropped():
    # overflow 18 tokens -> keep = 99 - 75 = 24 < 40
    out = render([Section("P", Prose(TEXT, ("p",)))], 10, "T")
    assert (out.markdown, out.tokens, out.refs) == ("", 0, ())


def test_keep_of_exactly_40_characters_shortens_instead_of_dropping():
    text = "z" * 79  # 4 + 7 + 79 + 1 = 91 chars = 23 tokens; budget 13 -> keep = 79 - (40 + 3) = 36
    assert render([Section("P", Prose(text))], 13, "T").markdown == ""
    text = "z" * 83  # 95 chars = 24 tokens; budget 14 -> keep = 83 - 43 = 40
    out = render([Section("P", Prose(text))], 14, "T")
    assert out.markdown == "# T\n\n## P\n\n" + "z" * 40 + "…\n"


def test_earlier_prose_keeps_its_text_when_the_last_prose_is_dropped():
    sections = [Section("P1", Prose("short answer", ("a",))), Section("P2", Prose(TEXT, ("b",)))]
    out = render(sections, 10, "T")
    assert out.markdown == "# T\n\n## P1\n\nshort answer\n"
    assert out.refs == ("a",)


def test_trimmed_output_always_fits_the_budget():
    sections = [
        Section("P", Prose(TEXT * 3, ("p",))),
        Section("L", Lines(tuple(Line(f"l{i}", f"bullet number {i}") for i in range(30)))),
    ]
    for budget in range(1, 200, 7):
        out = render(sections, budget, "Memory")
        assert out.tokens <= budget
        assert out.tokens == estimate_tokens(out.markdown)


# frontmatter ------------------------------------------------------------------------------------------------
FM = Frontmatter(engine="reference", generated_at=datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC))


def test_frontmatter_is_exact_and_counts_itself():
    out = render([Section("L", Lines((Line("id1", "hello"),)))], 1000, "Context", FM)
    assert out.markdown == (
        "---\n"
        "generated_at: 2026-01-02T03:04:05Z\n"
        "engine: reference\n"
        "tokens: 28\n"
        "refs: [id1]\n"
        "---\n"
        "\n"
        "# Context\n\n## L\n\n- hello\n"
    )
    assert out.tokens == 28 == estimate_tokens(out.markdown)


def test_frontmatter_refs_are_comma_space_separated():
    sections = [Section("P", Prose("answer", ("a", "b"))), Section("L", Lines((Line("c", "x"),)))]
    out = render(sections, 1000, "Context", FM)
    assert "\nrefs: [a, b, c]\n" in out.markdown


@pytest.mark.parametrize("length", range(300, 420, 3))
def test_frontmatter_token_count_is_a_fixed_point(length):
    out = render([Section("P", Prose("w" * length))], 10_000, "Context", FM)
    assert out.tokens == estimate_tokens(out.markdown)
    assert f"\ntokens: {out.tokens}\n" in out.markdown


def test_the_budget_covers_the_frontmatter():
    sections = [Section("L", Lines((Line("a", "one"), Line("b", "two"))))]
    plain = render(sections, 1000, "Context")
    with_header = render(sections, plain.tokens, "Context", FM)
    assert with_header.tokens <= plain.tokens
    assert with_header.markdown == ""  # the header alone outweighs the plain body's budget


def test_an_empty_document_has_no_frontmatter():
    assert render([Section("L", Lines(()))], 1000, "Context", FM).markdown == ""


# what each section shows after trimming ---------------------------------------------------------------------
def test_shown_lists_what_is_left_of_each_section_in_input_order():
    sections = [
        Section("P", Prose(TEXT, ("p",))),
        Section("Empty", Lines(())),
        Section("L", Lines((Line("l1", "aaa"), Line("l2", "bbb")))),
    ]
    assert render(sections, 100, "T").shown == (sections[0], None, sections[2])
    # 111 + 7 + 6 + 6 = 130 chars = 33 tokens; at 31 the last bullet goes
    out = render(sections, 31, "T")
    assert out.shown == (sections[0], None, Section("L", Lines((Line("l1", "aaa"),))))
    # the lines go before any prose, then the prose shortens
    out = render(sections, 20, "T")
    assert out.shown[1:] == (None, None)
    kept = out.shown[0]
    assert kept is not None and isinstance(kept.body, Prose) and kept.body.text.endswith("…")
    assert render(sections, 4, "T").shown == (None, None, None)
