"""Celery workers for memory-core: the only package that imports Celery."""
