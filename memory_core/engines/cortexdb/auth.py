"""Endpoints and bearer credentials (contract reference §5.1, §5.2).

A credential is static (a string from the settings) or a callable asked on **every attempt** (a host's session
token that refreshes). Either way the token is trimmed, and a blank one, one holding CR/LF or any byte a header
cannot carry, or a callable that fails, is ``Unauthorized`` before anything is sent. A credential never appears
in a ``repr``, a log line or an error message.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from memory_core.errors import ConfigError, Unauthorized

__all__ = ["BearerSource", "Credential", "Endpoint", "is_loopback", "parse_endpoint"]

BearerSource = Callable[[], str]
"""A callable answering the bearer token to send now."""


class Credential:
    """A bearer credential: a static token or a ``BearerSource``; its repr never shows the token.

    Args:
        value: The token, or a callable returning it on every attempt.

    Raises:
        ConfigError: a static token that is None or blank (the engine needs a key).
    """

    __slots__ = ("_source", "_static")

    def __init__(self, value: str | BearerSource | None) -> None:
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ConfigError("a CortexDB engine needs a credential, and none (or a blank one) was given")
        if isinstance(value, str):
            self._static: str | None = value
            self._source: BearerSource | None = None
        elif callable(value):
            self._static, self._source = None, value
        else:
            raise ConfigError(f"a credential is a string or a callable, not {type(value).__name__}")

    @property
    def dynamic(self) -> bool:
        """True for a callable asked on every attempt."""
        return self._source is not None

    def bearer(self) -> str:
        """The token to send now, trimmed.

        Raises:
            Unauthorized: the source failed, or the token is blank or holds CR/LF or a non-header byte.
        """
        if self._source is not None:
            try:
                raw = self._source()
            except Exception as exc:
                raise Unauthorized(f"the bearer source failed ({type(exc).__name__})") from None
        else:
            raw = self._static or ""
        if not isinstance(raw, str):
            raise Unauthorized("the bearer source answered no token")
        token = raw.strip()
        if not token:
            raise Unauthorized("the bearer token is blank")
        if any(ch in "\r\n" for ch in token):
            raise Unauthorized("the bearer token holds CR or LF")
        if any(not (0x20 <= ord(ch) < 0x7F) and ch != "\t" for ch in token):
            raise Unauthorized("the bearer token holds a byte a header cannot carry")
        return token

    def __repr__(self) -> str:
        return f"Credential({'dynamic' if self.dynamic else 'static'}, redacted)"

    __str__ = __repr__


def is_loopback(host: str) -> bool:
    """True for ``localhost``, ``127.0.0.0/8`` and ``::1`` (reference §5.1)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Endpoint:
    """Where the server is.

    Attributes:
        base_url: ``scheme://host[:port][/base]/`` with an http(s) scheme and a trailing slash.
        host: The host name.
        loopback: True when the host is a loopback address.
    """

    base_url: str
    host: str
    loopback: bool


def parse_endpoint(url: str, *, credentialed: bool = True) -> Endpoint:
    """Check an endpoint URL (``https://api-v1.cortexdb.ai``, ``http://127.0.0.1:3141``).

    Raises:
        ConfigError: the URL does not parse, its scheme is not http(s), it names no host, it carries a user,
            query or fragment, or it is a credentialed ``http://`` endpoint whose host is not loopback.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ConfigError("the CortexDB endpoint does not parse as a URL") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ConfigError(f"the CortexDB endpoint's scheme must be http or https, not {scheme or '(none)'!r}")
    host = parts.hostname or ""
    if not host:
        raise ConfigError("the CortexDB endpoint names no host")
    if parts.username is not None or parts.password is not None:
        raise ConfigError("the CortexDB endpoint must not carry credentials; set them in the settings")
    if parts.query or parts.fragment:
        raise ConfigError("the CortexDB endpoint takes no query or fragment here")
    loopback = is_loopback(host)
    if credentialed and scheme == "http" and not loopback:
        raise ConfigError(f"a credentialed http:// endpoint must be loopback, not {host!r}: use https")
    shown = f"[{host}]" if ":" in host else host
    netloc = f"{shown}:{port}" if port is not None else shown
    base = parts.path.rstrip("/")
    return Endpoint(base_url=f"{scheme}://{netloc}{base}/", host=host, loopback=loopback)
