"""A ``memory-core worker`` subprocess that is always stopped: on exit, on error and on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

__all__ = ["WorkerProcess", "running_worker"]

STOP_GRACE_S = 15.0
"""Seconds a worker gets after SIGTERM (Celery's warm shutdown) before SIGKILL."""


class WorkerProcess:
    """A worker started with ``python -m memory_core worker`` in its own process group, logging to ``log``.

    Args:
        log: File the worker's output goes to.
        queues: Comma-separated queues.
        concurrency: Pool processes.
        env: The environment; None inherits this process's (whose ``MEMORY_CORE_`` variables carry the settings).
    """

    def __init__(self, log: Path, queues: str, concurrency: int, env: dict[str, str] | None = None) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        self._out = log.open("wb")
        argv = [sys.executable, "-m", "memory_core", "worker", "--queues", queues, "-c", str(concurrency)]
        argv += ["--loglevel", "warning", "--hostname", f"demo-{os.getpid()}@%h"]
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    @property
    def pid(self) -> int:
        """The worker's main process id."""
        return self.proc.pid

    def alive(self) -> bool:
        """True while the worker runs."""
        return self.proc.poll() is None

    def tail(self, lines: int = 15) -> str:
        """The last lines of the worker's log."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, ready: Callable[[], bool], timeout_s: float) -> float:
        """Poll ``ready`` until it is true; the seconds it took.

        Raises:
            RuntimeError: the worker exited, or was not ready within ``timeout_s`` (the log's tail attached).
        """
        start = time.monotonic()
        while not ready():
            if not self.alive():
                raise RuntimeError(f"the worker exited with {self.proc.returncode}:\n{self.tail()}")
            if time.monotonic() - start > timeout_s:
                raise RuntimeError(f"the worker was not ready after {timeout_s:.0f} s:\n{self.tail()}")
            time.sleep(0.2)
        return time.monotonic() - start

    def stop(self) -> None:
        """SIGTERM the worker's process group, then SIGKILL after ``STOP_GRACE_S``. Idempotent."""
        if self.alive():
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(timeout=5)
        self._out.close()

    def _signal(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextmanager
def running_worker(
    log: Path, queues: str, concurrency: int, env: dict[str, str] | None = None
) -> Iterator[WorkerProcess]:
    """A worker for the duration of the block; stopped however the block ends (Ctrl-C included)."""
    worker = WorkerProcess(log, queues, concurrency, env)
    try:
        yield worker
    finally:
        worker.stop()
