"""Celery workers for memory-core: the only package (with ``beat_schedule.py``) that imports Celery or kombu.

| module | what it holds |
| --- | --- |
| ``kinds``, ``handlers`` | the table of job kinds, and what each kind's delivery does: add a kind here |
| ``config``, ``celery_app``, ``signals`` | the Celery configuration as data, the app (a task per kind), its signals |
| ``execution`` | the process's ``Runtime`` (engine and stores, opened once per process) and one delivery's flow |
| ``queue`` | ``JobQueue``, the host side (``submit``, the outbox, ``requeue``, the tool-write sink) |
| ``gate``, ``coordination`` | single flight: the gate's rules, the Redis and SQLite stores, leases |
| ``dead_letters``, ``transport`` | jobs that will not run; malformed messages never stop a worker |
| ``monitor``, ``embedding``, ``baseline`` | the operator's view; the embedding job; the benchmarks' no-op app |

docs/jobs.md describes the flow, its guarantees and settings.
"""
