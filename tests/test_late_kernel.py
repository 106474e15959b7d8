"""The late-interaction kernel against a straightforward reference, on random data.

``late.token_max`` scores every text in one product over their stacked stored (int8) vectors, and ``reorder``
scores each distinct text once (a candidate that is also the turn before another is not scored twice). Both must
give what the plain definition gives: dequantise each text, take each query token's best cosine with it, view a
turn with the turn before it as the elementwise max, and fuse. Only float rounding may differ.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from memory_core.engines.sqlite.rerank import RERANK_POOL, reorder
from memory_core.engines.sqlite.search import weights
from memory_core.engines.sqlite.vectors import Stored
from memory_core.retrieval.embedder import F32
from memory_core.retrieval.fusion import envelope, fuse, names_speaker, query_words
from memory_core.retrieval.late import CHUNK, Quantised, Tokens, dequantise, quantise, token_max

DIMS = 48


def _unit(rng: np.random.Generator, n: int, dims: int = DIMS) -> F32:
    rows = rng.normal(size=(n, dims)).astype(np.float32)
    out: F32 = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def _reference_max(query: F32, text: F32 | None) -> F32:
    """Each query token's best cosine with the text's tokens, one dot product at a time; -1 with no tokens."""
    out = np.full(len(query), -1.0, dtype=np.float32)
    if text is None or len(text) == 0:
        return out
    for j, q in enumerate(query):
        out[j] = max(float(np.dot(t, q)) for t in text)
    return out


def _floats(tokens: Tokens | None) -> F32 | None:
    if tokens is None:
        return None
    return tokens.dequantise() if isinstance(tokens, Quantised) else tokens


def test_quantised_is_a_view_of_the_blob_and_dequantises_as_before() -> None:
    rng = np.random.default_rng(1)
    vectors = _unit(rng, 7)
    blob = quantise(vectors)
    held = Quantised.parse(blob, DIMS)
    assert held.values.dtype == np.int8 and held.shape == (7, DIMS) and len(held) == 7
    assert held.nbytes == len(blob) == 7 * (DIMS + 4)  # a quarter of float32, plus the scales
    assert np.array_equal(held.dequantise(), dequantise(blob, DIMS))
    assert np.abs(held.dequantise() - vectors).max() < 0.01
    with pytest.raises(ValueError, match="not whole tokens"):
        Quantised.parse(blob[:-1], DIMS)


@pytest.mark.parametrize("seed", range(6))
def test_token_max_equals_the_reference_on_random_texts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    query = _unit(rng, int(rng.integers(1, 12)))
    texts: list[Tokens] = []
    for _ in range(int(rng.integers(1, 150))):
        size = int(rng.integers(0, 37))  # some texts have no tokens
        vectors = _unit(rng, size) if size else np.zeros((0, DIMS), dtype=np.float32)
        texts.append(Quantised.parse(quantise(vectors), DIMS) if rng.random() < 0.8 else vectors)
    got = token_max(query, texts)
    want = np.array([_reference_max(query, _floats(t)) for t in texts])
    assert got.shape == (len(texts), len(query)) and got.dtype == np.float32
    assert np.abs(got - want).max() < 1e-5
    assert np.array_equal(got == -1, want == -1)  # exactly the empty texts have no evidence


def test_token_max_over_chunks_and_a_text_longer_than_a_chunk() -> None:
    rng = np.random.default_rng(9)
    query = _unit(rng, 5)
    sizes = [CHUNK - 1, 2, CHUNK, 0, CHUNK + 40, 1, 1, CHUNK // 2, CHUNK // 2 + 1, 3 * CHUNK]
    texts: list[Tokens] = [Quantised.parse(quantise(_unit(rng, n)), DIMS) if n else _unit(rng, 0) for n in sizes]
    texts[4] = _unit(rng, CHUNK + 40)  # a float text wider than a chunk, between quantised ones
    want = np.array([_reference_max(query, _floats(t)) for t in texts])
    assert np.abs(token_max(query, texts) - want).max() < 1e-5


def test_token_max_of_no_query_tokens_or_no_texts() -> None:
    rng = np.random.default_rng(2)
    text = Quantised.parse(quantise(_unit(rng, 3)), DIMS)
    assert token_max(np.zeros((0, DIMS), dtype=np.float32), [text]).shape == (1, 0)
    assert token_max(_unit(rng, 2), []).shape == (0, 2)
    empty = np.zeros((0, DIMS), dtype=np.float32)
    assert (token_max(_unit(rng, 2), [empty, empty]) == -1).all()


def _reference_reorder(
    ranked: Sequence[tuple[int, float]],
    stored: dict[int, Stored],
    query: str,
    query_tokens: F32,
    now_us: int,
    dense: Sequence[int],
) -> list[tuple[int, float]]:
    """``reorder`` as its definition reads: every candidate and its turn before scored on their own."""
    head, tail = list(ranked[:RERANK_POOL]), list(ranked[RERANK_POOL:])
    extra = [s for s in dense if s not in {h for h, _ in head}]
    if extra:
        head = head + [(s, head[-1][1]) for s in extra]
        tail = [(s, v) for s, v in tail if s not in set(extra)]
    seqs = [s for s, _ in head]

    def floats(seq: int | None) -> F32 | None:
        row = stored.get(seq) if seq is not None else None
        return None if row is None else _floats(row.tokens)

    own = np.array([_reference_max(query_tokens, floats(s)) for s in seqs])
    before = np.array([_reference_max(query_tokens, floats(stored[s].prev if s in stored else None)) for s in seqs])
    embedded = np.array([(t := floats(s)) is not None and len(t) > 0 for s in seqs])
    when = np.array([stored[s].when_us if s in stored else now_us for s in seqs], dtype=np.int64)
    conf = np.array([stored[s].confidence if s in stored else 0.5 for s in seqs])
    words = query_words(query)
    spoken = np.array([s in stored and names_speaker(words, stored[s].speaker) for s in seqs])
    lexical = np.array([i + 1 for i in range(len(head) - len(extra))] + [0] * len(extra), dtype=np.int64)
    nominated = np.array([0] * (len(head) - len(extra)) + [i + 1 for i in range(len(extra))], dtype=np.int64)
    fused = fuse(lexical, own, np.maximum(own, before), embedded, weights(when, conf, now_us), spoken, nominated)
    order = sorted(range(len(seqs)), key=lambda i: (-fused[i], i))
    scores = envelope(np.array([head[i][1] for i in order]))
    out = [(seqs[i], float(s)) for i, s in zip(order, scores, strict=True)]
    return out + [(seq, min(score, float(scores[-1]))) for seq, score in tail]


def _store(rng: np.random.Generator, n: int) -> tuple[list[tuple[int, float]], dict[int, Stored]]:
    """``n`` ranked seqs; rows with turns before them that are candidates, older turns, missing or not embedded."""
    now = 10**15
    stored: dict[int, Stored] = {}
    for seq in range(1, n + 40):
        roll = rng.random()
        if roll < 0.05:
            continue  # not stored (deleted, or never a candidate's row)
        size = int(rng.integers(0, 20))
        tokens: Tokens | None = None if roll < 0.12 else Quantised.parse(quantise(_unit(rng, size)), DIMS)
        if roll > 0.9 and tokens is not None:
            tokens = tokens.dequantise()  # rows given as float vectors (as PostgreSQL's tests build them)
        prev = int(rng.integers(1, seq)) if seq > 1 and rng.random() < 0.7 else None
        speaker = str(rng.choice(["Caroline", "Melanie", None]))
        when = now - int(rng.integers(0, 10**11))
        stored[seq] = Stored(tokens, prev, speaker, when, float(rng.choice([0.5, 0.9])))
    ranked = [(int(s), float(1.0 - i / (2 * n))) for i, s in enumerate(rng.permutation(np.arange(40, 40 + n)))]
    return ranked, stored


@pytest.mark.parametrize("seed", range(8))
def test_reorder_equals_the_reference_on_random_candidates(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    ranked, stored = _store(rng, int(rng.integers(2, RERANK_POOL + 30)))
    query = "What did Caroline paint"
    query_tokens = _unit(rng, int(rng.integers(1, 9)))
    dense = [int(s) for s in rng.choice(np.arange(1, 40), size=int(rng.integers(0, 6)), replace=False)]
    now = 10**15
    got = reorder(ranked, stored, query, query_tokens, now, dense)
    want = _reference_reorder(ranked, stored, query, query_tokens, now, dense)
    assert [s for s, _ in got] == [s for s, _ in want]
    assert np.allclose([v for _, v in got], [v for _, v in want], rtol=0, atol=1e-9)
