"""The CortexDB engine over httpx, both wires, and its test doubles (contract reference §5, §6.1).

| URL | wire |
| --- | --- |
| ``cortexdb+https://host[:port][?consolidation=on_demand]`` | CortexDB Direct (key: ``MEMORY_CORE_CORTEXDB_KEY``) |
| ``tinyhumans+https://host`` | TinyHumans hosted (token: ``MEMORY_CORE_TINYHUMANS_TOKEN``) |
| ``cortexdb+http://127.0.0.1:N``, ``tinyhumans+http://…`` | the same over plain HTTP, loopback only |

Modules: ``wire`` (routes per wire), ``auth`` (endpoints, credentials), ``errors`` (the one status/transport →
error boundary), ``client`` (the httpx client: retries, caps, hold-back, actor), ``layout`` (scopes and lookup
labels), ``envelope`` (items ⇄ events), ``config`` (the layout and header settings, checked), ``attribution``
(``observed_actor``), ``engine`` (the ``MemoryEngine`` hooks), ``binding`` (one engine per configuration per
process: what ``open_engine`` hands out) and ``double`` (the doubles and their loopback server).
"""

from memory_core.engines.cortexdb.auth import BearerSource, Credential
from memory_core.engines.cortexdb.client import Timing
from memory_core.engines.cortexdb.engine import SCHEMES, CortexEngine
from memory_core.engines.cortexdb.wire import DIRECT, HOSTED, WIRES, Wire

__all__ = ["DIRECT", "HOSTED", "SCHEMES", "WIRES", "BearerSource", "CortexEngine", "Credential", "Timing", "Wire"]
