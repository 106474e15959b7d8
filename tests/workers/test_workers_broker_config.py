"""Issue 11 §4: a wrong Redis password, TLS on one side only, or a missing database is a configuration error.

Workers, beat and ``status`` exit 2 with the reason and the URL without its password; a host still parks the job
in the outbox (the turn never fails) and logs the configuration error once, loudly. Each test starts its own
throwaway ``redis-server`` (``--requirepass``, or TLS only), never the shared one.
"""

from __future__ import annotations

import logging
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flowkit import Flow, Spawn, memory_core_argv, require_program, wait_until

from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import IngestBrain
from memory_core.settings import Settings
from workers.monitor import JobMonitor
from workers.queue import JobQueue

DOC = IngestBrain(documents=(BrainDocument.new("notion", "Queues live in Redis.", title="Queues"),))
SECRET = "right-horse-battery"


def wrong_password(url: str) -> str:
    return url.replace(f":{SECRET}@", ":not-the-password@")


@pytest.fixture
def tls_only(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """``redis://127.0.0.1:<port>/0`` of a ``redis-server`` that speaks only TLS on that port."""
    require_program(request.config, "redis-server")
    require_program(request.config, "openssl")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
        + ["-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True,
        capture_output=True,
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert)]
        + ["--tls-key-file", str(key), "--tls-auth-clients", "no", "--bind", "127.0.0.1", "--save", ""]
        + ["--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE

    def handshakes() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5) as raw, context.wrap_socket(raw):
                return True
        except OSError:
            return False

    try:
        wait_until(handshakes, 20, 0.05, "the TLS-only redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_wrong_or_missing_password_is_a_configuration_error_for_the_probe(redis_server: Any) -> None:
    server = redis_server(password=SECRET)
    for url in (wrong_password(server.url), server.url.replace(f":{SECRET}@", "")):
        monitor = JobMonitor(Settings(_env_file=None, broker_url=url), read_only=True)
        probe = monitor.probe(2.0)
        monitor.close()
        assert not probe.reachable and probe.config_error is not None, probe
        assert SECRET not in probe.url and "not-the-password" not in probe.url
        assert "AuthenticationError" in probe.config_error
    monitor = JobMonitor(Settings(_env_file=None, broker_url=server.url), read_only=True)
    probe = monitor.probe(2.0)
    monitor.close()
    assert probe.reachable and probe.config_error is None


def test_an_outage_is_not_a_configuration_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here
    monitor = JobMonitor(Settings(_env_file=None, broker_url=f"redis://127.0.0.1:{port}/0"), read_only=True)
    probe = monitor.probe(1.0)
    monitor.close()
    assert not probe.reachable and probe.config_error is None


def test_a_tls_only_redis_reached_with_redis_url_is_a_configuration_error(tls_only: str) -> None:
    monitor = JobMonitor(Settings(_env_file=None, broker_url=tls_only), read_only=True)
    probe = monitor.probe(2.0)
    monitor.close()
    assert not probe.reachable and probe.config_error is not None and "rediss://" in probe.config_error


@pytest.mark.parametrize("command", ["worker", "beat"])
def test_worker_and_beat_with_a_wrong_password_exit_2_with_the_reason_and_the_url_masked(
    flow: Flow, spawn: Spawn, redis_server: Any, command: str
) -> None:
    url = wrong_password(redis_server(password=SECRET).url)
    argv = memory_core_argv(command, *(["--concurrency", "1"] if command == "worker" else []))
    proc = spawn(f"bad-auth-{command}", argv, ready=None, broker_url=url)
    wait_until(lambda: not proc.alive(), 60, what=f"the {command} to exit")
    out = proc.text()
    assert proc.popen.returncode == 2, out[-3000:]
    assert "ConfigError" in out and "AuthenticationError" in out, out[-3000:]
    assert "not-the-password" not in out and ":***@127.0.0.1" in out
    assert "ready." not in out and "Trying again" not in out  # no retry loop, as for an outage


def test_status_with_a_wrong_password_or_a_tls_only_server_exits_2_with_the_reason(
    flow: Flow, redis_server: Any, tls_only: str
) -> None:
    for url, says in ((wrong_password(redis_server(password=SECRET).url), "AuthenticationError"), (tls_only, "TLS")):
        env = flow.env(broker_url=url, engine="reference://")
        done = subprocess.run(memory_core_argv("status"), env=env, capture_output=True, text=True, timeout=120)
        out = done.stdout + done.stderr
        assert done.returncode == 2, out
        assert says in out and "not-the-password" not in out


@pytest.mark.parametrize("which", ["password", "tls"])
def test_a_host_parks_the_job_and_logs_the_configuration_error_once(
    redis_server: Any, tls_only: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, which: str
) -> None:
    url = wrong_password(redis_server(password=SECRET).url) if which == "password" else tls_only
    queue = JobQueue(Settings(_env_file=None, broker_url=url, var_dir=tmp_path, publish_timeout_s=1.0))
    try:
        with caplog.at_level(logging.WARNING, logger="workers.queue"):
            first = queue.send(DOC)
            queue._closed_until = 0.0  # the breaker window ends: the next submit tries the broker again
            second = queue.send(DOC)
        assert (first.state, second.state) == ("parked", "parked")  # the turn never fails; nothing is lost
        assert queue.outbox.waiting() == 2
    finally:
        queue.close()
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(loud) == 1 and "configuration" in loud[0].getMessage(), [r.getMessage() for r in caplog.records]
    assert "not-the-password" not in caplog.text
    assert not [r for r in caplog.records if "straight to the outbox" in r.getMessage()]  # not reported as an outage


def tls_to_plain(url: str) -> str:
    """``rediss://`` to the same plain (non-TLS) server."""
    return url.replace("redis://", "rediss://", 1)


def missing_db(url: str) -> str:
    """The same server's database 99, which a default ``redis-server`` (16 databases) does not have."""
    return url.rsplit("/", 1)[0] + "/99"


BAD_URLS = {
    "rediss-to-plain": (tls_to_plain, "does not speak TLS"),
    "missing-db": (missing_db, "DB index is out of range"),
}


@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_a_rediss_url_to_a_plain_server_or_a_missing_db_is_a_configuration_error_for_the_probe(
    redis_server: Any, case: str
) -> None:
    make, says = BAD_URLS[case]
    monitor = JobMonitor(Settings(_env_file=None, broker_url=make(redis_server(password=SECRET).url)), read_only=True)
    probe = monitor.probe(2.0)
    monitor.close()
    assert not probe.reachable and probe.config_error is not None and says in probe.config_error, probe
    assert SECRET not in probe.url and ":***@127.0.0.1" in probe.url


def test_a_rediss_url_with_nothing_listening_is_still_an_outage() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here
    monitor = JobMonitor(Settings(_env_file=None, broker_url=f"rediss://127.0.0.1:{port}/0"), read_only=True)
    probe = monitor.probe(1.0)
    monitor.close()
    assert not probe.reachable and probe.config_error is None


@pytest.mark.parametrize("command", ["worker", "beat"])
@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_worker_and_beat_with_a_rediss_url_to_a_plain_server_or_a_missing_db_exit_2(
    flow: Flow, spawn: Spawn, redis_server: Any, command: str, case: str
) -> None:
    make, says = BAD_URLS[case]
    url = make(redis_server(password=SECRET).url)
    argv = memory_core_argv(command, *(["--concurrency", "1"] if command == "worker" else []))
    proc = spawn(f"{case}-{command}", argv, ready=None, broker_url=url)
    wait_until(lambda: not proc.alive(), 60, what=f"the {command} to exit")
    out = proc.text()
    assert proc.popen.returncode == 2, out[-3000:]
    assert "ConfigError" in out and says in out, out[-3000:]
    assert SECRET not in out and ":***@127.0.0.1" in out
    assert "ready." not in out and "Trying again" not in out  # no retry loop, as for an outage


@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_status_with_a_rediss_url_to_a_plain_server_or_a_missing_db_exits_2_with_the_reason(
    flow: Flow, redis_server: Any, case: str
) -> None:
    make, says = BAD_URLS[case]
    env = flow.env(broker_url=make(redis_server(password=SECRET).url), engine="reference://")
    done = subprocess.run(memory_core_argv("status"), env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert says in out and SECRET not in out and ":***@127.0.0.1" in out


@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_a_host_parks_the_job_and_logs_a_rediss_or_db_configuration_error_once(
    redis_server: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    make, says = BAD_URLS[case]
    url = make(redis_server(password=SECRET).url)
    queue = JobQueue(Settings(_env_file=None, broker_url=url, var_dir=tmp_path, publish_timeout_s=1.0))
    try:
        with caplog.at_level(logging.WARNING, logger="workers.queue"):
            first = queue.send(DOC)
            queue._closed_until = 0.0  # the breaker window ends: the next submit tries the broker again
            second = queue.send(DOC)
        assert (first.state, second.state) == ("parked", "parked")  # the turn never fails; nothing is lost
        assert queue.outbox.waiting() == 2
    finally:
        queue.close()
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(loud) == 1 and "configuration" in loud[0].getMessage(), [r.getMessage() for r in caplog.records]
    assert says in loud[0].getMessage() and SECRET not in caplog.text
    assert not [r for r in caplog.records if "straight to the outbox" in r.getMessage()]  # not reported as an outage
