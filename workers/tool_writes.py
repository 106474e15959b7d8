"""The job flow as the sink of ``ToolWrites``: a queued ``learn``/``forget`` is a ``tool_write`` job.

``QueueSink(queue)`` submits through a ``JobQueue`` (published, or parked in the host's outbox while the broker
is down: the flow's one outbox) and asks its coordination store whether a job has finished (applied or
dead-lettered: the flow marks both done). ``open_tool_writes`` builds the ``ToolWrites`` a host uses.
"""

from __future__ import annotations

from memory_core.engine import MemoryEngine
from memory_core.tools.jobs import ToolWrite
from memory_core.tools.memory_tools import ToolScope
from memory_core.tools.writes import ToolWrites
from workers.queue import JobQueue

__all__ = ["QueueSink", "open_tool_writes"]


class QueueSink:
    """``JobSink`` over a ``JobQueue``."""

    def __init__(self, queue: JobQueue) -> None:
        self.queue = queue

    def submit(self, job: ToolWrite) -> str:
        """``JobQueue.submit`` (scrubbed there too when ``Settings.scrub``); the job id.

        Raises:
            InvalidRequest: a malformed job.
            EngineUnavailable: the broker is unreachable AND the outbox cannot be written.
        """
        return self.queue.submit(job)

    def finished(self, job_id: str) -> bool:
        """The coordination store's ``is_done`` (bounded by ``publish_timeout_s``; raises when unreachable)."""
        return self.queue.coordination.is_done(job_id)


def open_tool_writes(engine: MemoryEngine, queue: JobQueue, scope: ToolScope | None = None) -> ToolWrites:
    """``ToolWrites`` over ``engine`` whose queued requests are ``tool_write`` jobs of ``queue``.

    Scrubbing follows ``queue.settings.scrub`` (``MEMORY_CORE_SCRUB``).
    """
    return ToolWrites(engine, QueueSink(queue), scope, scrub=queue.settings.scrub)
