"""The real data the tests read, and the rule for when it is missing: skip on a laptop, fail when CI=true.

Imported by ``conftest.py`` (fixtures ``data_dir``, ``tiny_data_dir``) and by test modules that need the
path at import time (``from _data import require_data``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
"""True in CI (``.ci/run`` sets ``CI=true``): a missing service or data folder fails instead of skipping."""

REPO = Path(__file__).resolve().parents[1]
_DATA_ENV = os.environ.get("MEMORY_CORE_DATA_DIR", "").strip()  # read at import: ``_clean_environ`` strips it
DATA_DIR = Path(_DATA_ENV).expanduser().resolve() if _DATA_ENV else REPO.parent / "shared" / "data"
"""The real data (``locomo/locomo_dev.json``, ``docs/peps/``): ``MEMORY_CORE_DATA_DIR`` as the run started,
else ``../shared/data`` beside the checkout (the settings' default, made independent of the working folder)."""
DATA_PARTS = ("locomo/locomo_dev.json", "docs/peps")
"""What the real-data tests read under ``DATA_DIR``."""
TINY_DATA_DIR = REPO / "tests" / "fixtures" / "tiny_data"
"""A data folder shaped like ``DATA_DIR`` small enough for end-to-end runs: one short LoCoMo conversation
(``tiny-1``, 8 turns, 5 questions) and two small documents under ``docs/peps``."""


def require_data(*parts: str) -> Path:
    """``DATA_DIR`` when it holds ``parts`` (default ``DATA_PARTS``); else skip, or fail when CI=true.

    Raises:
        pytest.skip.Exception / pytest.fail.Exception: a part is missing (the reason names it and the variable).
    """
    missing = [part for part in parts or DATA_PARTS if not (DATA_DIR / part).exists()]
    if not missing:
        return DATA_DIR
    message = (
        f"real data not found: {', '.join(str(DATA_DIR / m) for m in missing)} "
        "(set MEMORY_CORE_DATA_DIR to the folder holding locomo/ and docs/peps/)"
    )
    if CI:
        pytest.fail(f"{message} (CI=true: missing data fails the run)")
    pytest.skip(message)
