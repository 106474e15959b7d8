"""Reading a request body: bounded in bytes, JSON by its content type, then validated into a contract model.

A body is refused before validation when it could be read two ways: a key given twice in one object (parsers
disagree on which one wins, so a proxy that checks the first and a server that keeps the last would see two
requests; RFC 8259 §4 leaves it undefined), the non-JSON constants ``NaN``/``Infinity`` (RFC 8259 §6), or nesting
deeper than ``MAX_DEPTH``.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from starlette.requests import Request

from memory_core._model import ContractModel
from memory_core.errors import InvalidRequest
from memory_core.http.errors import BodyTooLarge, UnsupportedMediaType

__all__ = ["DEFAULT_MAX_BODY_BYTES", "MAX_DEPTH", "check_content_type", "parse_body", "read_body"]

DEFAULT_MAX_BODY_BYTES = 1 << 20
"""The largest request body accepted by default, bytes (1 MiB; ``serve --max-body``)."""

MAX_DEPTH = 32
"""The deepest nesting of arrays and objects a body may have (the contract's deepest body nests about 8)."""

M = TypeVar("M", bound=ContractModel)


def check_content_type(header: str | None, raw: bytes) -> None:
    """Refuse a non-empty body whose ``Content-Type`` is not JSON (``application/json`` or ``…+json``); pure.

    An empty body needs no type (it means ``{}``). Requiring the type also keeps a browser from sending a body
    cross-site without a CORS preflight (``text/plain`` and form types are "simple" requests; Fetch §4.1).

    Raises:
        UnsupportedMediaType: ``field="content-type"`` (415).
    """
    if not raw.strip():
        return
    media = (header or "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise UnsupportedMediaType(f"expected application/json, got {media[:60] or 'none'!r}", field="content-type")


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, at most ``limit`` bytes.

    A larger ``Content-Length`` is refused before anything is read, and a body streaming past the limit is
    refused as soon as it does.

    Raises:
        BodyTooLarge: over ``limit`` (413).
        InvalidRequest: ``field="content-length"``: a header that is not a number.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise InvalidRequest("not a number", field="content-length") from None
        if size < 0:
            raise InvalidRequest("must not be negative", field="content-length")
        if size > limit:
            raise BodyTooLarge(f"{size} bytes is over the limit of {limit}", field="body")
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise BodyTooLarge(f"over the limit of {limit} bytes", field="body")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_body(model: type[M], raw: bytes) -> M:
    """``raw`` (JSON text; empty means ``{}``) validated as ``model``.

    Raises:
        InvalidRequest: not UTF-8 or not JSON (``field="body"``), not an object, a key twice, ``NaN``/``Infinity``,
            nesting past ``MAX_DEPTH``, or a malformed field (named).
    """
    try:
        text = raw.decode("utf-8") if raw.strip() else "{}"
    except UnicodeDecodeError:
        raise InvalidRequest("not UTF-8 text", field="body") from None
    if not text.lstrip().startswith("{"):
        raise InvalidRequest(f"expected a JSON object ({model.__name__})", field="body")
    _check_unambiguous(text)
    try:
        return model.model_validate_json(text)
    except InvalidRequest as exc:
        if exc.field is None:
            raise InvalidRequest(exc.reason, field="body") from None
        raise


def _refuse_constant(name: str) -> Any:
    raise InvalidRequest(f"{name} is not JSON (RFC 8259 §6)", field="body")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidRequest(f"key {key[:60]!r} given twice in one object", field="body")
        out[key] = value
    return out


def _too_deep(value: Any, limit: int) -> bool:
    """True when ``value`` nests arrays and objects deeper than ``limit``; pure."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, (dict, list))
        ]
        if not level:
            return False
    return True


def _check_unambiguous(text: str) -> None:
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidRequest(f"nested deeper than {MAX_DEPTH}", field="body") from None
    except InvalidRequest:
        raise
    except ValueError as exc:
        raise InvalidRequest(
            f"not JSON: {exc.msg if isinstance(exc, json.JSONDecodeError) else exc}", field="body"
        ) from None
    if isinstance(value, dict) and _too_deep(value, MAX_DEPTH):
        raise InvalidRequest(f"nested deeper than {MAX_DEPTH}", field="body")
