"""The bounded thread pool packs read on (seed 000: "Reads run concurrently"; reference §4.1 "Gather").

Every read of a pack is submitted from the calling thread and the call waits for all of them, so nothing a pack
starts outlives it. The shared pool has ``RECALL_WORKERS`` threads, named ``memory-core-recall_N``, created on
first use. Two hazards are handled here:

* a pack built *inside* a shared-pool thread would wait on reads queued behind itself; it gets a short-lived
  pool of its own (threads ``memory-core-recall-call_N``, joined before it returns);
* a forked child (a Celery prefork worker) inherits the pool object but not its threads; it starts a fresh pool.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from typing import Final, Generic, TypeVar

from memory_core.settings import get_settings

__all__ = ["RECALL_WORKERS", "Started", "reads_on_pool", "run_all", "run_here_first", "shared_pool"]

RECALL_WORKERS: Final = 8
"""Threads of the shared read pool (*memory-core*: bounds the reads all packs of a process run at once)."""

_T = TypeVar("_T")
_in_shared_pool = threading.local()
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _mark_shared_worker() -> None:
    _in_shared_pool.flag = True


def shared_pool() -> ThreadPoolExecutor:
    """The process-wide pool of ``RECALL_WORKERS`` threads packs read on unless given an executor.

    Created on first use; a forked child (a Celery prefork worker, say) starts a fresh one, because the parent's
    threads do not survive the fork.
    """
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=RECALL_WORKERS, thread_name_prefix="memory-core-recall", initializer=_mark_shared_worker
            )
        return _pool


def _forget_pool_after_fork() -> None:
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def reads_on_pool() -> bool:
    """Whether packs given no executor read every section on the shared pool (``MEMORY_CORE_READ_POOL``).

    Unset (the default), a pack whose engine ranks its fetch sections in one read makes that read on the calling
    thread (``recall.gather``), with the query encoded on the engine's encoder thread meanwhile: less CPU per
    pack and no later on a quiet machine (``docs/live-turn.md``, "the read pool").
    """
    return get_settings().read_pool


def run_here_first(calls: Sequence[Callable[[], _T]], executor: Executor | None = None) -> list[_T]:
    """Run ``calls[0]`` on the calling thread while the others run concurrently; results in order.

    The others are submitted first (``Started``: to ``executor``, else the shared pool), so they run while the
    caller runs the first; one not started by the time the caller asks for it runs on the caller. Returns only
    once none is still running.

    Args:
        calls: Functions that do not raise (each catches its own errors).
        executor: A thread-based executor for the others, or None for the shared pool.

    Returns:
        Each call's result, in call order.
    """
    if not calls:
        return []
    started = [Started(call, executor if executor is not None else shared_pool()) for call in calls[1:]]
    try:
        first = calls[0]()
        return [first, *(s.result() for s in started)]
    finally:
        for s in started:
            s.settle()


def run_all(calls: Sequence[Callable[[], _T]], executor: Executor | None = None) -> list[_T]:
    """Run ``calls`` concurrently and return their results in order, waiting for every one.

    Uses ``executor`` when given, else the shared pool of ``RECALL_WORKERS`` threads; a call made from a
    shared-pool thread gets a short-lived pool of its own instead, so nested packs never wait on themselves.
    A single call runs inline. If the executor refuses new work (shut down), the rest run inline.

    Args:
        calls: Functions that do not raise (each catches its own errors).
        executor: A thread-based executor to run on, or None for the shared pool.

    Returns:
        Each call's result, in call order.
    """
    if not calls:
        return []
    if len(calls) == 1:
        return [calls[0]()]
    if executor is None and getattr(_in_shared_pool, "flag", False):
        with ThreadPoolExecutor(
            max_workers=min(len(calls), RECALL_WORKERS), thread_name_prefix="memory-core-recall-call"
        ) as own:
            return _submit_all(own, calls)
    return _submit_all(executor if executor is not None else shared_pool(), calls)


class Started(Generic[_T]):
    """One call submitted to run beside the caller's own work, its result taken with ``result()``.

    A call the executor has not started by the time the caller asks for it is taken back and run on the
    caller's thread: the caller works instead of idling, and a caller that is itself one of the executor's
    threads (a host running ``pre_turn`` inside the one-worker pool it passed as ``executor``) never waits on
    work queued behind itself. ``Future.cancel`` succeeds exactly when the task has not begun, including one
    ``shutdown(cancel_futures=True)`` dropped. An executor that refuses new work (shut down) leaves the call to
    run when its result is asked. Work runs on the executor or the calling thread, nowhere else.
    """

    def __init__(self, call: Callable[[], _T], executor: Executor) -> None:
        self._call = call
        try:
            self._future: Future[_T] | None = executor.submit(call)
        except RuntimeError:  # the executor is shut down
            self._future = None

    def result(self) -> _T:
        """The call's result, run here when the executor had not started it."""
        if self._future is None or self._future.cancel():
            return self._call()
        return self._future.result()

    def settle(self) -> None:
        """Return once the call is not running on the executor (a taken-back or refused call is settled)."""
        if self._future is not None and not self._future.cancelled():
            wait([self._future])


def _submit_all(executor: Executor, calls: Sequence[Callable[[], _T]]) -> list[_T]:
    """Start every call (``Started``), then collect in order; return only once none is still running."""
    started = [Started(call, executor) for call in calls]
    try:
        return [s.result() for s in started]
    finally:
        for s in started:
            s.settle()
