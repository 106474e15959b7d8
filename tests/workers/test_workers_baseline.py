"""The benchmarks' baseline app (``workers.baseline``): its no-op task stays on the app that registered it.

Celery shares a decorated task with every app finalized later in the process unless told otherwise, so a
baseline made before the flow's app would leak ``baseline.noop`` into it, and a second baseline would register
the name twice (``DuplicateTaskNameWarning``, an error under this suite's ``filterwarnings``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from celery import Celery

from memory_core.settings import Settings
from workers.baseline import NOOP, create_baseline
from workers.celery_app import create_app


def test_each_baseline_holds_its_noop_and_no_other_app_gains_it(tmp_path: Path) -> None:
    s = Settings(_env_file=None, var_dir=tmp_path / "var")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second registration of the name would warn
        apps = [create_baseline(s), create_baseline(s, producer=True)]
        flow, bare = create_app(s), Celery("bare", set_as_current=False)
        assert all(NOOP in app.tasks for app in apps)
        assert apps[0].tasks[NOOP] is not apps[1].tasks[NOOP]
        assert NOOP not in flow.tasks and NOOP not in bare.tasks
