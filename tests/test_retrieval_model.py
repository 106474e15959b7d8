"""The embedders, quantised late interaction and rank fusion (pure parts of ``memory_core.retrieval``)."""

from __future__ import annotations

import numpy as np
import pytest

from memory_core.errors import ConfigError
from memory_core.retrieval import embedder as embedder_module
from memory_core.retrieval.embedder import MAX_TOKENS, Embedder, HashEmbedder, MiniLMEmbedder, embedder_for
from memory_core.retrieval.fusion import envelope, ranks, rrf
from memory_core.retrieval.late import dequantise, maxsim, quantise, token_max
from memory_core.scoring import embed

PAIRS = [
    "A man is playing a guitar.",
    "Someone strums an acoustic instrument.",
    "The stock market fell sharply today.",
    "Share prices dropped at the exchange.",
    "My dog loves chasing the ball in the park.",
    "The puppy ran after a toy outside.",
]


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return embedder_for("minilm")


def test_minilm_pins_the_nearest_neighbours_of_known_sentences(minilm: Embedder) -> None:
    assert minilm.name == "minilm-l6-v2-int8" and minilm.dims == 384 and isinstance(minilm, Embedder)
    pooled = minilm.encode(PAIRS).pooled
    assert np.allclose(np.linalg.norm(pooled, axis=1), 1.0, atol=1e-4)
    sim = pooled @ pooled.T
    np.fill_diagonal(sim, -1.0)
    assert sim.argmax(axis=1).tolist() == [1, 0, 3, 2, 5, 4]  # paraphrases share no content word
    assert sim[0, 1] > 0.4 and sim[0, 2] < 0.1


def test_minilm_token_vectors_are_content_wordpieces_in_order(minilm: Embedder) -> None:
    enc = minilm.encode(["What did the kids paint?", "the of and", ""])
    assert len(enc.tokens[0]) == 2  # kids, paint: stop-words and punctuation are left out
    assert len(enc.tokens[1]) == 0 and len(enc.tokens[2]) == 0
    long = minilm.encode([" ".join(f"mountain{i}" for i in range(200))])
    assert len(long.tokens[0]) == MAX_TOKENS
    # the batch order does not change a text's vectors
    alone = minilm.encode(["What did the kids paint?"])
    assert np.allclose(alone.pooled[0], enc.pooled[0], atol=1e-4)


def test_a_model_file_whose_sha256_is_not_the_pinned_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedder_module, "MINILM_SHA256", "0" * 64)
    with pytest.raises(ConfigError, match="sha256"):
        MiniLMEmbedder()
    with pytest.raises(ConfigError, match="unknown embedder"):
        embedder_for("bert")


def test_hash_embedder_is_the_reference_vector_per_text_and_term() -> None:
    enc = HashEmbedder().encode(["Sunsets at the lake", ""])
    assert enc.pooled.shape == (2, 64) and enc.tokens[0].shape == (2, 64) and enc.tokens[1].shape == (0, 64)
    assert np.allclose(enc.tokens[0], [embed("sunset"), embed("lake")])  # the terms, stemmed
    assert np.allclose(enc.pooled[0], embed("Sunsets at the lake"))
    assert not enc.pooled[1].any()


def test_quantised_tokens_round_trip_and_maxsim_takes_each_query_tokens_best() -> None:
    rng = np.random.default_rng(3)
    a = rng.normal(size=(5, 384)).astype(np.float32)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    blob = quantise(a)
    assert len(blob) == 5 * (384 + 4)
    assert np.abs(dequantise(blob, 384) - a).max() < 0.01
    assert dequantise(quantise(np.zeros((0, 384), dtype=np.float32)), 384).shape == (0, 384)
    q = a[[1, 3]]
    rows = token_max(q, [a[:2], a[2:], np.zeros((0, 384), dtype=np.float32)])
    assert np.allclose(rows[0, 0], 1.0) and rows[0, 1] < 0.5 and np.allclose(rows[1, 1], 1.0)
    assert (rows[2] == -1).all()
    both = np.maximum(rows[0], rows[1])  # the view of the two texts together
    assert np.allclose(maxsim(both[None, :]), 1.0)


def test_rrf_adds_reciprocal_ranks_and_the_envelope_never_rises() -> None:
    r1 = ranks(np.array([3.0, 1.0, 2.0]))
    r2 = ranks(np.array([0.1, 0.9, 0.5]), present=np.array([True, True, False]))
    assert r1.tolist() == [1, 3, 2] and r2.tolist() == [2, 1, 0]
    fused = rrf([r1, r2], k=60)
    assert np.allclose(fused, [1 / 61 + 1 / 62, 1 / 63 + 1 / 61, 1 / 62])
    assert envelope(np.array([0.2, 0.5, 0.1, 0.3])).tolist() == [0.5, 0.5, 0.3, 0.3]


def test_fuse_keeps_the_lexical_order_until_the_model_or_a_named_speaker_speaks() -> None:
    from memory_core.retrieval.fusion import fuse, names_speaker, query_words

    n = 4
    lexical = np.arange(1, n + 1)
    none = np.full((n, 2), -1.0, dtype=np.float32)
    flat = np.ones(n)
    off = np.zeros(n, dtype=bool)
    assert np.argsort(-fuse(lexical, none, none, off, flat, off)).tolist() == [0, 1, 2, 3]
    own = np.array([[0.1, 0.1], [0.2, 0.2], [0.3, 0.3], [0.9, 0.9]], dtype=np.float32)
    moved = fuse(lexical, own, own, np.ones(n, dtype=bool), flat, off)
    assert np.argmax(moved) == 0 and moved[3] > moved[2]  # the model lifts the last one past its neighbour
    spoken = np.array([False, True, False, False])
    assert np.argmax(fuse(lexical, none, none, off, flat, spoken)) == 1
    words = query_words("What did Caroline paint?")
    assert (
        names_speaker(words, "Caroline Smith")
        and not names_speaker(words, "Melanie")
        and not names_speaker(words, None)
    )
