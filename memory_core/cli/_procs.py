"""Process plumbing for ``memory-core demo``: a worker that is always stopped, signals as Ctrl-C, one demo at once.

* ``WorkerProcess`` starts ``python -m memory_core worker`` in its own session (so a terminal's Ctrl-C or
  hang-up reaches the demo, which decides how the worker stops) and stops it with Celery's warm shutdown:
  SIGTERM to the main process only, which finishes or requeues its running tasks and stops its pool children
  itself (signalling the whole group instead makes the log read "ForkPoolWorker exited with signal 15"); past
  ``STOP_GRACE_S`` the whole process group is killed.
* ``interrupts()`` makes SIGTERM and SIGHUP raise ``Interrupted`` (a ``KeyboardInterrupt``), so a ``kill`` or a
  closed terminal takes the same path as Ctrl-C: the ``finally`` that stops the worker runs.
* ``exclusive_lock(path)`` holds ``flock(2)`` on a lock file for the block; a second holder is refused with
  ``LockHeld`` naming the first. The kernel releases the lock when the holder exits, however it exits, and the
  file descriptor is not inherited by the worker (Python opens files non-inheritable, PEP 446).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType, TracebackType

from memory_core.errors import ConfigError

__all__ = [
    "STOP_GRACE_S",
    "Interrupted",
    "LockHeld",
    "WorkerProcess",
    "exclusive_lock",
    "exit_code_of",
    "interrupts",
    "running_worker",
]

STOP_GRACE_S = 15.0
"""Seconds a worker gets after SIGTERM (Celery's warm shutdown) before its process group is killed; above the
workers' ``SOFT_SHUTDOWN_S`` (10 s), after which Celery itself cancels and requeues running tasks."""
KILL_WAIT_S = 5.0
"""Seconds to wait for the worker to be gone after SIGKILL."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C's ``KeyboardInterrupt``.

    Attributes:
        signum: The signal received.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code_of(exc: KeyboardInterrupt) -> int:
    """The shell's exit status for an interrupt: 128 + the signal number (Ctrl-C, SIGINT: 130)."""
    return 128 + (exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT))


@contextmanager
def interrupts(signums: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Within the block, ``signums`` raise ``Interrupted`` in the main thread; the old handlers come back after.

    Outside the main thread (where Python cannot set handlers) the block runs unchanged.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signum)

    previous: dict[int, object] = {}
    try:
        for signum in signums:
            previous[signum] = signal.signal(signum, handler)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)  # type: ignore[arg-type]


class LockHeld(RuntimeError):
    """The lock file is held by another process.

    Attributes:
        path: The lock file.
        holder: What the holder wrote in it (``pid 1234 since 2025-01-01T10:00:00+00:00``), or ``""``.
    """

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is held by {holder or 'another process'}")
        self.path = path
        self.holder = holder


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created with its folder) for the block; the pid is written in it.

    Raises:
        LockHeld: another process holds it (nothing is waited for).
        ConfigError: the folder or the file cannot be created or opened (a read-only folder, another user's
            file); the message names the folder.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(
            f"cannot create or open the lock file {path.name} in {path.parent} ({exc.strerror or exc}): "
            "the folder must be one this user can write"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            raise LockHeld(path, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {datetime.now(UTC).isoformat(timespec='seconds')}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (deleting it would race with the next holder)


class WorkerProcess:
    """A worker started with ``python -m memory_core worker`` in its own session, logging to ``log``.

    Args:
        log: File the worker's output goes to.
        queues: Comma-separated queues.
        concurrency: Pool processes.
        hostname: The worker's node name (``name@%h``).
        env: The environment; None inherits this process's (whose ``MEMORY_CORE_`` variables carry the settings).
    """

    def __init__(
        self, log: Path, queues: str, concurrency: int, hostname: str, env: dict[str, str] | None = None
    ) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        self.hostname = hostname
        self._out = log.open("wb")
        argv = [sys.executable, "-m", "memory_core", "worker", "--queues", queues, "-c", str(concurrency)]
        argv += ["--loglevel", "warning", "--hostname", hostname]
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    @property
    def pid(self) -> int:
        """The worker's main process id (also its process group id)."""
        return self.proc.pid

    def alive(self) -> bool:
        """True while the worker's main process runs."""
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

    def stop(self, grace_s: float = STOP_GRACE_S) -> bool:
        """Warm shutdown: SIGTERM to the main process, up to ``grace_s`` for it to exit, then SIGKILL the group.

        The group is killed in any case once the main process is gone, so no pool child outlives it. A second
        interrupt while waiting (Ctrl-C again) skips the rest of the wait. Idempotent.

        Returns:
            True when the worker has exited.
        """
        try:
            if self.alive():
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    pass
        except KeyboardInterrupt:  # impatient: kill now
            pass
        finally:
            self._kill_group()
            try:
                self.proc.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            self._out.close()
        return not self.alive()

    def _kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # the group is already empty
            pass

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextmanager
def running_worker(
    log: Path, queues: str, concurrency: int, hostname: str, env: dict[str, str] | None = None
) -> Iterator[WorkerProcess]:
    """A worker for the duration of the block; stopped however the block ends (Ctrl-C included)."""
    worker = WorkerProcess(log, queues, concurrency, hostname, env)
    try:
        yield worker
    finally:
        worker.stop()
