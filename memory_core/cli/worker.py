"""``memory-core worker``: a Celery worker for the job queues (``celery -A workers.celery_app worker``).

```
memory-core worker                                   # every queue: beliefs, ingest, maintenance
memory-core worker --queues beliefs,maintenance -c 2 # the belief builders (compose: worker-beliefs)
memory-core worker --queues ingest                   # the brain ingester (compose: worker-ingest)
```
"""

from __future__ import annotations

from typing import Annotated

import typer

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, LoglevelOption, celery_app, use_options
from memory_core.cli._common import EngineOption
from memory_core.settings import get_settings

__all__ = ["worker"]


@app.command()
def worker(
    queues: Annotated[
        str | None, typer.Option("--queues", "-Q", help="Comma-separated queues; default: all three.")
    ] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c", min=1, help="Pool processes.")] = None,
    hostname: Annotated[str | None, typer.Option("--hostname", "-n", help="Node name (name@host).")] = None,
    pool: Annotated[str, typer.Option("--pool", "-P", help="prefork, threads or solo.")] = "prefork",
    loglevel: LoglevelOption = "info",
    engine: EngineOption = None,
    broker: BrokerOption = None,
) -> None:
    """Run a worker consuming the job queues until stopped (SIGTERM: warm shutdown)."""
    use_options(engine, broker)
    settings = get_settings()
    names = queues or ",".join((settings.queue_beliefs, settings.queue_ingest, settings.queue_maintenance))
    argv = ["worker", f"--queues={names}", f"--loglevel={loglevel}", f"--pool={pool}"]
    if concurrency:
        argv.append(f"--concurrency={concurrency}")
    if hostname:
        argv.append(f"--hostname={hostname}")
    code = celery_app().start(argv)
    raise typer.Exit(code=int(code or 0))
