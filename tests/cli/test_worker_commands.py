"""``memory-core worker|beat|flower``: options checked before Celery starts (exit 2), and Flower's quiet SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import memory_core.cli.beat
import memory_core.cli.flower
import memory_core.cli.worker
from memory_core.cli.flower import check_port, quiet_sigterm, stop_on_sigterm
from tests._cli import invoke


def run(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m memory_core <args>`` in a subprocess (a command that wrongly starts is stopped by ``timeout``)."""
    return subprocess.run(
        [sys.executable, "-m", "memory_core", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def recorder(started: list[list[str]]) -> Callable[[list[str]], int]:
    """A ``run_celery`` that records the Celery argv instead of starting Celery."""

    def run_celery(argv: list[str]) -> int:
        started.append(argv)
        return 0

    return run_celery


@pytest.mark.parametrize("port", ["70000", "0", "-1"])
def test_flower_refuses_a_port_outside_1_to_65535_naming_the_option(env: dict[str, str], port: str) -> None:
    result = run(env, "flower", "--port", port)
    assert result.returncode == 2, result.stderr
    assert "Invalid value for '--port'" in result.stderr and "(a port is 1-65535)" in result.stderr
    assert "Visit me at" not in result.stderr and "Traceback" not in result.stderr


def test_flower_port_follows_the_settings_rule_for_its_port() -> None:
    assert check_port(None) is None
    assert check_port(1) == 1 and check_port(65535) == 65535


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["worker", "--loglevel", "nonsense"], "'--loglevel' / '-l'"),
        (["worker", "-P", "gevent"], "'--pool' / '-P'"),
        (["worker", "--pool", "eventlet"], "'--pool' / '-P'"),
        (["beat", "-l", "loud"], "'--loglevel' / '-l'"),
    ],
    ids=["worker-loglevel", "worker-gevent", "worker-eventlet", "beat-loglevel"],
)
def test_worker_and_beat_refuse_an_unknown_log_level_or_pool_before_celery_starts(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, args: list[str], named: str
) -> None:
    started: list[list[str]] = []
    for module in (memory_core.cli.worker, memory_core.cli.beat):
        monkeypatch.setattr(module, "run_celery", recorder(started))
    result = invoke(env, *args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {named}" in result.output
    assert "is not one of" in result.output
    assert started == []
    assert not Path(env["MEMORY_CORE_VAR_DIR"]).exists()  # refused before anything was prepared


def test_worker_takes_a_log_level_in_any_case_and_the_three_pools(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[list[str]] = []
    monkeypatch.setattr(memory_core.cli.worker, "run_celery", recorder(started))
    for pool in ("prefork", "threads", "SOLO"):
        result = invoke(env, "worker", "-l", "WARNING", "-P", pool)
        assert result.exit_code == 0, result.output
    assert [argv[2:4] for argv in started] == [
        ["--loglevel=warning", "--pool=prefork"],
        ["--loglevel=warning", "--pool=threads"],
        ["--loglevel=warning", "--pool=solo"],
    ]


def test_a_sigterm_stops_flower_once_and_ignores_the_next() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as stopped:
            stop_on_sigterm(signal.SIGTERM, None)
        assert stopped.value.code == 0
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
    from flower import command

    own = command.sigterm_handler
    with quiet_sigterm():
        assert command.sigterm_handler is stop_on_sigterm  # what Flower installs
    assert command.sigterm_handler is own


def test_flower_stopped_by_sigterm_exits_0_without_a_traceback(env: dict[str, str]) -> None:
    """SIGTERM, then more while Flower shuts down (its threads still joining): status 0, no ``SystemExit`` shown."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_core", "flower", "--port", str(free_port())],
        env={**os.environ, **env, "MEMORY_CORE_FLOWER_PASSWORD": "test-secret"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "Visit me at" in line:
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(60), "".join(lines)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.05)
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    output = "".join(lines)
    assert code == 0, output
    assert "Traceback" not in output and "SystemExit" not in output, output
    assert "SIGTERM received: shutting down" in output


def test_flower_refused_before_it_starts_leaves_the_processs_sigterm_handler(env: dict[str, str]) -> None:
    before = signal.getsignal(signal.SIGTERM)
    result = invoke({**env, "MEMORY_CORE_FLOWER_USER": "a:b"}, "flower", "--port", str(free_port()))
    assert result.exit_code == 2, result.output
    assert "flower user may not contain ':'" in result.output
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.parametrize("queues", ["", " ", ",", " , ,"])
def test_worker_refuses_queues_naming_no_queue(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, queues: str
) -> None:
    """``worker --queues ""`` or ``","`` consumed all three queues (newcomer run); leaving it out still does."""
    started: list[list[str]] = []
    monkeypatch.setattr(memory_core.cli.worker, "run_celery", recorder(started))
    for option in ("--queues", "-Q"):
        result = invoke(env, "worker", option, queues)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"--queues {queues!r} names no queue"), result.stderr
    assert started == []
    assert not Path(env["MEMORY_CORE_VAR_DIR"]).exists()  # refused before anything was prepared
    assert invoke(env, "worker", "--queues", "ingest,").exit_code == 0
    assert invoke(env, "worker").exit_code == 0
    assert [argv[1] for argv in started] == ["--queues=ingest", "--queues=beliefs,ingest,maintenance"]


@pytest.mark.parametrize("address", ["999.1.1.1", "no-such-host.invalid"])
def test_flower_on_an_address_that_does_not_resolve_names_address_not_port(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, address: str
) -> None:
    """``flower --address 999.1.1.1`` said "choose another port with --port" (newcomer run): the hint names
    what to change."""
    started: list[list[str]] = []
    monkeypatch.setattr(memory_core.cli.flower, "run_celery", recorder(started))
    result = invoke({**env, "MEMORY_CORE_FLOWER_PASSWORD": "test-secret"}, "flower", "--address", address)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"flower cannot listen on {address}:5555 (--address): the address does not resolve")
    assert "give --address an IP address or host name of this machine" in lines[0]
    assert "--port" not in lines[0] and "MEMORY_CORE_FLOWER_PORT" not in lines[0]
    assert started == []


def test_flower_on_a_port_in_use_names_the_port(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []
    monkeypatch.setattr(memory_core.cli.flower, "run_celery", recorder(started))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        flower_env = {**env, "MEMORY_CORE_FLOWER_PASSWORD": "test-secret"}
        by_option = invoke(flower_env, "flower", "--port", str(port))
        by_setting = invoke({**flower_env, "MEMORY_CORE_FLOWER_PORT": str(port)}, "flower")
    for result, source in ((by_option, "--port"), (by_setting, "MEMORY_CORE_FLOWER_PORT")):
        assert result.exit_code == 2, result.output
        line = result.stderr.strip()
        assert line.startswith(f"flower cannot listen on 127.0.0.1:{port} ({source}): Address already in use;")
        assert line.endswith("choose another port with --port or MEMORY_CORE_FLOWER_PORT")
        assert "--address" not in line
    assert started == []


def test_flower_refuses_a_blank_address(env: dict[str, str]) -> None:
    result = invoke(env, "flower", "--address", " ")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().startswith("--address is blank")
