"""The subset of JSON Schema the tool schemas use, checked against a call's arguments; pure.

Keywords: ``type`` (object, array, string, integer, number, boolean), ``properties``, ``required``,
``additionalProperties: false``, ``oneOf`` of ``required`` lists (exactly one of), ``items``, ``minItems``,
``maxItems``, ``minLength``, ``pattern``, ``minimum``, ``maximum``, ``enum``. ``description`` and ``format`` are
documentation (a ``date-time`` is parsed where it is used). The tool schemas are the one statement of an
argument's shape: ``specs()`` hands them to the model and ``check`` holds a call to them.
"""

from __future__ import annotations

import math
import re
from typing import Any

from memory_core.errors import InvalidRequest

__all__ = ["check"]

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def _join(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


def _type_ok(value: Any, expected: str) -> bool:
    if isinstance(value, bool) and expected in {"integer", "number"}:
        return False
    return isinstance(value, _TYPES[expected])


def _check_object(value: dict[str, Any], schema: dict[str, Any], path: str) -> None:
    properties: dict[str, Any] = schema.get("properties", {})
    if schema.get("additionalProperties") is False:
        for key in value:
            if key not in properties:
                known = ", ".join(properties) or "none"
                raise InvalidRequest(f"unknown field (known: {known})", field=_join(path, key))
    for key in schema.get("required", ()):
        if key not in value:
            raise InvalidRequest("field required", field=_join(path, key))
    options = schema.get("oneOf")
    if options:
        names = [name for option in options for name in option["required"]]
        given = [name for name in names if name in value]
        if len(given) != 1:
            shown = " or ".join(f"`{n}`" for n in names)
            raise InvalidRequest(f"give exactly one of {shown} (got {len(given)})", field=path or None)
    for key, item in value.items():
        if key in properties:
            check(item, properties[key], _join(path, key))


def check(value: Any, schema: dict[str, Any], path: str = "") -> None:
    """Hold ``value`` to ``schema`` (the subset above).

    Raises:
        InvalidRequest: the first mismatch, naming its dotted field (``learning.confidence``, ``ids.3``).
    """
    expected = schema.get("type")
    if expected is not None and not _type_ok(value, expected):
        raise InvalidRequest(f"expected {expected}, got {type(value).__name__}", field=path or None)
    if "enum" in schema and value not in schema["enum"]:
        shown = ", ".join(str(v) for v in schema["enum"])
        raise InvalidRequest(f"{value!r} is not one of: {shown}", field=path or None)
    if isinstance(value, dict):
        _check_object(value, schema, path)
    elif isinstance(value, list | tuple):
        if len(value) < schema.get("minItems", 0):
            raise InvalidRequest(f"needs at least {schema['minItems']} item(s)", field=path or None)
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise InvalidRequest(f"at most {schema['maxItems']} items, got {len(value)}", field=path or None)
        if "items" in schema:
            for i, item in enumerate(value):
                check(item, schema["items"], _join(path, i))
    elif isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise InvalidRequest(f"needs at least {schema['minLength']} character(s)", field=path or None)
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            raise InvalidRequest("must not be blank", field=path or None)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidRequest("must be a finite number", field=path or None)
        if "minimum" in schema and value < schema["minimum"]:
            raise InvalidRequest(f"must be >= {schema['minimum']}", field=path or None)
        if "maximum" in schema and value > schema["maximum"]:
            raise InvalidRequest(f"must be <= {schema['maximum']}", field=path or None)
