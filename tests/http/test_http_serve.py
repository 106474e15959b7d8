"""``memory-core serve`` as a real process: refusals before it starts, then bad tokens, another tenant's root,
oversized and malformed bodies and a served turn over a socket (httpx), and no token in its output."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from httpkit import TOKEN_A, TOKEN_B, TOKENS
from typer.testing import CliRunner

from memory_core.cli import load_commands
from memory_core.cli.serve import is_loopback
from memory_core.settings import get_settings

runner = CliRunner()
PRE = {"thread_id": "t1", "turn_index": 0, "user_text": "Where does Mara live these days?"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_ENGINE": f"sqlite:///{tmp_path / 'memory.db'}",
        "MEMORY_CORE_BROKER_URL": "",
        "MEMORY_CORE_ENGINE_PLUGINS": "",
    }


def invoke(env: dict[str, str], *args: str):  # type: ignore[no-untyped-def]
    get_settings.cache_clear()
    try:
        return runner.invoke(load_commands(), ["serve", *args], env=env)
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "[::1]"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.org", "::"])
def test_other_addresses_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_serve_refuses_to_start_without_a_token(env: dict[str, str]) -> None:
    result = invoke(env, "--port", "1")
    assert result.exit_code == 2
    assert "no default token" in result.stderr


def test_serve_refuses_insecure_local_off_loopback(env: dict[str, str]) -> None:
    result = invoke(env, "--insecure-local", "--host", "0.0.0.0")
    assert result.exit_code == 2
    assert "loopback" in result.stderr


def test_serve_refuses_a_malformed_token_file_without_echoing_it(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps([{"token": "tiny-secret", "root": "team:a"}]))
    result = invoke(env, "--tokens", str(path))
    assert result.exit_code == 2
    assert "token token-0: a token is at least 16 characters" in result.stderr
    assert "tiny-secret" not in result.output


@pytest.fixture
def server(env: dict[str, str], tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_core", "serve", "--port", str(port), "--tokens", str(tokens)]
        + ["--max-body", "2048"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # wait for the server to answer (a start-up wait, not a measurement)
        if proc.poll() is not None:
            pytest.fail(f"serve exited {proc.returncode}: {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("serve did not answer /health within 60 s")
        time.sleep(0.2)
    try:
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.slow
def test_a_real_server_enforces_tokens_scopes_and_bodies(server: tuple[str, subprocess.Popen[str]]) -> None:
    base, proc = server
    with httpx.Client(base_url=base, timeout=30) as client:
        a = {"Authorization": f"Bearer {TOKEN_A}"}
        bad = client.post("/v1/pre_turn", json=PRE, headers={"Authorization": "Bearer wrong-wrong-wrong-wrong"})
        assert bad.status_code == 401
        other = client.post("/v1/pre_turn", json=PRE, headers=a, params={"root": "team:b"})
        assert other.status_code == 403
        big = client.post("/v1/pre_turn", json={**PRE, "user_text": "x" * 4000}, headers=a)
        assert big.status_code == 413
        malformed = client.post("/v1/pre_turn", content=b"{nope", headers={**a, "Content-Type": "application/json"})
        assert malformed.status_code == 400 and malformed.json()["field"] == "body"
        assert client.post("/v1/learn", json={"text": "Mara moved to Porto in March."}, headers=a).status_code == 200
        served = client.post("/v1/pre_turn", json=PRE, headers=a)
        assert served.status_code == 200
        assert "Porto" in served.json()["pack"]["markdown"]
        b = {"Authorization": f"Bearer {TOKEN_B}"}
        assert "Porto" not in client.post("/v1/pre_turn", json=PRE, headers=b).json()["pack"]["markdown"]
        reply = {"thread_id": "t1", "turn_index": 9, "assistant_text": "Ok."}
        due = client.post("/v1/post_turn", json=reply, headers=a)
        assert due.status_code == 200 and len(due.json()["job_ids"]) == 1
        [handle] = due.json()["job_ids"]
        assert client.get(f"/v1/jobs/{handle}", headers=a).json()["state"] == "PENDING"  # no worker runs here
        assert client.get(f"/v1/jobs/{handle}", headers=b).status_code == 404  # another root's job: unknown
        plain = client.post("/v1/pre_turn", content=json.dumps(PRE), headers={**a, "Content-Type": "text/plain"})
        assert plain.status_code == 415
        assert client.get("/metrics", headers=a).status_code == 200
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert TOKEN_A not in out and TOKEN_B not in out
    assert "POST /v1/pre_turn" in out  # the access log names paths
