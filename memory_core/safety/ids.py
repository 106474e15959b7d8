"""Ids hold no credential: an id in which a credential detector fires is refused, never stored; pure.

An id (a namespace segment, a thread, agent, source or actor id, a workspace, a repo) is identity: redacting it
would file the item under another id and merge unrelated threads or agents, so it cannot be scrubbed like text.
Storing it as given would keep the credential in the items and scopes tables, the bodies, the log and the
broker's messages. So a scrubbing write refuses it: ``InvalidRequest`` naming the field (docs/safety.md, "Ids").

Only the credential passes (private keys, markers, shapes: reference §6.2 passes 1-3) are run over ids. The
personal-identifier pass is not: ids are machine-made runs of digits that pass its checksums by chance (a dated
job id ``job-20240517-0001`` reads as an Aadhaar number, ``th-240517-1234567`` as a Korean RRN).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from memory_core.errors import InvalidRequest
from memory_core.meta import MemoryMeta
from memory_core.namespace import Namespace
from memory_core.safety.detector import Stage
from memory_core.safety.scrub import DETECTORS, find

__all__ = ["check_id", "check_meta_ids", "check_namespace", "holds_credential"]

_CREDENTIALS: Final = tuple(d for d in DETECTORS if d.pii_class is None)
"""The detectors of passes 1-3 (every one that is not a personal-identifier class)."""
_CREDENTIAL_DETECTORS: Final = frozenset(d.name for d in _CREDENTIALS)
_GLUED: Final = tuple(d for d in _CREDENTIALS if d.stage is Stage.SHAPE and d.name != "credential_assignment")
"""The token shapes, which want a token to start a word; ``key = value`` already matches after a hyphen."""
_GLUED_NAMES: Final = frozenset(d.name for d in _GLUED)
_JOINT: Final = re.compile(
    r"[-_](?=" + "|".join(re.escape(n) for n in sorted({n for d in _GLUED for n in d.needles})) + ")", re.IGNORECASE
)
"""A hyphen or underscore with a token's prefix glued after it (``agent-sk-…``, ``th_ghp_…``)."""


def _unglued(value: str) -> str:
    """``value`` with each joint before a token's prefix (``_JOINT``, or a prefilter's start) made a space."""
    joints = {m.start() for m in _JOINT.finditer(value)}
    for prefilter in (d.prefilter for d in _GLUED if d.prefilter is not None):
        joints.update(
            m.start() - 1 for m in prefilter.finditer(value) if m.start() > 0 and value[m.start() - 1] in "-_"
        )
    if not joints:
        return value
    chars = list(value)
    for at in joints:
        chars[at] = " "
    return "".join(chars)


@lru_cache(maxsize=4096)
def holds_credential(value: str) -> bool:
    """Whether a credential detector fires in ``value``, or a token shape glued to it after ``-`` or ``_``; pure.

    In text a token glued to a word (``agent-sk-proj-…``) is not one (the shapes want a token to start a word);
    in an id, parts are glued that way, so the shapes are also run with each hyphen or underscore that precedes a
    token's prefix read as a space: two passes over the id, whatever its length.

    Args:
        value: An id.
    """
    if any(f.detector in _CREDENTIAL_DETECTORS for f in find(value)):
        return True
    unglued = _unglued(value)
    return unglued != value and any(f.detector in _GLUED_NAMES for f in find(unglued))


def check_id(value: str | None, field: str) -> None:
    """Refuse ``value`` when it holds a credential (``holds_credential``); None passes.

    Raises:
        InvalidRequest: ``field``: the id holds a credential.
    """
    if value is not None and holds_credential(value):
        raise InvalidRequest(
            "holds a credential; an id cannot be redacted without changing it, so it is refused (docs/safety.md)",
            field=field,
        )


def check_namespace(namespace: Namespace, field: str = "namespace") -> None:
    """Refuse ``namespace`` when one of its segment ids holds a credential.

    Raises:
        InvalidRequest: ``field``: a segment id holds a credential.
    """
    for _, segment_id in namespace.segments:
        check_id(segment_id, field)


def check_meta_ids(meta: MemoryMeta) -> None:
    """Refuse ``meta`` when one of its ids holds a credential.

    Checked in this order: agent id, thread id, workspace, repo, commit, source id, tool call id, observed actor
    id, namespace (each segment id).

    Raises:
        InvalidRequest: ``meta.<field>`` (``meta.thread_id``, ``meta.observed_actor.id``, …) holds a credential.
    """
    for name in ("agent_id", "thread_id", "workspace", "repo", "commit"):
        check_id(getattr(meta, name), f"meta.{name}")
    check_id(meta.source.id, "meta.source.id")
    if meta.tool_call is not None:
        check_id(meta.tool_call.id, "meta.tool_call.id")
    if meta.observed_actor is not None:
        check_id(meta.observed_actor.id, "meta.observed_actor.id")
    check_namespace(meta.namespace, "meta.namespace")
