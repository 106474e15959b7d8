"""Text helpers of the distiller (pure): sentences, content terms, and first person to third person.

The rules are deliberately small and deterministic: no model runs in a build (DESIGN.md, "never run a model"
on the hot path; the build is background work, but determinism is what makes a repeated build a no-op).
"""

from __future__ import annotations

import functools
import re
from typing import Final

__all__ = [
    "STOPWORDS",
    "adverb_verb_pattern",
    "anchors",
    "clean_turn_text",
    "content_terms",
    "sentences",
    "stem",
    "third_person",
    "words",
]

STOPWORDS: Final = frozenset(
    """
    a about above after again against all also am an and any are aren't as at be because been before being
    below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during
    each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers
    herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself just let's me
    more most mustn't my myself no nor not now of off on once only or other ought our ours ourselves out over own
    same shan't she she'd she'll she's should shouldn't so some such than that that's the their theirs them
    themselves then there there's these they they'd they'll they're they've this those through to too under
    until up very was wasn't we we'd we'll we're we've were weren't what what's when when's where where's which
    while who who's whom why why's will with won't would wouldn't you you'd you'll you're you've your yours
    yourself yourselves really actually definitely totally pretty quite still even ever much many lot lots
    thing things something anything stuff kind sort way yeah yes yep oh ok okay um uh hey hi hello wow lol
    got get gets getting go goes going gone went make made take took come came see saw say said tell told
    one two also well like just so
    """.split()
)
"""Words that carry no subject of their own (English function words plus conversational filler)."""

CHITCHAT: Final = frozenset(
    """
    happy glad thanks thank great awesome cool nice good amazing awesome sure agree know mean sounds sound
    sorry congrats congratulations love hope feel think glad wonderful fantastic incredible true right totally
    absolutely exactly proud excited appreciate means meant care hear heard hug hugs bet guess wish luck fun
    """.split()
)
"""Words of reaction rather than content: a sentence made only of these says nothing about the speaker."""

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ANNOTATION = re.compile(r"\s*\[[^\]\n]{0,400}:[^\]\n]{0,400}\]\s*$")


def words(text: str) -> list[str]:
    """Word tokens, lowercased, apostrophes kept (``i'm``, ``don't``)."""
    return [w.lower().replace("’", "'") for w in _WORD.findall(text)]


def stem(word: str) -> str:
    """A light suffix-stripping stem so ``paintings``/``painting``/``painted`` meet (min stem 3 letters)."""
    w = word.lower().replace("'", "")
    for suffix, repl in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and not w.endswith("ss"):
            return w[: len(w) - len(suffix)] + repl
    return w


def content_terms(text: str) -> frozenset[str]:
    """Stems of the words that are not stopwords (at least 3 characters, or a number)."""
    out = set()
    for w in words(text):
        if w in STOPWORDS or (len(w) < 3 and not w.isdigit()):
            continue
        out.add(stem(w))
    return frozenset(out)


def substantive_terms(text: str) -> frozenset[str]:
    """Content terms that are not reactions (``happy``, ``thanks``): what a sentence is actually about."""
    return frozenset(t for t in content_terms(text) if t not in CHITCHAT and stem(t) not in CHITCHAT)


def anchors(terms: frozenset[str], n: int = 3) -> tuple[str, ...]:
    """Up to ``n`` terms to index a statement by: the longest, ties alphabetical (stable across builds)."""
    return tuple(sorted(terms, key=lambda t: (-len(t), t))[:n])


def clean_turn_text(text: str) -> str:
    """A turn's text without a trailing bracketed annotation such as ``[shares a photo: …]``."""
    return _ANNOTATION.sub("", text).strip()


def sentences(text: str) -> list[str]:
    """Split prose into sentences at ``.``/``!``/``?`` followed by a capital, and at line breaks."""
    out: list[str] = []
    for line in text.splitlines():
        line = " ".join(line.split())
        if not line:
            continue
        out.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return out


# first person → third person ----------------------------------------------------------------------------
_IRREGULAR_PAST: Final = frozenset(
    """
    was were had did went got made took saw said told came became began bought brought built caught chose drew
    drank drove ate fell felt found flew forgot gave grew heard held kept knew left lost met paid put ran read
    rode rang rose sang sat slept spoke spent stood swam taught thought threw understood woke won wore wrote
    finished started joined moved tried lost visited
    """.split()
)
_NOT_VERBS: Final = frozenset(
    """
    just also really always never still recently finally actually totally definitely usually often sometimes
    even only already truly absolutely probably certainly kinda sorta mostly personally
    """.split()
)
_MODALS: Final = frozenset("can could would should might must may shall will".split())
_CONTRACTIONS: Final = (
    (re.compile(r"\bI'm\b|\bI’m\b|\bI am\b"), "{n} is"),
    (re.compile(r"\bI've\b|\bI’ve\b"), "{n} has"),
    (re.compile(r"\bI'd\b|\bI’d\b"), "{n} would"),
    (re.compile(r"\bI'll\b|\bI’ll\b"), "{n} will"),
    (re.compile(r"\bI have\b"), "{n} has"),
    (re.compile(r"\bI don't\b|\bI don’t\b|\bI do not\b"), "{n} doesn't"),
    (re.compile(r"\bI do\b"), "{n} does"),
)
_I_VERB = re.compile(r"\bI\s+([A-Za-z']+)")
_POSSESSIVE = re.compile(r"\b([Mm]y|[Mm]ine)\b")
_OBJECT = re.compile(r"\b([Mm]e|[Mm]yself)\b(?!-)")


def _third_singular(verb: str) -> str:
    low = verb.lower()
    if low in _IRREGULAR_PAST or low.endswith("ed") or low in _MODALS or low in _NOT_VERBS:
        return verb
    if low == "have":
        return "has"
    if low == "be":
        return "is"
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if low.endswith("y") and len(low) > 2 and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


@functools.lru_cache(maxsize=1024)
def adverb_verb_pattern(name: str) -> re.Pattern[str]:
    """``<name> <adverb> <verb>`` for one speaker's name, compiled once per name (cached: a build meets few names).

    A build distils many sentences of the same few speakers; compiling this per sentence cost 14% of a job
    (issue 13). ``adverb_verb_pattern.cache_info().misses`` counts the compilations.
    """
    return re.compile(rf"\b{re.escape(name)} ({'|'.join(sorted(_NOT_VERBS))})\s+([A-Za-z']+)")


def third_person(sentence: str, name: str) -> str:
    """Rewrite a first-person sentence about ``name`` in the third person (``I love X`` → ``Ann loves X``).

    Pronouns become the name (``my`` → ``Ann's``); a present-tense verb after ``I`` takes its third-person
    form, a past-tense one is kept. ``we``/``our`` are left alone (the caller quotes those sentences).
    """
    out = sentence
    for pattern, repl in _CONTRACTIONS:
        out = pattern.sub(repl.format(n=name), out)

    def verb(match: re.Match[str]) -> str:
        word = match.group(1)
        if word.lower() in _NOT_VERBS:
            following = out[match.end() :].lstrip()
            nxt = _WORD.match(following)
            if nxt is not None:
                return f"{name} {word} "
        return f"{name} {_third_singular(word)}"

    out = _I_VERB.sub(verb, out)
    # after an adverb ("Ann just love X") fix the verb that follows it
    out = adverb_verb_pattern(name).sub(lambda m: f"{name} {m.group(1)} {_third_singular(m.group(2))}", out)
    out = re.sub(r"\bI\b", name, out)
    out = _POSSESSIVE.sub(f"{name}'s", out)
    out = _OBJECT.sub(name, out)
    return " ".join(out.split())
