"""The PostgreSQL engine: one store for many hosts and workers on many machines (``pip install memory-core[postgres]``).

Open it with ``open_engine("postgresql://user:password@host:5432/memory")``. Modules: ``options`` (the URL,
its options and masking), ``driver`` (one psycopg pool per process, error mapping), ``schema`` (versioned forward
migrations under an advisory lock), ``filters`` (``MetaFilter`` → SQL), ``search`` (candidates and their signals
in one statement), ``fusion`` (the pure scoring), ``rerank`` (late interaction, pure), ``vectors`` (the model's
stored vectors), ``model`` (the embedder and the query LRU), ``writes`` (one ``INSERT … ON CONFLICT DO NOTHING``),
``beliefs`` (incremental builds per scope under an advisory lock, retraction), ``engine`` (the hooks) and
``migrate`` (copying a SQLite store in).
"""

from memory_core.engines.postgres.engine import PostgresEngine

__all__ = ["PostgresEngine"]
