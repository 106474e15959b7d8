"""The one tokenizer of ranking: words, lowercased, stop-words dropped, Snowball English stems (pure).

Engines index and query with ``terms``, the relevance floor (``recall.relevance``) measures query coverage
with it, and the evaluation reads questions with it, so a word counts the same wherever it is compared.

A word is a run of letters and digits with inner apostrophes (``don't``, ``caroline's``). A word is dropped
when it is in ``STOPWORDS`` (English function words plus conversational filler, ``beliefs.text``), or is one
letter; a possessive or contraction keeps its first part (``caroline's`` → ``caroline``), and the rest is the
Snowball English stemmer's (Porter 2; PyStemmer, the Snowball project's C code), so ``painting``/``paintings``/
``painted`` meet. Every
term is a run of letters and digits, lowercase, so an FTS5 ``unicode61`` tokenizer reads a space-joined term
string back as the same terms (``index_text``).

Source: M. F. Porter, "Snowball: A language for stemming algorithms" (2001), the English (Porter2) stemmer.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from typing import Final

import Stemmer

from memory_core.beliefs.text import STOPWORDS

__all__ = ["MAX_QUERY_TERMS", "STOPWORDS", "index_text", "query_terms", "stem", "term_set", "terms"]

MAX_QUERY_TERMS: Final = 64
"""Distinct query terms kept (a pasted page must not become thousands of FTS5 phrases)."""

_WORD: Final = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_LOCAL: Final = threading.local()


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """The Snowball English stem of one lowercase word (cached: the vocabulary of a store is small).

    A Snowball stemmer keeps its word in its own state, so each thread has its own (a pack reads its sections
    on several threads at once). PyStemmer runs the Snowball project's generated C code: the same stems as its
    pure-Python port (``snowballstemmer``, used before; checked equal on every word of the LoCoMo and PEP data
    and of the Python sources and docs installed here, 180k words), over ten times faster on a word not cached.
    """
    stemmer = getattr(_LOCAL, "stemmer", None)
    if stemmer is None:
        stemmer = _LOCAL.stemmer = Stemmer.Stemmer("english", 0)  # no cache of its own: ``stem`` is cached
    out: str = stemmer.stemWord(word)
    return out


def terms(text: str) -> list[str]:
    """The terms of ``text`` in order, repeats kept (see the module docstring)."""
    out: list[str] = []
    for match in _WORD.finditer(text.lower()):
        word = match.group().replace("’", "'")
        if word in STOPWORDS:
            continue
        head = word.split("'", 1)[0]
        if (len(head) < 2 and not head.isdigit()) or head in STOPWORDS:
            continue
        out.append(stem(head))
    return out


def term_set(text: str) -> frozenset[str]:
    """The distinct terms of ``text``."""
    return frozenset(terms(text))


def query_terms(query: str) -> list[str]:
    """The query's distinct terms in order, at most ``MAX_QUERY_TERMS``."""
    return list(dict.fromkeys(terms(query)))[:MAX_QUERY_TERMS]


def index_text(text: str) -> str:
    """The terms of ``text`` joined by spaces: what a full-text index stores for it."""
    return " ".join(terms(text))
