"""Splitting converted documents into passages: headings, sizes, titles, and the ingest plan that uses it."""

from __future__ import annotations

from pathlib import Path

import pytest
from _data import DATA_DIR, require_data

from memory_core.cli._jobs import DOCS_PER_JOB, plan_ingest
from memory_core.documents import brain_document, split_document, split_text
from memory_core.documents.passages import (
    PASSAGE_MAX_CHARS,
    PASSAGE_MIN_CHARS,
    TITLE_SEPARATOR,
    is_heading,
)
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.lifecycle.brain import Brain
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.runner import BackgroundRunner
from memory_core.meta import MemoryMeta

PEPS = DATA_DIR / "docs" / "peps"


def _para(word: str, n: int) -> str:
    return " ".join(f"{word}{i}" for i in range(n)) + "."


@pytest.mark.parametrize(
    "line",
    ["Abstract", "Tabs or Spaces?", "Descriptive: Naming Styles", "Changes to typing (Python 3.9)", "3.2 Results"],
)
def test_heading_lines(line: str) -> None:
    assert is_heading(line)


@pytest.mark.parametrize(
    "line",
    [
        "import this",  # code starts lower-case
        "from typing import TypeVar",
        "x = compute(y)",
        ">>> print(1)",
        "# Correct:",
        "- a list item",
        "1. first step",
        "This is a sentence.",
        "Yes:",
        "A heading (with an open parenthesis",
        "Two\nlines",
        "A " + "very " * 20 + "long line",
    ],
)
def test_lines_that_are_not_headings(line: str) -> None:
    assert not is_heading(line)


def test_a_short_document_stays_whole_and_unchanged() -> None:
    doc = BrainDocument.new("files", "Intro\n\nShort body.", title="Guide")
    assert split_document(doc) == [doc]
    assert split_text("   ") == []


def test_sections_become_passages_titled_after_their_headings() -> None:
    text = "\n\n".join(
        [
            "Lead paragraph before any heading " + _para("lead", 30),
            "Specification",
            "Syntax",
            _para("syntax", 60),
            "Semantics",
            _para("sem", 40),
            "Tail",
            "Closing words.",
        ]
    )
    meta = MemoryMeta(file_path="/docs/guide.rst", folder="/docs")
    doc = BrainDocument.new("files", text, title="Guide", mime="text/x-rst", meta=meta)
    parts = split_document(doc)
    titles = [p.title for p in parts]
    assert titles[0] == "Guide"  # text before the first heading keeps the document title
    assert f"Guide{TITLE_SEPARATOR}Specification{TITLE_SEPARATOR}Syntax" in titles  # an empty parent is kept
    assert f"Guide{TITLE_SEPARATOR}Semantics" in titles and titles[-1] == f"Guide{TITLE_SEPARATOR}Tail"
    assert all(p.source == doc.source and p.mime == doc.mime and p.meta == doc.meta for p in parts)
    assert all(len(p.text) <= PASSAGE_MAX_CHARS for p in parts)
    # every block but the headings is kept, in order
    body = [b for b in text.split("\n\n") if not is_heading(b)]
    assert "\n\n".join(p.text for p in parts).split("\n\n") == body


def test_an_over_long_block_is_cut_at_sentences_and_the_short_tail_joins_the_passage_before() -> None:
    sentences = " ".join(f"Sentence number {i} says something about topic {i}." for i in range(60))
    text = f"Heading One\n\n{sentences}\n\nok."
    parts = split_text(text)
    assert len(parts) > 2
    assert all(len(p.text) <= PASSAGE_MAX_CHARS for p in parts)
    assert parts[-1].text.endswith("\n\nok.")  # "ok." is under PASSAGE_MIN_CHARS: it joined the last passage
    assert " ".join(" ".join(p.text.split()) for p in parts) == " ".join(f"{sentences} ok.".split())
    assert all(p.headings == ("Heading One",) for p in parts)


def test_the_split_is_deterministic() -> None:
    text = "\n\n".join(["Alpha", _para("a", 200), "Beta", _para("b", 200)])
    doc = BrainDocument.new("files", text, title="T")
    assert split_document(doc) == split_document(doc)
    assert len({p.text for p in split_document(doc)}) == len(split_document(doc))


def test_every_pep_splits_into_bullet_sized_passages_with_its_header_last() -> None:
    require_data("docs/peps")
    doc = brain_document(PEPS / "pep-0008.rst")
    parts = split_document(doc)
    assert len(parts) > 20 and all(len(p.text) <= PASSAGE_MAX_CHARS for p in parts)
    titles = [p.title or "" for p in parts]
    assert f"Style Guide for Python Code{TITLE_SEPARATOR}Maximum Line Length" in titles
    assert titles[-1] == f"Style Guide for Python Code{TITLE_SEPARATOR}Header"
    assert parts[-1].text.startswith("PEP: 8; Author: Guido van Rossum")
    assert not any("import" in t.split(TITLE_SEPARATOR)[-1] for t in titles)  # code lines are not headings
    assert sum(len(p.text) >= PASSAGE_MIN_CHARS for p in parts) > len(parts) // 2


def test_plan_ingest_stores_passages_that_replay_and_forget_together(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    sections = "\n\n".join(f"## Part {i}\n\n{_para(f'w{i}x', 90)}" for i in range(6))
    (folder / "guide.md").write_text(f"# Guide\n\n{sections}\n", encoding="utf-8")
    (folder / "note.md").write_text("# Note\n\nA short note.\n", encoding="utf-8")
    plan = plan_ingest([folder], source="files", collection="docs")
    assert plan.converted == [folder / "guide.md", folder / "note.md"]
    assert plan.passages == sum(len(job.documents) for job in plan.jobs) > 2
    assert all(len(job.documents) <= DOCS_PER_JOB for job in plan.jobs)
    layout = MemoryLayout("ws:t")
    with SQLiteEngine(tmp_path / "m.db") as engine:
        runner = BackgroundRunner(engine, layout)
        first = [r for job in plan.jobs for r in (runner.run(job).stored or ())]
        assert len(first) == plan.passages and not any(r.replayed for r in first)
        again = plan_ingest([folder], source="files", collection="docs")
        second = [r for job in again.jobs for r in (runner.run(job).stored or ())]
        assert [r.id for r in second] == [r.id for r in first] and all(r.replayed for r in second)
        hits = Brain(engine, layout).search("w3x5 w3x6")
        assert hits and hits[0].text.startswith(f"# Guide{TITLE_SEPARATOR}Part 3\n\n")
        assert Brain(engine, layout).forget("files").forgotten == plan.passages
        assert engine.list().items == ()
