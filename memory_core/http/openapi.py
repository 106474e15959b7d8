"""The OpenAPI 3.1 document, generated from the route table and the pydantic models (nothing written by hand)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic.json_schema import models_json_schema

import memory_core
from memory_core._model import ContractModel

if TYPE_CHECKING:
    from memory_core.http.app import ApiRoute

__all__ = ["ERROR_SCHEMA", "openapi_document"]

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {
        "error": {
            "type": "string",
            "description": "The error variant (InvalidRequest, Unauthorized, OutOfScope, NotFound, Conflict, "
            "Unsupported, EngineUnavailable, EngineError, ConfigError).",
        },
        "message": {"type": "string"},
        "field": {"type": ["string", "null"], "description": "The offending field (InvalidRequest)."},
    },
}
"""Every error's body (``MemoryCoreError.to_dict``)."""

_ERRORS = {
    "400": "Malformed request (names the field)",
    "401": "Missing or rejected token",
    "403": "The token is not bound to the root or agent named",
    "404": "No such job for this token's root (GET /v1/jobs/{job_id}; another root's job reads the same)",
    "413": "Body over the server's limit",
    "415": "A body whose Content-Type is not application/json",
    "503": "The engine is unavailable (transient; see Retry-After)",
}
_REF = "#/components/schemas/{model}"


def _param(name: str, where: str, description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "schema": {"type": "string"}, "description": description}


def openapi_document(routes: Sequence[ApiRoute]) -> dict[str, Any]:
    """The OpenAPI document for ``routes``: request bodies in validation mode, results in serialisation mode."""
    wanted: list[tuple[type[ContractModel], Any]] = []
    for route in routes:
        if route.body is not None:
            wanted.append((route.body, "validation"))
        wanted.append((route.result, "serialization"))
    keys, top = models_json_schema(list(dict.fromkeys(wanted)), ref_template=_REF)
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    schemas["Error"] = ERROR_SCHEMA
    error = {"content": {"application/json": {"schema": {"$ref": _REF.format(model="Error")}}}}
    paths: dict[str, Any] = {}
    for route in routes:
        params = [
            _param("root", "query", "The layout root; must be the token's (default: the token's)."),
            _param("agent", "query", "The agent acting; one the token is bound to (default: alphabetically first)."),
        ]
        params += [_param(p, "path", p, required=True) for p in _path_params(route.path)]
        operation: dict[str, Any] = {
            "operationId": route.path.removeprefix("/v1/").split("/")[0],
            "summary": route.summary,
            "parameters": params,
            "security": [{"bearer": []}],
            "responses": {
                str(route.status): {
                    "description": route.result.__name__,
                    "content": {"application/json": {"schema": keys[(route.result, "serialization")]}},
                },
                **{code: {"description": text, **error} for code, text in _ERRORS.items()},
            },
        }
        if route.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": keys[(route.body, "validation")]}},
            }
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    paths["/health"] = {
        "get": {"operationId": "health", "summary": "Whether the engine serves (token optional).", "responses": {}}
    }
    paths["/metrics"] = {"get": {"operationId": "metrics", "summary": "Prometheus metrics.", "responses": {}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "memory-core", "version": memory_core.__version__},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


def _path_params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{") and part.endswith("}")]
