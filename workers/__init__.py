"""Celery workers for memory-core: the only package (with ``beat_schedule.py``) that imports Celery or kombu.

| module | what it holds |
| --- | --- |
| ``kinds`` | the table of job kinds (model, task, queue, handler, Flower summary, coalescing): add a kind here |
| ``handlers`` | what each kind's delivery does (per-scope builds, ingest, build-due, outbox drain) |
| ``config`` | the Celery configuration as data, from settings (and why each item is set) |
| ``celery_app`` | ``app`` with a task per kind: ``celery -A workers.celery_app worker|beat|flower`` |
| ``execution`` | one delivery's flow: attempts, parsing, dispatch, retries, dead letters |
| ``runtime`` | the process's ``Runtime`` (engine, coordination, dead letters, queue), opened once per process |
| ``queue`` | ``JobQueue``: the host side (``submit`` returns at once; outbox when Redis is away) |
| ``outbox`` | the durable local outbox (SQLite under ``var_dir``) |
| ``locks`` | single flight and coalescing per (engine, scope) |
| ``gate`` | the scope gate's rules, declared once as a table: a pure ``step`` and one generic Lua interpreter |
| ``coordination``, ``redis_coordination`` | the state behind them: SQLite (server-less) and Redis run the same table |
| ``dead_letters``, ``requeue`` | jobs that will not run, and putting them back |
| ``poison``, ``transport``, ``consumer``, ``signals`` | malformed messages never crash a worker |
| ``stores`` | opening the above from settings; engine plugins |
| ``flower`` | Flower's command line (basic auth always on) |
| ``baseline`` | a plain Celery no-op app, the benchmarks' baseline |
"""
