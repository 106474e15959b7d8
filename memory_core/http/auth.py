"""Bearer tokens, each bound to the scope it may use: one layout root, and optionally a set of agents.

A token file is JSON: a list of ``{"token": …, "root": "team:acme", "agents": ["assistant"], "name": "acme"}``
(``agents`` left out or null: any agent under that root; ``name``: a label for logs, default ``token-<i>``).
Only each token's SHA-256 digest is kept in memory; a presented token is hashed and compared with every digest in
constant time (``hmac.compare_digest``, no early exit), so neither its value nor its position leaks through
timing. Tokens are never logged or echoed: errors name the entry by index or ``name``.

A request may name a ``root`` and an ``agent``; a root other than the token's, or an agent the token is not
bound to, is ``OutOfScope`` (403) before anything is read or written, so a token holder can never name another
tenant's root.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_core.errors import ConfigError, InvalidRequest, MemoryCoreError, Unauthorized
from memory_core.http.errors import OutOfScope
from memory_core.lifecycle.layout import MemoryLayout, check_agent_id
from memory_core.namespace import Namespace

__all__ = [
    "DEFAULT_AGENT",
    "MAX_AGENT_CHARS",
    "MIN_TOKEN_CHARS",
    "TOKEN_PATTERN",
    "TokenScope",
    "TokenTable",
    "is_loopback_host",
]

MIN_TOKEN_CHARS = 16
"""The shortest token accepted in a token file (a guessable token is no credential)."""
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""A token's characters: RFC 6750 §2.1 ``b64token``. Anything else (spaces, non-ASCII, control characters) could
not travel in an ``Authorization`` header byte for byte, so a token file holding it is refused at start."""
MAX_AGENT_CHARS = 128
"""The longest ``agent`` a request may name (a segment id's length, reference §1.7)."""
DEFAULT_AGENT = "assistant"
"""The agent a request naming none acts as (a token bound to agents: the alphabetically first of them)."""


_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})


def is_loopback_host(header: str | None) -> bool:
    """True when a ``Host`` header names a loopback address (``localhost``, ``127.0.0.1``, ``[::1]``, any port); pure.

    A server without a token answers only such requests: a web page that rebinds its own domain name to 127.0.0.1
    (DNS rebinding) sends its domain as ``Host``, so it is refused though it reached the loopback socket.
    """
    if header is None:
        return False
    host = header.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        name, port = name + "]", rest.removeprefix(":")
        if rest and not rest.startswith(":"):
            return False
    else:
        name, _, port = host.partition(":")
    return name in _LOOPBACK_NAMES and (port == "" or port.isdigit())


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True)
class TokenScope:
    """What one token may touch.

    Attributes:
        name: A label for logs and metrics (never the token).
        layout: The layout of the token's root.
        agents: The agent ids the token may act as, or None for any.
    """

    name: str
    layout: MemoryLayout
    agents: frozenset[str] | None = None

    def layout_for(self, root: str | None) -> MemoryLayout:
        """The token's layout, checked against the ``root`` a request named (None: the token's).

        Raises:
            InvalidRequest: ``field="root"``: a malformed namespace.
            OutOfScope: a root other than the token's.
        """
        if root is None:
            return self.layout
        try:
            named = Namespace.parse(root)
        except InvalidRequest as exc:
            raise InvalidRequest(exc.reason, field="root") from None
        if named != self.layout.root:
            raise OutOfScope("this token is not bound to that root")
        return self.layout

    def agent_for(self, agent: str | None) -> str:
        """The agent a request acts as: ``agent``, else the default; checked against the token's agents.

        Raises:
            InvalidRequest: ``field="agent"``: a blank id, one over ``MAX_AGENT_CHARS``, or control characters.
            OutOfScope: an agent the token is not bound to.
        """
        if agent is None:
            return min(self.agents) if self.agents else DEFAULT_AGENT
        chosen = check_agent_id(agent, field="agent")
        if len(chosen) > MAX_AGENT_CHARS or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in chosen):
            raise InvalidRequest(f"at most {MAX_AGENT_CHARS} characters, no control ones", field="agent")
        if self.agents is not None and chosen not in self.agents:
            raise OutOfScope("this token is not bound to that agent")
        return chosen


class TokenTable:
    """The tokens a server accepts (digests only) and their scopes.

    Args:
        entries: ``(token, scope)`` pairs; at least one, each token at least ``MIN_TOKEN_CHARS`` long, no token
            twice.

    Raises:
        ConfigError: no entry, a short or duplicated token, or one with characters outside ``TOKEN_PATTERN``
            (named by its scope's ``name``, never its value).
    """

    def __init__(self, entries: Sequence[tuple[str, TokenScope]]) -> None:
        if not entries:
            raise ConfigError("no token: give at least one")
        table: list[tuple[bytes, TokenScope]] = []
        for token, scope in entries:
            if not isinstance(token, str) or len(token.strip()) < MIN_TOKEN_CHARS or token != token.strip():
                raise ConfigError(
                    f"token {scope.name}: a token is at least {MIN_TOKEN_CHARS} characters, no surrounding spaces"
                )
            if TOKEN_PATTERN.fullmatch(token) is None:
                raise ConfigError(f"token {scope.name}: only A-Z a-z 0-9 - . _ ~ + / (then =) may be in a token")
            digest = _digest(token)
            if any(hmac.compare_digest(digest, seen) for seen, _ in table):
                raise ConfigError(f"token {scope.name}: the same token is listed twice")
            table.append((digest, scope))
        self._table = tuple(table)
        self.insecure = False

    def __repr__(self) -> str:
        return f"TokenTable({len(self._table)} tokens)"

    @classmethod
    def insecure_local(cls, layout: MemoryLayout) -> TokenTable:
        """A table accepting every request (no header needed) as the whole of ``layout``'s root, any agent.

        Only for a server bound to loopback (``serve --insecure-local``); ``authenticate`` also wants a loopback
        ``Host`` header.
        """
        table = cls.__new__(cls)
        table._table = ((b"", TokenScope("insecure-local", layout)),)
        table.insecure = True
        return table

    @classmethod
    def from_json(cls, data: Any, *, origin: str = "tokens") -> TokenTable:
        """Read the token file's JSON value (see the module docstring).

        Raises:
            ConfigError: a malformed entry, named by index (``tokens[2].root: …``); never shows a token.
        """
        if not isinstance(data, list):
            raise ConfigError(f"{origin}: expected a JSON list of {{token, root, agents?, name?}} objects")
        entries: list[tuple[str, TokenScope]] = []
        for i, raw in enumerate(data):
            where = f"{origin}[{i}]"
            if not isinstance(raw, dict):
                raise ConfigError(f"{where}: expected an object")
            unknown = set(raw) - {"token", "root", "agents", "name"}
            if unknown:
                raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
            name = raw.get("name", f"token-{i}")
            if not isinstance(name, str) or not name.strip():
                raise ConfigError(f"{where}.name: expected a non-blank string")
            try:
                layout = MemoryLayout(raw.get("root", ""))
            except MemoryCoreError as exc:
                raise ConfigError(f"{where}.root: {exc.message}") from None
            agents = raw.get("agents")
            if agents is not None:
                if not isinstance(agents, list) or not agents:
                    raise ConfigError(f"{where}.agents: expected a non-empty list of agent ids, or null for any")
                try:
                    agents = frozenset(check_agent_id(a, field=f"{where}.agents") for a in agents)
                except InvalidRequest as exc:
                    raise ConfigError(exc.message) from None
            token = raw.get("token")
            if not isinstance(token, str):
                raise ConfigError(f"{where}.token: expected a string")
            entries.append((token, TokenScope(name.strip(), layout, agents)))
        return cls(entries)

    @classmethod
    def from_file(cls, path: Path) -> TokenTable:
        """Read a token file.

        Raises:
            ConfigError: the file cannot be read, is not JSON, or holds a malformed entry.
        """
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"token file {path} is not JSON (line {exc.lineno})") from None
        return cls.from_json(data, origin=path.name)

    def authenticate(self, header: str | None, host: str | None = None) -> TokenScope:
        """The scope of the token an ``Authorization: Bearer <token>`` header carries.

        Every digest is compared, whatever matched first, so timing does not say how far the search went. An
        ``insecure_local`` table needs no header but a loopback ``Host`` (``is_loopback_host``).

        Args:
            header: The ``Authorization`` header, if any.
            host: The ``Host`` header, if any.

        Raises:
            Unauthorized: no header, not a bearer header, or a token the table does not hold.
            OutOfScope: an ``insecure_local`` table asked under a ``Host`` that is not loopback.
        """
        if self.insecure:
            if not is_loopback_host(host):
                raise OutOfScope("a server without tokens answers requests to a loopback Host only")
            return self._table[0][1]
        if header is None:
            raise Unauthorized("no bearer token: send Authorization: Bearer <token>")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("expected Authorization: Bearer <token>")
        presented = _digest(token.strip())  # a header Starlette decoded as Latin-1: non-ASCII never matches
        found: TokenScope | None = None
        for digest, scope in self._table:
            if hmac.compare_digest(presented, digest) and found is None:
                found = scope
        if found is None:
            raise Unauthorized("the token was rejected")
        return found
