"""Scheduler configuration: every YAML key, every env override, defaults, rejections."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.config import (
    DEFAULT_ADMIN_DIR,
    ConfigError,
    IngestTransport,
    LoadBalance,
    SchedulerConfig,
)

BASE_ENV = {"SVC_DB_URL": "ws://127.0.0.1:8000"}

FULL_YAML = """
db:
  url: http://db.internal:8001
  namespace: yns
  database: ydb
  username: yuser
  password: ypass-secret
load_balance: round_robin
heartbeat_interval_ms: 1000
heartbeat_timeout_ms: 4000
bootstrap_chunk_size: 250
bootstrap_timeout_secs: 60
replica_db_path: data/replica.db
wal_path: /var/lib/sched/wal
ingest_host: 127.0.0.1
ingest_port: 19667
ssp_poll_interval_ms: 700
max_buffer_per_ssp: 42
snapshot_update_interval_secs: 30
job_tables: [job, mail_job]
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "scheduler.yml"
    p.write_text(text)
    return p


def test_defaults_without_a_file() -> None:
    cfg = SchedulerConfig.load(None, BASE_ENV)
    assert cfg.scheduler_id.startswith("scheduler-") and len(cfg.scheduler_id) > 20
    assert cfg.load_balance is LoadBalance.LEAST_QUERIES
    assert (cfg.heartbeat_interval_ms, cfg.heartbeat_timeout_ms) == (5000, 15000)
    assert cfg.bootstrap_chunk_size == 1000
    assert cfg.bootstrap_timeout_secs == 120
    assert (cfg.ingest_host, cfg.ingest_port) == ("0.0.0.0", 9667)
    assert cfg.ssp_poll_interval_ms == 3000
    assert cfg.max_buffer_per_ssp == 10000
    assert cfg.snapshot_update_interval_secs == 300
    assert cfg.job_tables == ()
    assert cfg.replica_db_path.is_absolute() and cfg.wal_path.is_absolute()
    assert cfg.impersonation is False
    d = cfg.drift
    assert (d.check, d.auto_reclone, d.confirm_ticks, d.reclone_cooldown_secs,
            d.repair_max_rows, d.repair_timeout_secs, d.check_timeout_secs) == (
        True, True, 2, 3600, 2000, 300, 120)
    assert cfg.backends == ()
    assert cfg.bootstrap_page_size == 500
    assert cfg.clear_views_on_start is True
    assert cfg.auth_secret is None
    assert cfg.ingest_transport is IngestTransport.HTTP  # the spec default (ipc.transport)
    assert cfg.pool_port == 9669
    a = cfg.admin
    assert (a.enabled, a.host, a.port, a.dir, a.password, a.access) == (
        True, "0.0.0.0", 9668, DEFAULT_ADMIN_DIR, None, None)
    assert (DEFAULT_ADMIN_DIR / "index.html").is_file()  # the shipped dashboard
    assert (a.session_ttl_secs, a.presence_interval_secs, a.slow_view_ms, a.large_view_rows,
            a.presence_max_rows, a.job_interval_secs, a.job_live_interval_secs) == (
        28800, 15, 250, 1000, 20000, 15, 2)
    assert (a.cloud_api_url, a.cloud_project, a.project_slug) == (None, None, "default")
    assert a.objstore.enabled is False
    assert cfg.db.ws_url == "ws://127.0.0.1:8000/rpc"
    assert (cfg.db.namespace, cfg.db.database, cfg.db.user) == ("main", "main", "root")


def test_two_loads_get_distinct_scheduler_ids() -> None:
    assert SchedulerConfig.load(None, BASE_ENV).scheduler_id != SchedulerConfig.load(
        None, BASE_ENV).scheduler_id


def test_every_yaml_key_is_read(tmp_path: Path) -> None:
    cfg = SchedulerConfig.load(write(tmp_path, FULL_YAML), {})
    assert cfg.db.http_url == "http://db.internal:8001"
    assert cfg.db.ws_url == "ws://db.internal:8001/rpc"
    assert (cfg.db.namespace, cfg.db.database, cfg.db.user, cfg.db.password) == (
        "yns", "ydb", "yuser", "ypass-secret")
    assert cfg.load_balance is LoadBalance.ROUND_ROBIN
    assert (cfg.heartbeat_interval_ms, cfg.heartbeat_timeout_ms) == (1000, 4000)
    assert cfg.bootstrap_chunk_size == 250
    assert cfg.bootstrap_timeout_secs == 60
    # Relative paths resolve against the file's directory; absolute ones stay.
    assert cfg.replica_db_path == tmp_path.resolve() / "data" / "replica.db"
    assert cfg.wal_path == Path("/var/lib/sched/wal")
    assert (cfg.ingest_host, cfg.ingest_port) == ("127.0.0.1", 19667)
    assert cfg.ssp_poll_interval_ms == 700
    assert cfg.max_buffer_per_ssp == 42
    assert cfg.snapshot_update_interval_secs == 30
    assert cfg.job_tables == ("job", "mail_job")


@pytest.mark.parametrize("value", ["round_robin", "least_queries", "least_load"])
def test_every_load_balance_strategy(tmp_path: Path, value: str) -> None:
    cfg = SchedulerConfig.load(write(tmp_path, f"load_balance: {value}\n"), BASE_ENV)
    assert cfg.load_balance.value == value


def test_env_overrides_the_database_settings(tmp_path: Path) -> None:
    env = {"SVC_DB_URL": "wss://other:9000/rpc", "SVC_DB_NS": "ens", "SVC_DB_NAME": "edb",
           "SVC_DB_USER": "euser", "SVC_DB_PASS": "epass"}
    cfg = SchedulerConfig.load(write(tmp_path, FULL_YAML), env)
    assert cfg.db.ws_url == "wss://other:9000/rpc"
    assert (cfg.db.namespace, cfg.db.database, cfg.db.user, cfg.db.password) == (
        "ens", "edb", "euser", "epass")


def test_legacy_db_ws_is_a_fallback_for_the_url() -> None:
    cfg = SchedulerConfig.load(None, {"SVC_DB_WS": "ws://legacy:1234"})
    assert cfg.db.ws_url == "ws://legacy:1234/rpc"


def test_missing_database_url_is_rejected() -> None:
    with pytest.raises(ConfigError, match="SVC_DB_URL"):
        SchedulerConfig.load(None, {})


def test_every_env_override() -> None:
    env = dict(BASE_ENV) | {
        "SVC_SCHEDULER_ID": "sched-a",
        "SVC_IMPERSONATION": "on",
        "SVC_SNAPSHOT_UPDATE_INTERVAL_SECS": "17",
        "SVC_DRIFT_CHECK": "false",
        "SVC_DRIFT_AUTO_RECLONE": "0",
        "SVC_DRIFT_CONFIRM_TICKS": "5",
        "SVC_DRIFT_RECLONE_COOLDOWN_SECS": "60",
        "SVC_DRIFT_REPAIR_MAX_ROWS": "7",
        "SVC_DRIFT_REPAIR_TIMEOUT_SECS": "8",
        "SVC_DRIFT_CHECK_TIMEOUT_SECS": "9",
        "SVC_BACKENDS": '[{"name": "api", "environment": {"TOKEN": "t0k"},'
                        ' "run_on": {"pool": "gpu"}}]',
        "SVC_BOOTSTRAP_PAGE_SIZE": "123",
        "SVC_CLEAR_VIEWS_ON_START": "false",
        "SVC_AUTH_SECRET": "shh-secret",
        "SVC_INGEST_TRANSPORT": "http",
        "SVC_POOL_PORT": "19669",
        "SVC_ADMIN_ENABLED": "off",
        "SVC_ADMIN_PORT": "19668",
        "SVC_ADMIN_HOST": "127.0.0.2",
        "SVC_ADMIN_DIR": "/srv/admin",
        "SVC_ADMIN_PASSWORD": "break-glass-pw",
        "SVC_ADMIN_ACCESS": "account",
        "SVC_ADMIN_SESSION_TTL_SECS": "100",
        "SVC_ADMIN_PRESENCE_INTERVAL_SECS": "3",
        "SVC_ADMIN_SLOW_VIEW_MS": "99",
        "SVC_ADMIN_LARGE_VIEW_ROWS": "55",
        "SVC_ADMIN_PRESENCE_MAX_ROWS": "66",
        "SVC_ADMIN_JOB_INTERVAL_SECS": "30",
        "SVC_ADMIN_JOB_LIVE_INTERVAL_SECS": "4",
        "SVC_CLOUD_API_URL": "https://cloud.example",
        "SVC_CLOUD_PROJECT": "proj",
        "SVC_PROJECT_SLUG": "slug",
        "OBJSTORE_ENDPOINT": "http://minio:9000",
        "OBJSTORE_ACCESS_KEY": "ak-secret",
        "OBJSTORE_SECRET_KEY": "sk-secret",
        "OBJSTORE_BUCKET": "bk",
        "OBJSTORE_REGION": "eu",
    }
    cfg = SchedulerConfig.load(None, env)
    assert cfg.scheduler_id == "sched-a"
    assert cfg.impersonation is True
    assert cfg.snapshot_update_interval_secs == 17
    d = cfg.drift
    assert (d.check, d.auto_reclone, d.confirm_ticks, d.reclone_cooldown_secs,
            d.repair_max_rows, d.repair_timeout_secs, d.check_timeout_secs) == (
        False, False, 5, 60, 7, 8, 9)
    assert len(cfg.backends) == 1
    b = cfg.backends[0]
    assert (b.name, dict(b.environment), b.run_on_pool) == ("api", {"TOKEN": "t0k"}, "gpu")
    assert cfg.bootstrap_page_size == 123
    assert cfg.clear_views_on_start is False
    assert cfg.auth_secret == "shh-secret"
    assert cfg.ingest_transport is IngestTransport.HTTP
    assert cfg.pool_port == 19669
    a = cfg.admin
    assert (a.enabled, a.host, a.port, a.dir, a.password, a.access) == (
        False, "127.0.0.2", 19668, Path("/srv/admin"), "break-glass-pw", "account")
    assert (a.session_ttl_secs, a.presence_interval_secs, a.slow_view_ms, a.large_view_rows,
            a.presence_max_rows, a.job_interval_secs, a.job_live_interval_secs) == (
        100, 3, 99, 55, 66, 30, 4)
    assert (a.cloud_api_url, a.cloud_project, a.project_slug) == (
        "https://cloud.example", "proj", "slug")
    o = a.objstore
    assert (o.endpoint, o.access_key, o.secret_key, o.bucket, o.region, o.enabled) == (
        "http://minio:9000", "ak-secret", "sk-secret", "bk", "eu", True)
    text = repr(cfg)
    for secret in ("shh-secret", "break-glass-pw", "ak-secret", "sk-secret", "t0k"):
        assert secret not in text


def test_env_snapshot_interval_overrides_the_yaml(tmp_path: Path) -> None:
    cfg = SchedulerConfig.load(write(tmp_path, FULL_YAML),
                               {"SVC_SNAPSHOT_UPDATE_INTERVAL_SECS": "11"})
    assert cfg.snapshot_update_interval_secs == 11


def test_legacy_scheduler_backends_variable() -> None:
    cfg = SchedulerConfig.load(None, BASE_ENV | {"SVC_SCHEDULER_BACKENDS": '[{"name": "b"}]'})
    assert [b.name for b in cfg.backends] == ["b"]


def test_job_live_interval_is_clamped_to_the_idle_interval() -> None:
    cfg = SchedulerConfig.load(None, BASE_ENV | {"SVC_ADMIN_JOB_INTERVAL_SECS": "3",
                                                 "SVC_ADMIN_JOB_LIVE_INTERVAL_SECS": "10"})
    assert cfg.admin.job_live_interval_secs == 3


def test_job_sampler_can_be_switched_off() -> None:
    cfg = SchedulerConfig.load(None, BASE_ENV | {"SVC_ADMIN_JOB_INTERVAL_SECS": "0"})
    assert cfg.admin.job_interval_secs == 0


def test_the_admin_log_ring_size_is_read_and_bounded() -> None:
    assert SchedulerConfig.load(None, BASE_ENV).admin.log_lines == 5000
    cfg = SchedulerConfig.load(None, BASE_ENV | {"SVC_ADMIN_LOG_LINES": "700"})
    assert cfg.admin.log_lines == 700
    with pytest.raises(ConfigError, match="SVC_ADMIN_LOG_LINES"):
        SchedulerConfig.load(None, BASE_ENV | {"SVC_ADMIN_LOG_LINES": "10"})


def test_admin_dir_defaults_to_the_shipped_dashboard_and_empty_means_none() -> None:
    assert SchedulerConfig.load(None, BASE_ENV).admin.dir == DEFAULT_ADMIN_DIR
    cfg = SchedulerConfig.load(None, BASE_ENV | {"SVC_ADMIN_DIR": ""})
    assert cfg.admin.dir is None  # explicitly no bundle: the placeholder page
    cfg = SchedulerConfig.load(None, BASE_ENV | {"SVC_ADMIN_DIR": " /srv/ui "})
    assert cfg.admin.dir == Path("/srv/ui")


def test_objstore_switches_on_with_any_of_the_first_four() -> None:
    cfg = SchedulerConfig.load(None, BASE_ENV | {"OBJSTORE_BUCKET": "b"})
    assert cfg.admin.objstore.enabled is True
    cfg = SchedulerConfig.load(None, BASE_ENV | {"OBJSTORE_REGION": "eu"})
    assert cfg.admin.objstore.enabled is False


def test_password_is_not_in_repr(tmp_path: Path) -> None:
    cfg = SchedulerConfig.load(write(tmp_path, FULL_YAML), {})
    assert "ypass-secret" not in repr(cfg)


@pytest.mark.parametrize(("text", "path"), [
    ("db:\n  usernme: x\n", "db.usernme"),
    ("ingest_prt: 1\n", "ingest_prt"),
    ("db:\n  url: ws://x:1\n  extra: {a: 1}\n", "db.extra"),
])
def test_unknown_keys_are_rejected_with_their_path(tmp_path: Path, text: str, path: str) -> None:
    with pytest.raises(ConfigError, match=f"unknown config key '{path}'"):
        SchedulerConfig.load(write(tmp_path, text), BASE_ENV)


@pytest.mark.parametrize(("text", "path"), [
    ("ingest_port: '9667'\n", "ingest_port"),
    ("heartbeat_interval_ms: true\n", "heartbeat_interval_ms"),
    ("bootstrap_chunk_size: 1.5\n", "bootstrap_chunk_size"),
    ("load_balance: 3\n", "load_balance"),
    ("job_tables: job\n", "job_tables"),
    ("job_tables: [job, 3]\n", r"job_tables\[1\]"),
    ("db:\n  namespace: 5\n", "db.namespace"),
    ("db: [1]\n", "db"),
    ("replica_db_path: 3\n", "replica_db_path"),
    ("ingest_host: ''\n", "ingest_host"),
    ("max_buffer_per_ssp: 0\n", "max_buffer_per_ssp"),
    ("ingest_port: 70000\n", "ingest_port"),
])
def test_wrong_types_are_rejected_with_their_path(tmp_path: Path, text: str, path: str) -> None:
    with pytest.raises(ConfigError, match=f"'{path}'"):
        SchedulerConfig.load(write(tmp_path, text), BASE_ENV)


def test_wrong_type_password_is_not_echoed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        SchedulerConfig.load(write(tmp_path, "db:\n  password: 123456789\n"), BASE_ENV)
    assert "db.password" in str(info.value) and "123456789" not in str(info.value)


def test_unknown_load_balance_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="least_load"):
        SchedulerConfig.load(write(tmp_path, "load_balance: random\n"), BASE_ENV)


def test_heartbeat_timeout_must_exceed_the_interval(tmp_path: Path) -> None:
    text = "heartbeat_interval_ms: 5000\nheartbeat_timeout_ms: 5000\n"
    with pytest.raises(ConfigError, match="heartbeat_timeout_ms"):
        SchedulerConfig.load(write(tmp_path, text), BASE_ENV)


@pytest.mark.parametrize(("var", "value"), [
    ("SVC_DRIFT_CHECK", "maybe"),
    ("SVC_DRIFT_CONFIRM_TICKS", "two"),
    ("SVC_DRIFT_CONFIRM_TICKS", "0"),
    ("SVC_BOOTSTRAP_PAGE_SIZE", "-1"),
    ("SVC_INGEST_TRANSPORT", "carrier-pigeon"),
    ("SVC_POOL_PORT", "99999"),
    ("SVC_ADMIN_PORT", "x"),
    ("SVC_SNAPSHOT_UPDATE_INTERVAL_SECS", "1.5"),
    ("SVC_IMPERSONATION", "sometimes"),
    ("SVC_BACKENDS", "{not json"),
    ("SVC_BACKENDS", '{"name": "a"}'),
    ("SVC_BACKENDS", '[{"environment": {}}]'),
    # The same shape as PUT /backends: unknown fields, a bad URL, a name twice.
    ("SVC_BACKENDS", '[{"name": "a", "colour": "red"}]'),
    ("SVC_BACKENDS", '[{"name": "a", "url": "ftp://x/h"}]'),
    ("SVC_BACKENDS", '[{"name": "a"}, {"name": "a"}]'),
])
def test_bad_env_values_are_rejected_naming_the_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigError, match=var):
        SchedulerConfig.load(None, BASE_ENV | {var: value})


def test_bad_backends_json_does_not_echo_secrets() -> None:
    raw = '[{"name": "a", "environment": {"TOKEN": "leak-me"}'
    with pytest.raises(ConfigError) as info:
        SchedulerConfig.load(None, BASE_ENV | {"SVC_BACKENDS": raw})
    assert "leak-me" not in str(info.value)


def test_bad_database_url_is_rejected() -> None:
    with pytest.raises(ConfigError, match="database settings"):
        SchedulerConfig.load(None, {"SVC_DB_URL": "ftp://x"})


def test_invalid_yaml_and_non_mapping_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        SchedulerConfig.load(write(tmp_path, "a: [1,\n"), BASE_ENV)
    with pytest.raises(ConfigError, match="must be a mapping"):
        SchedulerConfig.load(write(tmp_path, "- 1\n- 2\n"), BASE_ENV)
    with pytest.raises(ConfigError, match="cannot read"):
        SchedulerConfig.load(tmp_path / "absent.yml", BASE_ENV)


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    cfg = SchedulerConfig.load(write(tmp_path, ""), BASE_ENV)
    assert cfg.ingest_port == 9667


def test_config_is_frozen() -> None:
    cfg = SchedulerConfig.load(None, BASE_ENV)
    with pytest.raises(AttributeError):
        cfg.ingest_port = 1  # type: ignore[misc]


def test_supervised_and_the_cloud_link_come_from_the_environment() -> None:
    base = {"SVC_DB_URL": "ws://127.0.0.1:8000"}
    cfg = SchedulerConfig.load(None, base)
    assert cfg.admin.supervised is False and cfg.cloud_linked is False
    linked = {**base, "SVC_SUPERVISED": "1", "SVC_CLOUD_API_URL": "https://api.example",
              "SVC_CLOUD_PROJECT": "p1", "SVC_AUTH_SECRET": "s"}
    cfg = SchedulerConfig.load(None, linked)
    assert cfg.admin.supervised is True and cfg.cloud_linked is True
    assert SchedulerConfig.load(None, {**linked, "SVC_AUTH_SECRET": ""}).cloud_linked is False
    with pytest.raises(ConfigError, match="SVC_SUPERVISED"):
        SchedulerConfig.load(None, {**base, "SVC_SUPERVISED": "maybe"})
    assert cfg.data_dir == cfg.replica_db_path.parent


def test_bootstrap_chunk_size_is_the_spec_value_at_most_with_the_reason(tmp_path: Path) -> None:
    # Decision (scheduler/README.md, Events): events per POST /ingest to an SSP; the spec's 1000
    # is the default and the SSP's batch maximum, so more is refused at start, naming why.
    assert SchedulerConfig.load(write(tmp_path, "bootstrap_chunk_size: 1000\n"),
                                BASE_ENV).bootstrap_chunk_size == 1000
    assert SchedulerConfig.load(write(tmp_path, "bootstrap_chunk_size: 1\n"),
                                BASE_ENV).bootstrap_chunk_size == 1
    with pytest.raises(ConfigError, match="between 1 and 1000, got 1001: it is the number of "
                                          "events per POST /ingest to an SSP"):
        SchedulerConfig.load(write(tmp_path, "bootstrap_chunk_size: 1001\n"), BASE_ENV)
    with pytest.raises(ConfigError, match="'bootstrap_chunk_size' must be >= 1, got 0"):
        SchedulerConfig.load(write(tmp_path, "bootstrap_chunk_size: 0\n"), BASE_ENV)
