"""CortexDB test doubles shipped with the package, as httpx ships ``MockTransport`` (contract reference §5.6).

```python
from memory_core.engines.cortexdb.double import direct_double
double = direct_double()
with double.engine() as engine:          # a CortexEngine over double.transport, in process
    engine.store(Document.of("hello"))
assert double.requests("POST", "v1/experience")
```

``direct_double()`` and ``hosted_double()`` answer over one deliberately unaccommodating append-only
``CortexLog``; ``knobs`` inject faults; ``seen`` records every request. ``DoubleServer`` serves either on loopback
(``memory-core cortex-double``).
"""

from __future__ import annotations

from typing import Any, Final

from memory_core.engines.cortexdb.client import Timing
from memory_core.engines.cortexdb.double.app import CortexDouble, DoubleError, Seen
from memory_core.engines.cortexdb.double.knobs import Knobs
from memory_core.engines.cortexdb.double.log import PACK_ID, CortexLog
from memory_core.engines.cortexdb.double.server import DoubleServer, serve

__all__ = [
    "DOUBLE_TIMING",
    "PACK_ID",
    "CortexDouble",
    "CortexLog",
    "DoubleError",
    "DoubleServer",
    "Knobs",
    "Seen",
    "direct_double",
    "double_engine",
    "hosted_double",
    "serve",
]

DOUBLE_TIMING: Final = Timing(
    read_waits=(0.005, 0.01), poll_s=0.005, poll_max_s=0.02, visible_s=2.0, ranked_s=0.05, hold_max_s=0.05
)
"""Timing for engines over a double: 5 ms polls and a 2 s visibility budget (reference §5.6)."""
DOUBLE_TOKEN: Final = "double-token"
"""The bearer ``double_engine`` sends by default (the doubles accept any non-blank bearer unless told)."""


def direct_double(log: CortexLog | None = None, **knobs: Any) -> CortexDouble:
    """A CortexDB Direct double (``v1/…`` routes), over ``log`` (a fresh one by default), with ``knobs`` set."""
    double = CortexDouble("direct", log=log or CortexLog())
    double.knobs.update(knobs)
    return double


def hosted_double(log: CortexLog | None = None, **knobs: Any) -> CortexDouble:
    """A TinyHumans hosted double (``memory/…`` routes, envelopes), over ``log``, with ``knobs`` set."""
    double = CortexDouble("hosted", log=log or CortexLog())
    double.knobs.update(knobs)
    return double


def double_engine(double: CortexDouble, credential: Any = DOUBLE_TOKEN, **options: Any) -> Any:
    """A ``CortexEngine`` over ``double`` in process (loopback endpoint, ``DOUBLE_TIMING`` unless given).

    Args:
        double: The double to talk to.
        credential: The bearer (a string or a callable).
        options: More ``CortexEngine`` keyword arguments (``timing``, ``sleep``, ``consolidation``, …).
    """
    from memory_core.engines.cortexdb.engine import CortexEngine
    from memory_core.engines.cortexdb.wire import DIRECT, HOSTED

    options.setdefault("timing", DOUBLE_TIMING)
    options.setdefault("endpoint", "http://127.0.0.1:3141")
    wire = HOSTED if double.hosted else DIRECT
    return CortexEngine(wire, credential, transport=double.transport, **options)
