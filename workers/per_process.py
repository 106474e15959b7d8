"""``PerProcess``: a value opened on first use in each process, and opened again in a forked child.

A Celery prefork worker forks its pool children after the main process may have opened things (a Redis client, a
SQLite connection); a child must not share them. ``PerProcess`` remembers which process opened its value and
opens a fresh one when asked from another (the child). Used for the process's runtime (``workers.runtime.runtime``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PerProcess"]

T = TypeVar("T")


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
