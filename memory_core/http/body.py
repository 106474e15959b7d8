"""Reading a request body: bounded in bytes before it is parsed, then validated into a contract model."""

from __future__ import annotations

from typing import TypeVar

from starlette.requests import Request

from memory_core._model import ContractModel
from memory_core.errors import InvalidRequest
from memory_core.http.errors import BodyTooLarge

__all__ = ["DEFAULT_MAX_BODY_BYTES", "parse_body", "read_body"]

DEFAULT_MAX_BODY_BYTES = 1 << 20
"""The largest request body accepted by default, bytes (1 MiB; ``serve --max-body``)."""

M = TypeVar("M", bound=ContractModel)


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
        InvalidRequest: not UTF-8 or not JSON (``field="body"``), not an object, or a malformed field (named).
    """
    try:
        text = raw.decode("utf-8") if raw.strip() else "{}"
    except UnicodeDecodeError:
        raise InvalidRequest("not UTF-8 text", field="body") from None
    if not text.lstrip().startswith("{"):
        raise InvalidRequest(f"expected a JSON object ({model.__name__})", field="body")
    try:
        return model.model_validate_json(text)
    except InvalidRequest as exc:
        if exc.field is None:
            raise InvalidRequest(exc.reason, field="body") from None
        raise
