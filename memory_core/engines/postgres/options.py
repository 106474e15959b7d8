"""The PostgreSQL engine URL: parsing, checking and masking (pure: strings in, values out).

``postgresql://user:password@host:port/database?option=value`` (``postgres://`` is the same). The database is
required. Options:

| option | meaning | default |
| --- | --- | --- |
| ``pool_min_size``, ``pool_max_size`` | connections the process's pool keeps at least / at most | settings |
| ``pool_timeout_s`` | longest a call waits for a pooled connection, seconds | settings |
| ``connect_timeout`` | libpq's connect timeout, seconds | settings |
| ``statement_timeout_ms`` | PostgreSQL ``statement_timeout`` on every connection, ms (0: none) | settings |
| ``host`` (a socket folder), ``sslmode``, ``sslrootcert``, ``sslcert``, ``sslkey`` | libpq's | |
| ``application_name``, ``target_session_attrs`` | libpq's | |

Any other option is refused, naming it (a typo must not be ignored silently). The password is never shown:
``masked`` replaces it with ``***`` and ``mask`` scrubs it from any message (libpq echoes parts of a conninfo).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from memory_core.engines import mask_url
from memory_core.errors import ConfigError
from memory_core.settings import get_settings

__all__ = ["SCHEMES", "SETTING", "PgOptions", "parse_url"]

SCHEMES: Final = ("postgresql", "postgres")
DEFAULT_PORT: Final = 5432
"""libpq's default port (PostgreSQL docs §34.1.2)."""
SETTING: Final = "engine URL (--engine / MEMORY_CORE_ENGINE)"
"""How errors name the setting at fault."""
_LIBPQ: Final = frozenset(
    {
        "host",
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "application_name",
        "target_session_attrs",
        "connect_timeout",
    }
)
_OURS: Final = frozenset({"pool_min_size", "pool_max_size", "pool_timeout_s", "statement_timeout_ms"})


@dataclass(frozen=True)
class PgOptions:
    """A checked PostgreSQL engine URL.

    Attributes:
        conninfo: The libpq URI (password included: never print it; print ``masked``).
        masked: The URL with its password replaced by ``***``.
        password: The password ('' for none), so messages can be scrubbed of it.
        database: The database name.
        pool_min_size / pool_max_size: Pool bounds.
        pool_timeout_s: Wait for a pooled connection, seconds.
        connect_timeout_s: libpq connect timeout, seconds.
        statement_timeout_ms: ``statement_timeout``, ms (0: none).
        identity: Which database this is, normalised and without the password: ``user@host:port/database``
            and the libpq options sorted (``postgres://`` and ``postgresql://``, a default port and option order
            do not matter). Keys a process's pool (``driver``) and a worker's engine key.
    """

    conninfo: str
    masked: str
    password: str
    database: str
    pool_min_size: int
    pool_max_size: int
    pool_timeout_s: float
    connect_timeout_s: int
    statement_timeout_ms: int
    identity: str = ""

    def mask(self, text: str) -> str:
        """``text`` with the password (plain and URL-encoded) replaced by ``***``."""
        if not self.password:
            return text
        for secret in {self.password, quote(self.password, safe="")}:
            text = text.replace(secret, "***")
        return text


def _number(name: str, raw: str, masked: str, *, low: float, integer: bool) -> float:
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise ConfigError(f"{SETTING} {masked}: option {name}={raw!r} is not a number") from None
    if value < low:
        raise ConfigError(f"{SETTING} {masked}: option {name}={raw!r} must be at least {low:g}")
    return value


def parse_url(url: str) -> PgOptions:
    """Check ``url`` and turn it into ``PgOptions`` (defaults from settings).

    Raises:
        ConfigError: another scheme, a malformed URL or port, no database, an unknown option, a bad option value,
            or a pool whose minimum exceeds its maximum; each message names the setting and shows the URL masked.
    """
    masked = mask_url(url)
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(f"{SETTING} {masked}: malformed URL ({exc})") from None
    if parts.scheme.lower() not in SCHEMES:
        raise ConfigError(f"{SETTING} {masked}: expected postgresql://user:password@host:port/database")
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise ConfigError(
            f"{SETTING} {masked}: names no database (expected postgresql://user:password@host:port/database)"
        )
    settings = get_settings()
    values: dict[str, float] = {
        "pool_min_size": settings.pg_pool_min_size,
        "pool_max_size": settings.pg_pool_max_size,
        "pool_timeout_s": settings.pg_pool_timeout_s,
        "connect_timeout": settings.pg_connect_timeout_s,
        "statement_timeout_ms": settings.pg_statement_timeout_ms,
    }
    libpq: list[tuple[str, str]] = []
    for name, raw in parse_qsl(parts.query, keep_blank_values=True):
        if name in _OURS or name == "connect_timeout":
            integer = name != "pool_timeout_s"
            low = 1 if name in {"pool_max_size", "connect_timeout"} else (0.001 if not integer else 0)
            values[name] = _number(name, raw, masked, low=low, integer=integer)
        elif name in _LIBPQ:
            libpq.append((name, raw))
        else:
            known = ", ".join(sorted(_OURS | _LIBPQ))
            raise ConfigError(f"{SETTING} {masked}: unknown option {name!r} (known: {known})")
    if values["pool_min_size"] > values["pool_max_size"]:
        raise ConfigError(f"{SETTING} {masked}: pool_min_size exceeds pool_max_size")
    libpq.append(("connect_timeout", str(int(values["connect_timeout"]))))
    conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(libpq), ""))
    user = quote(unquote(parts.username or ""), safe="")
    host = quote((parts.hostname or "").lower(), safe="")
    identity = f"postgresql://{user}@{host}:{parts.port or DEFAULT_PORT}/{quote(database, safe='')}"
    identity += "?" + urlencode(sorted(libpq)) if libpq else ""
    return PgOptions(
        conninfo=conninfo,
        masked=masked,
        password=unquote(parts.password or ""),
        database=database,
        pool_min_size=int(values["pool_min_size"]),
        pool_max_size=int(values["pool_max_size"]),
        pool_timeout_s=float(values["pool_timeout_s"]),
        connect_timeout_s=int(values["connect_timeout"]),
        statement_timeout_ms=int(values["statement_timeout_ms"]),
        identity=identity,
    )
