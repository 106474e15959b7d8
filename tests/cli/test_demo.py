"""``memory-core demo``: its pure parts exactly, its process plumbing, and whole runs on a tiny data folder."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memory_core.cli import load_commands
from memory_core.cli._procs import Interrupted, LockHeld, exclusive_lock, exit_code_of, interrupts
from memory_core.cli.demo import DemoFigures, _environment, demo_env, marked_pack, summary_rows, verdict
from memory_core.meta import ItemKind, MemoryMeta
from memory_core.query import Hit
from memory_core.recall.types import ContextPack, SectionHits
from memory_core.settings import get_settings

app = load_commands()


# pure parts ------------------------------------------------------------------------------------------------
def test_the_demo_names_its_own_queues_and_keys_and_a_broker_run_gets_unique_ones(tmp_path: Path) -> None:
    local = demo_env(tmp_path, None, "r1")
    assert local["MEMORY_CORE_BROKER_URL"] == "" and local["MEMORY_CORE_RESULT_BACKEND"] == ""
    assert local["MEMORY_CORE_ENGINE"] == f"sqlite:///{tmp_path / 'memory.db'}"
    assert [local[f"MEMORY_CORE_QUEUE_{q}"] for q in ("BELIEFS", "INGEST", "MAINTENANCE")] == [
        "demo-beliefs",
        "demo-ingest",
        "demo-maintenance",
    ]
    one, two = demo_env(tmp_path, "redis://h:6379/3", "r1"), demo_env(tmp_path, "redis://h:6379/3", "r2")
    assert one["MEMORY_CORE_BROKER_URL"] == "redis://h:6379/3"
    assert one["MEMORY_CORE_QUEUE_BELIEFS"] == "demo-r1-beliefs" != two["MEMORY_CORE_QUEUE_BELIEFS"]
    assert one["MEMORY_CORE_REDIS_PREFIX"] == "memory-core-demo-r1" != two["MEMORY_CORE_REDIS_PREFIX"]


def test_the_demo_environment_drops_exported_settings_and_restores_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_CORE_BROKER_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("MEMORY_CORE_QUEUE_BELIEFS", "nc-beliefs")
    monkeypatch.setenv("MEMORY_CORE_BUILD_BELIEFS_EVERY", "3")
    monkeypatch.setenv("MEMORY_CORE_DATA_DIR", str(tmp_path))
    with _environment(demo_env(tmp_path / "demo", None, "r1")):
        settings = get_settings()
        assert settings.broker_url in (None, "") and settings.queue_beliefs == "demo-beliefs"
        assert settings.build_beliefs_every == 10  # the default: the demo shows the default setup
        assert settings.data_dir == tmp_path
    assert os.environ["MEMORY_CORE_QUEUE_BELIEFS"] == "nc-beliefs"
    assert os.environ["MEMORY_CORE_BUILD_BELIEFS_EVERY"] == "3"


def test_verdict_passes_only_when_every_job_finished(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    assert verdict([], 0, 120, log) is None
    assert verdict(["WrongEngine: x", "WrongEngine: x", "Boom"], 0, 120, log) == (
        f"3 background jobs failed (2× WrongEngine: x; 1× Boom): the figures above are incomplete; see {log}"
    )
    assert verdict([], 1, 2.5, log) == (
        f"1 background job did not finish within --timeout 2.5 s: the figures above are incomplete; see {log}"
    )
    assert verdict(["Boom"], 2, 60, log) == (
        "1 background job failed (1× Boom) and 2 background jobs did not finish within --timeout 60 s: "
        f"the figures above are incomplete; see {log}"
    )
    # a queue entry dead-lettered before it became a job is in no job's state: the store is counted instead
    assert verdict([], 1, 120, log, dead_letters=1) == (
        "1 dead letter (memory-core dead-letters list) and 1 background job did not finish within --timeout "
        f"120 s: the figures above are incomplete; see {log}"
    )
    assert verdict([], 0, 120, log, dead_letters=2) is not None


def test_summary_rows() -> None:
    figures = DemoFigures(
        kinds=[("conversation", 16), ("document", 3)],
        items=19,
        beliefs=(5, 1),
        done=4,
        failed=0,
        pending=1,
        queues={"demo-beliefs": 0, "demo-ingest": -1},
        pre_turn_ms=[3.0, 1.0, 2.0],
        post_turn_ms=[2.0],
        pack_recall=[1.0, 0.5],
        bm25_recall=[0.5, 0.0],
    )
    assert summary_rows(figures) == [
        ("items", "19 (conversation 16, document 3)"),
        ("beliefs", "5 active, 1 superseded"),
        ("jobs run", "4 done, 0 failed, 1 pending; queues now demo-beliefs 0, demo-ingest ?"),
        ("pre_turn", "p50 2.0 ms · p99 3.0 ms (3 calls)"),
        ("post_turn", "p50 2.0 ms · p99 2.0 ms"),
        ("evidence recall", "pack 75.0% vs BM25 with as many turns 25.0% (2 questions, categories 1-4)"),
    ]
    bare = DemoFigures([], 0, None, 0, 0, 0, {}, [], [], [], [])
    lettered = DemoFigures([], 0, None, 3, 0, 1, {"q": 0}, [], [], [], [], dead_letters=1)
    assert dict(summary_rows(lettered))["jobs run"] == "3 done, 0 failed, 1 pending, 1 dead-lettered; queues now q 0"
    assert [what for what, _ in summary_rows(bare)] == ["items", "jobs run", "pre_turn", "post_turn"]
    assert summary_rows(bare)[2:] == [("pre_turn", "no calls"), ("post_turn", "no calls")]  # not "p50 nan ms"


def _hit(item_id: str, kind: ItemKind, derived: tuple[str, ...] = ()) -> Hit:
    return Hit(id=item_id, kind=kind, text=item_id, meta=MemoryMeta(), derived_from=derived)


def test_marked_pack_marks_the_bullets_that_hold_evidence_a_belief_by_its_sources() -> None:
    pack = ContextPack(
        markdown="# Memory\n\n## Learnings\n\n- Ann has a cat [x]\n\n## History\n\n- user: hi\n- user: cat Luna",
        refs=("belief", "t1", "t2"),
        sections=(
            SectionHits(heading="Learnings", hits=(_hit("belief", ItemKind.LEARNING, ("t2",)),)),
            SectionHits(
                heading="History",
                hits=(
                    _hit("t1", ItemKind.CONVERSATION),
                    _hit("uncited", ItemKind.CONVERSATION),
                    _hit("t2", ItemKind.CONVERSATION),
                ),
            ),
        ),
    )
    refs = {"t1": "D1:1", "t2": "D1:2"}
    assert marked_pack(pack, refs, {"D1:2"}).splitlines() == [
        "# Memory",
        "",
        "## Learnings",
        "",
        "[bold green]- Ann has a cat \\[x]  ◀ D1:2[/]",
        "",
        "## History",
        "",
        "- user: hi",
        "[bold green]- user: cat Luna  ◀ D1:2[/]",
    ]


# process plumbing ------------------------------------------------------------------------------------------
def test_a_second_holder_of_the_lock_is_refused_naming_the_first(tmp_path: Path) -> None:
    lock = tmp_path / "var" / "demo.lock"
    with exclusive_lock(lock):
        with pytest.raises(LockHeld) as err, exclusive_lock(lock):
            pass
        assert err.value.holder.startswith(f"pid {os.getpid()} since ")
    with exclusive_lock(lock):  # released when the first block ended
        pass


def test_sigterm_and_sighup_become_interrupts_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        with pytest.raises(KeyboardInterrupt) as err, interrupts():
            os.kill(os.getpid(), signum)
        assert isinstance(err.value, Interrupted) and err.value.signum == signum
        assert exit_code_of(err.value) == 128 + signum
    assert exit_code_of(KeyboardInterrupt()) == 130
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_second_demo_is_refused_and_leaves_the_first_ones_files(tmp_path: Path, tiny_data_dir: Path) -> None:
    var = tmp_path / "var"
    (var / "demo").mkdir(parents=True)
    (var / "demo" / "memory.db").write_text("the first demo's")
    env = {"MEMORY_CORE_VAR_DIR": str(var), "MEMORY_CORE_DATA_DIR": str(tiny_data_dir)}
    get_settings.cache_clear()
    with exclusive_lock(var / "demo.lock"):
        result = CliRunner().invoke(app, ["demo", "--sample", "tiny-1"], env=env)
    get_settings.cache_clear()
    assert result.exit_code == 1
    assert "another memory-core demo is running (pid" in result.output
    assert (var / "demo" / "memory.db").read_text() == "the first demo's"


def _demo_as_unprivileged(env: dict[str, str]) -> tuple[int, str]:
    """``memory-core demo`` in this process's CLI as a user who cannot write ``MEMORY_CORE_VAR_DIR``: ``nobody``
    in a forked child when run as root (root writes through permission bits), else this process; (exit, output).
    """
    if os.geteuid() != 0:
        get_settings.cache_clear()
        result = CliRunner().invoke(app, ["demo", "--sample", "tiny-1"], env=env)
        get_settings.cache_clear()
        return result.exit_code, result.output + (repr(result.exception) if result.exit_code not in (0, 2) else "")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.setgid(65534)
            os.setuid(65534)
            get_settings.cache_clear()
            result = CliRunner().invoke(app, ["demo", "--sample", "tiny-1"], env=env)
            text = f"{result.exit_code}\n{result.output}"
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                text += repr(result.exception)
        except BaseException as exc:
            text = f"99\n{type(exc).__name__}: {exc}"
        os.write(write, text.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        code, _, output = fh.read().partition("\n")
    os.waitpid(pid, 0)
    return int(code), output


def test_a_read_only_var_dir_exits_2_naming_the_folder(tiny_data_dir: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="memcore-demo-ro-"))
    try:
        shared.chmod(0o755)
        var = shared / "var"
        var.mkdir(mode=0o555)
        var.chmod(0o555)
        code, output = _demo_as_unprivileged(
            {"MEMORY_CORE_VAR_DIR": str(var), "MEMORY_CORE_DATA_DIR": str(tiny_data_dir)}
        )
        assert code == 2, output
        assert f"MEMORY_CORE_VAR_DIR {var}: cannot create or open the lock file demo.lock in {var}" in output
        assert "Traceback" not in output and "PermissionError" not in output
        assert sorted(var.iterdir()) == []
    finally:
        (shared / "var").chmod(0o755)
        shutil.rmtree(shared)


def test_a_broker_that_is_not_a_redis_url_exits_2_naming_the_option(tmp_path: Path, tiny_data_dir: Path) -> None:
    env = {"MEMORY_CORE_VAR_DIR": str(tmp_path / "var"), "MEMORY_CORE_DATA_DIR": str(tiny_data_dir)}
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["demo", "--sample", "tiny-1", "--broker", "http://x"], env=env)
    get_settings.cache_clear()
    assert result.exit_code == 2, result.output
    assert result.output.strip() == "--broker: scheme 'http' is not one of redis, rediss"
    assert not (tmp_path / "var" / "demo").exists()


def test_a_broker_that_does_not_answer_exits_2_with_the_reason_before_any_worker_starts(
    tmp_path: Path, tiny_data_dir: Path
) -> None:
    env = {"MEMORY_CORE_VAR_DIR": str(tmp_path / "var"), "MEMORY_CORE_DATA_DIR": str(tiny_data_dir)}
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["demo", "--sample", "tiny-1", "--broker", "redis://u:pw@127.0.0.1:1/9"], env=env)
    get_settings.cache_clear()
    assert result.exit_code == 2, result.output
    assert "--broker redis://u:***@127.0.0.1:1/9 is not answering: ConnectionError" in result.output
    assert "pw" not in result.output
    assert not (tmp_path / "var" / "demo" / "worker.log").exists()


# whole runs on the tiny data -------------------------------------------------------------------------------
def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def start_demo(tmp_path: Path, tiny_data_dir: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start ``memory-core demo`` on the tiny data with hostile exported settings; every demo is ended after."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "MEMORY_CORE_DATA_DIR": str(tiny_data_dir),
            "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
            # the README's Workers variables, still exported: the demo must not use them (nothing answers on :1)
            "MEMORY_CORE_BROKER_URL": "redis://127.0.0.1:1/0",
            "MEMORY_CORE_QUEUE_BELIEFS": "nc-beliefs",
            "MEMORY_CORE_ENGINE": f"sqlite:///{tmp_path / 'not-the-demos.db'}",
            "COLUMNS": "200",
        }
        argv = [sys.executable, "-m", "memory_core", "demo", "--sample", "tiny-1", "--questions", "2", *args]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _worker_pid(proc: subprocess.Popen[str]) -> tuple[int, list[str]]:
    seen: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if m := re.search(r"\[1/5\] worker pid (\d+) ready", line):
            return int(m.group(1)), seen
    raise AssertionError("the demo ended before its worker was ready:\n" + "".join(seen))


@pytest.mark.slow
def test_the_demo_runs_end_to_end_on_its_own_settings_and_stops_its_worker(
    start_demo: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    proc = start_demo()
    pid, seen = _worker_pid(proc)
    out, _ = proc.communicate(timeout=180)
    output = "".join(seen) + out
    assert proc.returncode == 0, output
    assert "2 files converted" in output and "ingest_brain job" in output
    assert "8 turns → 16 turn items" in output
    assert "0 failed, 0 still pending" in output
    assert re.search(r"evidence recall\s+│\s+pack \d+\.\d% vs BM25", output), output
    assert "redis://127.0.0.1:1" not in output and "nc-beliefs" not in output
    assert not _pid_alive(pid) and not _group_alive(pid)
    assert not (tmp_path / "not-the-demos.db").exists()
    log = (tmp_path / "var" / "demo" / "worker.log").read_text()
    assert "exited with signal" not in log and "Traceback" not in log, log


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])  # HUP: as TERM
def test_an_interrupted_demo_stops_its_worker_warmly_then_exits_128_plus_the_signal(
    start_demo: Callable[..., subprocess.Popen[str]], tmp_path: Path, signum: signal.Signals
) -> None:
    proc = start_demo("--timeout", "300")
    pid, seen = _worker_pid(proc)
    os.killpg(pid, signal.SIGSTOP)  # hold the worker so the jobs cannot all finish before the signal lands
    try:
        proc.send_signal(signum)
    finally:
        os.killpg(pid, signal.SIGCONT)
    out, _ = proc.communicate(timeout=120)
    output = "".join(seen) + out
    assert proc.returncode == 128 + signum, output
    assert f"interrupted ({signum.name}): the worker was stopped" in output
    assert not _pid_alive(pid) and not _group_alive(pid)
    log = (tmp_path / "var" / "demo" / "worker.log").read_text()
    assert "exited with signal" not in log, log


DEMO_REDIS_DB = 14
"""The tests' Redis database (as ``tests/workers``); the demo's keys there are all named ``*demo-<run>*``."""


@pytest.fixture
def demo_redis(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A client of db 14 of the test Redis (skips without it; fails when CI=true), and its URL as ``.url``."""
    import redis

    root_conftest = Path(__file__).resolve().parents[1] / "conftest.py"
    root = next(
        p
        for p in request.config.pluginmanager.get_plugins()
        if Path(getattr(p, "__file__", "") or ".").resolve() == root_conftest
    )
    root.require_service("redis", root.REDIS_HOST, root.REDIS_PORT)
    url = f"redis://{root.REDIS_HOST}:{root.REDIS_PORT}/{DEMO_REDIS_DB}"
    client = redis.Redis.from_url(url, decode_responses=True)
    client.url = url  # type: ignore[attr-defined]
    yield client
    client.close()


def _demo_keys(client: Any) -> set[str]:
    """Every key of db 14 a demo run could have written: its prefix, queues, bindings and results."""
    keys: set[str] = set()
    for pattern in ("memory-core-demo-*", "demo-*", "_kombu.binding.demo-*", "_kombu.binding_permanent.demo-*"):
        keys.update(client.scan_iter(match=pattern, count=1000))
    results = list(client.scan_iter(match="celery-task-meta-*", count=1000))
    for start in range(0, len(results), 500):
        batch = results[start : start + 500]
        keys.update(k for k, raw in zip(batch, client.mget(batch), strict=True) if raw and '"queue": "demo-' in raw)
    return keys


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.parametrize("ending", ["finished", "SIGTERM"])
def test_a_broker_demo_deletes_what_it_wrote_on_redis_however_it_ends(
    start_demo: Callable[..., subprocess.Popen[str]], demo_redis: Any, ending: str
) -> None:
    before = _demo_keys(demo_redis)
    proc = start_demo("--broker", demo_redis.url, "--timeout", "300")
    pid, seen = _worker_pid(proc)
    assert _demo_keys(demo_redis) - before, "the run wrote nothing on the broker"  # its queues and bindings
    if ending == "SIGTERM":
        os.killpg(pid, signal.SIGSTOP)  # hold the worker so the run cannot end before the signal lands
        try:
            proc.send_signal(signal.SIGTERM)
        finally:
            os.killpg(pid, signal.SIGCONT)
    out, _ = proc.communicate(timeout=180)
    output = "".join(seen) + out
    assert proc.returncode == (0 if ending == "finished" else 128 + signal.SIGTERM), output
    assert re.search(r"deleted the run's \d+ keys on the broker", output), output
    assert _demo_keys(demo_redis) - before == set()
