"""Ranking pieces shared by every engine (pure: no SQLite, no PostgreSQL, no I/O but the model's own files).

* ``terms``: the one tokenizer (Snowball English stems, stop-words dropped) for engines, the relevance floor
  and the evaluation.
* ``window``: the text a conversation turn is indexed with (the turn and its neighbours in its thread).
* ``embedder``: the ``Embedder`` protocol, the ``hash`` test double and the MiniLM model (``EMBEDDER`` setting).
* ``late``: quantised token vectors and late-interaction (MaxSim) scores.
* ``fusion``: reciprocal-rank fusion and the absolute score a fused list reports.
"""
