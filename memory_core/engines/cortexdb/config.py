"""The engine settings the reference defines, checked (contract reference §5.1 ``EngineSettings``, §5.4); pure.

| setting | wire | what it does |
| --- | --- | --- |
| ``scope_root`` | both | the v3 layout below this root (``org:42``); none: the legacy ``app:tinymemory`` tree |
| ``tenant_root`` | TinyHumans | the v3 layout below the tenant's own root, which the backend pins: no root is sent |
| ``retired_scope_root`` | both, with a v3 root | an earlier root (``user:42``) read, forgotten, erased, never written |
| ``scope_owner`` | Direct, with ``scope_root`` | the actor (``user:42``) registered as the root owner before writing |
| ``observed_actor`` | Direct | attribute assistant turns to their agent and named actors on the wire |
| ``headers`` | both | fixed non-credential headers (``x-sdk-name``); the transport's own are refused |

Every refusal is a ``ConfigError`` whose message starts with the setting's name, and none echoes a header's
value (the reference: "no refusal echoes a value").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from memory_core.engines.cortexdb.layout import check_root
from memory_core.errors import ConfigError

__all__ = ["RESERVED_HEADERS", "Layout", "check_actor", "check_headers", "check_layout", "parse_flag"]

RESERVED_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "cookie", "host", "content-length", "idempotency-key", "x-cortex-actor"}
)
"""Headers the transport sets itself; ``headers`` may not name them (reference ``cortex/README.md``, Transport)."""
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_ACTOR = re.compile(r"[a-z][a-z0-9_]*:[A-Za-z0-9_.@-]{1,128}")
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class Layout:
    """Where an engine writes and what it reads.

    Attributes:
        root: The write root: None legacy, ``""`` the tenant's (hosted), else a v3 root.
        roots: Every root read: ``root``, then the retired one if any.
        owner: The actor registered as ``root``'s owner (Direct), or None.
        observed_actor: Attribution on (Direct).
    """

    root: str | None
    roots: tuple[str | None, ...]
    owner: str | None
    observed_actor: bool


def parse_flag(name: str, value: str) -> bool:
    """A boolean setting written as text (``1``/``true``/``yes``/``on`` or their opposites).

    Raises:
        ConfigError: anything else, naming ``name``.
    """
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ConfigError(f"{name} must be true or false, not {value[:20]!r}")


def check_actor(name: str, actor: str) -> str:
    """An actor id ``type:id`` (``user:42``), trimmed.

    Raises:
        ConfigError: anything else, naming ``name``.
    """
    value = actor.strip()
    if not _ACTOR.fullmatch(value):
        raise ConfigError(f"{name} {actor[:40]!r} is not an actor id type:id (e.g. user:42)")
    return value


def _root(name: str, value: str) -> str:
    try:
        return check_root(value)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def check_layout(
    *,
    hosted: bool,
    scope_root: str | None,
    tenant_root: bool,
    retired_scope_root: str | None,
    scope_owner: str | None,
    observed_actor: bool,
) -> Layout:
    """The layout those settings make, or the first refusal (rules: reference ``cortex-layout.md``).

    Raises:
        ConfigError: ``tenant_root`` on Direct or beside ``scope_root``; a malformed root; a retired root
            without a v3 root or equal to it; ``scope_owner`` on TinyHumans, without ``scope_root`` or malformed;
            ``observed_actor`` on TinyHumans.
    """
    root: str | None = None if scope_root is None else _root("scope_root", scope_root)
    if tenant_root:
        if not hosted:
            raise ConfigError("tenant_root is for the tinyhumans wire, whose backend pins it; Direct pins nothing")
        if root is not None:
            raise ConfigError("tenant_root and scope_root are two roots: configure one")
        root = ""
    retired = None if retired_scope_root is None else _root("retired_scope_root", retired_scope_root)
    if retired is not None:
        if root is None:
            raise ConfigError("retired_scope_root needs a v3 layout: set scope_root (or tenant_root on tinyhumans)")
        if retired == root or retired.startswith(f"{root}/") or (root and root.startswith(f"{retired}/")):
            raise ConfigError(f"retired_scope_root {retired!r} overlaps scope_root {root!r}")
    owner = None
    if scope_owner is not None:
        if hosted:
            raise ConfigError("scope_owner is for the cortexdb wire: the tinyhumans backend keeps its own tenancy")
        if root is None:
            raise ConfigError("scope_owner needs scope_root: the owner is registered for that root")
        owner = check_actor("scope_owner", scope_owner)
    if observed_actor and hosted:
        raise ConfigError("observed_actor is for the cortexdb wire only")
    roots = (root,) if retired is None else (root, retired)
    return Layout(root=root, roots=roots, owner=owner, observed_actor=observed_actor)


def check_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """Fixed headers, checked: a token name, not one the transport sets, a value without CR/LF.

    Raises:
        ConfigError: naming the header (never its value).
    """
    out: dict[str, str] = {}
    for name, value in (headers or {}).items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise ConfigError(f"headers: {str(name)[:40]!r} is not a header name")
        if name.lower() in RESERVED_HEADERS:
            raise ConfigError(f"headers: {name} is set by the transport itself and may not be configured")
        if not isinstance(value, str) or any(ch in value for ch in "\r\n\0"):
            raise ConfigError(f"headers: the value of {name} is not one line of text")
        out[name] = value
    return out
