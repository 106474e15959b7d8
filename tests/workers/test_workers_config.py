"""The Celery configuration from settings, the beat schedule, compose.yaml and the Flower command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from flowkit import REPO

import beat_schedule
from memory_core.engines import load_plugins
from memory_core.errors import ConfigError
from memory_core.settings import Settings, parse_engine_plugins
from workers.config import (
    beat_config,
    celery_config,
    check_timeouts,
    flower_argv,
    host_config,
    restore_sweep,
    result_backend_url,
)
from workers.kinds import JOB_KINDS


def settings(**fields: Any) -> Settings:
    return Settings(_env_file=None, **fields)


REDIS = "redis://127.0.0.1:6379/3"


def test_serialization_is_json_only_in_every_direction() -> None:
    conf = celery_config(settings(broker_url=REDIS))
    assert conf["task_serializer"] == conf["result_serializer"] == conf["event_serializer"] == "json"
    assert conf["accept_content"] == conf["result_accept_content"] == ["json"]


def test_delivery_is_at_least_once_with_one_message_per_process() -> None:
    conf = celery_config(settings(broker_url=REDIS))
    assert conf["task_acks_late"] and conf["task_reject_on_worker_lost"]
    assert conf["worker_prefetch_multiplier"] == 1
    assert conf["worker_cancel_long_running_tasks_on_connection_loss"]
    assert conf["broker_connection_retry_on_startup"]


def test_one_visibility_timeout_everywhere_above_the_hard_limit_and_the_backoff_cap() -> None:
    s = settings(broker_url=REDIS, visibility_timeout_s=900, task_time_limit_s=300, task_soft_time_limit_s=240)
    conf = celery_config(s)
    assert conf["visibility_timeout"] == 900
    assert conf["broker_transport_options"]["visibility_timeout"] == 900
    assert conf["result_backend_transport_options"]["visibility_timeout"] == 900
    assert conf["task_soft_time_limit"] < conf["task_time_limit"] < conf["visibility_timeout"]
    assert s.retry_backoff_max_s < conf["visibility_timeout"]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"task_soft_time_limit_s": 600, "task_time_limit_s": 600}, "task_soft_time_limit_s"),
        ({"task_time_limit_s": 3600, "visibility_timeout_s": 3600, "task_soft_time_limit_s": 10}, "task_time_limit_s"),
        ({"retry_backoff_max_s": 4000.0}, "retry_backoff_max_s"),
        # a retry's countdown plus its run passes the visibility timeout (issue 11 §2)
        ({"visibility_timeout_s": 700, "task_time_limit_s": 600, "retry_backoff_max_s": 150.0}, "retry_backoff_max_s"),
        ({"lock_ttl_s": 4000}, "lock_ttl_s"),
    ],
)
def test_time_settings_that_would_run_a_job_twice_are_refused(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        check_timeouts(settings(**fields))


def test_events_results_and_redis_sockets_are_configured() -> None:
    conf = celery_config(settings(broker_url=REDIS, result_expires_s=3600, redis_socket_timeout_s=7.0))
    assert conf["worker_send_task_events"] and conf["task_send_sent_event"]
    assert conf["result_expires"] == 3600
    options = conf["broker_transport_options"]
    assert options["socket_timeout"] == options["socket_connect_timeout"] == 7.0
    assert options["health_check_interval"] == 25 and options["socket_keepalive"]
    assert conf["redis_socket_timeout"] == 7.0
    assert conf["broker_transport"] == "workers.transport:SafeRedisTransport"
    assert conf["worker_consumer"] == "workers.transport:Consumer"


def test_a_tls_broker_verifies_certificates_for_the_broker_and_the_result_backend() -> None:
    import ssl

    conf = celery_config(settings(broker_url="rediss://:pw@redis.example:6380/0"))
    assert conf["broker_use_ssl"] == {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    assert conf["result_backend"] == "rediss://:pw@redis.example:6380/0?ssl_cert_reqs=required"
    assert "broker_use_ssl" not in celery_config(settings(broker_url=REDIS))


def test_tasks_route_to_their_queues() -> None:
    conf = celery_config(settings(broker_url=REDIS, queue_beliefs="b", queue_ingest="i", queue_maintenance="m"))
    assert conf["task_routes"] == {
        "memory.build_beliefs": {"queue": "b"},
        "memory.ingest_brain": {"queue": "i"},
        "memory.tool_write": {"queue": "i"},
        "memory.build_due": {"queue": "m"},
        "memory.drain_outbox": {"queue": "m"},
        "memory.retention": {"queue": "m"},
        "memory.embed_items": {"queue": "b"},
        "memory.build_scopes": {"queue": "b"},
        "memory.embed_due": {"queue": "m"},
        "memory.compact_log": {"queue": "m"},
    }


def test_without_a_broker_url_the_transport_is_serverless_under_var_dir(tmp_path: Path) -> None:
    s = settings(var_dir=tmp_path / "var")
    conf = celery_config(s)
    assert conf["broker_url"] == "filesystem://"
    assert conf["broker_transport"] == "workers.transport:SafeFilesystemTransport"
    options = conf["broker_transport_options"]
    assert options["data_folder_in"] == options["data_folder_out"] == str((tmp_path / "var/broker/queue").resolve())
    assert result_backend_url(s) == f"file://{(tmp_path / 'var/results').resolve()}"


def test_the_host_publishes_without_a_result_backend_retries_or_reconnect_loops() -> None:
    conf = host_config(settings(broker_url=REDIS, publish_timeout_s=1.5))
    assert conf["result_backend"] is None
    assert conf["task_publish_retry"] is False
    options = conf["broker_transport_options"]
    assert options["socket_timeout"] == options["socket_connect_timeout"] == 1.5
    assert options["max_retries"] == 0
    assert options["visibility_timeout"] == conf["visibility_timeout"]


@pytest.mark.parametrize(("period", "expected"), [(100, (10, 10)), (2, (1, 2)), (30, (3, 10)), (1, (1, 1))])
def test_the_redelivery_sweep_period_maps_to_kombus_interval_and_throttle(
    period: int, expected: tuple[int, int]
) -> None:
    assert restore_sweep(period) == expected
    interval, throttle = expected
    assert interval * throttle == period


def test_every_beat_entry_names_a_registered_task_on_its_queue() -> None:
    from workers.celery_app import app

    app.loader.import_default_modules()
    s = settings(build_due_interval_s=120.0, outbox_drain_interval_s=30.0, log_compact_interval_s=3600.0)
    schedule = beat_config(s)
    assert set(schedule) == set(beat_schedule.ENTRIES)
    for entry in schedule.values():
        assert entry["task"] in app.tasks
        assert entry["options"]["queue"] == s.queue_maintenance
        assert entry["options"]["expires"] == entry["schedule"]
    assert schedule["build-due"]["schedule"] == 120.0
    assert schedule["drain-outbox"]["schedule"] == 30.0
    assert schedule["embed-due"]["schedule"] == 120.0 and schedule["embed-due"]["task"] == "memory.embed_due"
    assert schedule["compact-log"]["schedule"] == 3600.0 and schedule["compact-log"]["task"] == "memory.compact_log"
    assert set(JOB_KINDS.queues()) <= set(app.tasks)


def test_flower_always_gets_basic_auth_from_settings() -> None:
    argv = flower_argv(settings(flower_user="ops", flower_password="pw", flower_port=5600))
    assert argv[0] == "flower"
    assert "--basic-auth=ops:pw" in argv and "--port=5600" in argv
    with pytest.raises(ValueError, match="PASSWORD"):
        flower_argv(settings(flower_password=""))
    with pytest.raises(ValueError, match="may not contain"):
        flower_argv(settings(flower_user="a:b"))


def test_engine_plugins_parse_and_malformed_entries_are_refused() -> None:
    assert parse_engine_plugins(" probe=probe_engine:open_probe , x=pkg.mod:make ") == {
        "probe": "probe_engine:open_probe",
        "x": "pkg.mod:make",
    }
    assert parse_engine_plugins("") == {}
    with pytest.raises(ValueError, match="scheme=module:callable"):
        parse_engine_plugins("probe=probe_engine")
    with pytest.raises(ConfigError, match="scheme=module:callable"):
        load_plugins("probe=probe_engine")


def test_compose_has_the_services_with_the_commands_and_memory_core_variables() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"redis", "postgres", "worker-beliefs", "worker-ingest", "beat", "flower"}
    redis_cmd = " ".join(services["redis"]["command"])
    assert "--requirepass" in redis_cmd and "--appendonly yes" in redis_cmd and "noeviction" in redis_cmd
    assert services["worker-beliefs"]["command"][:4] == ["memory-core", "worker", "--queues", "beliefs,maintenance"]
    assert services["worker-ingest"]["command"][:4] == ["memory-core", "worker", "--queues", "ingest"]
    assert services["beat"]["command"] == ["memory-core", "beat"]
    assert services["beat"]["deploy"]["replicas"] == 1
    assert services["flower"]["command"][:2] == ["memory-core", "flower"]
    for name in ("worker-beliefs", "worker-ingest", "beat", "flower"):
        env = services[name]["environment"]
        assert all(key.startswith("MEMORY_CORE_") for key in env)
        assert env["MEMORY_CORE_ENGINE"].endswith("@postgres:5432/memory}")
        assert "memory-data:/data" in services[name]["volumes"]
    assert "MEMORY_CORE_FLOWER_PASSWORD" in services["flower"]["environment"]
    assert "memory-data" in compose["volumes"]


def test_an_engine_plugin_target_that_cannot_be_loaded_is_a_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import memory_core.engines as engines

    monkeypatch.setitem(engines._REGISTRY, "nomodule", "no_such_module_for_mc:open_it")
    monkeypatch.setitem(engines._REGISTRY, "noattr", "memory_core.engines.reference:NoSuchEngine.from_url")
    with pytest.raises(ConfigError, match="no_such_module_for_mc:open_it"):
        engines.open_engine("nomodule://x")
    with pytest.raises(ConfigError, match="memory_core.engines.reference:NoSuchEngine.from_url"):
        engines.open_engine("noattr://x")


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("redis:/127.0.0.1", "no host"),
        ("http://127.0.0.1:6379/9", "scheme 'http' is not one of redis, rediss, filesystem"),
        ("redis://:pa/ss@redis:6379/0", "must be URL-encoded"),  # an unencoded / in the password
        ("redis://:pa#ss@redis:6379/0", "must be URL-encoded"),  # an unencoded # in the password
        ("redis://redis:6379/zero", "database 'zero' is not a number"),
        ("redis://redis:port/0", "port is not a number"),
        ("filesystem:///elsewhere", "plain filesystem://"),
        # query options: kombu takes each as a keyword (a TypeError for ?password=, a KeyError for a bad cert mode)
        ("redis://127.0.0.1:6379/9?password=pa/ss", "'password' is not taken by the broker's clients"),
        ("redis://u:pa%2Fss@h:6379/9?password=pa/ss", "'password' is not taken"),
        ("redis://127.0.0.1:6379/9?ssl_cert_reqs=bogus", "'ssl_cert_reqs' is a TLS option: it needs a rediss://"),
        ("rediss://127.0.0.1:6379/9?ssl_cert_reqs=bogus", "ssl_cert_reqs='bogus' is not valid"),
        ("rediss://h:6380/0?ssl_cert_reqs=CERT_REQUIRED", "expected none or optional or required"),  # redis-py: no
        ("rediss://h:6380/0?ssl_check_hostname=yes", "expected false or true"),
        ("rediss://h:6380/0?ssl_ca_certs=", "expected a path"),
        ("rediss://h:6380/0?ssl_cert_reqs=none&ssl_cert_reqs=required", "given twice"),
        ("redis://h:6379/0?socket_timeout=5", "'socket_timeout' is not one the broker's clients take"),
    ],
)
def test_a_broker_url_the_flow_cannot_use_is_a_config_error_naming_the_variable(
    url: str, named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory_core.settings import get_settings

    monkeypatch.setenv("MEMORY_CORE_BROKER_URL", url)
    get_settings.cache_clear()
    with pytest.raises(ConfigError, match="MEMORY_CORE_BROKER_URL") as caught:
        get_settings()
    assert named in str(caught.value)
    assert "pa/ss" not in str(caught.value) and "pa#ss" not in str(caught.value)  # no password in the message


def test_usable_broker_and_result_urls_are_kept_and_blank_means_server_less() -> None:
    assert settings(broker_url="redis://:p%2Fw@redis:6379/0").broker_url == "redis://:p%2Fw@redis:6379/0"
    assert settings(broker_url="rediss://redis.example:6380/1").broker_url == "rediss://redis.example:6380/1"
    assert settings(broker_url="redis://:p@ss@redis").broker_url == "redis://:p@ss@redis"  # @ splits on the last
    assert settings(broker_url="FILESYSTEM://").broker_url == "filesystem://"
    assert settings(broker_url="  ").broker_url is None
    assert settings(result_backend="file:///srv/results").result_backend == "file:///srv/results"
    with pytest.raises(ValueError, match="result_backend"):
        settings(result_backend="rpc://")


@pytest.mark.parametrize(
    "url",
    [
        "rediss://h:6380/0?ssl_cert_reqs=required",
        "rediss://u:pw@h:6380/0?ssl_cert_reqs=none&ssl_check_hostname=false",
        "rediss://h:6380/0?ssl_ca_certs=/etc/ca.pem&ssl_certfile=/etc/c.pem&ssl_keyfile=/etc/k.pem",
    ],
)
def test_the_query_options_a_broker_url_may_carry_are_taken_by_kombu_celery_and_redis_py(url: str) -> None:
    import kombu
    import redis
    from celery.backends.redis import RedisBackend

    from workers.celery_app import app

    kept = settings(broker_url=url)
    assert kept.broker_url == url
    kombu.Connection(url).close()  # kombu 5.7 turns each query option into a keyword argument
    redis.Redis.from_url(url).close()  # the coordination store's client: an unknown option is a TypeError
    RedisBackend(app=app, url=result_backend_url(kept))  # the result backend the broker URL gives
    assert celery_config(kept)["broker_url"] == url


def test_queue_names_map_logical_names_to_the_configured_ones_and_report_strangers() -> None:
    from workers.config import resolve_queues

    s = settings(queue_beliefs="nc-beliefs", queue_ingest="nc-ingest", queue_maintenance="nc-maintenance")
    assert resolve_queues(s, "beliefs,maintenance") == (["nc-beliefs", "nc-maintenance"], [])
    assert resolve_queues(s, "nc-ingest, beliefs") == (["nc-ingest", "nc-beliefs"], [])
    assert resolve_queues(s, None) == (["nc-beliefs", "nc-ingest", "nc-maintenance"], [])
    assert resolve_queues(s, "ingest,nc-ingest,celery") == (["nc-ingest", "celery"], ["celery"])
    swapped = settings(queue_beliefs="ingest", queue_ingest="x-ingest")  # a configured name wins over a logical one
    assert resolve_queues(swapped, "ingest") == (["ingest"], [])


def test_a_minimum_build_interval_whose_countdown_could_outlast_the_visibility_timeout_is_refused() -> None:
    check_timeouts(settings(build_min_interval_s=1.0))
    with pytest.raises(ConfigError, match="build_min_interval_s"):
        check_timeouts(
            settings(visibility_timeout_s=700, task_time_limit_s=600, retry_backoff_max_s=9, build_min_interval_s=100)
        )


def test_a_missing_program_skips_locally_but_fails_under_ci(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowkit import require_program, root_conftest

    root = root_conftest(request.config)
    monkeypatch.setattr(root, "CI", False)
    with pytest.raises(pytest.skip.Exception):
        require_program(request.config, "no-such-program-for-memory-core")
    monkeypatch.setattr(root, "CI", True)
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_program(request.config, "no-such-program-for-memory-core")
