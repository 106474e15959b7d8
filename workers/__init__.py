"""Celery workers for memory-core: the only package (with ``beat_schedule.py``) that imports Celery or kombu.

Its modules, the flow, its guarantees and settings: docs/jobs.md.
"""
