"""Settings: the one place that reads the environment (prefix ``MEMORY_CORE_``, or a ``.env`` file).

Defaults give the embedded setup: the SQLite engine under ``./var/`` and, with no broker URL, a server-less
kombu transport under ``./var/`` (see the README for what that transport cannot do).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from memory_core.errors import ConfigError
from memory_core.limits import ASSISTANT_TEXT_CAP, MAX_TEXT_CHARS, USER_TEXT_CAP

__all__ = [
    "BROKER_SCHEMES",
    "MAX_RETENTION_DAYS",
    "RESULT_SCHEMES",
    "Settings",
    "check_url",
    "get_settings",
    "parse_engine_plugins",
]

BROKER_SCHEMES = ("redis", "rediss", "filesystem")
"""Broker URL schemes the job flow runs on (``workers.config``: Redis, or the server-less transport)."""
RESULT_SCHEMES = ("redis", "rediss", "file")
"""Result backend URL schemes (``workers.config.result_backend_url`` picks one of them when unset)."""
MAX_RETENTION_DAYS = 36_500
"""Longest ``retention_max_age_days``: 100 years (memory-core's bound; ``now - timedelta(days=…)`` must stay a date)."""
_ENCODE_HINT = "a password holding / # ? or % must be URL-encoded (%2F %23 %3F %25)"


def _check_redis_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.fragment or "#" in url:
        raise ValueError(f"'#' ends the URL early: {_ENCODE_HINT}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"the port is not a number in 1-65535 ({_ENCODE_HINT})") from None
    if not parts.hostname:
        raise ValueError(f"no host: expected redis://[:password@]host[:port][/db] ({_ENCODE_HINT})")
    if port == 0:
        raise ValueError("the port is not a number in 1-65535")
    db = parts.path.lstrip("/")
    if db and not db.isdigit():
        raise ValueError(f"the database {db!r} is not a number: expected redis://host:port/0 ({_ENCODE_HINT})")
    _check_redis_query(parts.scheme.lower(), parts.query)


_TLS_QUERY: dict[str, frozenset[str] | None] = {
    "ssl_cert_reqs": frozenset({"none", "optional", "required"}),
    "ssl_check_hostname": frozenset({"true", "false"}),
    "ssl_ca_certs": None,  # a path: any value but blank
    "ssl_certfile": None,
    "ssl_keyfile": None,
}
"""The query options a Redis URL may carry (``rediss://`` only), with the values they take (None: any non-blank).

The URL reaches kombu's ``Connection`` (kombu 5.7 ``utils/url.py`` ``parse_url``: every query option becomes a
keyword argument, ``ssl_*`` ones folded into ``ssl``), Celery's Redis result backend and redis-py's ``from_url``
(6.4 ``connection.py``): only these options are taken by all three, and only these spellings of their values
(redis-py's ``ssl_cert_reqs`` knows ``none``/``optional``/``required``; kombu's also ``CERT_*``).
"""


def _check_redis_query(scheme: str, query: str) -> None:
    """Refuse a query option of a Redis URL that a client would choke on or ignore (``_TLS_QUERY``).

    Raises:
        ValueError: naming the option (never its value: ``?password=`` is a secret).
    """
    seen: set[str] = set()
    for pair in query.split("&") if query else []:
        name, _, value = pair.partition("=")
        name = unquote(name)
        if name not in _TLS_QUERY:
            if name.lower() in {"password", "username", "user"}:
                raise ValueError(
                    f"the query option {name!r} is not taken by the broker's clients: put the credentials in the "
                    f"URL, redis://[user]:password@host[:port][/db] ({_ENCODE_HINT})"
                )
            raise ValueError(
                f"the query option {name!r} is not one the broker's clients take; a Redis URL takes "
                f"{', '.join(_TLS_QUERY)} (rediss:// only)"
            )
        if scheme != "rediss":
            raise ValueError(f"the query option {name!r} is a TLS option: it needs a rediss:// URL")
        if name in seen:
            raise ValueError(f"the query option {name!r} is given twice")
        seen.add(name)
        allowed, value = _TLS_QUERY[name], unquote(value)
        if not value.strip() or (allowed is not None and value not in allowed):
            expected = " or ".join(sorted(allowed)) if allowed is not None else "a path"
            raise ValueError(f"the query option {name}={value!r} is not valid: expected {expected}")


def check_url(url: str | None, schemes: tuple[str, ...]) -> str | None:
    """``url`` if the job flow can use it, None when blank; the rule behind ``broker_url``/``result_backend``.

    ``redis://`` and ``rediss://`` URLs must name a host, and may give a numeric port (1-65535) and a numeric
    database (``redis://[:password@]host[:port][/db]``, redis-py's URL format); a password holding ``/ # ?``
    must be URL-encoded, or it splits the URL. Their query takes only the TLS options every client of the job
    flow takes (``rediss://`` only, ``_TLS_QUERY``): ``?password=`` and the rest are refused, before a job is
    queued, instead of failing inside a client. ``filesystem://`` (the server-less broker) takes no host or path:
    its folders live under ``var_dir``. ``file:///abs/path`` is a result folder.

    Args:
        url: The configured URL, or None.
        schemes: The schemes accepted (``BROKER_SCHEMES`` or ``RESULT_SCHEMES``).

    Returns:
        The URL (``filesystem://`` normalised to lower case), or None for a blank value.

    Raises:
        ValueError: naming what is wrong (pydantic reports it under the setting's variable).
    """
    if url is None or not url.strip():
        return None
    url = url.strip()
    scheme = urlsplit(url).scheme.lower()
    if scheme not in schemes:
        raise ValueError(f"scheme {scheme or '(none)'!r} is not one of {', '.join(schemes)}")
    if scheme in {"redis", "rediss"}:
        _check_redis_url(url)
    elif scheme == "filesystem":
        if url.lower() != "filesystem://":
            raise ValueError("the server-less broker is plain filesystem:// (its folders live under var_dir)")
        return "filesystem://"
    elif scheme == "file" and not urlsplit(url).path.startswith("/"):
        raise ValueError("expected file:///absolute/folder")
    return url


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
"""A URL scheme (RFC 3986 §3.1): ``urlsplit`` finds no other in an engine URL, so no other could ever be opened."""
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
"""``module:callable``: a dotted module path, a colon, a dotted attribute path."""


def parse_engine_plugins(spec: str) -> dict[str, str]:
    """``"probe=tests.probe:open_probe, x=pkg.mod:make"`` → ``{"probe": "tests.probe:open_probe", …}``; pure.

    The rule behind ``engine_plugins``: entries separated by commas (blank ones ignored), each
    ``scheme=module:callable``; the scheme is lower-cased, as ``urlsplit`` reads a URL's.

    Raises:
        ValueError: naming the first malformed entry (pydantic reports it under ``MEMORY_CORE_ENGINE_PLUGINS``).
    """
    out: dict[str, str] = {}
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        scheme, sep, target = (part.strip() for part in entry.partition("="))
        if not sep or not _SCHEME.fullmatch(scheme) or not _TARGET.fullmatch(target):
            raise ValueError(f"entry {entry!r} is not scheme=module:callable (e.g. mine=mypkg.engines:open_mine)")
        out[scheme.lower()] = target
    return out


class Settings(BaseSettings):
    """memory-core configuration; every field maps to ``MEMORY_CORE_<FIELD>``.

    Attributes:
        engine: Engine URL (``sqlite:///./var/memory.db``, ``reference://``).
        var_dir: Folder for local state (SQLite file, outbox, server-less broker).
        data_dir: Folder holding the sample data the demo and benchmarks read (``locomo/locomo_dev.json``,
            ``docs/peps/``); the team's shared checkout by default.
        broker_url: Celery broker URL (``redis://[:password@]host[:port][/db]``, ``rediss://…``); None (or
            blank) uses the server-less transport under ``var_dir``. Checked by ``check_url``: a malformed URL is a
            ``ConfigError`` naming ``MEMORY_CORE_BROKER_URL``; a password holding ``/ # ?`` must be URL-encoded.
        result_backend: Celery result backend URL (``redis://``, ``rediss://``, ``file:///folder``); None picks one
            to match the broker.
        queue_beliefs / queue_ingest / queue_maintenance: Celery queue names.
        task_time_limit_s / task_soft_time_limit_s: hard and soft task limits, seconds.
        visibility_timeout_s: Redis redelivery timeout, seconds; must exceed the hard limit.
        max_retries / retry_backoff_s / retry_backoff_max_s: retry policy for transient errors.
        build_beliefs_every: post_turn returns a BuildBeliefs job every N turns (0 = never).
        build_due_interval_s: how often beat enqueues builds for scopes written since their last build.
        budget_tokens: default pack budget, tokens of 4 characters.
        user_text_cap / assistant_text_cap: characters of a user / assistant turn memory logs (4,000 / 8,000,
            seed 004); the rest is replaced by a truncation marker (``lifecycle.caps``), and pre_turn ranks for the
            capped text, so its cost is bounded whatever the text's size.
        flower_user / flower_password / flower_port: Flower basic auth and port.
        layout_root: The ``MemoryLayout`` root workers place ``IngestBrain`` documents under (``root``, ``team:acme``).
        engine_plugins: Extra engine URL schemes, ``scheme=module:callable`` separated by commas; the callable
            takes the URL and returns a ``MemoryEngine``. ``engines.open_engine`` registers them before every open,
            so every command and library caller honours them; a malformed entry is a ``ConfigError`` naming
            ``MEMORY_CORE_ENGINE_PLUGINS`` (``parse_engine_plugins``).
        redis_prefix: Prefix of memory-core's own Redis keys (scope locks, pending marks, attempts, dead letters).
        publish_timeout_s: Bound on one ``JobQueue.submit`` publish, seconds (the producer's Redis connect and
            read timeouts); past it the job goes to the outbox (celery#4556: a publish can hang otherwise).
        redis_socket_timeout_s: Connect/read timeout of the workers' Redis sockets, seconds (redis-py#775).
        redis_health_check_s: Seconds between Redis connection health checks (kombu's default is 25).
        redelivery_sweep_s: How often, in seconds, workers scan Redis for messages unacked past the visibility
            timeout (kombu's ``unacked_restore_interval`` × ``unacked_restore_throttle``; kombu's default ~100).
        result_expires_s: Seconds a job's stored result is kept (Celery ``result_expires``; 0 is refused).
        lock_ttl_s: Lease of a scope's build lock, seconds; a running build extends it every third of it.
        build_min_interval_s: Least time between the starts of two builds of one scope, seconds (0: no minimum).
            Triggers that arrive sooner fold into one follow-up build delivered when the interval ends, so a burst
            of triggers shorter than this gives at most two builds however fast a build is (issue 5 §4).
        outbox_drain_interval_s: How often beat drains the local outbox, seconds.
        retention_interval_s / retention_max_age_days / retention_max_turns / retention_archive: the
            ``memory.retention`` job (``lifecycle.retention``, seed 004): how often beat runs it (daily), the age
            past which logged turns go (90 days), the newest turns kept per layout root (5,000), and whether an
            engine declaring tiers moves them to ``archive`` instead of forgetting them. Facts and beliefs are
            never pruned by it. The age is at most ``MAX_RETENTION_DAYS`` (a finite number of days: a larger one
            would overflow the cut-off date).
        log_compact_interval_s / log_keep_records: the ``memory.compact_log`` job (``docs/log-model.md``,
            "Checkpoints"): how often beat runs it (daily), and how many of the newest log records it leaves
            uncompacted (100,000): ``as_of`` and ``rollback`` reach back at least that far.
        dead_letter_max: Dead letters kept; the oldest are dropped past it.
        scrub: Scrub every write of the engines hosts, workers and commands open (``engines.open_host_engine``
            wraps them in ``safety.ScrubbingEngine``); ``MEMORY_CORE_SCRUB=off`` stores secrets verbatim, and every
            open says so on stderr.
        embedder: The ranking model (``retrieval.embedder``): ``minilm`` (all-MiniLM-L6-v2, int8 ONNX) or
            ``hash`` (the reference vector; no model).
        embedder_model: A local ONNX file to run instead of the pinned MiniLM (same inputs and output).
        embed_batch: Items one embedding job encodes and stores per transaction.
        blas_threads: Threads of the process's BLAS pool, set when the first SQLite engine opens (its ranking's
            products are small; ``engines.sqlite.blas``); 0 leaves the pool alone.
        read_pool: Whether a pack given no executor reads every section on its own on the shared read pool
            (``recall.pool``), rather than the fetch sections in one read on the calling thread when the engine
            can (``recall.gather``; ``docs/live-turn.md``, "the read pool").
        cortexdb_key / tinyhumans_token: The bearer credentials of the ``cortexdb+…`` and ``tinyhumans+…``
            engines (never shown in a repr, log or error).
        cortexdb_headers: Fixed non-credential headers (a JSON object, e.g. ``{"x-sdk-name": "my-host"}``) both
            CortexDB wires send on every request; the transport's own headers are refused.
        pg_pool_min_size / pg_pool_max_size: Connections the PostgreSQL engine's one pool per process keeps open
            at least / at most (a URL's ``pool_min_size`` / ``pool_max_size`` override them).
        pg_pool_timeout_s: Longest a PostgreSQL call waits for a pooled connection, seconds; past it the call
            fails ``EngineUnavailable``.
        pg_connect_timeout_s: libpq's ``connect_timeout`` for each new PostgreSQL connection, seconds.
        pg_statement_timeout_ms: PostgreSQL's ``statement_timeout`` on every pooled connection, ms (0: none).
    """

    model_config = SettingsConfigDict(env_prefix="MEMORY_CORE_", env_file=".env", extra="ignore")

    engine: str = "sqlite:///./var/memory.db"
    var_dir: Path = Path("./var")
    broker_url: str | None = None
    result_backend: str | None = None

    queue_beliefs: str = "beliefs"
    queue_ingest: str = "ingest"
    queue_maintenance: str = "maintenance"

    task_time_limit_s: int = Field(default=600, gt=0)
    task_soft_time_limit_s: int = Field(default=540, gt=0)
    visibility_timeout_s: int = Field(default=3600, gt=0)
    max_retries: int = Field(default=5, ge=0)
    retry_backoff_s: float = Field(default=2.0, gt=0)
    retry_backoff_max_s: float = Field(default=300.0, gt=0)

    build_beliefs_every: int = Field(default=10, ge=0, le=2**32 - 1)  # a u32 (RecallPolicy.build_beliefs_every)
    build_due_interval_s: float = Field(default=300.0, gt=0)
    budget_tokens: int = Field(default=1200, gt=0, le=2**63 - 1)  # a usize (RecallPolicy.budget_tokens)
    user_text_cap: int = Field(default=USER_TEXT_CAP, gt=0, le=MAX_TEXT_CHARS)
    assistant_text_cap: int = Field(default=ASSISTANT_TEXT_CAP, gt=0, le=MAX_TEXT_CHARS)

    flower_user: str = "admin"
    flower_password: SecretStr = SecretStr("change-me")
    flower_port: int = Field(default=5555, gt=0, lt=65536)

    layout_root: str = "root"
    data_dir: Path = Path("../shared/data")
    engine_plugins: str = ""
    redis_prefix: str = Field(default="memory-core", min_length=1)
    publish_timeout_s: float = Field(default=2.0, gt=0)
    redis_socket_timeout_s: float = Field(default=10.0, gt=0)
    redis_health_check_s: int = Field(default=25, ge=0)
    redelivery_sweep_s: int = Field(default=100, gt=0)
    result_expires_s: int = Field(default=86400, gt=0)
    lock_ttl_s: int = Field(default=60, gt=0)
    build_min_interval_s: float = Field(default=1.0, ge=0)
    outbox_drain_interval_s: float = Field(default=60.0, gt=0)
    dead_letter_max: int = Field(default=10000, gt=0)
    scrub: bool = True
    embedder: Literal["minilm", "hash"] = "minilm"
    embedder_model: str | None = None
    embed_batch: int = Field(default=256, gt=0, le=10_000)
    blas_threads: int = Field(default=1, ge=0, le=1024)
    read_pool: bool = False
    cortexdb_key: SecretStr | None = None
    tinyhumans_token: SecretStr | None = None
    cortexdb_headers: dict[str, str] = Field(default_factory=dict)
    pg_pool_min_size: int = Field(default=1, ge=0)
    pg_pool_max_size: int = Field(default=8, gt=0)
    pg_pool_timeout_s: float = Field(default=10.0, gt=0)
    pg_connect_timeout_s: int = Field(default=5, gt=0)
    pg_statement_timeout_ms: int = Field(default=30_000, ge=0)
    retention_interval_s: float = Field(default=86_400.0, gt=0)
    retention_max_age_days: float = Field(default=90.0, gt=0, le=MAX_RETENTION_DAYS, allow_inf_nan=False)
    retention_max_turns: int = Field(default=5_000, gt=0)
    retention_archive: bool = False
    log_compact_interval_s: float = Field(default=86_400.0, gt=0)
    log_keep_records: int = Field(default=100_000, gt=0)

    @field_validator("engine_plugins")
    @classmethod
    def _engine_plugins(cls, value: str) -> str:
        parse_engine_plugins(value)
        return value

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, value: str | None) -> str | None:
        return check_url(value, BROKER_SCHEMES)

    @field_validator("result_backend")
    @classmethod
    def _result_backend(cls, value: str | None) -> str | None:
        return check_url(value, RESULT_SCHEMES)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once.

    Raises:
        ConfigError: a ``MEMORY_CORE_`` variable (or ``.env`` entry) that does not parse; the message names it.
    """
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        name = "_".join(str(p) for p in first.get("loc", ())).upper() or "SETTINGS"
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        raise ConfigError(f"MEMORY_CORE_{name}: {message}") from None
