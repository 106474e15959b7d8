"""Celery workers for memory-core: the only package (with ``beat_schedule.py``) that imports Celery or kombu.

| module | what it holds |
| --- | --- |
| ``config`` | the Celery configuration as data, from settings (and why each item is set) |
| ``celery_app`` | ``app``: ``celery -A workers.celery_app worker|beat|flower`` |
| ``tasks`` | ``memory.build_beliefs``, ``memory.ingest_brain``, ``memory.build_due``, ``memory.drain_outbox`` |
| ``execution`` | one delivery's flow: attempts, parsing, per-scope builds, retries, dead letters |
| ``queue`` | ``JobQueue``: the host side (``submit`` returns at once; outbox when Redis is away) |
| ``outbox`` | the durable local outbox (SQLite under ``var_dir``) |
| ``locks`` | single flight and coalescing per (engine, scope) |
| ``coordination``, ``redis_coordination`` | the state behind them (Lua on Redis; SQLite server-less) |
| ``dead_letters``, ``requeue`` | jobs that will not run, and putting them back |
| ``poison``, ``transport``, ``consumer``, ``signals`` | malformed messages never crash a worker |
| ``stores`` | opening the above from settings; engine plugins |
| ``per_process`` | a value opened once per process (again in a forked pool child) |
| ``flower`` | Flower's command line (basic auth always on) |
| ``baseline`` | a plain Celery no-op app, the benchmarks' baseline |
"""
