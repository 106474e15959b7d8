"""Find secrets left on disk: raw bytes, and base64 bodies inside JSON files (how kombu writes messages)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def readable(path: Path) -> bytes:
    """The file's bytes, plus every base64 string inside it when it is JSON, decoded."""
    raw = path.read_bytes()
    parts = [raw]
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return raw
    for text in _strings(data):
        try:
            parts.append(base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError):
            continue
    return b"\n".join(parts)


def leaks(root: Path, secrets: tuple[str, ...] | list[str]) -> dict[str, list[str]]:
    """Each secret found in a file under ``root``, with the files holding it."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        content = readable(path)
        for secret in secrets:
            if secret.encode() in content:
                found.setdefault(secret, []).append(str(path.relative_to(root)))
    return found
