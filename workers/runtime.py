"""``Runtime``: what one worker process holds (engine, runner, stores, a queue), opened on first use.

``runtime()`` is this process's, opened again in a forked pool child (``PerProcess``: a prefork worker forks its
children after the main process may have opened a Redis client or a SQLite connection, which a child must not
share); the tasks, the flow, the poison guards and the signal handlers all ask it, so a process opens one
coordination store and one dead-letter store. ``close_runtime()`` closes it (worker process shutdown; tests that
change the settings call it too).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from memory_core.engine import MemoryEngine
from memory_core.engines import open_host_engine
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.runner import BackgroundRunner
from memory_core.settings import Settings, get_settings
from workers.coordination import Coordination
from workers.dead_letters import DeadLetterStore
from workers.kinds import JOB_KINDS, JobKinds
from workers.locks import engine_key
from workers.queue import JobQueue, open_coordination, open_dead_letters

__all__ = ["PerProcess", "Runtime", "close_runtime", "open_worker_engine", "runtime"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def open_worker_engine(settings: Settings) -> MemoryEngine:
    """Open ``Settings.engine`` with ``engine_plugins`` registered, its writes scrubbed unless ``scrub`` is off.

    Raises:
        ConfigError: a malformed plugin entry, or an unknown engine scheme.
    """
    return open_host_engine(settings.engine, plugins=settings.engine_plugins, scrub=settings.scrub)


class Runtime:
    """What one worker process holds, opened on first use: engine, runner, coordination, dead letters, queue.

    Args:
        settings: The settings.
        engine / coordination / letters / queue: Injected parts (tests); default opened from settings.
        kinds: The table of job kinds deliveries are parsed and dispatched by.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        engine: MemoryEngine | None = None,
        coordination: Coordination | None = None,
        letters: DeadLetterStore | None = None,
        queue: JobQueue | None = None,
        kinds: JobKinds = JOB_KINDS,
    ) -> None:
        self.settings = settings
        self.kinds = kinds
        self._engine = engine
        self._coordination = coordination
        self._letters = letters
        self._queue = queue
        self.layout = MemoryLayout(settings.layout_root)
        self.engine_key = engine_key(settings.engine)

    @property
    def engine(self) -> MemoryEngine:
        """The engine (``Settings.engine``, plugins registered)."""
        if self._engine is None:
            self._engine = open_worker_engine(self.settings)
        return self._engine

    @property
    def runner(self) -> BackgroundRunner:
        """A ``BackgroundRunner`` over the engine and layout."""
        return BackgroundRunner(self.engine, self.layout)

    @property
    def coordination(self) -> Coordination:
        """The coordination store."""
        if self._coordination is None:
            self._coordination = open_coordination(self.settings)
        return self._coordination

    @property
    def letters(self) -> DeadLetterStore:
        """The dead-letter store."""
        if self._letters is None:
            self._letters = open_dead_letters(self.settings)
        return self._letters

    @property
    def queue(self) -> JobQueue:
        """A ``JobQueue`` for follow-up jobs (sharing the coordination store)."""
        if self._queue is None:
            self._queue = JobQueue(self.settings, coordination=self.coordination, kinds=self.kinds)
        return self._queue

    def close(self) -> None:
        """Close whatever was opened."""
        for part in (self._queue, self._engine, self._coordination, self._letters):
            if part is not None:
                try:
                    part.close()
                except Exception as exc:  # closing must not mask the shutdown
                    log.warning("closing %s failed: %s", type(part).__name__, exc)


class PerProcess(Generic[T]):
    """A lazily opened per-process value (thread-safe).

    Args:
        opener: Makes the value; called at most once per process (until ``reset``).
    """

    def __init__(self, opener: Callable[[], T]) -> None:
        self._opener = opener
        self._lock = threading.Lock()
        self._held: tuple[int, T] | None = None
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a thread of the parent may have held it at the fork

    def get(self) -> T:
        """This process's value, opened now if this process has none yet."""
        with self._lock:
            pid = os.getpid()
            if self._held is None or self._held[0] != pid:
                self._held = (pid, self._opener())
            return self._held[1]

    def reset(self, close: Callable[[T], None] | None = None) -> None:
        """Forget the value; ``close`` it first when this process opened it (a parent's copy is left alone)."""
        with self._lock:
            held, self._held = self._held, None
        if held is not None and close is not None and held[0] == os.getpid():
            close(held[1])


_runtime: PerProcess[Runtime] = PerProcess(lambda: Runtime(get_settings()))


def runtime() -> Runtime:
    """This process's ``Runtime`` (opened on first use, and again in a forked child)."""
    return _runtime.get()


def close_runtime() -> None:
    """Close this process's ``Runtime`` (worker process shutdown)."""
    _runtime.reset(Runtime.close)
