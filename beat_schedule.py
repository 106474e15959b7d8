"""The periodic jobs celery beat sends, as pure data (issue 5 §6). Run exactly ONE beat.

Each entry: ``task`` (a registered task name), ``every`` (seconds, or the name of a ``Settings`` field holding
seconds) and ``kwargs``. ``workers.config.beat_config`` turns this into Celery's ``beat_schedule``, routing each
task to its queue and letting each tick expire after one period.

| entry | task | every | what it does |
| --- | --- | --- | --- |
| ``build-due`` | ``memory.build_due`` | ``build_due_interval_s`` | a build per scope written since its last build |
| ``drain-outbox`` | ``memory.drain_outbox`` | ``outbox_drain_interval_s`` | publishes parked jobs |
| ``retention`` | ``memory.retention`` | ``retention_interval_s`` (daily) | prunes old turns (seed 004) |
| ``embed-due`` | ``memory.embed_due`` | ``build_due_interval_s`` | an ``embed_items`` job while items wait |
| ``compact-log`` | ``memory.compact_log`` | ``log_compact_interval_s`` (daily) | old log records into a checkpoint |

Two beats send every tick twice (celery/celery#2856); the tasks tolerate it (a build is single flight per scope
and coalesced, a drain claims each row once), but the rule in docs/jobs.md stands: one beat.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ENTRIES"]

ENTRIES: dict[str, dict[str, Any]] = {
    "build-due": {"task": "memory.build_due", "every": "build_due_interval_s", "kwargs": {}},
    "drain-outbox": {"task": "memory.drain_outbox", "every": "outbox_drain_interval_s", "kwargs": {}},
    "retention": {"task": "memory.retention", "every": "retention_interval_s", "kwargs": {}},
    "embed-due": {"task": "memory.embed_due", "every": "build_due_interval_s", "kwargs": {}},
    "compact-log": {"task": "memory.compact_log", "every": "log_compact_interval_s", "kwargs": {}},
}
"""Entry name → ``{task, every, kwargs}``."""
