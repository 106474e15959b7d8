"""One BLAS thread for the engine's small matrix products (``BLAS_THREADS`` setting).

Ranking multiplies small matrices: the query against the index's vectors (``index``, ``belief_index``) and the
query's tokens against a hundred candidates' (``rerank``: ~2,000 × 384 by 384 × 8). OpenBLAS splits any product
above ~260k multiply-adds across a pool of threads that spin while they wait; on a 2-core machine shared with a
worker (or a host pinned to one core, which OpenBLAS does not notice once loaded) the caller then waits for
threads that are not running: on the demo's data a ``pre_turn`` took 110 ms of CPU with the default pool against
48 ms with one thread (same run), and one 1,942 × 384 × 6 product 40 ms against 2 ms.

So the first engine a process opens sets the BLAS pool (OpenBLAS, MKL, BLIS: through ``threadpoolctl``) to
``BLAS_THREADS`` threads, default 1, once per process; ``0`` leaves it alone. The setting is process-wide: a
host that runs large products of its own can set it (or ``0`` and its own limits).
"""

from __future__ import annotations

import threading

from threadpoolctl import threadpool_info, threadpool_limits

__all__ = ["blas_threads", "limit_blas"]

_done = False
_lock = threading.Lock()


def limit_blas(threads: int) -> bool:
    """Set the process's BLAS pools to ``threads`` threads, once per process; whether this call set them.

    Args:
        threads: Threads per BLAS pool; 0 leaves them as they are.
    """
    global _done
    with _lock:
        if _done or threads <= 0:
            return False
        _done = True
    threadpool_limits(limits=threads, user_api="blas")
    return True


def blas_threads() -> list[int]:
    """Threads of each BLAS pool loaded in the process (for tests and the bench)."""
    return [int(info["num_threads"]) for info in threadpool_info() if info.get("user_api") == "blas"]
