"""``memory-core worker``: a Celery worker for the job queues (``celery -A workers.celery_app worker``).

```
memory-core worker                                   # every queue: beliefs, ingest, maintenance
memory-core worker --queues beliefs,maintenance -c 2 # the belief builders (compose: worker-beliefs)
memory-core worker --queues ingest                   # the brain ingester (compose: worker-ingest)
```

``--queues`` takes the logical names ``beliefs``, ``ingest``, ``maintenance`` (mapped to the configured
``MEMORY_CORE_QUEUE_*`` names) or the configured names themselves; any other name exits 2 naming ``--queues`` and
listing the names it takes (no job of this app is routed there: a worker would wait forever and leave its binding
in the broker), as does a ``--queues`` naming no queue (``""``, ``","``).
``--pool`` is ``prefork``, ``threads`` or ``solo`` and ``--loglevel`` one of ``debug info warning error
critical``; anything else exits 2 before Celery starts. Exit status: Celery's (1 after an unrecoverable error),
2 for a configuration error or a bad option.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

import typer

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, LoglevelOption, run_celery, use_options
from memory_core.cli._common import EngineOption, fail
from memory_core.errors import ConfigError
from memory_core.settings import get_settings

__all__ = ["Pool", "check_queues", "unknown_queues", "worker"]

Pool = Literal["prefork", "threads", "solo"]
"""The pools ``--pool`` takes: Celery's others need packages this project does not install (gevent, eventlet)."""


def check_queues(value: str | None) -> str | None:
    """The ``--queues`` callback: exit 2 naming the option when it is given but names no queue.

    ``--queues ""`` or ``--queues ","`` would otherwise read as "not given" and consume every queue.
    """
    if value is not None and not any(entry.strip() for entry in value.split(",")):
        raise fail(
            f"--queues {value!r} names no queue: give beliefs, ingest and/or maintenance (comma-separated), or "
            "leave the option out for all three"
        )
    return value


def unknown_queues(unknown: Sequence[str], known: Mapping[str, str]) -> str:
    """The error for ``--queues`` entries no task is routed to, listing the names it takes; pure.

    Args:
        unknown: The entries that are neither a logical nor a configured queue name, as given.
        known: Logical name → configured name (``workers.config.known_queues``).
    """
    names = ", ".join(logical if logical == name else f"{logical} ({name})" for logical, name in known.items())
    given = ", ".join(repr(e) for e in unknown)
    return (
        f"--queues: {given} {'is no queue' if len(unknown) == 1 else 'are no queues'} of this app (no job is routed "
        f"there, a worker would wait forever): give {names}, comma-separated, or leave the option out for all"
    )


@app.command()
def worker(
    queues: Annotated[
        str | None,
        typer.Option(
            "--queues",
            "-Q",
            metavar="QUEUES",
            help="Comma-separated: beliefs, ingest, maintenance (or configured names); default all.",
            callback=check_queues,
        ),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", metavar="N", min=1, help="Pool processes.")
    ] = None,
    hostname: Annotated[
        str | None, typer.Option("--hostname", "-n", metavar="NAME", help="Node name (name@host).")
    ] = None,
    pool: Annotated[
        Pool, typer.Option("--pool", "-P", metavar="POOL", case_sensitive=False, help="prefork, threads or solo.")
    ] = "prefork",
    loglevel: LoglevelOption = "info",
    engine: EngineOption = None,
    broker: BrokerOption = None,
) -> None:
    """Run a worker consuming the job queues until stopped (SIGTERM: warm shutdown)."""
    use_options(engine, broker)
    from workers.config import known_queues, prepare, resolve_queues
    from workers.monitor import require_broker
    from workers.signals import BROKER_CHECK_TIMEOUT_S

    settings = get_settings()
    names, unknown = resolve_queues(settings, queues)
    if unknown:  # before prepare: a worker on such a queue would wait forever and leave its binding in Redis
        raise fail(unknown_queues(unknown, known_queues(settings)))
    prepare(settings)
    try:
        require_broker(settings, BROKER_CHECK_TIMEOUT_S)  # a wrong password is no outage: exit 2 (issue 11 §4)
    except ConfigError as exc:
        raise fail(f"memory-core worker: ConfigError: {exc}") from None
    argv = ["worker", f"--queues={','.join(names)}", f"--loglevel={loglevel}", f"--pool={pool}"]
    if concurrency:
        argv.append(f"--concurrency={concurrency}")
    if hostname:
        argv.append(f"--hostname={hostname}")
    raise typer.Exit(code=run_celery(argv))
