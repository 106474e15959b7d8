"""Requeue a dead letter: its job is submitted again under the same id, then the letter is dropped."""

from __future__ import annotations

from memory_core.errors import InvalidRequest
from memory_core.lifecycle.jobs import parse_job
from memory_core.settings import Settings
from workers.dead_letters import DeadLetterStore
from workers.queue import JobQueue
from workers.stores import open_dead_letters

__all__ = ["requeue"]


def requeue(
    settings: Settings, letter_id: str, *, store: DeadLetterStore | None = None, queue: JobQueue | None = None
) -> str:
    """Submit dead letter ``letter_id``'s job again (same id; its attempts, progress and done marks cleared).

    Returns:
        The job id serving it (the letter's, or a pending identical build's).

    Raises:
        NotFound: no such dead letter.
        InvalidRequest: the payload is not a job (a malformed message cannot be requeued; purge it).
        EngineUnavailable: the store is unreachable.
    """
    letters = store or open_dead_letters(settings)
    letter = letters.get(letter_id)
    if letter.truncated:
        raise InvalidRequest("the payload was cut when it was dead-lettered; it cannot be requeued", field="payload")
    job = parse_job(letter.payload)
    jobs = queue or JobQueue(settings)
    try:
        jobs.coordination.forget_job(letter.id)
        job_id = jobs.submit(job, job_id=letter.id)
    finally:
        if queue is None:
            jobs.close()
    letters.delete(letter.id)
    return job_id
