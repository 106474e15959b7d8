"""An executor a test drives by hand: background work runs only when the test says so."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any


class ManualExecutor(Executor):
    """Runs nothing until told: the test decides when background work happens."""

    def __init__(self) -> None:
        self.queue: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.down = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self.down:
            raise RuntimeError("cannot schedule new futures after shutdown")
        self.queue.append((fn, args))
        return Future()

    def run_all(self) -> int:
        ran = 0
        while self.queue:
            fn, args = self.queue.pop(0)
            fn(*args)
            ran += 1
        return ran

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.down = True
