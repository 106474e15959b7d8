"""Requeue a dead letter: its job is published again under the same id, for the engine it was submitted for.

Order matters: the letter is deleted *before* the job is published (and put back if the publish fails), so a
job that fails again at once writes a new letter under the same id that stays; deleting after the publish
would race with it and drop the new letter. The job keeps the engine key it was submitted with (the letter's
``engine``): stamping it with the requeuing shell's key would send a ``WrongEngine`` letter straight back, or
run a job against the store of whatever engine the operator's shell names. ``engine=`` retargets deliberately.
"""

from __future__ import annotations

from memory_core.errors import InvalidRequest
from memory_core.settings import Settings
from workers.dead_letters import DeadLetterStore
from workers.locks import engine_key
from workers.queue import JobQueue
from workers.stores import open_dead_letters

__all__ = ["requeue"]


def requeue(
    settings: Settings,
    ref: str,
    *,
    engine: str | None = None,
    store: DeadLetterStore | None = None,
    queue: JobQueue | None = None,
) -> str:
    """Publish dead letter ``ref``'s job again (same id; its attempts, progress and done marks cleared).

    Args:
        settings: The settings.
        ref: The letter's id, or a prefix of it that only one letter has.
        engine: An engine URL to run the job against instead (its ``engine_key`` is stamped on the job);
            default the engine the letter records, else this process's ``Settings.engine``.
        store: The dead-letter store (tests); default opened from settings.
        queue: The job queue (tests); default opened from settings.

    Returns:
        The job id serving it (the letter's, or a pending identical build's).

    Raises:
        NotFound: no such dead letter.
        InvalidRequest: an ambiguous prefix, or a payload that is not a job (a malformed message cannot be
            requeued; purge it).
        EngineUnavailable: the store or the broker is unreachable (the letter is kept).
    """
    letters = store or open_dead_letters(settings)
    letter = letters.get(letters.resolve(ref))
    if letter.truncated:
        raise InvalidRequest("the payload was cut when it was dead-lettered; it cannot be requeued", field="payload")
    target = engine_key(engine) if engine else letter.engine
    jobs = queue or JobQueue(settings)
    try:
        job = jobs.kinds.parse(letter.payload)  # a job of any kind in the table (workers.kinds)
        jobs.coordination.forget_job(letter.id)
        letters.delete(letter.id)
        try:
            return jobs.publish(job, letter.id, engine=target)
        except BaseException:
            letters.put(letter)  # not published: the letter stays for the next try
            raise
    finally:
        if queue is None:
            jobs.close()
