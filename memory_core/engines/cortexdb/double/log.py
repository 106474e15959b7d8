"""``CortexLog``: the append-only event log behind both doubles, deliberately unaccommodating (reference §5.6).

* Append-only: events are never edited; forget removes them by id only.
* An idempotency key with the same body replays (``replayed_from_idempotency``); with another body it is a
  conflict. Forgetting or erasing an event releases its key.
* Listings are newest first and emit every event **twice**; ``limit`` counts the copies.
* Recall ranks a scope's events by the query words they share (ties newest first) and keeps the pack, always
  ``pack_test``, for the answer route; any forget or erasure drops the packs.
* A belief build distils one claim per sentence of each event, ``{claim: {subject, predicate, object},
  stance, confidence, built_at}``; every belief of a scope carries the time of the scope's last build.
* Each event carries ``created_at``, the server's time of appending it (``observed_at`` is the writer's), so a
  listing's newest event tells when its scope was last written.
* Registered scopes (``POST v1/scopes``) keep ``{path, members: [{actor, role}]}``; registering a path twice
  is a conflict.

Thread-safe: one lock guards everything.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

__all__ = ["PACK_ID", "CortexLog", "Event", "KeyConflict"]

PACK_ID: Final = "pack_test"
"""The one pack id the doubles hand out; the answer route requires it (reference §5.6)."""
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE = re.compile(r"[^.!?]*[.!?]?")


class KeyConflict(Exception):
    """The idempotency key was used before with another body."""


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def body_hash(body: Any) -> str:
    """A digest of a JSON body (key order kept as sent)."""
    return hashlib.sha256(json.dumps(body, separators=(",", ":"), sort_keys=True).encode()).hexdigest()


@dataclass
class Event:
    """One appended event.

    Attributes:
        seq: Its place in the log (1, 2, …).
        hidden_for: Listings of its scope it is still hidden from (the ``hide_listing_for`` knob).
    """

    seq: int
    id: str
    scope: str
    modality: str
    role: str
    text: str
    labels: tuple[str, ...]
    observed_at: str | None
    key: str | None
    created_at: str = ""
    hidden_for: int = 0

    def to_json(self) -> dict[str, Any]:
        """The event as listings and packs carry it."""
        context: dict[str, Any] = {"labels": list(self.labels)}
        if self.observed_at is not None:
            context["observed_at"] = self.observed_at
        return {
            "id": self.id,
            "scope": self.scope,
            "modality": self.modality,
            "content": {"kind": "message", "role": self.role, "text": self.text},
            "context": context,
            "created_at": self.created_at,
        }


@dataclass
class CortexLog:
    """The shared log; see the module docstring."""

    events: list[Event] = field(default_factory=list)
    keys: dict[str, tuple[str, str]] = field(default_factory=dict)
    packs: dict[str, list[Event]] = field(default_factory=dict)
    beliefs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    registrations: dict[str, dict[str, Any]] = field(default_factory=dict)
    writes: int = 0
    _seq: int = 0
    _lock: threading.RLock = field(default_factory=threading.RLock)

    # writes ------------------------------------------------------------------------------------------
    def append(self, body: dict[str, Any], key: str | None, hide_for: int = 0) -> tuple[str, bool]:
        """Append the event an experience body describes; answer ``(event_id, replayed)``.

        Raises:
            KeyConflict: ``key`` was used before with another body.
        """
        digest = body_hash(body)
        with self._lock:
            if key is not None and key in self.keys:
                held_digest, event_id = self.keys[key]
                if held_digest != digest:
                    raise KeyConflict(key)
                return event_id, True
            self._seq += 1
            content = body["content"]
            context = body.get("context") or {}
            event = Event(
                seq=self._seq,
                id=f"evt_{self._seq:06d}",
                scope=body["scope"],
                modality=body["modality"],
                role=content["role"],
                text=content["text"],
                labels=tuple(context.get("labels") or ()),
                observed_at=context.get("observed_at"),
                created_at=_now(),
                key=key,
                hidden_for=hide_for,
            )
            self.events.append(event)
            if key is not None:
                self.keys[key] = (digest, event.id)
            self.writes += 1
            return event.id, False

    def forget(self, scope: str, ids: list[str]) -> int:
        """Remove the named events of ``scope``; answer how many were removed (unknown ids are ignored)."""
        wanted = set(ids)
        with self._lock:
            return self._remove(lambda e: e.scope == scope and e.id in wanted)

    def erase(self, scope: str | None) -> int:
        """Remove every event of ``scope`` (None: of every scope) and its beliefs; answer how many."""
        with self._lock:
            if scope is None:
                self.beliefs.clear()
            else:
                self.beliefs.pop(scope, None)
            return self._remove(lambda e: scope is None or e.scope == scope)

    def _remove(self, doomed: Any) -> int:
        gone = [e for e in self.events if doomed(e)]
        if gone:
            ids = {e.id for e in gone}
            self.events = [e for e in self.events if e.id not in ids]
            self.keys = {k: v for k, v in self.keys.items() if v[1] not in ids}
        self.packs.clear()
        return len(gone)

    # reads -------------------------------------------------------------------------------------------
    def listing(self, scope: str, labels: set[str], offset: int, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """A listing page: newest first, every event twice, ``limit`` counting copies; answer (items, has_more)."""
        with self._lock:
            shown: list[Event] = []
            for event in reversed(self.events):
                if event.scope != scope or (labels and not labels.intersection(event.labels)):
                    continue
                if event.hidden_for > 0:
                    event.hidden_for -= 1
                    continue
                shown.append(event)
            doubled = [e.to_json() for e in shown for _ in range(2)]
        return doubled[offset : offset + limit], offset + limit < len(doubled)

    def scopes(self, prefix: str) -> list[str]:
        """Every scope holding events whose path starts with ``prefix``, sorted."""
        with self._lock:
            return sorted({e.scope for e in self.events if e.scope.startswith(prefix)})

    def recall(self, scope: str, query: str, events: int, beliefs: int, labels: set[str]) -> dict[str, Any]:
        """A pack: the scope's events ranked by shared query words (ties newest first), and its beliefs."""
        words = _words(query)
        with self._lock:
            scored = []
            for event in self.events:
                if event.scope != scope or (labels and not labels.intersection(event.labels)):
                    continue
                score = len(words & _words(event.text))
                if score:
                    scored.append((-score, -event.seq, event))
            scored.sort(key=lambda row: (row[0], row[1]))
            chosen = [event for _, _, event in scored[:events]]
            self.packs[scope] = chosen
            held = self.beliefs.get(scope, [])
            ranked = sorted(
                (b for b in held if words & _words(" ".join(b["claim"].values()))),
                key=lambda b: -len(words & _words(" ".join(b["claim"].values()))),
            )
        return {"pack_id": PACK_ID, "layers": {"events": [e.to_json() for e in chosen], "beliefs": ranked[:beliefs]}}

    def pack(self, scope: str) -> list[Event] | None:
        """The scope's last pack, or None (never built, or dropped by a forget)."""
        with self._lock:
            return self.packs.get(scope)

    # beliefs -----------------------------------------------------------------------------------------
    def build(self, scope: str) -> dict[str, Any]:
        """Distil one claim per sentence of each event of ``scope``; answer the build's counts."""
        with self._lock:
            held = self.beliefs.setdefault(scope, [])
            known = {b["claim"]["object"] for b in held}
            scanned = [e for e in self.events if e.scope == scope]
            built = 0
            for event in scanned:
                for match in _SENTENCE.finditer(" ".join(event.text.split())):
                    sentence = match.group(0).strip()[:200]
                    if not sentence or sentence in known:
                        continue
                    known.add(sentence)
                    held.append(
                        {
                            "id": f"blf_{len(held) + 1:04d}",
                            "claim": {"subject": "the record", "predicate": "notes_that", "object": sentence},
                            "stance": "supported",
                            "confidence": 0.6,
                        }
                    )
                    built += 1
            stamp = _now()
            for belief in held:  # a build re-derives the scope: every belief carries its time
                belief["built_at"] = stamp
            return {
                "built": built,
                "items": len(held),
                "facts_scanned": 0,
                "events_scanned": len(scanned),
                "reasons": [],
            }

    def held_beliefs(self, scope: str, limit: int) -> list[dict[str, Any]]:
        """The scope's beliefs, oldest first, at most ``limit``."""
        with self._lock:
            return list(self.beliefs.get(scope, []))[:limit]

    # scope registrations -----------------------------------------------------------------------------
    def register(self, record: dict[str, Any]) -> bool:
        """Register ``record["path"]``; False when it was registered already (nothing changes)."""
        with self._lock:
            if record["path"] in self.registrations:
                return False
            self.registrations[record["path"]] = dict(record)
            return True

    def registration(self, path: str) -> dict[str, Any] | None:
        """A registered scope's record, or None."""
        with self._lock:
            held = self.registrations.get(path)
            return dict(held) if held is not None else None

    def set_members(self, path: str, members: list[Any]) -> dict[str, Any] | None:
        """Replace a registered scope's members; None when it is not registered."""
        with self._lock:
            held = self.registrations.get(path)
            if held is None:
                return None
            held["members"] = list(members)
            return dict(held)
