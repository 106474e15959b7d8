r"""``memory-core demo --broker URL``: check the Redis before the run, and delete what the run wrote there after.

A run on a real Redis names everything after its run id (``demo_env``): the key prefix ``memory-core-demo-<run>``
and the queues ``demo-<run>-beliefs|ingest|maintenance``. What it leaves on that Redis, seen after a run of the
main demo (about 250 keys):

* ``<prefix>:job:<id>:attempts|progress|done``, ``<prefix>:gate:…``, ``<prefix>:dead…``: the coordination
  and dead-letter stores (TTL up to a day, some none);
* ``demo-<run>-<queue>`` and its priority lists ``demo-<run>-<queue>`` + ``"\x06\x16"`` + ``<n>``: kombu's
  Redis transport (no TTL);
* ``_kombu.binding.demo-<run>-<queue>`` and ``_kombu.binding_permanent.demo-<run>-<queue>``: kombu, one
  exchange per queue (no TTL: they piled up forever);
* ``celery-task-meta-<id>`` of every job the worker ran: Celery's result backend (``result_expires``, a day).

``forget_run`` deletes all of them once the worker has stopped (on success, error and Ctrl-C alike). A result
key carries no run prefix; every job the worker started counted an attempt under the run's prefix
(``<prefix>:job:<id>:attempts``), so those ids, and the ids the run itself knows, name the results to delete.
Keys shared by every worker on that Redis (``_kombu.binding_deadlines``, ``unacked``, the pidbox bindings) are
left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from rich.markup import escape

from memory_core.cli._common import console, fail, plural
from memory_core.engine import MemoryEngine
from memory_core.settings import check_url

__all__ = [
    "BROKER_SCHEMES",
    "PROBE_TIMEOUT_S",
    "broker_problem",
    "forget_or_warn",
    "forget_run",
    "probe_or_exit",
    "run_patterns",
]

BROKER_SCHEMES = ("redis", "rediss")
"""What ``--broker`` takes: the demo runs on a Redis (the server-less default needs no URL)."""
PROBE_TIMEOUT_S = 1.0
"""Seconds the broker gets to answer one PING before the demo refuses to start (``JobMonitor.probe``)."""
CLEANUP_TIMEOUT_S = 5.0
"""Seconds each Redis call of the cleanup may take (connect and answer)."""
_JOB_KEY = re.compile(r":job:(?P<id>[^:]+):")


def broker_problem(url: str) -> str | None:
    """Why ``url`` cannot be the demo's ``--broker`` (naming the option), or None when it can; pure.

    The rule is ``settings.check_url`` (a ``redis://`` or ``rediss://`` URL naming a host, numeric port and
    database) restricted to Redis.
    """
    try:
        check_url(url, BROKER_SCHEMES)
    except ValueError as exc:
        return f"--broker: {exc}"
    return None


def run_patterns(prefix: str, queues: Sequence[str]) -> list[str]:
    """The ``SCAN MATCH`` patterns of the keys a run wrote under its own names (results aside); pure.

    Args:
        prefix: The run's ``MEMORY_CORE_REDIS_PREFIX`` (``memory-core-demo-<run>``).
        queues: The run's queue names (``demo-<run>-beliefs``, …).
    """
    patterns = [f"{_glob(prefix)}:*"]
    for queue in queues:
        name = _glob(queue)
        patterns += [name, f"{name}\x06\x16*", f"_kombu.binding.{name}", f"_kombu.binding_permanent.{name}"]
    return patterns


def _glob(text: str) -> str:
    """``text`` with Redis glob characters escaped, so a pattern matches it literally."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def forget_run(url: str, prefix: str, queues: Sequence[str], job_ids: Iterable[str] = ()) -> int:
    """Delete every key the run wrote on the Redis at ``url`` (see the module docstring); the number deleted.

    Call it once the run's worker has stopped (a running worker writes them again).

    Args:
        url: The run's broker URL (results live on the broker: the demo sets no result backend).
        prefix: The run's key prefix.
        queues: The run's queue names.
        job_ids: Job ids the run submitted or saw (their results go too, with those of every job counted
            under ``prefix``).

    Raises:
        redis.RedisError: the Redis did not answer (nothing more is deleted).
    """
    import redis

    client = redis.Redis.from_url(url, socket_timeout=CLEANUP_TIMEOUT_S, socket_connect_timeout=CLEANUP_TIMEOUT_S)
    try:
        keys: set[bytes] = set()
        ids = set(job_ids)
        for pattern in run_patterns(prefix, queues):
            for key in client.scan_iter(match=pattern, count=1000):
                keys.add(key)
                if (m := _JOB_KEY.search(key.decode(errors="replace"))) is not None:
                    ids.add(m.group("id"))
        keys.update(f"celery-task-meta-{job_id}".encode() for job_id in ids)
        deleted = 0
        ordered = sorted(keys)
        for start in range(0, len(ordered), 500):
            deleted += int(client.delete(*ordered[start : start + 500]))
        return deleted
    finally:
        client.close()


def probe_or_exit(monitor: Any, engine: MemoryEngine) -> None:
    """Exit 2 at once when the ``--broker`` Redis does not answer one PING, rather than wait for a worker.

    Args:
        monitor: The run's ``workers.monitor.JobMonitor`` (its ``probe``); closed, with ``engine``, on exit.
        engine: The run's engine.

    Raises:
        typer.Exit: status 2, after ``--broker <url without password> is not answering: <reason>``.
    """
    probe = monitor.probe(PROBE_TIMEOUT_S)
    if not probe.reachable:
        monitor.close()
        engine.close()
        raise fail(f"--broker {probe.url} is not answering: {probe.reason}")


def forget_or_warn(url: str, prefix: str, queues: Sequence[str], ids: Sequence[str]) -> None:
    """``forget_run``, then say how many keys went; a failure is reported (the demo's outcome stands), not raised."""
    try:
        deleted = forget_run(url, prefix, queues, ids)
    except Exception as exc:  # the demo's outcome stands; the keys expire or can be deleted by hand
        console.print(f"[yellow]could not delete the run's keys ({prefix}:*, {queues[0]}…): {escape(str(exc))}[/]")
        return
    console.print(f"deleted the run's {plural(deleted, 'key')} on the broker (queues, bindings, {prefix}:*, results)")
