"""Jobs are scrubbed where they are submitted: no secret in the server-less broker's files or the outbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from safety_leaks import leaks

from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain
from memory_core.meta import MemoryMeta
from memory_core.namespace import Reach
from memory_core.safety.jobs import scrub_job
from memory_core.settings import Settings
from workers.queue import JobQueue

AWS = "AKIAIOSFODNN7EXAMPLE"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
CARD = "4111 1111 1111 1111"
SECRETS = (AWS, JWT, CARD, "s3cr3tPa55")


def _job() -> IngestBrain:
    doc = BrainDocument.new(
        "notion",
        f"Deploy notes: the key is {AWS} and the session token {JWT}.\nCorporate card {CARD}.",
        title=f"Keys {AWS}",
        meta=MemoryMeta(url="https://wiki.example.com/deploy?token=s3cr3tPa55", file_path="/deploy/notes.md"),
    )
    return IngestBrain(documents=(doc, BrainDocument.new("notion", "nothing secret")))


def test_scrub_job_scrubs_documents_and_keeps_the_rest() -> None:
    job = _job()
    scrubbed = scrub_job(job)
    first, second = scrubbed.documents
    assert first.title == "Keys [REDACTED]" and AWS not in first.text and CARD not in first.text
    assert "[REDACTED_PII_CARD]" in first.text and first.meta.url == "https://wiki.example.com/deploy?token=[REDACTED]"
    assert first.meta.file_path == "/deploy/notes.md" and first.source == job.documents[0].source
    assert second is job.documents[1]  # nothing to scrub: the same document
    build = BuildBeliefs(request={"reach": Reach.exact("agent:alice").to_dict()})
    assert scrub_job(build) is build


@pytest.mark.parametrize("scrub", [True, False])
def test_nothing_secret_reaches_the_server_less_broker(tmp_path: Path, scrub: bool) -> None:
    queue = JobQueue(Settings(_env_file=None, var_dir=tmp_path / "var", scrub=scrub))
    try:
        state = queue.send(_job()).state
    finally:
        queue.close()
    assert state == "published"
    assert sorted(leaks(tmp_path, SECRETS)) == ([] if scrub else sorted(SECRETS))  # off: the same check finds them


@pytest.mark.parametrize("scrub", [True, False])
def test_nothing_secret_reaches_the_outbox_when_the_broker_is_down(tmp_path: Path, scrub: bool) -> None:
    settings = Settings(
        _env_file=None, broker_url="redis://127.0.0.1:1/0", var_dir=tmp_path, publish_timeout_s=0.3, scrub=scrub
    )
    queue = JobQueue(settings)
    try:
        assert queue.send(_job()).state == "parked"
        assert queue.outbox.waiting() == 1
    finally:
        queue.close()
    assert sorted(leaks(tmp_path, SECRETS)) == ([] if scrub else sorted(SECRETS))
