"""``memory-core beat``: the periodic scheduler (``beat_schedule.py``). Run exactly ONE.

Two beats send every tick twice (celery/celery#2856). The schedule state lives in ``var_dir``.
"""

from __future__ import annotations

import typer

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, LoglevelOption, celery_app, run_celery, use_options
from memory_core.cli._common import EngineOption, fail
from memory_core.errors import ConfigError
from memory_core.settings import get_settings

__all__ = ["beat"]


@app.command()
def beat(loglevel: LoglevelOption = "info", engine: EngineOption = None, broker: BrokerOption = None) -> None:
    """Run celery beat: build-due and outbox-drain ticks (see beat_schedule.py). Run exactly one."""
    use_options(engine, broker)
    from workers.config import prepare
    from workers.monitor import require_broker
    from workers.signals import BROKER_CHECK_TIMEOUT_S

    prepare(get_settings())
    try:
        require_broker(get_settings(), BROKER_CHECK_TIMEOUT_S)  # a wrong password is no outage: exit 2
    except ConfigError as exc:
        raise fail(f"memory-core beat: ConfigError: {exc}") from None
    schedule = celery_app().conf.beat_schedule_filename
    raise typer.Exit(code=run_celery(["beat", f"--loglevel={loglevel}", f"--schedule={schedule}"]))
