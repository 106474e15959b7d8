"""The operator's side of the job flow: ``dead-letters`` on a narrow terminal, and the bounded broker probe."""

from __future__ import annotations

import socket
import ssl
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_core.cli import load_commands
from memory_core.settings import Settings
from workers.dead_letters import DeadLetter, SqliteDeadLetters
from workers.monitor import JobMonitor, redact
from workers.queue import JobQueue, OutboxEntry


@pytest.fixture
def var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A server-less setup under ``tmp_path/var`` for the CLI, on an 80-column terminal."""
    monkeypatch.setenv("MEMORY_CORE_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("COLUMNS", "80")
    return tmp_path / "var"


def test_dead_letter_ids_stay_whole_on_one_line_at_80_columns_and_a_unique_prefix_finds_one(var: Path) -> None:
    store = SqliteDeadLetters(var / "coordination.db", 100)
    ids = [str(uuid.uuid4()) for _ in range(2)]
    for job_id in ids:
        store.put(DeadLetter.of(job_id, "InvalidRequest", payload={"job": "x"}, message="documents: " + "z" * 200))
    app = load_commands()
    runner = CliRunner()
    listed = runner.invoke(app, ["dead-letters", "list"], env={"COLUMNS": "80"})
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    for job_id in ids:
        assert any(job_id in line for line in lines), listed.output  # not folded over several lines
    shown = runner.invoke(app, ["dead-letters", "show", ids[0][:8]])
    assert shown.exit_code == 0 and ids[0] in shown.output, shown.output
    missing = runner.invoke(app, ["dead-letters", "show", "ffffffff-no"])
    assert missing.exit_code == 1 and "no dead letter" in missing.output


def test_an_ambiguous_prefix_is_refused_naming_the_candidates(var: Path) -> None:
    store = SqliteDeadLetters(var / "coordination.db", 100)
    for job_id in ("abc-1", "abc-2"):
        store.put(DeadLetter.of(job_id, "InvalidRequest", payload={"job": "x"}))
    result = CliRunner().invoke(load_commands(), ["dead-letters", "requeue", "abc"])
    assert result.exit_code == 1 and "starts 2 dead letters" in result.output
    assert store.count() == 2  # nothing was requeued or dropped


def test_the_worker_refuses_a_queue_name_that_is_neither_logical_nor_configured(tmp_path: Path) -> None:
    # was a warning, and the worker consumed the queue nobody publishes to: now exit 2 before anything is prepared
    (tmp_path / "a-file").write_text("")  # var_dir under a file: preparing would fail, so it is never reached
    env = {"MEMORY_CORE_QUEUE_BELIEFS": "nc-beliefs", "MEMORY_CORE_VAR_DIR": str(tmp_path / "a-file" / "var")}
    result = CliRunner().invoke(load_commands(), ["worker", "--queues", "beliefs,belief"], env=env)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "--queues: 'belief' is no queue of this app" in result.stderr
    assert "beliefs (nc-beliefs), ingest, maintenance" in result.stderr


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_broker_probe_says_why_an_unreachable_broker_does_not_answer_and_counts_the_outbox(
    tmp_path: Path,
) -> None:
    url = f"redis://:secret@127.0.0.1:{closed_port()}/9"
    settings = Settings(_env_file=None, broker_url=url, var_dir=tmp_path / "var", publish_timeout_s=0.5)
    queue = JobQueue(settings)
    queue.outbox.put(OutboxEntry(id="parked-1", task="memory.ingest_brain", payload="{}", created=0.0))
    queue.close()
    monitor = JobMonitor(settings)
    probe = monitor.probe(timeout_s=0.5)
    assert not probe.reachable and probe.reason is not None and "ConnectionError" in probe.reason
    assert "secret" not in probe.url and "secret" not in probe.reason
    assert monitor.outbox_waiting() == 1
    monitor.close()


def test_a_blackholed_broker_is_reported_within_the_probes_bound(tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)  # accepts, never answers: a hung Redis, or TLS spoken to a plain port
    try:
        url = f"rediss://127.0.0.1:{server.getsockname()[1]}/9"
        monitor = JobMonitor(Settings(_env_file=None, broker_url=url, var_dir=tmp_path / "var"))
        probe = monitor.probe(timeout_s=0.3)
        assert not probe.reachable and probe.reason is not None and "Timeout" in probe.reason
        monitor.close()
    finally:
        server.close()


def test_the_monitors_redis_client_verifies_a_tls_certificate_unless_the_url_says_otherwise() -> None:
    from workers.coordination import redis_client

    tls = redis_client("rediss://127.0.0.1:1/9", 0.5, 0).connection_pool.make_connection()
    assert tls.cert_reqs == ssl.CERT_REQUIRED
    lax = redis_client("rediss://127.0.0.1:1/9?ssl_cert_reqs=none", 0.5, 0).connection_pool.make_connection()
    assert lax.cert_reqs == ssl.CERT_NONE  # the URL's own choice is kept


def test_urls_are_printed_without_credentials() -> None:
    assert redact("redis://:pw@redis:6379/0") == "redis://:***@redis:6379/0"
    assert redact("redis://redis:6379/0") == "redis://redis:6379/0"
    assert redact("filesystem://") == "filesystem://"
    assert redact("redis://ops:pw@redis:6379/0") == "redis://ops:***@redis:6379/0"  # the user name is kept
    assert redact("redis://redis:6379/9?password=hunter2") == "redis://redis:6379/9?password=***"
    assert redact("rediss://redis/0?ssl_cert_reqs=none&token=t0k") == "rediss://redis/0?ssl_cert_reqs=none&token=***"


def test_broker_urls_are_masked_by_the_engines_rule() -> None:
    from memory_core.engines import mask_url

    for url in ("redis://u:pw@h:1/0?password=x&key=y", "rediss://h/0?sslpassword=s", "redis://:p%2Fw@h/0"):
        assert redact(url) == mask_url(url)


def test_a_compose_redis_password_that_is_not_url_safe_stops_the_worker_with_a_config_error(tmp_path: Path) -> None:
    import os
    import subprocess

    import yaml
    from flowkit import REPO, memory_core_argv

    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    template = compose["services"]["worker-beliefs"]["environment"]["MEMORY_CORE_BROKER_URL"]
    url = template.replace("${MEMORY_CORE_REDIS_PASSWORD:?set MEMORY_CORE_REDIS_PASSWORD}", "pa/ss#1")
    assert url == "redis://:pa/ss#1@redis:6379/0"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
    env |= {"MEMORY_CORE_BROKER_URL": url, "MEMORY_CORE_VAR_DIR": str(tmp_path / "var")}
    command = compose["services"]["worker-beliefs"]["command"]
    done = subprocess.run(memory_core_argv(*command[1:]), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "MEMORY_CORE_BROKER_URL" in done.stderr and "URL-encoded" in done.stderr, done.stderr
    assert "pa/ss" not in done.stderr and "Traceback" not in done.stderr


def test_a_read_only_monitor_creates_nothing_and_reads_a_fresh_server_less_setup_as_empty(tmp_path: Path) -> None:
    var = tmp_path / "var"
    monitor = JobMonitor(Settings(_env_file=None, broker_url=None, var_dir=var), read_only=True)
    try:
        probe = monitor.probe(timeout_s=0.3)
        assert probe.reachable and probe.reason is None  # nothing was ever queued
        assert set(monitor.queue_depths().values()) == {0}
        assert monitor.outbox_waiting() == 0
        assert monitor.active(timeout_s=0.3) is None  # no worker ever bound its control exchange: not asked
    finally:
        monitor.close()
    assert not var.exists()
    JobMonitor(Settings(_env_file=None, broker_url=None, var_dir=var)).close()  # not read-only: prepared
    assert (var / "broker" / "queue").is_dir()
