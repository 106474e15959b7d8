"""End to end: secrets typed into a turn and pasted into an ingested document, through AgentMemory and Brain with a
real worker building beliefs, can be read back from nowhere: recall, fetch, the pack, context.md, beliefs, every
stored item, and no file the host or the worker wrote (the engine's database, the broker's messages, results,
dead letters, the outbox, the worker's log).

The server-less transport keeps all of that under one folder, so one scan of it covers every store; the host
opens its engine as the CLI and workers do (``open_host_engine``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from flowkit import Proc, memory_core_argv, wait_until

from memory_core.engines import open_host_engine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.brain import Brain
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.namespace import Reach
from memory_core.query import ListRequest
from memory_core.recall.context import compile_context
from memory_core.settings import get_settings

pytestmark = [pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "safety"))
from safety_leaks import leaks  # noqa: E402

AWS = "AKIAIOSFODNN7EXAMPLE"
CARD = "4111 1111 1111 1111"
PASSWORD = "Tr0ub4dor&3xyz"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
GHP = "ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ"
KEY_BODY = "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9OiZ0mXn1Y4j2Q8aB7cdGVzdGtleWRhdGFmb3Jz"
SECRETS = (AWS, CARD, CARD.replace(" ", ""), PASSWORD, JWT, GHP, KEY_BODY)

TURNS = (
    f"I live in Lisbon. My AWS access key is {AWS} and my card is {CARD}.",
    f"I work as a marine biologist; my password is {PASSWORD} and the session token was {JWT}.",
)
DOC = (
    "# Deploy runbook\n\nThe deploy bot uses the token "
    f"{GHP} to push.\n\nThe server key:\n\n-----BEGIN RSA PRIVATE KEY-----\n{KEY_BODY}\n"
    "-----END RSA PRIVATE KEY-----\n\n"
    "Deploys run every Tuesday from the Lisbon office."
)


def _everything_readable(engine, layout: MemoryLayout, mem: AgentMemory) -> str:  # type: ignore[no-untyped-def]
    everything = Reach.subtree()
    parts = [h.text for h in engine.list(ListRequest(limit=1000, filter={"reach": everything.to_dict()})).items]
    for question in ("What is my AWS key?", "What card do I use?", "What is the deploy token?", "Where do I live?"):
        answer = engine.recall({"question": question, "filter": {"reach": everything.to_dict()}})
        parts += [answer.answer, *(c.snippet for c in answer.citations)]
        parts += [h.text for h in engine.fetch({"query": question, "filter": {"reach": everything.to_dict()}}).hits]
    parts += [h.text for h in engine.beliefs({"reach": everything.to_dict(), "limit": 200})]
    pack = mem.pre_turn({"thread_id": "t2", "turn_index": 0, "user_text": "What is my AWS key and card?"}).pack
    parts.append(pack.markdown)
    parts.append(compile_context(engine).markdown)
    return "\n".join(parts)


def test_no_secret_typed_or_ingested_can_be_read_back_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_ENGINE": f"sqlite:///{tmp_path / 'var' / 'memory.db'}",
        "MEMORY_CORE_BROKER_URL": "",
        "MEMORY_CORE_RESULT_BACKEND": "",
        "MEMORY_CORE_BUILD_MIN_INTERVAL_S": "0",
        "MEMORY_CORE_ENGINE_PLUGINS": "",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    worker_env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}, **env}
    worker = Proc("worker", memory_core_argv("worker", "--loglevel", "debug"), worker_env, tmp_path, tmp_path)
    from workers.monitor import JobMonitor
    from workers.queue import JobQueue

    queue, monitor = JobQueue(), JobMonitor()
    engine = open_host_engine(get_settings().engine)
    try:
        worker.wait_for("ready.", 90)
        layout = MemoryLayout()
        mem = AgentMemory(engine, layout, "alice").with_policy({"build_beliefs_every": 2})
        ids: list[str] = []
        for i, text in enumerate(TURNS):
            mem.pre_turn({"thread_id": "t1", "turn_index": i, "user_text": text})
            report = mem.post_turn({"thread_id": "t1", "turn_index": i, "assistant_text": f"Noted: {text}"})
            ids += [queue.submit(job) for job in report.jobs]
        ids.append(queue.submit(Brain(engine, layout).ingest_job([BrainDocument.new("notion", DOC, title="Runbook")])))
        assert len(ids) == 2
        waited = monitor.wait(ids, timeout_s=120)
        assert waited.complete and not waited.failed, waited

        beliefs = engine.beliefs({"reach": Reach.subtree().to_dict(), "limit": 200})
        assert any("Lisbon" in h.text for h in beliefs)  # the worker built beliefs from the scrubbed turns
        stored = engine.list(ListRequest(limit=1000, filter={"reach": Reach.subtree().to_dict()})).items
        assert any("[REDACTED_PRIVATE_KEY]" in h.text for h in stored)  # the document was ingested, scrubbed
        readable = _everything_readable(engine, layout, mem)
        assert "[REDACTED]" in readable and "[REDACTED_PII_CARD]" in readable
        assert [s for s in SECRETS if s in readable] == []
    finally:
        engine.close()
        queue.close()
        monitor.close()
        worker.stop()
    wait_until(lambda: not worker.alive(), 30, what="the worker to stop")
    assert "ready." in worker.text()
    assert leaks(tmp_path, SECRETS) == {}  # the database, broker messages, results, dead letters, outbox, log


@pytest.mark.redis
def test_a_job_published_to_redis_carries_no_secret_in_its_body_or_flowers_args(flow) -> None:  # type: ignore[no-untyped-def]
    import base64
    import json
    import uuid

    from memory_core.lifecycle.jobs import IngestBrain
    from workers.queue import JobQueue

    queue_name = f"{flow.uid}-{uuid.uuid4().hex[:6]}-ingest"
    queue = JobQueue(flow.settings(queue_ingest=queue_name))
    try:
        queue.submit(IngestBrain(documents=(BrainDocument.new("notion", DOC, title=f"Keys {AWS}"),)))
    finally:
        queue.close()
    raw = flow.client().rpop(queue_name)
    assert raw is not None
    message = json.loads(raw)
    body = base64.b64decode(message["body"]).decode()
    assert "[REDACTED_PRIVATE_KEY]" in body and "[REDACTED]" in body
    everything = raw + body + json.dumps(message["headers"])
    assert [s for s in SECRETS if s in everything] == []
