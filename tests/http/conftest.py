"""Fixtures of the HTTP API tests (helpers in ``httpkit``)."""

from __future__ import annotations

import pytest
from httpkit import Api, make_api


@pytest.fixture
def api() -> Api:
    return make_api()
