"""From stored items to statements (pure): what a speaker says about themself, and a document's key sentences.

Conversations: only ``user`` turns are read (what the user states), sentence by sentence. A sentence is kept
when it is a statement (not a question) in the first person that says something beyond a reaction (at least
two substantive words, or one with a recognised attribute). It is sorted into a category:

| category | recognised by | learning kind | base confidence |
| --- | --- | --- | --- |
| plan | ``going to``, ``planning``, ``want to``, ``I'll``, ``next week``, ``tomorrow`` … | fact | 0.55 |
| preference | ``I love/like/enjoy/prefer/hate``, ``favorite``, ``a fan of`` … | preference | 0.7 |
| event | a resolved date, or a past-tense verb after ``I``/``we`` | fact | 0.65 |
| self | any other first-person statement | fact | 0.7 |
| group | ``we``/``our`` without ``I`` (quoted with the speaker named) | fact | 0.6 |

Relative dates are resolved against the turn's time (``dates.resolve``) and the date is kept in the text; a
statement with no date of its own ends with the day it was said. Attribute statements (``my favorite X is``,
``I live in``, ``I work at``, ``I'm N years old``, ``I love/hate X``) share a subject per speaker and
attribute, so a newer value supersedes an older one.

Control text is never a source (issue 11 rule 8, ``memory_core.control``): a user turn holding a chat-template
token, or any sentence that instructs the model or claims instructions, a role or a permission ("my instructions
are …", "ignore previous instructions", "I am your developer"), gives no statement at all, so an injected
instruction never becomes a belief about the speaker; nor does such a sentence or title of a document.

Documents: the title (base 0.8) and the key sentences (base 0.6): prose sentences scored by how many of the
document's frequent terms they hold, with a bonus for the opening sentence of the document and of each
section. Items with ``meta.derive == False`` and learnings are never sources (reference §3).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Final

from memory_core.control import is_control_text
from memory_core.items import Conversation, Document, LearningKind, Role, Turn
from memory_core.meta import MemoryMeta

from .dates import format_day, resolve
from .model import Category, SourceItem, Statement
from .text import anchors, clean_turn_text, content_terms, sentences, stem, substantive_terms, third_person, words

__all__ = ["extract", "said_at", "speaker_name"]

MAX_TEXT: Final = 400
"""Longest belief text, in characters."""
BASE: Final = {
    Category.PLAN: 0.55,
    Category.PREFERENCE: 0.7,
    Category.EVENT: 0.65,
    Category.SELF: 0.7,
    Category.GROUP: 0.6,
    Category.TITLE: 0.8,
    Category.KEY_SENTENCE: 0.6,
}
"""Confidence of a belief backed by one item, per category (memory-core's calibration)."""

_SINGULAR = frozenset({"i", "i'm", "i've", "i'd", "i'll", "my", "me", "mine", "myself"})
_OWNED = frozenset({"my", "me", "mine", "myself", "we", "we're", "we've", "our", "ours", "us"})
_GROUP = frozenset({"we", "we're", "we've", "we'll", "we'd", "our", "ours", "us", "ourselves"})
_YOU = frozenset({"you", "your", "you're", "you've", "you'll", "you'd", "yours", "yourself"})

_PLAN = re.compile(
    r"\b(?:going to|gonna|plan|plans|planning|want to|wanna|hope to|hoping to|thinking (?:of|about)|intend|"
    r"looking forward|can't wait|(?:i|we)'d love to|would love to|(?:i|we)'ll|(?:i|we) will|next (?:week|month|"
    r"year|weekend)|tomorrow|soon|upcoming)\b"
)
_PREFERENCE = re.compile(
    r"\b(?:i|we)\s+(?:really\s+|absolutely\s+|just\s+|also\s+|totally\s+)?(?:love|like|enjoy|prefer|adore|hate|"
    r"dislike|can't stand)\b|\bfavou?rite\b|\b(?:i'm|i am)\s+(?:a\s+(?:big\s+|huge\s+)?fan of|passionate about|"
    r"obsessed with|really into|into)\b"
)
_PAST_AFTER = re.compile(r"\b(?:i|we)\s+(?:just\s+|recently\s+|finally\s+|also\s+|actually\s+)?([a-z']+)")
_IRREGULAR_PAST: Final = frozenset(
    "was were had did went got made took saw said told came became began bought brought built caught chose drew "
    "drank drove ate fell felt found flew forgot gave grew heard held kept knew left lost met paid put ran read "
    "rode rang rose sang sat slept spoke spent stood swam taught thought threw understood woke won wore wrote".split()
)
_VALUE_END = re.compile(r"[,;:.!()]|\b(?:and|with|because|but|since|when|last|next|so|for|as)\b")
_ATTRIBUTES: Final = (
    (re.compile(r"\bmy favou?rite ([a-z]+(?: [a-z]+)?) (?:is|are|was|has been)\s+(.+)"), "favorite {0}", 2),
    (
        re.compile(
            r"\bmy (name|job|age|birthday|hometown|address|email|phone number|major|role|title|goal|dream job|dream)"
            r" (?:is|was)\s+(.+)"
        ),
        "{0}",
        2,
    ),
    (
        re.compile(
            r"\b(?:i live|i'm living|i am living|i moved|i've moved|i have moved|i relocated)\s+(?:in|to)\s+(.+)"
        ),
        "lives in",
        1,
    ),
    (
        re.compile(
            r"\b(?:i work|i'm working|i am working|i started working|i got a job|i've started working)\s+"
            r"(?:at|for)\s+(.+)"
        ),
        "works at",
        1,
    ),
    (re.compile(r"\b(?:i work|i'm working|i am working) as (?:a |an )?(.+)"), "works as", 1),
    (re.compile(r"\b(?:i'm|i am) (\d+) years? old"), "age", 1),
)
_LIKING = re.compile(
    r"\b(?:i|we)\s+(?:really\s+|absolutely\s+|just\s+|also\s+|totally\s+|still\s+)?(love|like|enjoy|adore|prefer|"
    r"hate|dislike|don't like|do not like|no longer like|can't stand|don't enjoy)\s+(.+)"
)
_NEGATIVE = frozenset({"hate", "dislike", "don't like", "do not like", "no longer like", "can't stand", "don't enjoy"})


def speaker_name(meta: MemoryMeta) -> str:
    """Who a conversation item's user turns come from: the observed actor's name, its id, the agent id.

    A lowercase id is capitalised (``caroline`` → ``Caroline``); with nothing to go on, ``The user``.
    """
    actor = meta.observed_actor
    raw = (actor.name or actor.id.split(":", 1)[-1]) if actor is not None else (meta.agent_id or "")
    raw = raw.strip()
    if not raw:
        return "The user"
    return raw[:1].upper() + raw[1:] if raw.islower() else raw


def said_at(turn: Turn, meta: MemoryMeta) -> datetime | None:
    """When a conversation turn's statements were said: the turn's own time, else the item's."""
    return turn.at or meta.observed_at


def _value(text: str) -> str:
    cut = _VALUE_END.search(text)
    head = text[: cut.start()] if cut else text
    terms = sorted(content_terms(head))
    return " ".join(terms)[:120] or " ".join(words(head))[:60]


def _attribute(lower: str) -> tuple[str, str] | None:
    for pattern, label, value_group in _ATTRIBUTES:
        m = pattern.search(lower)
        if m is not None:
            value = _value(m.group(value_group))
            if value:
                return label.format(*(stem(g) for g in m.groups()[: value_group - 1])), value
    m = _LIKING.search(lower)
    if m is not None:
        cut = _VALUE_END.search(m.group(2))
        obj = m.group(2)[: cut.start()] if cut else m.group(2)
        head = " ".join(sorted(content_terms(obj))[:2])
        if head:
            return f"likes {head}", "-" if m.group(1) in _NEGATIVE else "+"
    return None


def _category(lower: str, toks: list[str], day_future: bool | None) -> Category:
    singular = any(t in _SINGULAR for t in toks)
    if _PLAN.search(lower) or day_future:
        return Category.PLAN
    if _PREFERENCE.search(lower):
        return Category.PREFERENCE
    m = _PAST_AFTER.search(lower)
    if day_future is False or (m is not None and (m.group(1) in _IRREGULAR_PAST or m.group(1).endswith("ed"))):
        return Category.EVENT
    return Category.SELF if singular else Category.GROUP


def _finish(text: str, suffix: str = "") -> str:
    text = text.strip().rstrip(".!;:, ")
    text = text[:1].upper() + text[1:]
    out = f"{text}{suffix}."
    return out if len(out) <= MAX_TEXT else out[: MAX_TEXT - 1].rstrip() + "…"


def _conversation_statement(
    sentence: str, name: str, src: SourceItem, meta: MemoryMeta, observed: datetime | None
) -> Statement | None:
    if sentence.rstrip().endswith("?"):
        return None
    toks = words(sentence)
    singular = any(t in _SINGULAR for t in toks)
    group = any(t in _GROUP for t in toks)
    if not (singular or group):
        return None
    if any(t in _YOU for t in toks) and not any(t in _OWNED for t in toks):
        return None
    lower = " ".join(sentence.lower().replace("’", "'").split())
    substantive = substantive_terms(sentence)
    attribute = _attribute(lower) if singular else None
    if len(substantive) < 2 and not (attribute and substantive):
        return None
    ref = observed.date() if observed is not None else None
    resolved, day = resolve(sentence, ref)
    future = None if day is None or ref is None else day > ref
    category = _category(lower, toks, future)
    if singular:
        body = third_person(resolved, name)
    else:
        category = Category.GROUP if category is Category.SELF else category
        body = f'{name} said: "{resolved.strip().rstrip(".!")}"'
    suffix = f" (said {format_day(ref)})" if day is None and ref is not None else ""
    terms = content_terms(sentence)
    speaker = name.lower()
    if attribute is not None:
        subject = f"{speaker}|{attribute[0]}"
        key = f"{subject}={attribute[1]}"
    else:
        key = f"{speaker}|{category.value}|{' '.join(sorted(terms))[:240]}|{day.isoformat() if day else ''}"
        subject = key
    return Statement(
        key=key,
        subject=subject,
        text=_finish(body, suffix),
        kind=LearningKind.PREFERENCE if category is Category.PREFERENCE else LearningKind.FACT,
        category=category,
        base_confidence=BASE[category],
        terms=terms,
        anchors=anchors(terms),
        speaker=speaker,
        evidence=src.id,
        seq=src.seq,
        observed_at=observed,
        day=day,
        meta=meta,
    )


def _from_conversation(src: SourceItem, item: Conversation) -> list[Statement]:
    meta = item.meta
    name = speaker_name(meta)
    out: list[Statement] = []
    seen: set[str] = set()
    for turn in item.turns:
        if turn.role is not Role.USER:
            continue
        said = sentences(clean_turn_text(turn.text))
        if any(is_control_text(sentence) for sentence in said) or is_control_text(turn.text):
            continue  # a turn that tries to steer the model is no evidence about its speaker
        observed = said_at(turn, meta)
        for sentence in said:
            st = _conversation_statement(sentence, name, src, meta, observed)
            if st is not None and st.key not in seen:
                seen.add(st.key)
                out.append(st)
    return out


# documents ----------------------------------------------------------------------------------------------
_FIELD = re.compile(r"^([A-Z][A-Za-z-]*):\s*(.*)$")
_UNDERLINE = re.compile(r"^([=\-~^*#`'\"+_.:])\1{2,}\s*$")
_ROLE = re.compile(r":([a-z]+):`([^`<]*?)(?:\s*<[^>]*>)?`")
_LINK = re.compile(r"`([^`<]+?)\s*<[^>]*>`_+")
_MARKUP = re.compile(r"``|`_*|\*\*|(?<!\w)\*(?=\w)|(?<=\w)\*(?!\w)")
_CODEY = re.compile(r"[=(){}\[\]<>;]|>>>|::")
_BOILERPLATE = re.compile(r"\b(?:public domain|copyright|all rights reserved|license[ds]? under)\b", re.I)
_CUE = re.compile(
    r"\b(?:must|should|recommend\w*|propos\w*|this pep|is a|are|means|allows?|introduc\w*|defin\w*)\b", re.I
)


def _clean_inline(text: str) -> str:
    text = _ROLE.sub(lambda m: ("PEP " if m.group(1) == "pep" else "") + m.group(2).strip(), text)
    text = _LINK.sub(lambda m: m.group(1), text)
    return " ".join(_MARKUP.sub("", text).split())


def _title(doc: Document, lines: list[str]) -> str | None:
    if doc.title and doc.title.strip():
        return " ".join(doc.title.split())
    for line in lines[:40]:
        m = _FIELD.match(line)
        if m and m.group(1).lower() == "title" and m.group(2).strip():
            return m.group(2).strip()
    for i, line in enumerate(lines[:60]):
        stripped = line.strip()
        if stripped.startswith("#") and stripped.lstrip("#").strip():
            return stripped.lstrip("#").strip()
        if (
            stripped
            and i + 1 < len(lines)
            and _UNDERLINE.match(lines[i + 1].strip())
            and not _UNDERLINE.match(stripped)
        ):
            return stripped
    return None


def _paragraphs(lines: list[str]) -> list[tuple[str, bool]]:
    """Prose paragraphs as ``(text, opens_section)``: headings, field lists, directives and code are dropped."""
    out: list[tuple[str, bool]] = []
    current: list[str] = []
    section_start = True
    literal_indent: int | None = None
    in_header = bool(lines) and _FIELD.match(lines[0]) is not None

    def flush() -> None:
        nonlocal current, section_start
        if current:
            out.append((" ".join(current), section_start))
            section_start = False
        current = []

    for i, raw in enumerate(lines):
        indent = len(raw) - len(raw.lstrip())
        line = raw.strip()
        if in_header:
            if not line:
                in_header = False
            continue
        if literal_indent is not None:
            if line and indent <= literal_indent:
                literal_indent = None
            else:
                continue
        if not line:
            flush()
            continue
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if _UNDERLINE.match(line) or line.startswith("#") or (nxt and _UNDERLINE.match(nxt)):
            flush()
            section_start = True
            continue
        if line.startswith(".. ") or line.startswith(">>>") or indent >= 4 and not current:
            flush()
            literal_indent = indent if line.startswith(".. ") else indent - 1
            continue
        current.append(line)
        if line.endswith("::"):
            flush()
            literal_indent = indent
    flush()
    return out


def _key_sentences(text: str) -> list[str]:
    lines = text.splitlines()
    candidates: list[tuple[int, str, frozenset[str], bool]] = []
    for para, opens in _paragraphs(lines):
        for j, raw in enumerate(sentences(_clean_inline(para))):
            sentence = raw.lstrip("-*• ").strip()
            n = len(sentence.split())
            if _BOILERPLATE.search(sentence) or is_control_text(sentence):
                continue
            if not 6 <= n <= 60 or sentence.endswith(("?", ":")) or len(_CODEY.findall(sentence)) > 2:
                continue
            terms = content_terms(sentence)
            if len(terms) >= 3:
                candidates.append((len(candidates), sentence, terms, opens and j == 0))
    if not candidates:
        return []
    tf = Counter(t for _, _, terms, _ in candidates for t in terms)

    def score(row: tuple[int, str, frozenset[str], bool]) -> float:
        pos, sentence, terms, opens = row
        s = sum(math.log1p(tf[t] - 1) for t in terms) / math.sqrt(len(terms))
        if pos == 0:
            s += 1.5
        elif opens:
            s += 0.7
        if _CUE.search(sentence):
            s += 0.4
        return s

    k = min(12, max(3, round(math.sqrt(len(candidates)))))
    chosen = [candidates[0], *sorted(candidates[1:], key=lambda r: (-score(r), r[0]))[: k - 1]]
    return [sentence for _, sentence, _, _ in sorted(chosen)]


def _from_document(src: SourceItem, item: Document) -> list[Statement]:
    meta = item.meta
    lines = item.text.splitlines()
    title = _title(item, lines)
    if title is not None and is_control_text(title):
        title = None
    source = f"{meta.source.kind.value}:{meta.source.id}:{title}" if meta.source.id else None
    identity = meta.file_path or meta.url or source or title or src.id
    observed = meta.observed_at
    out: list[Statement] = []
    if title:
        subject = f"doc|{identity}|title"
        terms = content_terms(title)
        out.append(
            Statement(
                key=f"{subject}={title.lower()}",
                subject=subject,
                text=_finish(f"Document: {title}"),
                kind=LearningKind.FACT,
                category=Category.TITLE,
                base_confidence=BASE[Category.TITLE],
                terms=terms,
                anchors=anchors(terms),
                speaker="",
                evidence=src.id,
                seq=src.seq,
                observed_at=observed,
                day=None,
                meta=meta,
            )
        )
    for sentence in _key_sentences(item.text):
        terms = content_terms(sentence)
        key = f"doc|{identity}|{' '.join(sorted(terms))[:240]}"
        out.append(
            Statement(
                key=key,
                subject=key,
                text=_finish(f"{title}: {sentence}" if title else sentence),
                kind=LearningKind.FACT,
                category=Category.KEY_SENTENCE,
                base_confidence=BASE[Category.KEY_SENTENCE],
                terms=terms,
                anchors=anchors(terms),
                speaker="",
                evidence=src.id,
                seq=src.seq,
                observed_at=observed,
                day=None,
                meta=meta,
            )
        )
    return out


def extract(items: Iterable[SourceItem]) -> list[Statement]:
    """Every statement the items make, in item order (learnings and ``derive == False`` items give none)."""
    out: list[Statement] = []
    for src in items:
        item = src.item
        if item.item_meta.derive is False:
            continue
        if isinstance(item, Conversation):
            out.extend(_from_conversation(src, item))
        elif isinstance(item, Document):
            out.extend(_from_document(src, item))
    return out
