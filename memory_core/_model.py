"""The pydantic base every contract value derives from, and the shared timestamp type.

Every contract value is a frozen pydantic v2 model, so it has one JSON form. Three rules keep that form
compatible with the TinyMemory wire (contract reference §1.4-§1.5):

* unset optional fields (``None``) are left out, and fields named in ``__omit_defaults__`` are left out while
  they hold their default (an empty ``tags`` list, a root namespace, ``beliefs = 0``);
* fields serialise in declaration order, a union's ``"type"``/``"job"`` tag first;
* timestamps serialise as RFC 3339 in UTC with a ``Z`` and fractional seconds only when non-zero.

Malformed input, whether passed to a constructor, ``model_validate`` or ``model_validate_json``, raises
``InvalidRequest`` naming the first offending field instead of pydantic's ``ValidationError``.

Wrong types are refused, never coerced: every int and bool field is ``StrictInt``/``StrictBool`` (and a
learning's confidence ``StrictFloat``), so ``"7"``, ``True`` or ``5.0`` is no limit and ``"yes"`` or ``1`` no
``inherit`` (the reference's serde refuses them too). JSON numbers and booleans parse as before, and models are
not strict as a whole, so enums, ``Namespace`` and ``Timestamp`` keep accepting their string forms.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Final, Self, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    model_serializer,
)

from memory_core.errors import InvalidRequest

__all__ = [
    "EARLIEST",
    "LATEST",
    "ContractModel",
    "StrictBool",
    "StrictFloat",
    "StrictInt",
    "Timestamp",
    "format_timestamp",
    "invalid_from",
    "reading_wire",
    "utc",
    "wire_input",
]


EARLIEST: Final = datetime.min.replace(tzinfo=UTC)
"""The earliest storable time, ``0001-01-01T00:00:00Z`` (RFC 3339 years are four digits; Python's range)."""

LATEST: Final = datetime.max.replace(tzinfo=UTC)
"""The latest storable time, ``9999-12-31T23:59:59.999999Z``."""

_SHORT_YEAR = re.compile(r"(-?)(\d{1,3})-(\d\d-\d\d[Tt ])")


def utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime; a naive datetime is taken to be UTC already.

    Raises:
        ValueError: the time in UTC falls outside ``EARLIEST..LATEST`` (``9999-12-31T23:00:00-05:00`` is in year
            10000 in UTC): it could be written but never read back, so it is refused (a bare ``OverflowError``
            before).
    """
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(
            f"{value.isoformat()} is outside {format_timestamp(EARLIEST)}..{format_timestamp(LATEST)} in UTC"
        ) from None


def _padded_year(value: Any) -> Any:
    """Read a stored timestamp whose year was written without its leading zeros (``999-01-01T…``) as ``0999``.

    Versions before the four-digit rule wrote years before 1000 that way; reading them keeps those items readable.
    """
    if isinstance(value, str):
        match = _SHORT_YEAR.match(value)
        if match and not match.group(1):
            return f"{int(match.group(2)):04d}-{match.group(3)}{value[match.end() :]}"
    return value


def format_timestamp(value: datetime) -> str:
    """Format a datetime as chrono's RFC 3339 form: ``2001-01-01T00:00:00Z``, ``…:00.250Z``, ``…:00.000001Z``.

    Fractional seconds appear only when non-zero, with 3 digits when whole milliseconds, else 6
    (contract reference §1.4, "DateTime<Utc> in chrono's RFC3339 form"); the year always has four digits
    (RFC 3339 ``date-fullyear``), so every value in ``EARLIEST..LATEST`` reads back.
    """
    value = utc(value)
    base = f"{value.year:04d}-" + value.strftime("%m-%dT%H:%M:%S")  # %Y drops a short year's zeros on glibc
    micro = value.microsecond
    if micro == 0:
        return f"{base}Z"
    if micro % 1000 == 0:
        return f"{base}.{micro // 1000:03d}Z"
    return f"{base}.{micro:06d}Z"


Timestamp = Annotated[
    datetime, BeforeValidator(_padded_year), AfterValidator(utc), PlainSerializer(format_timestamp, return_type=str)
]
"""An aware UTC datetime that serialises in chrono's RFC 3339 form (naive input is read as UTC).

Every accepted value reads back: a time whose UTC form leaves ``EARLIEST..LATEST`` is ``InvalidRequest`` naming
the field (issue 11 rule 1)."""


_WIRE: ContextVar[bool] = ContextVar("memory_core_wire_input", default=False)


@contextmanager
def wire_input() -> Iterator[None]:
    """Mark the validation inside the block as reading outside input: JSON text or a JSON object (mapping).

    ``model_validate``, ``model_validate_json``, ``coerce`` and ``items.parse_item`` read through it. A model whose
    Python constructor is kinder than the wire (``Learning``) asks ``reading_wire()``.
    """
    token = _WIRE.set(True)
    try:
        yield
    finally:
        _WIRE.reset(token)


def reading_wire() -> bool:
    """True inside ``wire_input()``: the values being validated came from JSON, not from a Python constructor."""
    return _WIRE.get()


def _field_path(loc: tuple[int | str, ...]) -> str | None:
    parts = [str(p) for p in loc]
    return ".".join(parts) if parts else None


def invalid_from(
    exc: ValidationError, prefix: str | None = None, union_tags: frozenset[str] = frozenset()
) -> InvalidRequest:
    """Turn pydantic's ``ValidationError`` into ``InvalidRequest`` naming the first offending field.

    Args:
        exc: The validation error.
        prefix: A field path to put in front of the error's own location, e.g. ``"items.3"``.
        union_tags: Tags of the tagged union ``exc`` came from; pydantic puts the chosen tag first in the
            location (``document.meta.namespace``), and it is no field, so it is dropped.

    Returns:
        The ``InvalidRequest`` to raise; a missing or unknown union tag names the tag field (``type``).
    """
    first = exc.errors(include_url=False)[0]
    loc = tuple(first.get("loc", ()))
    if loc and loc[0] in union_tags:
        loc = loc[1:]
    if first.get("type") in ("union_tag_invalid", "union_tag_not_found"):
        loc = (*loc, str((first.get("ctx") or {}).get("discriminator", "")).strip("'\""))
    field = _field_path(loc)
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    ctx = first.get("ctx") or {}
    inner = ctx.get("error")
    if isinstance(inner, InvalidRequest):
        message = inner.message
        if inner.field:
            message = message.removeprefix(f"{inner.field}: ")
            field = f"{field}.{inner.field}" if field else inner.field
    elif isinstance(inner, Exception):
        message = str(inner)
    else:
        message = str(first.get("msg", "invalid value"))
    return InvalidRequest(message[:1].lower() + message[1:], field=field)


_Defaults = tuple[tuple[str, Any, Any], ...]
"""A model's optional fields in declaration order: ``(name, default, default factory or None)``."""
_BY_ALIAS: Final[_Defaults] = (("", None, None),)
"""The plan of a model ``ContractModel.trusted`` leaves to ``model_construct`` (aliases or a post-init hook)."""
_TRUSTED: dict[type[BaseModel], _Defaults] = {}


def _trusted_plan(cls: type[BaseModel]) -> _Defaults:
    """The optional fields' defaults of ``cls`` for ``ContractModel.trusted`` (``_BY_ALIAS``: not eligible)."""
    fields = cls.__pydantic_fields__
    aliased = any(f.alias is not None or f.validation_alias is not None for f in fields.values())
    if cls.__pydantic_post_init__ or aliased:
        return _BY_ALIAS
    return tuple(
        (name, None if f.default_factory is not None else f.default, f.default_factory)
        for name, f in fields.items()
        if not f.is_required()
    )


class ContractModel(BaseModel):
    """Base of every contract value: frozen, strict about unknown keys, compact in JSON.

    Subclasses list in ``__omit_defaults__`` the fields to leave out of JSON while they hold their default.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_enum_values=False,
        ser_json_inf_nan="strings",
    )

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_from(exc) from None

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: Any = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        """Validate ``obj`` into this model, raising ``InvalidRequest`` naming the field on failure."""
        try:
            with wire_input():
                return super().model_validate(
                    obj,
                    strict=strict,
                    extra=extra,
                    from_attributes=from_attributes,
                    context=context,
                    by_alias=by_alias,
                    by_name=by_name,
                )
        except ValidationError as exc:
            raise invalid_from(exc) from None

    @classmethod
    def model_validate_json(
        cls,
        json_data: str | bytes | bytearray,
        *,
        strict: bool | None = None,
        extra: Any = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        """Validate a JSON document into this model, raising ``InvalidRequest`` naming the field on failure."""
        try:
            with wire_input():
                return super().model_validate_json(
                    json_data, strict=strict, extra=extra, context=context, by_alias=by_alias, by_name=by_name
                )
        except ValidationError as exc:
            raise invalid_from(exc) from None

    @classmethod
    def coerce(cls, value: Any, field: str | None = None) -> Self:
        """Accept an instance, a JSON object (mapping) or a JSON document and return an instance.

        Args:
            value: The request as a model, a mapping or JSON text.
            field: The name to report when ``value`` is of the wrong shape altogether.

        Raises:
            InvalidRequest: ``value`` is malformed; the error names the field.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls.model_validate(dict(value))
        if isinstance(value, str | bytes | bytearray):
            text = value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else value
            if text.lstrip().startswith("{"):
                try:
                    return cls.model_validate_json(value)
                except InvalidRequest as err:  # malformed JSON names no field of its own: name the caller's
                    if err.field is None and field is not None:
                        raise InvalidRequest(err.reason, field=field) from err
                    raise
            shown = text if len(text) <= 40 else text[:40] + "…"
            raise InvalidRequest(f"expected a {cls.__name__} object or JSON text, got {shown!r}", field=field)
        raise InvalidRequest(f"expected a {cls.__name__} object, got {type(value).__name__}", field=field)

    @classmethod
    def trusted(cls, **values: Any) -> Self:
        """An instance from trusted, already valid field values: ``model_construct`` for fields given by name.

        Pydantic's ``model_construct`` looks up every field's aliases and default on each call (~8 µs for a
        ``Hit``); a pack builds ~90 hits. Here the defaults of the fields not given are taken from a per-class
        table built once (a default factory is still called per instance), and the fields set are the names
        given, as ``model_construct`` records them. A class whose fields have aliases, or that has a post-init
        hook, goes through ``model_construct`` itself.
        """
        plan = _TRUSTED.get(cls)
        if plan is None:
            plan = _TRUSTED[cls] = _trusted_plan(cls)
        if plan is _BY_ALIAS:
            return cast(Self, cls.model_construct(**values))
        given = set(values)
        for name, default, factory in plan:
            if name not in given:
                values[name] = factory() if factory is not None else default
        m = cls.__new__(cls)
        object.__setattr__(m, "__dict__", values)
        object.__setattr__(m, "__pydantic_fields_set__", given)
        object.__setattr__(m, "__pydantic_extra__", None)
        object.__setattr__(m, "__pydantic_private__", None)
        return m

    def to_json(self) -> str:
        """This value as compact JSON text."""
        return self.model_dump_json()

    def to_dict(self) -> dict[str, Any]:
        """This value as a JSON-compatible dict."""
        return self.model_dump(mode="json")

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        omit = type(self).__omit_defaults__
        fields = type(self).model_fields
        out: dict[str, Any] = {}
        for key, value in data.items():
            if value is None:
                continue
            name = key
            if omit:
                # the serialised key may be an alias; find the field it came from
                if key not in fields:
                    name = next((n for n, f in fields.items() if f.alias == key), key)
                if name in omit:
                    field = fields[name]
                    # compared, never handed out: no deep copy of a plain default (``get_default`` makes one)
                    factory = field.default_factory is not None
                    default = field.get_default(call_default_factory=True) if factory else field.default
                    if getattr(self, name) == default:
                        continue
            out[key] = value
        return out
