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

from functools import lru_cache
from typing import Final

from memory_core.errors import InvalidRequest
from memory_core.meta import MemoryMeta
from memory_core.namespace import Namespace
from memory_core.safety.scrub import DETECTORS, find

__all__ = ["check_id", "check_meta_ids", "check_namespace", "holds_credential"]

_CREDENTIAL_DETECTORS: Final = frozenset(d.name for d in DETECTORS if d.pii_class is None)
"""The detectors of passes 1-3 (every one that is not a personal-identifier class)."""


@lru_cache(maxsize=4096)
def holds_credential(value: str) -> bool:
    """Whether a credential detector fires in ``value``; pure.

    ``find`` also finds a credential token glued after ``-`` or ``_`` (``agent-sk-proj-…``, ``th_ghp_…``: the rule
    of ``safety.glued``, the same as in text), which is how the parts of an id are joined.

    Args:
        value: An id.
    """
    return any(f.detector in _CREDENTIAL_DETECTORS for f in find(value))


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
