"""The server-less transport's queue files: an entry appears whole, once (``workers.transport._AtomicFiles``)."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from celery import Celery
from kombu import Connection
from kombu.transport import filesystem

from memory_core.settings import Settings
from workers import transport
from workers.config import ATOMIC_FILE_BACKEND, celery_config, celery_result_backend, result_backend_url
from workers.transport import AtomicFilesystemBackend, SafeFilesystemTransport


def _queue_name() -> str:
    """A fresh queue name: kombu caches declared exchanges per process, across connections and folders."""
    return f"jobs-{uuid.uuid4().hex[:8]}"


def _connection(tmp_path: Path) -> Connection:
    queue = tmp_path / "queue"
    queue.mkdir(exist_ok=True)
    options = {
        "data_folder_in": str(queue),
        "data_folder_out": str(queue),
        "processed_folder": str(tmp_path / "processed"),  # not created: the consumer makes it
        "control_folder": str(tmp_path / "control"),
        "store_processed": False,
    }
    return Connection("filesystem://", transport=SafeFilesystemTransport, transport_options=options)


def test_a_consumer_polling_while_an_entry_is_written_never_takes_it_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kombu's own ``_put`` opens the ``.msg`` file before writing it: a poll in between took an empty entry,
    dead-lettered it as "not JSON" and the job was lost (one demo run in five, issue 6 newcomer run)."""
    letters: list[str] = []
    monkeypatch.setattr(transport, "dead_letter_raw", lambda raw, queue, reason: letters.append(reason))
    polled: list[str] = []
    with _connection(tmp_path) as host, _connection(tmp_path) as worker:
        name = _queue_name()
        out, into = host.SimpleQueue(name), worker.SimpleQueue(name)
        real = getattr(transport, "_dumps", filesystem.dumps)

        def poll_mid_write(message: Any) -> str:
            try:
                into.get(block=False)
                polled.append("taken")
            except Empty:
                polled.append("nothing yet")
            return real(message)

        monkeypatch.setattr(transport, "_dumps", poll_mid_write, raising=False)
        monkeypatch.setattr(filesystem, "dumps", poll_mid_write)  # the same probe were kombu's _put used
        out.put({"job": 1})
        monkeypatch.setattr(transport, "_dumps", real, raising=False)
        taken = into.get(timeout=2)
        assert taken.payload == {"job": 1}
        taken.ack()
        with pytest.raises(Empty):
            into.get(block=False)  # taken once
        out.close()
        into.close()
    assert polled == ["nothing yet"]
    assert letters == []
    assert list((tmp_path / "queue").iterdir()) == []  # no partial file left behind
    assert list((tmp_path / "processed").iterdir()) == []  # taken entries are removed once read


def test_an_entry_another_consumer_took_first_is_skipped_and_the_next_is_delivered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _connection(tmp_path) as host, _connection(tmp_path) as worker:
        name = _queue_name()
        out, into = host.SimpleQueue(name), worker.SimpleQueue(name)
        out.put({"job": 1})
        time.sleep(0.005)  # entry names start with the millisecond: job 1's sorts first
        out.put({"job": 2})
        first = sorted(p.name for p in (tmp_path / "queue").iterdir())[0]
        real_listdir = os.listdir

        def listing_then_race(path: str) -> list[str]:
            names = real_listdir(path)
            (tmp_path / "queue" / first).unlink()  # another worker renamed it away after our listing
            monkeypatch.setattr(os, "listdir", real_listdir)
            return names

        monkeypatch.setattr(os, "listdir", listing_then_race)
        taken = into.get(timeout=2)
        assert taken.payload == {"job": 2}
        taken.ack()
        out.close()
        into.close()


# the server-less result store ----------------------------------------------------------------------------------
def test_a_file_result_is_replaced_whole_so_a_reader_never_sees_a_partial_or_mixed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Celery("results-test", set_as_current=False)
    app.conf.result_backend = f"{ATOMIC_FILE_BACKEND}+file://{tmp_path}"
    backend = app.backend
    assert isinstance(backend, AtomicFilesystemBackend)
    backend.set(b"job-1", b'{"status": "STARTED", "result": "' + b"x" * 5000 + b'"}')
    seen_before_replace: list[bytes] = []
    real_replace = os.replace

    def replace(src: bytes, dst: bytes) -> None:  # what a reader polling now would read
        seen_before_replace.append(Path(os.fsdecode(dst)).read_bytes())
        real_replace(src, dst)

    monkeypatch.setattr("workers.transport.os.replace", replace)
    backend.set(b"job-1", b'{"status": "SUCCESS"}')
    assert len(seen_before_replace) == 1 and seen_before_replace[0].startswith(b'{"status": "STARTED"')
    assert json.loads(backend.get(b"job-1")) == {"status": "SUCCESS"}  # whole, nothing of the longer one left
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(os.fsdecode(backend._filename(b"job-1")))]


def test_the_server_less_result_backend_is_the_atomic_one(tmp_path: Path) -> None:
    settings = Settings(var_dir=str(tmp_path / "var"))
    assert celery_result_backend(settings) == f"{ATOMIC_FILE_BACKEND}+{result_backend_url(settings)}"
    assert celery_config(settings)["result_backend"] == celery_result_backend(settings)
    redis_settings = Settings(broker_url="redis://127.0.0.1:6379/3")
    assert celery_result_backend(redis_settings) == result_backend_url(redis_settings)  # only file:// changes
