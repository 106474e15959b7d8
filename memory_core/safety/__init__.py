"""Nothing secret is kept: the scrub pass over text and items, and the engine wrapper that applies it to every write.

| module | what |
| --- | --- |
| ``normalize`` | hidden characters dropped, look-alike digits folded, with the way back to the original |
| ``detector`` | ``Detector``, ``Policy``, ``Stage`` |
| ``credentials`` | private-key blocks, credential markers and shapes (reference §6.2 passes 1-3) |
| ``pii`` | checksum-gated personal identifiers (pass 4) |
| ``glued`` | credential tokens glued after ``-`` or ``_`` (``my-sk-…``), for text and ids alike |
| ``scrub`` | ``find`` and ``scrub``: the pass over one text |
| ``ids`` | ids are never rewritten: one holding a credential is refused |

See docs/safety.md for what is and is not detected.
"""

from memory_core.safety.credentials import REDACTED, REDACTED_PRIVATE_KEY
from memory_core.safety.detector import Detector, Policy, Stage
from memory_core.safety.pii import pii_replacement
from memory_core.safety.scrub import DETECTORS, Finding, find, scrub

__all__ = [
    "DETECTORS",
    "REDACTED",
    "REDACTED_PRIVATE_KEY",
    "Detector",
    "Finding",
    "Policy",
    "Stage",
    "find",
    "pii_replacement",
    "scrub",
]
