"""Celery workers for memory-core: the only package (with ``beat_schedule.py``) that imports Celery or kombu.

| module | what it holds |
| --- | --- |
| ``kinds``, ``handlers`` | the table of job kinds, and what each kind's delivery does: add a kind here |
| ``config`` | the Celery configuration as data, from settings (and why each item is set); Flower's argv |
| ``celery_app`` | ``app`` with a task per kind: ``celery -A workers.celery_app worker|beat|flower`` |
| ``execution`` | the process's ``Runtime`` (engine and stores, opened once per process) and one delivery's flow |
| ``queue``, ``outbox`` | ``JobQueue``, the host side (``submit``; the stores' openers; ``requeue``); the outbox |
| ``gate``, ``locks``, ``coordination`` | single flight: the gate's rules, leases, the Redis and SQLite stores |
| ``dead_letters`` | jobs that will not run |
| ``poison``, ``transport``, ``signals`` | malformed messages never crash a worker (consumer, transports, signals) |
| ``monitor`` | the operator's view: job states, queue depths, broker probe |
| ``tool_writes`` | the job flow as the sink of queued tool writes |
| ``baseline`` | a plain Celery no-op app, the benchmarks' baseline |

docs/jobs.md describes the flow, its guarantees and settings.
"""
