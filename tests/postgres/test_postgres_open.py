"""Opening the PostgreSQL engine: bad URLs, bad servers, newer schemas, concurrent migrations, the pool.

Every refusal is a clear error naming the setting, with the password masked; the CLI exits 2 with it.
"""

from __future__ import annotations

import multiprocessing
import socket
import threading
from collections.abc import Iterator

import psycopg
import psycopg.errors
import pytest
from pgkit import ADMIN_URL
from typer.testing import CliRunner

from memory_core import Document, ListRequest, MemoryMeta
from memory_core.cli import load_commands
from memory_core.engines import mask_url, open_engine
from memory_core.engines.postgres.driver import classify
from memory_core.engines.postgres.options import parse_url
from memory_core.engines.postgres.schema import SCHEMA, SCHEMA_VERSION
from memory_core.errors import ConfigError, Conflict, EngineError, EngineUnavailable

pytestmark = pytest.mark.postgres

runner = CliRunner()
app = load_commands()
SECRET = "s3cret-Pw"


def _with_password(url: str, password: str = SECRET) -> str:
    scheme, rest = url.split("://", 1)
    user, _, host = rest.partition("@")
    return f"{scheme}://{user.partition(':')[0]}:{password}@{host}"


# pure: the URL ------------------------------------------------------------------------------------------
def test_a_url_without_a_database_is_refused_naming_the_setting_and_masking_the_password() -> None:
    with pytest.raises(ConfigError) as err:
        parse_url(f"postgresql://bob:{SECRET}@db.example:5432")
    assert "names no database" in str(err.value) and "MEMORY_CORE_ENGINE" in str(err.value)
    assert SECRET not in str(err.value) and "bob:***@db.example" in str(err.value)


def test_an_unknown_option_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as err:
        parse_url(f"postgresql://bob:{SECRET}@db.example/mem?pool_max=3")
    assert "unknown option 'pool_max'" in str(err.value) and SECRET not in str(err.value)


@pytest.mark.parametrize(
    "query",
    ["pool_max_size=0", "pool_min_size=5&pool_max_size=2", "statement_timeout_ms=soon", "connect_timeout=-1"],
)
def test_bad_option_values_are_refused(query: str) -> None:
    with pytest.raises(ConfigError):
        parse_url(f"postgresql://bob@db.example/mem?{query}")


def test_options_and_settings_reach_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    from memory_core.settings import get_settings

    monkeypatch.setenv("MEMORY_CORE_PG_STATEMENT_TIMEOUT_MS", "1234")
    get_settings.cache_clear()
    opts = parse_url("postgres://bob@db.example:6000/mem?pool_max_size=3&sslmode=disable")
    assert (opts.pool_max_size, opts.statement_timeout_ms, opts.database) == (3, 1234, "mem")
    assert "sslmode=disable" in opts.conninfo and "pool_max_size" not in opts.conninfo


def test_mask_url_hides_only_the_password() -> None:
    assert mask_url(f"postgresql://bob:{SECRET}@h:5432/db?x=1") == "postgresql://bob:***@h:5432/db?x=1"
    assert mask_url("postgresql://bob@h/db") == "postgresql://bob@h/db"


def test_driver_errors_map_to_the_error_tree_with_the_password_scrubbed() -> None:
    opts = parse_url(f"postgresql://bob:{SECRET}@db.example/mem")
    rejected = classify(psycopg.errors.InvalidPassword(f"password authentication failed ({SECRET})"), opts)
    assert isinstance(rejected, ConfigError) and "password was rejected" in str(rejected)
    assert SECRET not in str(rejected)
    missing = classify(psycopg.errors.InvalidCatalogName('database "mem" does not exist'), opts)
    assert isinstance(missing, ConfigError) and "does not exist" in str(missing)
    down = classify(psycopg.OperationalError("connection refused"), opts)
    assert isinstance(down, EngineUnavailable) and down.retryable
    timeout = classify(psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), opts)
    assert isinstance(timeout, EngineUnavailable)
    other = classify(psycopg.errors.UndefinedTable("relation x does not exist"), opts)
    assert isinstance(other, EngineError)


# real servers -------------------------------------------------------------------------------------------
@pytest.fixture
def not_postgres() -> Iterator[int]:
    """A TCP server that answers like a web server, on a free port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def test_a_server_that_is_not_postgresql_is_a_config_error(not_postgres: int) -> None:
    with pytest.raises(ConfigError) as err:
        open_engine(f"postgresql://bob:{SECRET}@127.0.0.1:{not_postgres}/mem?sslmode=disable")
    assert "PostgreSQL's protocol" in str(err.value) and SECRET not in str(err.value)


def test_a_server_that_is_down_is_unavailable() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    with pytest.raises(EngineUnavailable) as err:
        open_engine(f"postgresql://bob:{SECRET}@127.0.0.1:{port}/mem?connect_timeout=2")
    assert SECRET not in str(err.value)


def test_an_unknown_role_or_database_is_a_config_error(pg_url: str) -> None:
    with pytest.raises(ConfigError) as err:
        open_engine(_with_password(pg_url.replace("postgresql://postgres", "postgresql://nobody_here")))
    assert SECRET not in str(err.value) and "MEMORY_CORE_ENGINE" in str(err.value)
    with pytest.raises(ConfigError) as err:
        open_engine(_with_password(pg_url.rsplit("/", 1)[0] + "/postgres_missing_db"))
    assert "does not exist" in str(err.value) and SECRET not in str(err.value)


def test_the_cli_exits_2_on_a_bad_url_with_the_password_masked(pg_url: str) -> None:
    for url in (
        f"postgresql://bob:{SECRET}@127.0.0.1:5432",
        _with_password(pg_url) + "?pool_max=3",
        _with_password(pg_url.replace("postgresql://postgres", "postgresql://nobody_here")),
    ):
        result = runner.invoke(app, ["recall", "what", "--engine", url])
        assert result.exit_code == 2, result.output
        assert SECRET not in result.output and "***" in result.output


def test_a_newer_schema_is_refused_and_the_cli_exits_2(pg_url: str) -> None:
    open_engine(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"UPDATE {SCHEMA}.meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(Conflict) as err:
        open_engine(pg_url)
    assert "newer than this memory-core's" in str(err.value)
    result = runner.invoke(app, ["status", "--engine", pg_url])
    assert result.exit_code == 2 and "newer" in result.output


def _open_and_count(url: str) -> int:
    with open_engine(url) as engine:
        return int(engine.stats()["items"])


def test_processes_starting_at_once_migrate_once(pg_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        counts = pool.map(_open_and_count, [pg_url] * 4)
    assert counts == [0, 0, 0, 0]
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(f"SELECT key, value FROM {SCHEMA}.meta ORDER BY key").fetchall()
    keys = [r[0] for r in rows]
    assert keys.count("instance") == 1 and ("schema_version", str(SCHEMA_VERSION)) in rows


def test_engines_of_one_process_share_one_pool(pg_url: str) -> None:
    a, b = open_engine(pg_url), open_engine(pg_url)
    try:
        assert a._driver is b._driver  # type: ignore[attr-defined]
    finally:
        a.close()
        b.close()
    c = open_engine(pg_url)
    try:
        assert c._driver is not a._driver  # type: ignore[attr-defined]  # the last close closed the pool
    finally:
        c.close()


def test_dropped_connections_are_replaced_without_an_error(pg_url: str) -> None:
    database = pg_url.rsplit("/", 1)[1]
    with open_engine(pg_url + "?pool_min_size=2&pool_max_size=2") as engine:
        first = engine.store(Document.of("before the restart", MemoryMeta(workspace="w")))
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()) t",
                (database,),
            ).fetchone()
        assert killed is not None and killed[0] >= 1
        second = engine.store(Document.of("after the restart", MemoryMeta(workspace="w")))
        ids = {h.id for h in engine.list(ListRequest(limit=10)).items}
        assert ids == {first.id, second.id}


def test_a_statement_past_the_timeout_is_unavailable(pg_url: str) -> None:
    open_engine(pg_url).close()  # migrated first: the schema's statements are not what is timed out here
    with open_engine(pg_url + "?statement_timeout_ms=1000") as engine:
        with pytest.raises(EngineUnavailable) as err:
            engine._driver.run(lambda conn: conn.execute("SELECT pg_sleep(30)"))  # type: ignore[attr-defined]
        assert "timed out" in str(err.value)
        assert engine.health().is_serving


def test_two_spellings_of_one_database_have_one_identity_without_the_password() -> None:
    spellings = [
        f"postgresql://mem:{SECRET}@DB.example.com:5432/memory?sslmode=require&application_name=a",
        "postgres://mem:other@db.example.com/memory?application_name=a&sslmode=require",
        "postgresql://mem@db.example.com:5432/memory?sslmode=require&application_name=a",
    ]
    identities = {parse_url(url).identity for url in spellings}
    assert len(identities) == 1
    (identity,) = identities
    assert SECRET not in identity and "other" not in identity and "db.example.com:5432/memory" in identity
    assert parse_url("postgresql://mem@db.example.com:5433/memory").identity != identity
    assert parse_url("postgresql://mem@db.example.com/other").identity != parse_url(spellings[2]).identity
    from memory_core.engines import engine_identity
    from workers.coordination import engine_key

    assert {engine_key(url) for url in spellings} == {engine_key(spellings[0])}  # a worker takes the host's jobs
    assert engine_identity(spellings[0]) == identity
    assert SECRET not in engine_identity("postgresql://mem:s3cret-Pw@h/db?bogus=1")  # refused: masked
    assert engine_identity(" sqlite:///var/a.db ") == "sqlite:///var/a.db"


def test_two_spellings_of_one_database_share_one_pool(pg_url: str) -> None:
    parts = pg_url.split("://", 1)[1]
    host, _, database = parts.partition("/")
    other = f"postgres://{host if ':' in host.rpartition('@')[2] else host + ':5432'}/{database}"
    a, b = open_engine(pg_url), open_engine(other)
    try:
        assert a._driver is b._driver  # type: ignore[attr-defined]
    finally:
        a.close()
        b.close()


def test_a_read_right_after_the_connections_dropped_is_retried(pg_url: str) -> None:
    database = pg_url.rsplit("/", 1)[1]
    with open_engine(pg_url + "?pool_min_size=1&pool_max_size=1") as engine:
        first = engine.store(Document.of("before the restart", MemoryMeta(workspace="w")))
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:  # the pooled connection was just used:
            admin.execute(  # it is lent unchecked, and the read meets the dropped socket
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            )
        assert [h.id for h in engine.list(ListRequest(limit=10)).items] == [first.id]


def test_mask_url_hides_a_password_given_as_a_query_parameter() -> None:
    """libpq reads ``?password=`` (and ``sslpassword``) too: an error naming the URL must not print it."""
    assert mask_url(f"postgresql://bob@h/db?sslmode=require&password={SECRET}") == (
        "postgresql://bob@h/db?sslmode=require&password=***"
    )
    assert (
        mask_url(f"postgresql://bob:{SECRET}@h/db?sslpassword={SECRET}") == "postgresql://bob:***@h/db?sslpassword=***"
    )
    assert mask_url("sqlite:///x.db?synchronous=normal") == "sqlite:///x.db?synchronous=normal"
    with pytest.raises(ConfigError) as caught:
        open_engine(f"postgresql://bob@127.0.0.1:5432/db?password={SECRET}")
    assert SECRET not in str(caught.value) and "password=***" in str(caught.value)
